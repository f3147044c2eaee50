// model/cuda/cuda_ops_layers.cu — CudaOps (cuda_ops.hpp), the per-token layers: LayerNorm and
// RMSNorm (plain and fused with the residual add), the residual add, the cuBLASLt matmuls, GELU,
// SwiGLU, rotary embeddings and the classifier (fused, and vocab-parallel in two passes). Each
// checks what its kernels' 16-byte packs need, converts the void* tensors to the act dtype and
// calls kernels.cuh's launcher on the current stream.

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "model/cuda/cuda_ops.hpp"
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {
namespace {

/// Throws std::invalid_argument unless the row length suits the 16-byte packs of the row kernels.
void require_packed_rows(int C, const char* op) {
    if (C % cuda::kPackElems != 0)
        throw std::invalid_argument(std::string("cuda ") + op + ": the row length (n_embd) " + std::to_string(C) +
                                    " must be a multiple of " + std::to_string(cuda::kPackElems));
}
/// Throws std::invalid_argument unless every pointer is 16-byte aligned (128-bit loads).
void require_aligned(std::initializer_list<const void*> ptrs, const char* op) {
    for (const void* p : ptrs)
        if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0)
            throw std::invalid_argument(std::string("cuda ") + op + ": tensor pointers must be 16-byte aligned");
}

}  // namespace

// ---- normalization, residual, matmul ----
void CudaOps::layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                                const void* bias, int N, int C) {
    require_packed_rows(C, "layernorm_forward");
    require_aligned({out, inp, weight, bias}, "layernorm_forward");
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::layernorm_forward(as<X>(out), mean, rstd, static_cast<X*>(nullptr), as<X>(inp),
                                static_cast<const X*>(nullptr), as<X>(weight), as<X>(bias), N, C, stream_);
    });
}

void CudaOps::fused_residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                               const void* b, const void* weight, const void* bias, int N,
                                               int C) {
    require_packed_rows(C, "fused_residual_layernorm_forward");
    require_aligned({residual, out, a, b, weight, bias}, "fused_residual_layernorm_forward");
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::layernorm_forward(as<X>(out), mean, rstd, as<X>(residual), as<X>(a), as<X>(b), as<X>(weight),
                                as<X>(bias), N, C, stream_);
    });
}

void CudaOps::layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                                 const void* weight, const float* mean, const float* rstd, int N, int C) {
    require_packed_rows(C, "layernorm_backward");
    require_aligned({dinp, dout, inp, weight}, "layernorm_backward");
    float* scratch = scratch_for(cuda::layernorm_backward_scratch_bytes(N, C));
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::layernorm_backward(as<X>(dinp), as<X>(dweight), as<X>(dbias), as<X>(dout), as<X>(inp),
                                 as<X>(weight), mean, rstd, N, C, scratch, stream_);
    });
}

void CudaOps::residual_forward(void* out, const void* a, const void* b, size_t n) {
    require_aligned({out, a, b}, "residual_forward");
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::residual_forward(as<X>(out), as<X>(a), as<X>(b), n, stream_);
    });
}

void CudaOps::matmul_forward(void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias, int N,
                             int C, int OC) {
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::matmul_forward(lt_, as<X>(out), as<X>(pre_gelu), as<X>(inp), as<X>(weight), as<X>(bias), N, C, OC,
                             stream_);
    });
}

void CudaOps::matmul_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                              const void* weight, const void* pre_gelu, int N, int C, int OC) {
    float* scratch = dbias != nullptr ? scratch_for(cuda::matmul_backward_scratch_bytes(N, OC)) : nullptr;
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::matmul_backward(lt_, as<X>(dinp), as<X>(dweight), as<X>(dbias), as<X>(dout), as<X>(inp),
                              as<X>(weight), as<X>(pre_gelu), N, C, OC, scratch, stream_);
    });
}

// ---- Llama's pieces: rmsnorm.cu, qk_norm.cu (Qwen3), rope.cu, swiglu.cu ----
void CudaOps::rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                              float eps) {
    require_packed_rows(C, "rmsnorm_forward");
    require_aligned({out, inp, weight}, "rmsnorm_forward");
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::rmsnorm_forward(as<X>(out), rstd, static_cast<X*>(nullptr), as<X>(inp), static_cast<const X*>(nullptr),
                              as<X>(weight), N, C, eps, stream_);
    });
}

void CudaOps::fused_residual_rmsnorm_forward(void* residual, void* out, float* rstd, const void* a, const void* b,
                                             const void* weight, int N, int C, float eps) {
    require_packed_rows(C, "fused_residual_rmsnorm_forward");
    require_aligned({residual, out, a, b, weight}, "fused_residual_rmsnorm_forward");
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::rmsnorm_forward(as<X>(out), rstd, as<X>(residual), as<X>(a), as<X>(b), as<X>(weight), N, C, eps,
                              stream_);
    });
}

void CudaOps::rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
                               const float* rstd, int N, int C) {
    require_packed_rows(C, "rmsnorm_backward");
    require_aligned({dinp, dout, inp, weight}, "rmsnorm_backward");
    float* scratch = scratch_for(cuda::rmsnorm_backward_scratch_bytes(N, C));
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::rmsnorm_backward(as<X>(dinp), as<X>(dweight), as<X>(dout), as<X>(inp), as<X>(weight), rstd, N, C,
                               scratch, stream_);
    });
}

void CudaOps::qk_norm_forward(void* qkv, void* pre, float* rstd, const void* wq, const void* wk, int N, int NH,
                              int NKV, int HS, float eps) {
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::qk_norm_forward(as<X>(qkv), as<X>(pre), rstd, as<X>(wq), as<X>(wk), N, NH, NKV, HS, eps, stream_);
    });
}

void CudaOps::qk_norm_backward(void* dqkv, void* dwq, void* dwk, const void* pre, const void* wq, const void* wk,
                               const float* rstd, int N, int NH, int NKV, int HS) {
    float* scratch = scratch_for(cuda::qk_norm_backward_scratch_bytes(N, NH, NKV, HS));
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::qk_norm_backward(as<X>(dqkv), as<X>(dwq), as<X>(dwk), as<X>(pre), as<X>(wq), as<X>(wk), rstd, N, NH,
                               NKV, HS, scratch, stream_);
    });
}

const float* CudaOps::rope_table_for(int T, int HS, float theta) {
    Buffer& buf = rope_tables_[{T, HS, theta}];
    if (buf.ptr == nullptr) {
        const size_t bytes = cuda::rope_table_bytes(T, HS);
        buf.ptr = internal_malloc(bytes);
        buf.bytes = bytes;
        cuda::rope_table(static_cast<float*>(buf.ptr), T, HS, theta, stream_);
        CUDA_CHECK(cudaStreamSynchronize(stream_));  // complete before any stream reads it
    }
    return static_cast<const float*>(buf.ptr);
}

void CudaOps::rope_forward(void* qkv, int B, int T, int NH, int NKV, int HS, float theta) {
    const float* table = rope_table_for(T, HS, theta);
    dispatch([&](auto t) { cuda::rope(as<decltype(t)>(qkv), table, B, T, NH, NKV, HS, false, stream_); });
}

void CudaOps::rope_backward(void* dqkv, int B, int T, int NH, int NKV, int HS, float theta) {
    const float* table = rope_table_for(T, HS, theta);
    dispatch([&](auto t) { cuda::rope(as<decltype(t)>(dqkv), table, B, T, NH, NKV, HS, true, stream_); });
}

void CudaOps::rope_forward_pos(void* qkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                               int n_pos) {
    const float* table = rope_table_for(pos == nullptr ? T : n_pos, HS, theta);  // a row per position
    dispatch([&](auto t) { cuda::rope(as<decltype(t)>(qkv), table, B, T, NH, NKV, HS, false, stream_, pos); });
}

void CudaOps::rope_backward_pos(void* dqkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                                int n_pos) {
    const float* table = rope_table_for(pos == nullptr ? T : n_pos, HS, theta);
    dispatch([&](auto t) { cuda::rope(as<decltype(t)>(dqkv), table, B, T, NH, NKV, HS, true, stream_, pos); });
}

void CudaOps::swiglu_forward(void* out, const void* inp, int N, int F) {
    dispatch([&](auto t) { cuda::swiglu_forward(as<decltype(t)>(out), as<decltype(t)>(inp), N, F, stream_); });
}

void CudaOps::swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int F) {
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::swiglu_backward(as<X>(dinp), as<X>(dout), as<X>(inp), N, F, stream_);
    });
}

// ---- GELU and the classifier ----
void CudaOps::gelu_forward(void* out, const void* inp, size_t n) {
    require_aligned({out, inp}, "gelu_forward");
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::gelu_forward(as<X>(out), as<X>(inp), n, stream_);
    });
}

void CudaOps::gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) {
    require_aligned({dinp, inp, dout}, "gelu_backward");
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::gelu_backward(as<X>(dinp), as<X>(inp), as<X>(dout), n, stream_);
    });
}

void CudaOps::fused_classifier(void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss,
                               bool write_grad) {
    require_aligned({logits}, "fused_classifier");
    if (Vp % cuda::kPackElems != 0)
        throw std::invalid_argument("cuda fused_classifier: padded vocab " + std::to_string(Vp) +
                                    " must be a multiple of " + std::to_string(cuda::kPackElems));
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::fused_classifier(as<X>(logits), losses, targets, N, V, Vp, dloss, write_grad, stream_);
    });
}

void CudaOps::classifier_partial(float* stats, const void* logits, const int* targets, int N, int nv, int v0,
                                 int V) {
    require_vocab_range(v0, nv, "classifier_partial");
    if (V < 1) throw std::invalid_argument("cuda classifier_partial: vocab_size V must be >= 1, got " + std::to_string(V));
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::classifier_partial(stats, as<X>(logits), targets, N, nv, v0, V, stream_);
    });
}

void CudaOps::classifier_finish(void* logits, float* losses, const float* all, int tp, const int* targets, int N,
                                int nv, int v0, int V, float dloss, bool write_grad) {
    require_vocab_range(v0, nv, "classifier_finish");
    if (tp < 1 || V < 1)
        throw std::invalid_argument("cuda classifier_finish: expected tp >= 1 and V >= 1, got tp " +
                                    std::to_string(tp) + ", V " + std::to_string(V));
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::classifier_finish(as<X>(logits), losses, all, tp, targets, N, nv, v0, V, dloss, write_grad, stream_);
    });
}

}  // namespace llmtrain::cuda
