// emu/ptx.cpp — the emulator's model of model/cuda/ptx.cuh (declared in device_ptx.hpp):
// mma.sync m16n8k16 bf16, ldmatrix, cp.async and the bf16x2 pack, with PTX ISA's documented
// fragment layouts. See device_ptx.hpp for the rules and docs/cuda_emu.md, "PTX primitives".
#include "emu/device_ptx.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "emu/device.hpp"
#include "emu/emu.hpp"
#include "emu/memory.hpp"
#include "emu/shared_hazards.hpp"

namespace emu::detail {
namespace {

constexpr unsigned kMaxThreads = 1024;

/// What one lane passes to a warp collective, published for the other lanes of its warp.
struct PtxCall {
    const void* p0 = nullptr;
    const void* p1 = nullptr;
    const void* p2 = nullptr;
};
thread_local PtxCall t_calls[kMaxThreads];  // one slot per thread of the running block

/// One cp.async: 16 bytes from src (or zeros) to dst.
struct Copy {
    unsigned char* dst = nullptr;
    const unsigned char* src = nullptr;
    bool valid = false;
    std::source_location site;
};
/// A thread's copies: issued but not committed, and its committed groups, oldest first.
struct LaneCopies {
    std::vector<Copy> pending;
    std::vector<std::vector<Copy>> groups;  // a handful at most: erasing the front is cheap
};
thread_local LaneCopies t_copies[kMaxThreads];
thread_local bool t_used = false;  ///< a cp.async was issued since the worker's block started

std::string hex(const void* p) {
    char b[32];
    std::snprintf(b, sizeof b, "%p", p);
    return b;
}

std::string where(std::source_location s) { return std::string(s.file_name()) + ":" + std::to_string(s.line()); }

/// Shared memory as far as the emulator can tell: 16-byte aligned, not emulated global memory, not
/// the calling thread's own stack (a local array). (Static __shared__ is thread_local storage and
/// dynamic shared memory a worker buffer: neither has a range of its own to test against.)
void check_shared(const char* fn, const char* what, const void* p) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
        throw Error(std::string(fn) + ": " + what + " " + hex(p) + " is not 16-byte aligned");
    if (const memory::Allocation* a = memory::find(p))
        throw Error(std::string(fn) + ": " + what + " " + hex(p) + " is global memory (" + memory::describe(*a) +
                    "), not shared memory");
    if (on_lane_stack(p, 16))
        throw Error(std::string(fn) + ": " + what + " " + hex(p) +
                    " is on the thread's stack (a local variable), not shared memory");
}

/// Warp collective entry: publish, meet all 32 lanes at `site`; returns the warp's first thread.
unsigned enter(const PtxCall& call, std::source_location site) {
    const unsigned t = linear_thread(), base = t - t % 32;
    if (blockDim.x * blockDim.y * blockDim.z % 32 != 0 && base + 32 > blockDim.x * blockDim.y * blockDim.z)
        throw Error("a PTX warp collective (mma.sync/ldmatrix) needs all 32 lanes: the block's last warp is partial");
    t_calls[t] = call;
    warp_op(WarpOp::collective, 0xffffffffu, 0, 0, 32, site);
    return base;
}
/// Warp collective exit: every lane is done reading the others' published values.
void leave(std::source_location site) { warp_op(WarpOp::collective, 0xffffffffu, 0, 0, 32, site); }

uint16_t half_of(uint32_t r, int hi) { return static_cast<uint16_t>(hi ? r >> 16 : r & 0xFFFF); }

float bf16_to_float(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

std::atomic<uint64_t> g_matrices{0}, g_extra_wavefronts{0};

/// Bank conflicts of one ldmatrix (emu::LdmatrixBanks): the published row addresses of its num
/// matrices, banks by offset in dynamic shared memory (absolute elsewhere).
void count_banks(unsigned base, int num) {
    const uintptr_t smem0 = t_dyn_smem_base;
    uint64_t extra = 0;
    for (int j = 0; j < num; j++) {
        int per_bank[32] = {};
        for (int r = 0; r < 8; r++) {
            const auto a = reinterpret_cast<uintptr_t>(t_calls[base + 8 * j + r].p0) - smem0;
            for (int w = 0; w < 4; w++) per_bank[(a / 4 + w) % 32]++;
        }
        extra += static_cast<uint64_t>(*std::max_element(per_bank, per_bank + 32) - 1);
    }
    g_matrices += static_cast<uint64_t>(num);
    g_extra_wavefronts += extra;
}

/// ldmatrix .x<num> (.trans): lanes 8j..8j+7 give matrix j's row addresses.
void ldmatrix(const char* fn, uint32_t* r, int num, bool trans, const void* smem, std::source_location site) {
    const unsigned t = linear_thread(), lane = t % 32;
    if (static_cast<int>(lane) < 8 * num) {
        check_shared(fn, "row address", smem);
        if (const uint16_t copy = copy_in_flight(smem); copy != kNoCopy)
            throw Error(std::string(fn) + ": lane " + std::to_string(lane) + " reads row " + hex(smem) +
                        " while a cp.async into it by " + thread_name(copy) +
                        " is in flight (not yet retired by that thread's cp.async.wait_group)");
        shared_access(smem, 16, SharedAccess::ldmatrix, site);
    }
    const unsigned base = enter({smem}, site);
    if (lane == 0) count_banks(base, num);
    uint32_t out[4] = {};
    for (int j = 0; j < num; j++) {
        // Element (row, col) of matrix j: row `row` is lane 8j+row's 16 bytes.
        auto elem = [&](unsigned row, unsigned col) {
            uint16_t v;
            std::memcpy(&v, static_cast<const unsigned char*>(t_calls[base + 8 * j + row].p0) + 2 * col, 2);
            return v;
        };
        const unsigned g = lane / 4, c = 2 * (lane % 4);
        const uint16_t lo = trans ? elem(c, g) : elem(g, c);
        const uint16_t hi = trans ? elem(c + 1, g) : elem(g, c + 1);
        out[j] = static_cast<uint32_t>(lo) | static_cast<uint32_t>(hi) << 16;
    }
    leave(site);
    for (int j = 0; j < num; j++) r[j] = out[j];
}

/// Performs one copy (at its group's retirement by thread t's wait at wait_site).
void perform(const Copy& c, unsigned t, std::source_location wait_site) {
    for (int i = 0; i < 16; i++)
        if (c.dst[i] != 0xFF)
            throw Error("cp.async issued at " + where(c.site) + ": destination " + hex(c.dst) +
                        " was written while the copy was in flight (its poison is gone at the wait; " +
                        thread_name(t) + ")");
    if (c.valid)
        std::memcpy(c.dst, c.src, 16);
    else
        std::memset(c.dst, 0, 16);
    copy_in_flight(c.dst) = kNoCopy;
    shared_access(c.dst, 16, SharedAccess::cp_async_wait, wait_site);  // the data lands (for another warp) now
}

void forget(unsigned t) {
    LaneCopies& lc = t_copies[t];
    auto drop = [&](const std::vector<Copy>& v) {
        for (const Copy& c : v)
            if (uint16_t& copy = copy_in_flight(c.dst); copy == t) copy = kNoCopy;
    };
    drop(lc.pending);
    for (const auto& g : lc.groups) drop(g);
    lc.pending.clear();
    lc.groups.clear();
}

}  // namespace

void ptx_block_start() {
    if (!t_used) return;
    for (LaneCopies& lc : t_copies) lc.pending.clear(), lc.groups.clear();
    t_used = false;
}

void ptx_lane_exit(unsigned lane) {
    if (lane >= kMaxThreads) return;
    LaneCopies& lc = t_copies[lane];
    size_t n = lc.pending.size();
    for (const auto& g : lc.groups) n += g.size();
    if (n == 0) return;
    const Copy& first = lc.pending.empty() ? lc.groups.front().front() : lc.pending.front();
    const std::string msg = "exits with " + std::to_string(n) + " cp.async cop" + (n == 1 ? "y" : "ies") + " in flight (" +
                            std::to_string(lc.pending.size()) + " not committed; the first issued at " +
                            where(first.site) + "): wait with cp_async_wait<0>() before exiting";
    forget(lane);
    throw Error(msg);
}

}  // namespace emu::detail

namespace emu {
LdmatrixBanks ldmatrix_banks() { return {detail::g_matrices.load(), detail::g_extra_wavefronts.load()}; }
void reset_ldmatrix_banks() { detail::g_matrices = 0, detail::g_extra_wavefronts = 0; }
}  // namespace emu

namespace llmtrain::cuda::ptx {

using namespace ::emu::detail;
using ::emu::Error;

void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], site_t site) {
    const unsigned lane = linear_thread() % 32;
    const unsigned base = enter({a, b}, site);
    // A[r][k]: lane 4*(r%8) + (k%8)/2, register (r>=8) + 2*(k>=8), half k%2.
    auto A = [&](unsigned r, unsigned k) {
        const auto* regs = static_cast<const uint32_t*>(t_calls[base + 4 * (r % 8) + (k % 8) / 2].p0);
        return bf16_to_float(half_of(regs[(r >= 8) + 2 * (k >= 8)], k % 2));
    };
    // B[k][n]: lane 4*n + (k%8)/2, register (k>=8), half k%2.
    auto B = [&](unsigned k, unsigned n) {
        const auto* regs = static_cast<const uint32_t*>(t_calls[base + 4 * n + (k % 8) / 2].p1);
        return bf16_to_float(half_of(regs[k >= 8], k % 2));
    };
    const unsigned g = lane / 4, t = lane % 4;
    float out[4];
    for (int j = 0; j < 4; j++) {
        const unsigned r = g + 8 * (j >= 2), n = 2 * t + (j % 2);
        float acc = c[j];
        for (unsigned k = 0; k < 16; k++) acc += A(r, k) * B(k, n);  // exact products, k increasing
        out[j] = acc;
    }
    leave(site);  // the other lanes are done reading this lane's a and b
    for (int j = 0; j < 4; j++) d[j] = out[j];
}

void ldmatrix_x1(uint32_t r[1], const void* smem, site_t site) { ldmatrix("ldmatrix_x1", r, 1, false, smem, site); }
void ldmatrix_x2(uint32_t r[2], const void* smem, site_t site) { ldmatrix("ldmatrix_x2", r, 2, false, smem, site); }
void ldmatrix_x4(uint32_t r[4], const void* smem, site_t site) { ldmatrix("ldmatrix_x4", r, 4, false, smem, site); }
void ldmatrix_x2_trans(uint32_t r[2], const void* smem, site_t site) {
    ldmatrix("ldmatrix_x2_trans", r, 2, true, smem, site);
}
void ldmatrix_x4_trans(uint32_t r[4], const void* smem, site_t site) {
    ldmatrix("ldmatrix_x4_trans", r, 4, true, smem, site);
}

void cp_async_16(void* smem, const void* gmem, bool valid, site_t site) {
    const unsigned t = linear_thread();
    check_shared("cp_async_16", "destination", smem);
    if (valid) {
        if (reinterpret_cast<uintptr_t>(gmem) % 16 != 0)
            throw Error("cp_async_16: source " + hex(gmem) + " is not 16-byte aligned");
        const emu::memory::Allocation* a = emu::memory::find(gmem);
        if (!a || reinterpret_cast<uintptr_t>(gmem) + 16 > a->base + a->size)
            throw Error("cp_async_16: source " + hex(gmem) + " is not 16 bytes of emulated device memory: " +
                        emu::memory::explain_foreign(gmem));
    }
    uint16_t& copy = copy_in_flight(smem);
    t_used = true;
    if (copy != kNoCopy)
        throw Error("cp_async_16 at " + where(site) + ": destination " + hex(smem) + " already has a cp.async in flight (by " +
                    thread_name(copy) + "); wait for it before reusing the buffer");
    shared_access(smem, 16, SharedAccess::cp_async, site);  // it may land at once
    copy = static_cast<uint16_t>(t);
    std::memset(smem, 0xFF, 16);  // poison: NaN until the wait retires the copy
    t_copies[t].pending.push_back({static_cast<unsigned char*>(smem), static_cast<const unsigned char*>(gmem), valid, site});
}

void cp_async_commit(site_t) {
    LaneCopies& lc = t_copies[linear_thread()];
    lc.groups.push_back(std::move(lc.pending));  // an empty group counts too, as in PTX
    lc.pending.clear();
}

void cp_async_wait_group(int n, site_t site) {
    const unsigned t = linear_thread();
    LaneCopies& lc = t_copies[t];
    while (lc.groups.size() > static_cast<size_t>(n)) {
        for (const Copy& c : lc.groups.front()) perform(c, t, site);
        lc.groups.erase(lc.groups.begin());
    }
}

uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat16 l = __float2bfloat16_rn(lo), h = __float2bfloat16_rn(hi);
    uint16_t lb, hb;
    std::memcpy(&lb, &l, 2);
    std::memcpy(&hb, &h, 2);
    return static_cast<uint32_t>(lb) | static_cast<uint32_t>(hb) << 16;
}

float ex2_approx(float x) {
    if (std::fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
    const float r = std::exp2f(x);
    return std::fpclassify(r) == FP_SUBNORMAL ? 0.0f : r;
}

int lane_id() { return static_cast<int>(linear_thread() % 32); }

}  // namespace llmtrain::cuda::ptx
