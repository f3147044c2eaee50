// tests/cuda_emu/kernels/layernorm_example.cuh — host entry of the emulator's example kernel.
//
// An llm.c-style LayerNorm forward (one warp per row, warp-shuffle reductions, weights staged in
// shared memory). It is the proof that a real kernel both runs under cuda_emu (test_layernorm.cu)
// and compiles with nvcc for sm_80/sm_90 (nvcc_gate.sh).
#pragma once
#include <cuda_runtime.h>

namespace llmtrain::example {

/// out = (inp - mean) * rstd * weight + bias over the last dimension, fp32.
/// Shapes: out, inp (N, C); mean, rstd (N); weight, bias (C). N = B*T rows. eps = 1e-5.
/// All pointers are device memory; asynchronous on `stream`. Errors: throws llmtrain::CudaError on
/// a launch error (e.g. C too large for shared memory: 2*C*4 bytes must fit in 227 KiB).
/// Source: Ba et al. 2016, "Layer Normalization"; kernel structure after llm.c layernorm_forward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, cudaStream_t stream);

}  // namespace llmtrain::example
