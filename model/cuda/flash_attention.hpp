// model/cuda/flash_attention.hpp — which shapes the tensor-core FlashAttention-2 kernels
// (flash_attention.cu, model.attention = "native" in bf16) take and the shared memory they need
// (plain C++: CudaOps, resolve_attention and the tests read it; other shapes stay on attention.cu's
// CUDA-core kernels).
#pragma once
#include <algorithm>
#include <cstddef>

namespace llmtrain::cuda {

/// True when head size C / NH is 64 or 128 (the kernels are compiled for those two).
inline bool flash_attention_supported(int C, int NH) {
    return NH > 0 && C % NH == 0 && (C / NH == 64 || C / NH == 128);
}

/// Bytes of dynamic shared memory per block the most demanding FlashAttention-2 kernel needs at
/// `head_size` (64 or 128; the forward, the dK/dV and the dQ kernel all run in a training step). A
/// device runs them only if this is at most its opt-in limit (cudaDevAttrMaxSharedMemoryPerBlockOptin:
/// 227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on sm_86, sm_89 and sm_120). Source: flash_attention.cu's
/// flash_forward_smem / flash_backward_kv_smem / flash_backward_q_smem with its constants (64-row
/// blocks of 4 warps of 16 rows, 64-row tiles, bf16 tiles of row stride HS + 8, per-warp fp32 score
/// tiles of stride 68, bf16 P tiles of stride 72, +32 bytes of alignment): HS 64: 54,304 / 90,656 /
/// 80,928 B; HS 128: 95,264 / 123,424 / 113,696 B (docs/cuda.md). Keep in step with
/// flash_attention.cu: the emulated test FlashSmem.NeedIsExactlyTheKernelsLimit fails otherwise.
inline size_t flash_attention_smem_bytes(int head_size) {
    const size_t bf16 = 2, f32 = 4, rows = 64, tile = 64, warps = 4, mma = 16;
    const size_t row_tile = bf16 * rows * size_t(head_size + 8);  // a (64, HS) bf16 tile
    const size_t s_ld = tile + 4, p_ld = tile + 8;                 // fp32 score / bf16 P strides
    const size_t wide_ld = std::max<size_t>(size_t(head_size), tile) + 4;
    const size_t forward = 32 + 3 * row_tile + warps * mma * (f32 * wide_ld + bf16 * p_ld);
    const size_t key = 32 + 4 * row_tile + 2 * tile * f32 + warps * 2 * mma * (f32 * s_ld + bf16 * p_ld);
    const size_t query = 32 + 4 * row_tile + warps * mma * (2 * f32 * s_ld + bf16 * p_ld);
    return std::max({forward, key, query});
}

}  // namespace llmtrain::cuda
