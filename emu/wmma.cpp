// emu/wmma.cpp — the wmma model's state and checks (device_wmma.hpp): the layout seed,
// the element-to-position permutations drawn from it, and the collective entry and exit.
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "emu/emu.hpp"
#include "emu/device_wmma.hpp"

namespace emu {
namespace {

constexpr uint64_t kUnset = ~uint64_t{0};
std::atomic<uint64_t> g_seed{kUnset};

/// The permutations of one seed: position of (lane, e) and owner of each position, per kind.
struct Layout {
    uint64_t seed = kUnset;
    std::array<std::array<uint16_t, 256>, 3> pos, owner;
};
thread_local Layout t_layout;

uint64_t splitmix(uint64_t& s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

const Layout& layout() {
    const uint64_t seed = wmma_layout();
    if (t_layout.seed != seed) {
        uint64_t s = seed;
        for (int k = 0; k < 3; k++) {
            auto& p = t_layout.pos[k];
            for (int i = 0; i < 256; i++) p[i] = static_cast<uint16_t>(i);
            for (int i = 255; i > 0; i--) std::swap(p[i], p[splitmix(s) % (i + 1)]);  // Fisher-Yates
            for (int i = 0; i < 256; i++) t_layout.owner[k][p[i]] = static_cast<uint16_t>(i);
        }
        t_layout.seed = seed;
    }
    return t_layout;
}

}  // namespace

void set_wmma_layout(uint64_t seed) { g_seed = seed; }

uint64_t wmma_layout() {
    uint64_t s = g_seed.load();
    if (s != kUnset) return s;
    const char* env = std::getenv("CUDA_EMU_WMMA_LAYOUT");
    s = 1;
    if (env && *env) {
        char* end = nullptr;
        s = std::strtoull(env, &end, 10);
        if (*end != '\0' || s == kUnset)
            throw Error(std::string("CUDA_EMU_WMMA_LAYOUT='") + env + "': expected a seed (a decimal integer)");
    }
    uint64_t expected = kUnset;
    g_seed.compare_exchange_strong(expected, s);
    return g_seed.load();
}

namespace detail {

const uint16_t* wmma_positions(int kind) { return layout().pos[kind].data(); }
const uint16_t* wmma_owners(int kind) { return layout().owner[kind].data(); }

void wmma_check_memory(const char* fn, const void* p, unsigned ldm, size_t elem_bytes) {
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    {
        char b[32];
        std::snprintf(b, sizeof b, "%p", p);
        throw Error(std::string("wmma::") + fn + ": pointer " + b + " is not 256-bit (32-byte) aligned");
    }
    if (ldm < 16 || (ldm * elem_bytes) % 16 != 0)
        throw Error(std::string("wmma::") + fn + ": ldm " + std::to_string(ldm) +
                    " must be >= 16 and a multiple of 16 bytes (" + std::to_string(16 / elem_bytes) + " elements)");
}

unsigned wmma_enter(const char* fn, const WmmaCall& call, bool uniform, std::source_location site) {
    const unsigned t = linear_thread(), base = t - t % 32;
    t_wmma_calls[t] = call;
    warp_op(WarpOp::collective, 0xffffffffu, 0, 0, 32, site);  // all 32 lanes, the same call site
    const WmmaCall& first = t_wmma_calls[base];
    if (uniform && (first.ptr != call.ptr || first.ldm != call.ldm || first.layout != call.layout))
        throw Error(std::string("wmma::") + fn + ": lane " + std::to_string(t % 32) +
                    " passes a different pointer, ldm or layout than lane 0 of its warp (they must be warp-uniform)");
    return base;
}

void wmma_leave(std::source_location site) { warp_op(WarpOp::collective, 0xffffffffu, 0, 0, 32, site); }

}  // namespace detail
}  // namespace emu
