// emu/device.hpp — what a kernel sees of its thread: indices, barriers and warp operations.
//
// Each CUDA thread runs as a fiber on a worker thread (emu/scheduler.cpp). The built-in
// variables read the running fiber's coordinates; __syncthreads and the warp intrinsics suspend the
// fiber until its partners arrive, and check that they arrived at the same call site with the same
// mask (semantics: CUDA C++ Programming Guide, "Synchronization Functions" and "Warp Shuffle
// Functions"; PTX ISA, shfl.sync). Violations end the kernel with a report instead of undefined
// behaviour. Included by prelude.hpp; never by ordinary C++ code.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

namespace emu::detail {

/// The coordinates of the CUDA thread now running on this worker (set at every fiber switch).
struct ThreadCoords {
    uint3 thread_idx{};
};
/// The coordinates of the block now running on this worker.
struct BlockCoords {
    uint3 block_idx{};
    dim3 block_dim{}, grid_dim{};
};
extern constinit thread_local ThreadCoords* t_thread;
extern constinit thread_local BlockCoords* t_block;

/// The warp-level operations; one rendezvous implementation serves them all.
/// `collective`: the rendezvous of a PTX or wmma warp collective (mma, ldmatrix, load/store_matrix):
/// a __syncwarp(0xffffffff) at one site for the checks, but not a memory barrier for the
/// shared-memory hazard checks (shared_hazards.hpp), as `syncwarp` is.
enum class WarpOp : uint8_t { shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, any, all, syncwarp, collective };

/// __syncthreads: suspends until every live thread of the block waits at a barrier; they must all
/// wait at this same call site (else: "divergent __syncthreads" report).
void syncthreads(std::source_location site);

/// One warp operation for the calling lane: suspends until every lane named in `mask` has called
/// the same operation at the same site with the same mask, then returns this lane's result
/// (shuffles: the source lane's `value`; ballot: the vote mask; any/all: 0 or 1). `arg` is the
/// source lane / delta / lane mask of a shuffle, `width` its segment width (a power of 2 ≤ 32).
/// Reports: the mask lacks the caller, names a lane outside the block, a lane of the mask exited
/// or waits elsewhere, or a shuffle reads a lane outside the mask.
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, std::source_location site);

/// The lanes that exist in the caller's warp (all 32 unless the block size is not a multiple of
/// 32). Threads do not run in lockstep here, so neither divergence nor exits show in it.
unsigned active_mask();

/// The current block's dynamic shared memory (the launch's `smem` bytes, 16-byte aligned, filled
/// with 0xFF at block start like uninitialized memory).
void* dynamic_smem();

/// Reinterprets a shuffled value: T must be trivially copyable and at most 8 bytes.
template <class T>
uint64_t to_bits(const T& v) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "warp shuffle of a type > 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, static_cast<const void*>(&v), sizeof(T));
    return b;
}
template <class T>
T from_bits(uint64_t b) {
    T v;
    std::memcpy(static_cast<void*>(&v), &b, sizeof(T));
    return v;
}

}  // namespace emu::detail

// ---- built-in variables: per-fiber, read through the worker's current pointers ----
#define threadIdx (::emu::detail::t_thread->thread_idx)
#define blockIdx (::emu::detail::t_block->block_idx)
#define blockDim (::emu::detail::t_block->block_dim)
#define gridDim (::emu::detail::t_block->grid_dim)
inline constexpr int warpSize = 32;

namespace emu::detail {
/// The running CUDA thread's linear index in its block (x fastest), as warps are formed.
inline unsigned linear_thread() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
}  // namespace emu::detail

// ---- barriers ----

/// Block-wide barrier (all threads of the block, same call site).
inline void __syncthreads(std::source_location site = std::source_location::current()) {
    ::emu::detail::syncthreads(site);
}
/// Warp barrier over the lanes in `mask` (each must call it at the same site with the same mask).
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location site = std::source_location::current()) {
    ::emu::detail::warp_op(::emu::detail::WarpOp::syncwarp, mask, 0, 0, 32, site);
}

// ---- warp shuffles (any trivially copyable T of ≤ 8 bytes: int, float, double, __nv_bfloat16, ...) ----

/// Value of `var` in lane srcLane (taken modulo width, within the caller's width-lane segment).
template <class T>
T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize,
              std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    return from_bits<T>(warp_op(WarpOp::shfl_idx, mask, to_bits(var), srcLane, width, site));
}
/// Value of `var` in lane (lane - delta); lanes below delta in their segment keep their own.
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    return from_bits<T>(warp_op(WarpOp::shfl_up, mask, to_bits(var), static_cast<int>(delta), width, site));
}
/// Value of `var` in lane (lane + delta); lanes whose source leaves their segment keep their own.
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    return from_bits<T>(warp_op(WarpOp::shfl_down, mask, to_bits(var), static_cast<int>(delta), width, site));
}
/// Value of `var` in lane (lane ^ laneMask) (butterfly); a source in a later segment keeps its own.
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize,
                  std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    return from_bits<T>(warp_op(WarpOp::shfl_xor, mask, to_bits(var), laneMask, width, site));
}

// ---- warp votes ----

/// Bit i set when lane i is in `mask` and its predicate is non-zero.
inline unsigned __ballot_sync(unsigned mask, int predicate,
                              std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    return static_cast<unsigned>(warp_op(WarpOp::ballot, mask, predicate != 0, 0, 32, site));
}
/// 1 when any lane in `mask` has a non-zero predicate.
inline int __any_sync(unsigned mask, int predicate, std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    return static_cast<int>(warp_op(WarpOp::any, mask, predicate != 0, 0, 32, site));
}
/// 1 when every lane in `mask` has a non-zero predicate.
inline int __all_sync(unsigned mask, int predicate, std::source_location site = std::source_location::current()) {
    using namespace ::emu::detail;
    return static_cast<int>(warp_op(WarpOp::all, mask, predicate != 0, 0, 32, site));
}
/// The lanes that exist in the caller's warp: the emulator cannot see divergence, so code must not
/// use this to find the lanes of a branch (use __ballot_sync). Not a synchronization point.
inline unsigned __activemask() { return ::emu::detail::active_mask(); }
