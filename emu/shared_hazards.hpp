// emu/shared_hazards.hpp — hazards between warps on shared memory, found in any thread
// order (docs/cuda_emu.md "Hazards between warps, and the racecheck").
//
// The scheduler runs one warp's stretch between barriers before or after another's, so a missing
// __syncthreads shows as wrong bits only in the orders that happen to run the reader first. This
// module keeps, for every 4-byte word of the block's shared memory, the barrier interval ("epoch":
// the __syncthreads releases of the block so far) of its last write and of its reads, with the
// threads and the access, and faults at once on a hazard between two warps in one interval:
//   - read after write: another warp's store (or retired cp.async) is visible only after a barrier;
//   - write after read: on a GPU the write may land before another warp's read has run;
//   - write after write: which of the two stays is up to the hardware.
// Between two lanes of one warp the same holds until a __syncwarp orders them (independent thread
// scheduling, sm_70+: a warp's lanes are not in lockstep). Fed by the PTX model (ldmatrix
// reads, cp.async writes: always) and, in the racecheck build, by plain loads and stores of
// shared memory (racecheck_hooks.cpp: the compiler's -fsanitize=thread instrumentation of kernel
// sources calls them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>

namespace emu::detail {

/// How shared memory was touched (for the report).
enum class SharedAccess : uint8_t { load, store, ldmatrix, cp_async, cp_async_wait };

/// Records an access by the running CUDA thread to [p, p + n) of shared memory (dynamic or static
/// __shared__) in the current barrier interval. `site` names a PTX
/// primitive's caller; `pc`, when not null, a plain access's instruction (a return address).
/// Errors: throws emu::Error (a kernel fault) on a hazard with another warp's access in the same
/// interval, naming both accesses, the threads and the shared-memory offset.
void shared_access(const void* p, size_t n, SharedAccess kind, std::source_location site, const void* pc = nullptr);

/// Called by the scheduler: a block starts with [base, base + bytes) of dynamic shared memory (its
/// records from earlier blocks are stale from now on); a __syncthreads released the block; the
/// block ended.
void shared_block_start(const void* base, size_t bytes);
void shared_barrier();
void shared_block_end();
/// Called by the scheduler when a __syncwarp released warp `warp` (of the running block): its lanes'
/// accesses before it are ordered before those after. (PTX and wmma collectives are no such
/// barrier: WarpOp::collective.)
void shared_warp_sync(unsigned warp);

/// The cp.async copy in flight into the 16-byte chunk of shared memory at p (16-byte aligned): the
/// issuing thread's linear index, or kNoCopy. Kept with the chunk's first word for the running
/// block (the PTX model's in-flight checks, ptx.cpp).
constexpr uint16_t kNoCopy = 0xFFFF;
uint16_t& copy_in_flight(const void* p);

/// "thread (x,y,z)" of linear thread t of the running block, for reports.
std::string thread_name(unsigned t);

/// "function at file:line" of the instruction before return address pc (addr2line: the object needs
/// debug information), else the bare address. For the hazard reports.
std::string describe_code(const void* pc);

/// While a block runs (all 0 otherwise): its dynamic shared memory, and the worker thread's block
/// of the executable's thread-local storage, where the prelude puts static __shared__ arrays
/// (`__shared__` is `thread_local`). The plain-access hooks' fast test.
extern constinit thread_local uintptr_t t_dyn_smem_base;
extern constinit thread_local size_t t_dyn_smem_bytes;
extern constinit thread_local uintptr_t t_static_smem_base;
extern constinit thread_local size_t t_static_smem_bytes;

/// A plain load or store of n bytes at p, from the instruction before return address pc: recorded
/// when p is the running block's shared memory, dynamic or static, else ignored (global memory,
/// the stack, host code). The executable's other thread-locals (the emulator's own, read by the
/// prelude's threadIdx & co.) share the static range: kernels only read them, which is no hazard.
inline void shared_plain_access(const void* p, size_t n, bool write, const void* pc) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    if (a - t_dyn_smem_base >= t_dyn_smem_bytes && a - t_static_smem_base >= t_static_smem_bytes) return;
    shared_access(p, n, write ? SharedAccess::store : SharedAccess::load, std::source_location{}, pc);
}

}  // namespace emu::detail
