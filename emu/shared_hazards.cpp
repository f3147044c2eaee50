// emu/shared_hazards.cpp — per-word records of shared memory and the hazard checks
// between warps (see shared_hazards.hpp).
#include "emu/shared_hazards.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "emu/device.hpp"
#include "emu/emu.hpp"

namespace emu::detail {

constinit thread_local uintptr_t t_dyn_smem_base = 0;
constinit thread_local size_t t_dyn_smem_bytes = 0;
constinit thread_local uintptr_t t_static_smem_base = 0;
constinit thread_local size_t t_static_smem_bytes = 0;

namespace {

/// One access: where, by whom, and the count of its warp's __syncwarp releases before it.
struct Where {
    std::source_location site;
    const void* pc = nullptr;
    uint32_t sync = 0;
    uint16_t thread = 0;  // < 1024
    SharedAccess kind = SharedAccess::load;
};

/// One 4-byte word of shared memory in the running block.
struct Word {
    uint32_t block = 0;        ///< the worker's block it describes (older: stale, read as fresh)
    uint32_t write_epoch = 0;  ///< the interval of the last write (0: none)
    uint32_t read_epoch = 0;   ///< the interval of `readers`
    uint32_t readers = 0;      ///< warps (bit w) that read it in read_epoch
    uint32_t read_lanes = 0;   ///< lanes (bit l) of `read`'s warp that read it since its __syncwarp `read.sync`
    Where write;               ///< the last write
    Where read;                ///< the last of the reads in read_epoch
    uint16_t copy = kNoCopy;   ///< copy_in_flight (first word of a 16-byte chunk only)
};

// Dynamic shared memory's words in a flat array by offset (the hot path), static __shared__'s by
// address. Never cleared: stale words are reset when touched.
thread_local std::vector<Word> t_flat;
thread_local std::unordered_map<uintptr_t, Word> t_static;
thread_local uint32_t t_block_serial = 0;  // wraps after 4G blocks of one worker: harmless
thread_local uint32_t t_epoch = 1;
thread_local uint32_t t_warp_sync[32];  // per warp of the block: its __syncwarp releases so far

/// The main executable's PT_TLS segment (where its thread_locals, static __shared__ included, live).
int find_tls(dl_phdr_info* info, size_t, void* out) {
    if (info->dlpi_name && info->dlpi_name[0]) return 0;  // the main program comes first, unnamed
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS) return *static_cast<ElfW(Phdr)*>(out) = info->dlpi_phdr[i], 1;
    return 1;
}

/// [base, base + bytes) of this thread's block of the executable's TLS: on x86-64 (TLS variant II)
/// it ends at the thread pointer, its size rounded up to its alignment.
std::pair<uintptr_t, size_t> executable_tls() {
    static const ElfW(Phdr) tls = [] {
        ElfW(Phdr) p{};
        dl_iterate_phdr(find_tls, &p);
        return p;
    }();
    if (tls.p_memsz == 0) return {0, 0};
    const size_t align = tls.p_align ? tls.p_align : 1;
    const size_t span = (tls.p_memsz + align - 1) / align * align;
    return {reinterpret_cast<uintptr_t>(__builtin_thread_pointer()) - span, tls.p_memsz};
}

Word& word(uintptr_t a) {
    const uintptr_t off = a - t_dyn_smem_base;
    Word& w = off < t_dyn_smem_bytes ? t_flat[off / 4] : t_static[a];
    if (w.block != t_block_serial) w = Word{}, w.block = t_block_serial;
    return w;
}

const char* verb(SharedAccess k) {
    switch (k) {
        case SharedAccess::load: return "a load";
        case SharedAccess::store: return "a store";
        case SharedAccess::ldmatrix: return "an ldmatrix";
        case SharedAccess::cp_async: return "a cp.async";
        case SharedAccess::cp_async_wait: return "a cp.async (retired by its wait)";
    }
    return "an access";
}

}  // namespace

uint16_t& copy_in_flight(const void* p) { return word(reinterpret_cast<uintptr_t>(p)).copy; }

std::string thread_name(unsigned t) {
    const dim3 b = blockDim;
    return "thread (" + std::to_string(t % b.x) + "," + std::to_string((t / b.x) % b.y) + "," +
           std::to_string(t / (b.x * b.y)) + ")";
}

std::string describe_code(const void* pc) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "%p", pc);
    Dl_info info{};
    if (!dladdr(pc, &info) || !info.dli_fname) return hex;
    // The call's own instruction, one byte before its return address, relative to the object's base.
    const auto off = reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase) - 1;
    char addr[32];
    std::snprintf(addr, sizeof addr, "0x%lx", static_cast<unsigned long>(off));
    const std::string cmd = "addr2line -C -f -e '" + std::string(info.dli_fname) + "' " + addr + " 2>/dev/null";
    std::unique_ptr<FILE, int (*)(FILE*)> f(popen(cmd.c_str(), "r"), pclose);
    std::array<char, 4096> fn{}, line{};
    if (!f || !std::fgets(fn.data(), fn.size(), f.get()) || !std::fgets(line.data(), line.size(), f.get())) return hex;
    std::string a(fn.data()), b(line.data());
    while (!a.empty() && a.back() == '\n') a.pop_back();
    while (!b.empty() && b.back() == '\n') b.pop_back();
    if (const size_t d = b.find(" (discriminator"); d != std::string::npos) b.resize(d);
    return a + " at " + b;
}

namespace {

std::string describe(const Where& w) {
    std::string s = std::string(verb(w.kind)) + " by " + thread_name(w.thread) + " of warp " + std::to_string(w.thread / 32);
    if (w.pc) return s + " (" + describe_code(w.pc) + ")";
    if (w.site.line()) return s + " at " + w.site.file_name() + ":" + std::to_string(w.site.line());
    return s;
}

std::string position(uintptr_t a) {
    const uintptr_t off = a - t_dyn_smem_base;
    if (off < t_dyn_smem_bytes) return "byte " + std::to_string(off) + " of dynamic shared memory";
    char b[64];
    std::snprintf(b, sizeof b, "static __shared__ address %p", reinterpret_cast<void*>(a));
    return b;
}

[[noreturn]] void hazard(const char* what, uintptr_t a, const Where& now, const std::string& before,
                         const char* barrier, const char* why) {
    throw Error(std::string(what) + " on " + position(a) + ": " + describe(now) + " after " + before + ", with no " +
                barrier + " between: " + why);
}

}  // namespace

void shared_block_start(const void* base, size_t bytes) {
    ++t_block_serial;
    t_dyn_smem_base = reinterpret_cast<uintptr_t>(base);
    t_dyn_smem_bytes = bytes;
    if (t_flat.size() < (bytes + 3) / 4) t_flat.resize((bytes + 3) / 4);
    std::tie(t_static_smem_base, t_static_smem_bytes) = executable_tls();
    std::fill(std::begin(t_warp_sync), std::end(t_warp_sync), 0u);
}

void shared_warp_sync(unsigned warp) { ++t_warp_sync[warp]; }

void shared_block_end() { t_dyn_smem_base = t_dyn_smem_bytes = t_static_smem_base = t_static_smem_bytes = 0; }

void shared_barrier() { t_epoch = t_epoch + 1 ? t_epoch + 1 : 1; }  // 0 stays "never"

void shared_access(const void* p, size_t n, SharedAccess kind, std::source_location site, const void* pc) {
    const unsigned t = linear_thread(), warp = t / 32;
    const Where now{site, pc, t_warp_sync[warp], static_cast<uint16_t>(t), kind};
    // A hazard with an earlier access `e` of this barrier interval: from another warp, or from
    // another lane of this warp with no __syncwarp since (independent thread scheduling, sm_70+:
    // the lanes of a warp are not in lockstep).
    auto unordered = [&](const Where& e) {
        return e.thread / 32 != warp || (e.thread != t && e.sync == now.sync);
    };
    auto barrier = [&](const Where& e) {
        return e.thread / 32 != warp ? "__syncthreads" : "__syncwarp (or __syncthreads)";
    };
    const bool write = kind == SharedAccess::store || kind == SharedAccess::cp_async || kind == SharedAccess::cp_async_wait;
    const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3}, end = reinterpret_cast<uintptr_t>(p) + n;
    for (uintptr_t a = first; a < end; a += 4) {
        Word& w = word(a);
        const bool written_here = w.write_epoch == t_epoch && unordered(w.write);
        if (!write) {
            if (written_here)
                hazard("read after write", a, now, describe(w.write), barrier(w.write),
                       "the write is visible to another thread only after a barrier that follows it");
            if (w.read_epoch != t_epoch) w.readers = 0, w.read_lanes = 0, w.read_epoch = t_epoch;
            if (w.read.thread / 32 != warp || w.read.sync != now.sync) w.read_lanes = 0;  // those are ordered or another warp's
            w.readers |= 1u << warp;
            w.read_lanes |= 1u << (t % 32);
            w.read = now;
            continue;
        }
        if (written_here)
            hazard("write after write", a, now, describe(w.write), barrier(w.write),
                   "which of the two writes stays is up to the hardware");
        if (const uint32_t others = w.read_epoch == t_epoch ? w.readers & ~(1u << warp) : 0)
            hazard("write after read", a, now,
                   w.read.thread / 32 != warp ? describe(w.read)  // else an earlier reader of another warp
                                              : "a read by warp " + std::to_string(std::countr_zero(others)),
                   "__syncthreads", "on a GPU the write may land before that read");
        // Every lane of this warp that read it since this warp's last __syncwarp, not only the last
        // reader: which lane read last depends on the thread order.
        if (const uint32_t lanes = w.read_epoch == t_epoch && w.read.thread / 32 == warp && w.read.sync == now.sync
                                       ? w.read_lanes & ~(1u << (t % 32))
                                       : 0)
            hazard("write after read", a, now,
                   w.read.thread != t ? describe(w.read)
                                      : "a read by thread " + std::to_string(warp * 32 + std::countr_zero(lanes)) +
                                            " of warp " + std::to_string(warp),
                   barrier(w.read), "on a GPU the write may land before that read");
        w.write_epoch = t_epoch;
        w.write = now;
    }
}

}  // namespace emu::detail
