// model/cuda/rope_table.hpp — the table of rotary-embedding angles that the CUDA RoPE kernels
// (rope.cu) read: cos and sin of a_i = t * theta^(-2i/HS) for every position t < T and pair
// i < HS/2. Plain C++ so that CudaOps and the tests (test_cuda_llama_ops.cpp) can build and check
// one without CUDA headers.
#pragma once
#include <cstddef>

struct CUstream_st;  // cudaStream_t's struct (driver_types.h), declared as in flash_attention.hpp

namespace llmtrain::cuda {

/// Bytes of the RoPE table at (T, HS): T x HS/2 pairs of fp32 (cos, sin), 8 bytes each. Llama 3 8B
/// (T 8192, head size 128): 4 MiB.
inline size_t rope_table_bytes(int T, int HS) { return static_cast<size_t>(T) * (HS / 2) * 2 * sizeof(float); }

/// Fills table (T x HS/2 x 2 fp32, device memory of rope_table_bytes(T, HS)) with (cos a, sin a) at
/// [t][i], a = t * theta^(-2i/HS): the angle, its cos and sin computed in double on the device and
/// rounded once to fp32 (the values the kernels used to compute per element, and the CPU backend's
/// tables), queued on `stream`. Defined in rope.cu (llmtrain_cuda, llmtrain_cuda_emu).
/// Errors: std::invalid_argument for T < 1 or an odd or non-positive HS.
void rope_table(float* table, int T, int HS, float theta, CUstream_st* stream);

}  // namespace llmtrain::cuda
