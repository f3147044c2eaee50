// tests/cuda_emu/scheduler.hpp — runs one thread block of a kernel on the calling worker thread.
//
// Each CUDA thread of the block is a fiber (Boost.Context, 64 KiB guarded stacks), pooled per
// worker and reused across blocks. Fibers run one at a time in the configured thread order until
// they exit or reach a __syncthreads or a warp operation; a barrier releases when every live
// thread waits at it, a warp operation when every lane of its mask does. A block in which no
// thread can proceed is a deadlock, reported with every thread's state. Kernels that never
// synchronized on an earlier launch take a fast path: a plain loop of calls, no fibers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>

#include "tests/cuda_emu/emu.hpp"

namespace emu::detail {

/// One launch as the scheduler sees it.
struct LaunchSpec {
    const void* kernel = nullptr;
    dim3 grid, block;
    size_t smem = 0;             ///< dynamic shared memory bytes per block
    std::function<void()> body;  ///< runs the kernel for the current thread
};

/// How to run a block.
struct BlockRun {
    uint3 block_idx{};
    ThreadOrder order = ThreadOrder::forward;
    uint64_t seed = 0;      ///< for ThreadOrder::random
    bool fast = false;      ///< plain loop: any synchronization is reported
    bool* used_sync;        ///< set when a thread reached a barrier or warp operation
};

/// Runs one block of `spec` on this thread. Returns "" or a report (divergent barrier, wrong warp
/// mask, deadlock with every thread's state, an exception thrown by a thread, a synchronization
/// reached on the fast path). After a report the block's remaining threads are abandoned.
std::string run_block(const LaunchSpec& spec, const BlockRun& run);

}  // namespace emu::detail
