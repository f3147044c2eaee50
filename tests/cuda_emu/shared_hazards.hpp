// tests/cuda_emu/shared_hazards.hpp — hazards between warps on shared memory, found in any thread
// order (docs/cuda_emu.md "Hazards between warps").
//
// The scheduler runs one warp's stretch between barriers before or after another's, so a missing
// __syncthreads shows as wrong bits only in the orders that happen to run the reader first. This
// module keeps, for every 4-byte word of the block's shared memory, the barrier interval ("epoch":
// the __syncthreads releases of the block so far) of its last write and of its reads, with the
// warps and the access, and faults at once on a hazard between two warps in one interval:
//   - read after write: another warp's store (or retired cp.async) is visible only after a barrier;
//   - write after read: on a GPU the write may land before another warp's read has run;
//   - write after write: which of the two stays is up to the hardware.
// Within one warp nothing is a hazard (its lanes issue in order). Fed by the PTX model (ldmatrix
// reads, cp.async writes: always) and, in the racecheck build, by plain loads and stores of
// dynamic shared memory (racecheck_hooks.cpp: the compiler's -fsanitize=thread instrumentation of
// kernel sources calls them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <source_location>

namespace emu::detail {

/// How shared memory was touched (for the report).
enum class SharedAccess : uint8_t { load, store, ldmatrix, cp_async, cp_async_wait };

/// Records an access by the running CUDA thread to [p, p + n) of shared memory (dynamic, or static
/// __shared__ through the PTX model) in the current barrier interval. `site` names a PTX
/// primitive's caller; `pc`, when not null, a plain access's instruction (a return address).
/// Errors: throws emu::Error (a kernel fault) on a hazard with another warp's access in the same
/// interval, naming both accesses, the threads and the shared-memory offset.
void shared_access(const void* p, size_t n, SharedAccess kind, std::source_location site, const void* pc = nullptr);

/// Called by the scheduler: a block starts with [base, base + bytes) of dynamic shared memory (its
/// records from earlier blocks are stale from now on); a __syncthreads released the block.
void shared_block_start(const void* base, size_t bytes);
void shared_barrier();

/// The running block's dynamic shared memory (both 0 outside a block): the plain-access hooks'
/// fast test.
extern constinit thread_local uintptr_t t_dyn_smem_base;
extern constinit thread_local size_t t_dyn_smem_bytes;

/// A plain load or store of n bytes at p, from the instruction before return address pc: recorded
/// when p is in the running block's dynamic shared memory, else ignored (global memory, the stack,
/// host code).
inline void shared_plain_access(const void* p, size_t n, bool write, const void* pc) {
    if (reinterpret_cast<uintptr_t>(p) - t_dyn_smem_base >= t_dyn_smem_bytes) return;
    shared_access(p, n, write ? SharedAccess::store : SharedAccess::load, std::source_location{}, pc);
}

}  // namespace emu::detail
