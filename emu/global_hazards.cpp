// emu/global_hazards.cpp — per-word records of global stores and the checks between the
// blocks of one launch (see global_hazards.hpp).
#include "emu/global_hazards.hpp"

#include <array>
#include <mutex>
#include <string>
#include <unordered_map>

#include "emu/arena.hpp"
#include "emu/device.hpp"
#include "emu/emu.hpp"
#include "emu/memory.hpp"
#include "emu/shared_hazards.hpp"

namespace emu::detail {
namespace {

/// The last block's stores to one 4-byte word of device memory: which of its bytes (elements of 1
/// and 2 bytes are stored by different blocks side by side, as a GPU allows).
struct Store {
    uint64_t launch = 0;
    uint64_t block = 0;
    const void* pc = nullptr;
    unsigned thread = 0;
    unsigned bytes = 0;  // bit i: byte i of the word
};

/// Blocks run on several workers at once: the records are split over shards, each with its lock.
struct Shard {
    std::mutex mu;
    std::unordered_map<uintptr_t, Store> stores;  // by word address; kept across launches
};
std::array<Shard, 64> g_shards;

thread_local uint64_t t_launch = 0;  // 0 outside a block
thread_local uint64_t t_block_linear = 0;

std::string who(uint64_t block, unsigned thread) {
    const dim3 g = gridDim;
    return "block (" + std::to_string(block % g.x) + "," + std::to_string(block / g.x % g.y) + "," +
           std::to_string(block / (uint64_t{g.x} * g.y)) + ") " + thread_name(thread);
}

}  // namespace

void global_block_start(uint64_t launch, uint64_t block) { t_launch = launch + 1, t_block_linear = block; }

void global_block_end() { t_launch = 0; }

void global_plain_access(const void* p, size_t n, bool write, const void* pc) {
    if (t_launch == 0 || t_thread == nullptr || !arena::contains(p)) return;
    const unsigned thread = linear_thread();
    const auto begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
    for (uintptr_t a = begin & ~uintptr_t{3}; a < end; a += 4) {
        unsigned bytes = 0;  // the bytes of this word the access touches
        for (unsigned i = 0; i < 4; i++) bytes |= (a + i >= begin && a + i < end) << i;
        Shard& sh = g_shards[(a >> 2) % g_shards.size()];
        std::unique_lock lock(sh.mu);
        auto it = sh.stores.find(a);
        const bool same_launch = it != sh.stores.end() && it->second.launch == t_launch;
        if (same_launch && it->second.block != t_block_linear && (it->second.bytes & bytes)) {
            const Store before = it->second;
            lock.unlock();
            const memory::Allocation* al = memory::find(reinterpret_cast<const void*>(a));
            const std::string where = al ? "byte " + std::to_string(a - al->base) + " of " + memory::describe(*al)
                                         : "device memory";
            throw Error(std::string(write ? "write after write" : "read after write") + " on " + where + ": " +
                        (write ? "a store" : "a load") +
                        " by " + who(t_block_linear, thread) + " (" + describe_code(pc) + ") after a store by " +
                        who(before.block, before.thread) + " (" + describe_code(before.pc) +
                        ") in the same launch: the blocks of a grid run in no set order, and none may see another's "
                        "stores (no kernel here synchronizes blocks)");
        }
        if (!write) continue;
        // A block adds to its own bytes of the word; another block's (disjoint) bytes give way.
        const unsigned kept = same_launch && it->second.block == t_block_linear ? it->second.bytes : 0;
        const Store now{t_launch, t_block_linear, pc, thread, kept | bytes};
        if (it != sh.stores.end()) it->second = now;
        else sh.stores.emplace(a, now);
    }
}

}  // namespace emu::detail
