// emu/pool.hpp — the worker threads that run the blocks of a launch.
//
// A launch's blocks are independent, so they are spread over $CUDA_EMU_WORKERS threads (default
// 2: the calling thread plus one helper). Each thread runs one block at a time with its own fiber
// pool and its own copy of __shared__ variables (thread_local), as an SM runs its blocks.
#pragma once
#include <cstdint>
#include <functional>

namespace emu::detail {

/// Runs job(i) for every i in [0, count) on the calling thread and the helper threads, each i once,
/// and returns when all have finished. `job` must not throw. Errors: throws emu::Error when
/// $CUDA_EMU_WORKERS is not an integer in [1, 64].
void parallel_for(uint64_t count, const std::function<void(uint64_t)>& job);

}  // namespace emu::detail
