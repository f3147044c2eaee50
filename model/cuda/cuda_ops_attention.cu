// model/cuda/cuda_ops_attention.cu — CudaOps (cuda_ops.hpp), attention: multi-head and
// grouped-query, forward and backward, and which path runs them. cuDNN's fused graph when the path
// is cudnn (its plans built at a shape's first call; with model.attention = "auto" a shape cuDNN
// rejects switches the backend to cublas for good, cudnn_plans_or_fallback; grouped-query takes the
// graph with n_kv_head K/V heads unless cuDNN refuses it, cudnn_gqa_native), else cuBLAS's batched
// GEMMs around our softmax (cublas_attention.cu) when the path is cublas, else FlashAttention-2 on
// tensor cores in bf16 at head size 64 or 128 (flash_forward.cu, flash_backward.cu), else the CUDA-core kernels of
// attention.cu on a copy of qkv with the key/value heads expanded (gqa.cu). attention_reason()
// reports the choice.

#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "model/cuda/cuda_ops.hpp"
#include "model/cuda/kernels.cuh"
#ifdef LLMTRAIN_HAVE_CUDNN
#include "model/cuda/cudnn_attention.hpp"  // nvcc builds with cuDNN only (never under cuda_emu)
#endif

namespace llmtrain::cuda {

std::string CudaOps::attention_reason() const {
    return cudnn_active() ? attention_.why + gqa_note_ + doc_note_ : attention_.why;
}

void CudaOps::attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH) {
#ifdef LLMTRAIN_HAVE_CUDNN
    if (cudnn_ && cudnn_plans_or_fallback(B, T, C, NH)) {
        void* ws = scratch_for(cudnn_->workspace_bytes(false, B, T, C, NH));
        return cudnn_->forward(as<bf16>(out), lse, as<bf16>(qkv), B, T, C, NH, ws, stream_);
    }
#endif
    if (blas_ != nullptr) {
        const auto plan = cuda::cublas_attention_plan(false, B, T, C, NH, dtype_size(act_),
                                                      opt_.attention_workspace_mb);
        void* ws = scratch_for(plan.workspace_bytes);
        bind_blas();
        return dispatch([&](auto t) {
            using X = decltype(t);
            cuda::cublas_attention_forward(blas_, as<X>(out), lse, as<X>(qkv), B, T, C, NH, NH, plan, ws, stream_);
        });
    }
    if (act_ == DType::bf16 && cuda::flash_attention_supported(C, NH))  // native on tensor cores
        return cuda::flash_attention_forward(as<bf16>(out), lse, as<bf16>(qkv), B, T, C, NH, NH, stream_);
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::attention_forward(as<X>(out), lse, as<X>(qkv), B, T, C, NH, stream_);
    });
}

void CudaOps::attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                 int B, int T, int C, int NH) {
#ifdef LLMTRAIN_HAVE_CUDNN
    if (cudnn_ && cudnn_plans_or_fallback(B, T, C, NH)) {
        void* ws = scratch_for(cudnn_->workspace_bytes(true, B, T, C, NH));
        return cudnn_->backward(as<bf16>(dqkv), as<bf16>(dout), as<bf16>(qkv), as<bf16>(out), lse, B, T, C, NH,
                                ws, stream_);
    }
#endif
    if (blas_ != nullptr) {
        const auto plan = cuda::cublas_attention_plan(true, B, T, C, NH, dtype_size(act_),
                                                      opt_.attention_workspace_mb);
        void* ws = scratch_for(plan.workspace_bytes);
        bind_blas();
        return dispatch([&](auto t) {
            using X = decltype(t);
            cuda::cublas_attention_backward(blas_, as<X>(dqkv), as<X>(dout), as<X>(qkv), as<X>(out), lse, B, T,
                                            C, NH, NH, plan, ws, stream_);
        });
    }
    if (act_ == DType::bf16 && cuda::flash_attention_supported(C, NH))
        return cuda::flash_attention_backward(as<bf16>(dqkv), as<bf16>(dout), as<bf16>(qkv), as<bf16>(out), lse, B,
                                              T, C, NH, NH, flash_tile(C / NH), flash_scratch(B, T, C, NH), stream_);
    float* scratch = scratch_for(cuda::attention_backward_scratch_bytes(B, T, NH));
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::attention_backward(as<X>(dqkv), as<X>(dout), as<X>(qkv), as<X>(out), lse, B, T, C, NH, scratch,
                                 stream_);
    });
}

void CudaOps::attention_forward_gqa(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                                    int HS) {
    require_gqa(NH, NKV);
    const int C = NH * HS;
    if (NKV == NH) return attention_forward(out, lse, qkv, B, T, C, NH);
#ifdef LLMTRAIN_HAVE_CUDNN
    if (cudnn_ && cudnn_gqa_native(B, T, C, NH, NKV)) {
        void* ws = scratch_for(cudnn_->workspace_bytes(false, B, T, C, NH, NKV));
        return cudnn_->forward(as<bf16>(out), lse, as<bf16>(qkv), B, T, C, NH, NKV, ws, stream_);
    }
#endif
    if (blas_ != nullptr && !cudnn_active()) {
        const auto plan = cuda::cublas_attention_plan(false, B, T, C, NH, dtype_size(act_), opt_.attention_workspace_mb);
        void* ws = scratch_for(plan.workspace_bytes);
        bind_blas();
        return dispatch([&](auto t) {
            using X = decltype(t);
            cuda::cublas_attention_forward(blas_, as<X>(out), lse, as<X>(qkv), B, T, C, NH, NKV, plan, ws, stream_);
        });
    }
    if (flash_path(C, NH))
        return cuda::flash_attention_forward(as<bf16>(out), lse, as<bf16>(qkv), B, T, C, NH, NKV, stream_);
    const size_t n3 = static_cast<size_t>(B) * T * 3 * C;
    void* q3 = gqa_for(n3 * dtype_size(act_));
    dispatch([&](auto t) { cuda::gqa_expand(as<decltype(t)>(q3), as<decltype(t)>(qkv), B, T, NH, NKV, HS, stream_); });
    attention_forward(out, lse, q3, B, T, C, NH);
}

void CudaOps::attention_backward_gqa(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                     int B, int T, int NH, int NKV, int HS) {
    require_gqa(NH, NKV);
    const int C = NH * HS;
    if (NKV == NH) return attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH);
#ifdef LLMTRAIN_HAVE_CUDNN
    if (cudnn_ && cudnn_gqa_native(B, T, C, NH, NKV)) {
        void* ws = scratch_for(cudnn_->workspace_bytes(true, B, T, C, NH, NKV));
        return cudnn_->backward(as<bf16>(dqkv), as<bf16>(dout), as<bf16>(qkv), as<bf16>(out), lse, B, T, C, NH,
                                NKV, ws, stream_);
    }
#endif
    if (blas_ != nullptr && !cudnn_active()) {
        const auto plan = cuda::cublas_attention_plan(true, B, T, C, NH, dtype_size(act_), opt_.attention_workspace_mb);
        void* ws = scratch_for(plan.workspace_bytes);
        bind_blas();
        return dispatch([&](auto t) {
            using X = decltype(t);
            cuda::cublas_attention_backward(blas_, as<X>(dqkv), as<X>(dout), as<X>(qkv), as<X>(out), lse, B, T, C,
                                            NH, NKV, plan, ws, stream_);
        });
    }
    if (flash_path(C, NH)) {
        return cuda::flash_attention_backward(as<bf16>(dqkv), as<bf16>(dout), as<bf16>(qkv), as<bf16>(out), lse, B,
                                              T, C, NH, NKV, flash_tile(C / NH), flash_scratch(B, T, C, NH),
                                              stream_);
    }
    const size_t n3 = static_cast<size_t>(B) * T * 3 * C, es = dtype_size(act_);
    char* buf = static_cast<char*>(gqa_for(2 * n3 * es));
    void *q3 = buf, *d3 = buf + n3 * es;
    dispatch([&](auto t) { cuda::gqa_expand(as<decltype(t)>(q3), as<decltype(t)>(qkv), B, T, NH, NKV, HS, stream_); });
    attention_backward(d3, dout, q3, out, lse, B, T, C, NH);
    dispatch([&](auto t) { cuda::gqa_reduce(as<decltype(t)>(dqkv), as<decltype(t)>(d3), B, T, NH, NKV, HS, stream_); });
}

// Document masking: doc null is the causal op. cublas takes the mask in its softmax kernels;
// otherwise FlashAttention-2 where its shapes allow (cuDNN active included: its fused graph gets no
// mask here, said once), else attention.cu on the expanded multi-head copy (gqa.cu) when NKV < NH.
void CudaOps::attention_forward_doc(void* out, float* lse, const void* qkv, const int* doc, int B, int T, int NH,
                                    int NKV, int HS) {
    if (doc == nullptr) return attention_forward_gqa(out, lse, qkv, B, T, NH, NKV, HS);
    require_gqa(NH, NKV);
    const int C = NH * HS;
    if (blas_ != nullptr && !cudnn_active()) {
        const auto plan = cuda::cublas_attention_plan(false, B, T, C, NH, dtype_size(act_), opt_.attention_workspace_mb);
        void* ws = scratch_for(plan.workspace_bytes);
        bind_blas();
        return dispatch([&](auto t) {
            using X = decltype(t);
            cuda::cublas_attention_forward(blas_, as<X>(out), lse, as<X>(qkv), B, T, C, NH, NKV, plan, ws, stream_, doc);
        });
    }
    const bool flash = act_ == DType::bf16 && cuda::flash_attention_supported(C, NH);
    if (cudnn_active() && doc_note_.empty()) {
        doc_note_ = std::string("; document masking: ") + (flash ? "FlashAttention-2" : "attention.cu") +
                    " (the cuDNN graph here has no document mask)";
        std::fprintf(stderr, "llmtrain: attention: cudnn%s\n", doc_note_.c_str());
    }
    if (flash) return cuda::flash_attention_forward(as<bf16>(out), lse, as<bf16>(qkv), B, T, C, NH, NKV, stream_, doc);
    const void* q3 = qkv;
    if (NKV != NH) {
        void* e = gqa_for(static_cast<size_t>(B) * T * 3 * C * dtype_size(act_));
        dispatch([&](auto t) { cuda::gqa_expand(as<decltype(t)>(e), as<decltype(t)>(qkv), B, T, NH, NKV, HS, stream_); });
        q3 = e;
    }
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::attention_forward(as<X>(out), lse, as<X>(q3), B, T, C, NH, stream_, doc);
    });
}

void CudaOps::attention_backward_doc(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                     const int* doc, int B, int T, int NH, int NKV, int HS) {
    if (doc == nullptr) return attention_backward_gqa(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS);
    require_gqa(NH, NKV);
    const int C = NH * HS;
    if (blas_ != nullptr && !cudnn_active()) {
        const auto plan = cuda::cublas_attention_plan(true, B, T, C, NH, dtype_size(act_), opt_.attention_workspace_mb);
        void* ws = scratch_for(plan.workspace_bytes);
        bind_blas();
        return dispatch([&](auto t) {
            using X = decltype(t);
            cuda::cublas_attention_backward(blas_, as<X>(dqkv), as<X>(dout), as<X>(qkv), as<X>(out), lse, B, T, C, NH,
                                            NKV, plan, ws, stream_, doc);
        });
    }
    if (act_ == DType::bf16 && cuda::flash_attention_supported(C, NH)) {  // the small tile (flash_backward.cu)
        const cuda::FlashBackwardTile small = cuda::flash_backward_tile_small(HS);
        float* ws = scratch_for(cuda::flash_attention_backward_scratch_bytes(B, T, C, NH, small.keys));
        return cuda::flash_attention_backward(as<bf16>(dqkv), as<bf16>(dout), as<bf16>(qkv), as<bf16>(out), lse, B, T,
                                              C, NH, NKV, small, ws, stream_, doc);
    }
    const size_t n3 = static_cast<size_t>(B) * T * 3 * C, es = dtype_size(act_);
    char* buf = NKV != NH ? static_cast<char*>(gqa_for(2 * n3 * es)) : nullptr;
    const void* q3 = NKV != NH ? buf : qkv;
    void* d3 = NKV != NH ? buf + n3 * es : dqkv;
    if (NKV != NH)
        dispatch([&](auto t) { cuda::gqa_expand(as<decltype(t)>(buf), as<decltype(t)>(qkv), B, T, NH, NKV, HS, stream_); });
    float* scratch = scratch_for(cuda::attention_backward_scratch_bytes(B, T, NH));
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::attention_backward(as<X>(d3), as<X>(dout), as<X>(q3), as<X>(out), lse, B, T, C, NH, scratch, stream_, doc);
    });
    if (NKV != NH)
        dispatch([&](auto t) { cuda::gqa_reduce(as<decltype(t)>(dqkv), as<decltype(t)>(d3), B, T, NH, NKV, HS, stream_); });
}

void CudaOps::require_gqa(int NH, int NKV) {
    if (NKV < 1 || NH % NKV != 0)
        throw std::invalid_argument("cuda attention: n_kv_head " + std::to_string(NKV) + " must divide n_head " +
                                    std::to_string(NH));
}

// Context parallelism (model/gpt_cp.cpp): the cuBLAS path's query tiles restricted to the rows.
void CudaOps::attention_forward_rows(void* out, float* lse, const void* qkv, const int* doc, int B, int T, int NH,
                                     int NKV, int HS, const AttentionRows& rows) {
    require_gqa(NH, NKV);
    const int C = NH * HS;
    if (rows_blas_ == nullptr && cublasCreate(&rows_blas_) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasCreate failed");
    const auto plan = cuda::cublas_attention_plan(false, B, T, C, NH, dtype_size(act_), opt_.attention_workspace_mb);
    void* ws = scratch_for(plan.workspace_bytes);
    bind_blas(rows_blas_);
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::cublas_attention_forward(rows_blas_, as<X>(out), lse, as<X>(qkv), B, T, C, NH, NKV, plan, ws, stream_, doc,
                                       cuda::CublasRows{rows.q0, rows.nq, rows.Tout, rows.o0});
    });
}

void CudaOps::attention_backward_rows(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                      const int* doc, int B, int T, int NH, int NKV, int HS, const AttentionRows& rows) {
    require_gqa(NH, NKV);
    const int C = NH * HS;
    if (rows_blas_ == nullptr && cublasCreate(&rows_blas_) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasCreate failed");
    const auto plan = cuda::cublas_attention_plan(true, B, T, C, NH, dtype_size(act_), opt_.attention_workspace_mb);
    void* ws = scratch_for(plan.workspace_bytes);
    bind_blas(rows_blas_);
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::cublas_attention_backward(rows_blas_, as<X>(dqkv), as<X>(dout), as<X>(qkv), as<X>(out), lse, B, T, C, NH,
                                        NKV, plan, ws, stream_, doc, cuda::CublasRows{rows.q0, rows.nq, rows.Tout, rows.o0});
    });
}

#ifdef LLMTRAIN_HAVE_CUDNN

bool CudaOps::cudnn_plans_or_fallback(int B, int T, int C, int NH) {
    try {
        cudnn_->workspace_bytes(false, B, T, C, NH);
        cudnn_->workspace_bytes(true, B, T, C, NH);
        return true;
    } catch (const CudaError& e) {
        if (!attention_automatic_) throw;
        attention_ = {Attention::cublas, "auto: cuDNN " + std::to_string(cuda::CudnnAttention::version()) +
                                             " rejected B " + std::to_string(B) + ", T " + std::to_string(T) +
                                             ", C " + std::to_string(C) + ", NH " + std::to_string(NH) +
                                             ": " + e.what()};
        std::fprintf(stderr, "llmtrain: attention: cublas (%s)\n", attention_.why.c_str());
        cudnn_.reset();
        opt_.attention = Attention::cublas;
        if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasCreate failed");
        return false;
    }
}

bool CudaOps::cudnn_gqa_native(int B, int T, int C, int NH, int NKV) {
    if (cudnn_gqa_refused_) return false;
    try {
        cudnn_->workspace_bytes(false, B, T, C, NH, NKV);
        cudnn_->workspace_bytes(true, B, T, C, NH, NKV);
        if (gqa_note_.empty()) gqa_note_ = "; grouped-query: cuDNN graph with n_kv_head K/V heads";
        return true;
    } catch (const CudaError& e) {
        cudnn_gqa_refused_ = true;
        gqa_note_ = "; grouped-query: expanded K/V copy (cuDNN refused its graph with n_kv_head " +
                    std::to_string(NKV) + " of n_head " + std::to_string(NH) + " at B " + std::to_string(B) +
                    ", T " + std::to_string(T) + ", C " + std::to_string(C) + ": " + e.what() + ")";
        std::fprintf(stderr, "llmtrain: attention: cudnn%s\n", gqa_note_.c_str());
        return false;
    }
}

#endif

void CudaOps::bind_blas(cublasHandle_t h) {
    if (h == nullptr) h = blas_;
    if (cublasSetStream(h, stream_) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(h, lt_.workspace, lt_.workspace_bytes) != CUBLAS_STATUS_SUCCESS)
        throw CudaError("cuda cublas attention: cublasSetStream/cublasSetWorkspace failed");
}

}  // namespace llmtrain::cuda
