// emu/device_ptx.hpp — the PTX warp-level primitives of model/cuda/ptx.cuh on the CPU.
//
// Declares llmtrain::cuda::ptx (the same names and parameters as ptx.cuh under nvcc, plus a
// trailing defaulted std::source_location: the caller's site) and implements them in ptx.cpp.
// Included by the prelude and by ptx.cuh under EMU_BUILD. Layouts are PTX ISA's documented ones
// (see ptx.cuh for each function's fragment layout); docs/cuda_emu.md, "PTX primitives".
//
// - mma_bf16_16816 and ldmatrix_* are warp collectives: all 32 lanes of the warp must call the same
//   function at the same site (checked through __syncwarp(0xffffffff), like nvcuda::wmma).
//   mma: D[r][c] = C[r][c] + sum_{k=0..15} A[r][k]*B[k][c] in fp32, k in increasing order (bf16
//   products are exact in fp32, so a plain C++ loop in that order gives the same bits).
//   ldmatrix: every used lane's row address must be 16-byte aligned and lie in the block's shared
//   memory (static __shared__ or EXTERN_SHARED); an error is a kernel fault naming the lane.
// - cp.async is per thread: cp_async_16 records the copy and fills the 16 destination bytes with
//   0xFF (NaN as fp32/bf16) at once; cp_async_commit closes the thread's pending copies into a
//   group; cp_async_wait<N> performs (reads gmem, writes smem) the copies of every committed group
//   but the N most recent. So a read before the right wait sees NaN; __syncthreads completes
//   nothing. Copies issued but not committed stay in flight through any wait (PTX: wait_group
//   waits on committed groups only); a wait on more groups than were committed is a no-op.
//   Reported as kernel faults: a thread that exits with copies in flight (committed or not); a
//   cp_async_16 onto a destination with a copy in flight (any thread of the block); an ldmatrix
//   row with a copy in flight; a destination overwritten by a plain store while its copy was in
//   flight (seen at the wait: the poison is gone); between warps, in one barrier interval (no
//   __syncthreads between), an ldmatrix of a row another warp's copy was retired into, or a
//   cp_async_16 into a row another warp read (shared_hazards.hpp; in any thread order); a destination or ldmatrix address that is
//   emulated global memory or the thread's own stack, or not 16-byte aligned; a valid source
//   that is not emulated device memory or not 16-byte aligned.
// - pack_bf16x2: __float2bfloat16_rn of each (cuda_bf16.h's exact conversion), lo in bits 0-15.
// - ex2_approx: std::exp2f with .ftz's flushes (subnormal input and result to 0).
// - lane_id: the linear thread index in the block mod 32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <source_location>

namespace llmtrain::cuda::ptx {

using site_t = std::source_location;

/// D = A * B + C, mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (see ptx.cuh for layouts).
void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                    site_t site = site_t::current());
/// ldmatrix.sync.aligned.m8n8.x1.shared.b16: lanes 0-7 address the rows; lane i gets row i/4,
/// elements 2(i%4), 2(i%4)+1.
void ldmatrix_x1(uint32_t r[1], const void* smem, site_t site = site_t::current());
/// .x2: lanes 8j..8j+7 address matrix j's rows (j < 2); r[j] as in x1.
void ldmatrix_x2(uint32_t r[2], const void* smem, site_t site = site_t::current());
/// .x4: lanes 8j..8j+7 address matrix j's rows (j < 4); r[j] as in x1.
void ldmatrix_x4(uint32_t r[4], const void* smem, site_t site = site_t::current());
/// .x2.trans: lane i gets M[2(i%4)][i/4], M[2(i%4)+1][i/4] of each matrix M.
void ldmatrix_x2_trans(uint32_t r[2], const void* smem, site_t site = site_t::current());
/// .x4.trans: four matrices, transposed as in x2.trans.
void ldmatrix_x4_trans(uint32_t r[4], const void* smem, site_t site = site_t::current());
/// cp.async.cg.shared.global, 16 bytes; valid = false writes 16 zero bytes (src-size 0) and does
/// not read gmem. The destination holds 0xFF bytes until a wait retires the copy's group.
void cp_async_16(void* smem, const void* gmem, bool valid, site_t site = site_t::current());
/// cp.async.commit_group: this thread's pending copies become one group (possibly empty).
void cp_async_commit(site_t site = site_t::current());
/// cp.async.wait_group n (the model behind cp_async_wait<N>).
void cp_async_wait_group(int n, site_t site = site_t::current());
/// cp.async.wait_group N: performs every committed group of this thread but the N most recent.
template <int N>
void cp_async_wait(site_t site = site_t::current()) {
    static_assert(N >= 0, "cp.async.wait_group takes a non-negative count");
    cp_async_wait_group(N, site);
}
/// Two floats rounded to bf16 (nearest even), lo in bits 0-15, hi in bits 16-31.
uint32_t pack_bf16x2(float lo, float hi);
/// 2^x as ex2.approx.ftz.f32: std::exp2f (correctly rounded or nearly; the GPU's is within
/// 2^-22 relative), a subnormal input read as 0 and a subnormal result returned as +0.
float ex2_approx(float x);
/// The calling CUDA thread's lane: its linear index in the block mod 32 (%laneid).
int lane_id();

}  // namespace llmtrain::cuda::ptx

namespace emu::detail {
/// Called by the scheduler: ptx_block_start when a worker starts a block (forgets the cp.async
/// state an abandoned earlier block left); ptx_lane_exit after a CUDA thread's kernel body returns
/// (lane = linear thread index in the block): throws emu::Error when it leaves copies in flight.
void ptx_block_start();
void ptx_lane_exit(unsigned lane);
/// True when [p, p+n) lies on the running CUDA thread's own fiber stack (local memory).
bool on_lane_stack(const void* p, size_t n);
}  // namespace emu::detail
