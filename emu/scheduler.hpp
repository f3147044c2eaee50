// emu/scheduler.hpp — runs one thread block of a kernel on the calling worker thread.
//
// Each CUDA thread of the block runs on a fiber (Boost.Context, 64 KiB guarded stacks) from a pool
// per worker, reused across blocks. Threads run one at a time in the configured thread order until
// they exit or reach a __syncthreads or a warp operation; a barrier releases when every live
// thread waits at it, a warp operation when every lane of its mask does. A block in which no
// thread can proceed is a deadlock, reported with every thread's state. Fast path: threads that
// exit without waiting run back to back on one fiber as a plain loop of calls; the first wait
// ends the loop there and the scheduler takes over, so the order and results are the same.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>

#include "emu/emu.hpp"

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
    uint64_t seed = 0;  ///< for ThreadOrder::random
    uint64_t launch = 0;  ///< the launch's serial number in the process
};

/// Runs one block of `spec` on this thread. Returns "" or a report (divergent barrier, wrong warp
/// mask, deadlock with every thread's state, an exception thrown by a thread). After a report the
/// block's remaining threads are abandoned (their kernels unwind).
std::string run_block(const LaunchSpec& spec, const BlockRun& run);

}  // namespace emu::detail
