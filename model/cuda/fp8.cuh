// model/cuda/fp8.cuh — FP8 in the CUDA backend's kernels: model/fp8.hpp's conversions (the same
// functions on the host, in the emulator and under nvcc) applied to the compute dtype with a scale.
// The FP8 linear layers quantize through it (fp8_quantize.cu; docs/fp8.md). Being a .cuh of
// model/cuda, it is compiled by the nvcc gate (tests/cuda_emu/nvcc_gate.sh) for sm_80 and sm_90,
// which keeps model/fp8.hpp honest device code.
#pragma once
#include <cstdint>

#include "model/cuda/common.cuh"
#include "model/fp8.hpp"

namespace llmtrain::cuda {

/// x (float or __nv_bfloat16) times `scale` (current scaling: fp8_max / amax, model/fp8.hpp), then
/// rounded to format `f`'s bits: nearest even, saturated to ±max (cuBLASLt's and __NV_SATFINITE's
/// behaviour), NaN -> 0x7F. The product is formed in fp32.
template <typename T>
__device__ __host__ inline uint8_t to_fp8_scaled(T x, float scale, Fp8Format f) {
    return f32_to_fp8(to_float(x) * scale, f, Fp8Saturation::kSatFinite);
}

/// FP8 bits of format `f` back to T, times `inv_scale` (1 / scale): fp32 product, then from_float's
/// round to nearest even into T.
template <typename T>
__device__ __host__ inline T from_fp8_scaled(uint8_t c, float inv_scale, Fp8Format f) {
    return from_float<T>(fp8_to_f32(c, f) * inv_scale);
}

}  // namespace llmtrain::cuda
