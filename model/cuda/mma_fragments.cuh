// model/cuda/mma_fragments.cuh — the operands of mma.sync m16n8k16 (model/cuda/ptx.cuh) from bf16
// tiles in shared memory, one warp at a time: which lane points ldmatrix.x4 (or .trans) at which
// row of a 16x16 block for an A fragment, its transpose, and the B fragments of two n8 tiles read
// by rows or by columns; an accumulator pair reused as the next A fragment (FlashAttention-2's
// register trick); and the accumulating mma. The address formulas follow the PTX ISA's "Matrix
// Fragments for mma.m16n8k16" and ldmatrix's row-to-lane rule (lanes 8i .. 8i + 7 give matrix i's
// row addresses); the emulator models both, so a wrong formula fails under the emulator (emu/).
// Used by flash_forward.cu and flash_backward.cu.
#pragma once
#include <cstdint>

#include "model/cuda/kernels.cuh"
#include "model/cuda/ptx.cuh"

namespace llmtrain::cuda {

// `base` is the top-left element of the 16x16 block in a row-major bf16 tile, `ld` its row length in elements.

/// A fragment of a row-major 16x16 block: A[m][k] = base[m * ld + k].
__device__ inline void load_a(uint32_t a[4], const __nv_bfloat16* base, int ld) {
    const int lane = threadIdx.x % kWarpSize;
    ptx::ldmatrix_x4(a, base + (lane % 8 + 8 * ((lane / 8) % 2)) * ld + 8 * (lane / 16));
}
/// A fragment of the transpose of a row-major 16x16 block: A[m][k] = base[k * ld + m].
__device__ inline void load_a_trans(uint32_t a[4], const __nv_bfloat16* base, int ld) {
    const int lane = threadIdx.x % kWarpSize, mat = lane / 8;
    ptx::ldmatrix_x4_trans(a, base + (lane % 8 + 8 * (mat / 2)) * ld + 8 * (mat % 2));
}
/// B fragments of two n8 tiles (b[0..1]: n 0-7, b[2..3]: n 8-15) where B[k][n] = base[n * ld + k]
/// (the rows of a row-major tile are B's columns: K in Q K^T).
__device__ inline void load_b_rows(uint32_t b[4], const __nv_bfloat16* base, int ld) {
    const int lane = threadIdx.x % kWarpSize;
    ptx::ldmatrix_x4(b, base + (lane % 8 + 8 * (lane / 16)) * ld + 8 * ((lane / 8) % 2));
}
/// B fragments of two n8 tiles where B[k][n] = base[k * ld + n] (a row-major [k][n] tile: V in P V).
__device__ inline void load_b_cols(uint32_t b[4], const __nv_bfloat16* base, int ld) {
    const int lane = threadIdx.x % kWarpSize;
    ptx::ldmatrix_x4_trans(b, base + (lane % 8 + 8 * ((lane / 8) % 2)) * ld + 8 * (lane / 16));
}
/// The A fragment (16 x 16, k = the accumulator's columns 16kk .. 16kk + 15) of accumulator tiles
/// acc[2kk] and acc[2kk + 1], rounded to bf16: the register trick.
__device__ inline void acc_to_a(uint32_t a[4], const float lo[4], const float hi[4]) {
    a[0] = ptx::pack_bf16x2(lo[0], lo[1]);
    a[1] = ptx::pack_bf16x2(lo[2], lo[3]);
    a[2] = ptx::pack_bf16x2(hi[0], hi[1]);
    a[3] = ptx::pack_bf16x2(hi[2], hi[3]);
}
/// d += a b: one m16n8k16 bf16 mma with fp32 accumulation (a: A fragment, b: one n8 tile's B fragment).
__device__ inline void mma(float d[4], const uint32_t a[4], const uint32_t* b) { ptx::mma_bf16_16816(d, a, b, d); }

}  // namespace llmtrain::cuda
