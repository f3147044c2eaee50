// emu/global_hazards.hpp — hazards between the blocks of one launch on global memory,
// for the racecheck build (docs/cuda_emu.md "Hazards between warps, and the racecheck").
//
// A GPU runs a grid's blocks in no set order, and none of this backend's kernels lets blocks
// communicate (no atomics, no __threadfence): so within one launch, a word of emulated device
// memory that one block stores is neither stored nor loaded by another. The racecheck's hooks
// (racecheck_hooks.cpp) pass every plain global access of instrumented kernels here; this module
// keeps each stored word's launch and block and faults on a store or load of it by another block of
// the same launch (write after write, read after write). A read by one block before another
// block's store (write after read) is not seen: reads are not recorded; nor a hazard on bytes whose
// word another block stored into since (a word keeps the bytes of its last storing block only).
#pragma once
#include <cstddef>
#include <cstdint>

namespace emu::detail {

/// Called by the scheduler when a worker starts a block (the launch's serial number, unique per
/// launch in the process, and the block's linear index in its grid) and when the block ends.
void global_block_start(uint64_t launch, uint64_t block);
void global_block_end();

/// A plain load or store of n bytes at p by the running CUDA thread, from the instruction before
/// return address pc: checked when a block runs and p is emulated device or pinned memory, else
/// ignored. Errors: throws emu::Error (a kernel fault) naming both blocks, threads and source lines.
void global_plain_access(const void* p, size_t n, bool write, const void* pc);

}  // namespace emu::detail
