// model/cuda/cuda_backend.hpp — the entry points of the CUDA backend, for model/backend.cpp.
//
// Plain C++ (no CUDA headers), so the CPU-only parts of the build can include it. The backend is
// compiled twice: by nvcc into llmtrain_cuda (real GPUs) and by g++ against tests/cuda_emu into
// llmtrain_cuda_emu (the CPU emulator that the tests run); both export these functions.
#pragma once
#include <memory>
#include <string>

#include "model/ops.hpp"

namespace llmtrain {

/// model.attention, parsed once (parse_attention): our kernels on CUDA cores, cuBLAS GEMMs on tensor
/// cores around our softmax (tiled over queries), or cuDNN's fused attention (docs/cuda.md).
enum class Attention { native, cublas, cudnn };

/// model.attention_workspace_mb's default: the cublas path's scores of GPT-2 1.5B at micro-batch 8
/// (B*NH*T*T = 8*25*1024*1024 scores of 4 + 2 bytes, bf16) fit in one tile, llm.c's layout.
constexpr int kDefaultAttentionWorkspaceMb = 1200;

/// "native" | "cublas" | "cudnn" -> Attention. Errors: std::invalid_argument naming model.attention.
Attention parse_attention(const std::string& name);

/// Options of the CUDA backend beyond the precision.
struct CudaBackendOptions {
    /// Round the fp32 master weights to bf16 params stochastically in AdamW (bf16 mode only).
    bool stochastic_rounding = false;
    /// model.attention: native (our kernels), cublas (cuBLAS batched GEMMs + our softmax, fp32 or
    /// bf16) or cudnn (cuDNN fused attention; bf16, needs a build with cuDNN).
    Attention attention = Attention::native;
    /// model.attention_workspace_mb: MiB of fp32 scores + probabilities one cublas attention tile may
    /// use (model/cuda/cublas_attention.hpp); >= 1.
    int attention_workspace_mb = kDefaultAttentionWorkspaceMb;
    /// model.matmul_autotune: time cuBLASLt's candidate algorithms on each GEMM shape's first call
    /// and keep the fastest. Off: the heuristic's first, the same in every run; on: faster where the
    /// heuristic misjudges, but two processes may choose differently, so runs are no longer
    /// bitwise repeatable (docs/cuda.md "cuBLASLt plans").
    bool matmul_autotune = false;
};

/// Number of CUDA devices visible (0 when there is none or no driver; never throws).
int cuda_device_count();

/// Creates the CUDA backend on device (local MPI rank mod device count) with act dtype from
/// `precision` ("bf16" or "fp32"). Errors: std::invalid_argument for another precision, cudnn
/// attention without cuDNN in the build or with fp32, or attention_workspace_mb < 1; std::runtime_error when
/// no device is present or CUDA/cuBLASLt/cuDNN fails to initialize.
std::unique_ptr<Ops> make_cuda_backend(const std::string& precision, const CudaBackendOptions& options = {});

}  // namespace llmtrain
