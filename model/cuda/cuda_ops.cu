// model/cuda/cuda_ops.cu — CudaOps: the Ops interface (model/ops.hpp) on a CUDA device.
//
// Owns the device state every op shares: the current stream, the cuBLASLt handle and its 32 MiB
// workspace, one scratch buffer per stream (reduction partials, attention's D = dO.O, cuDNN's
// workspace, the cublas attention's workspace), the token buckets of the encoder backward (built on
// the host from the caller's token ids, else from a copy the forward starts), with attention = "cublas" a cuBLAS handle (it shares the cuBLASLt
// workspace: both run in stream order on the current stream), and, with attention = "cudnn" in nvcc
// builds with cuDNN, the cuDNN fused-attention plans (model.attention = "auto" is resolved once, in
// make_cuda_backend, by resolve_attention; a shape cuDNN rejects then falls back to cublas). These
// device buffers are reported through Ops::note_internal_memory, so the Allocator counts them as
// workspace. Each GPT op converts its void* tensors to the act dtype (float in fp32 mode,
// __nv_bfloat16 in bf16 mode) and calls the launchers of kernels.cuh. Everything is asynchronous
// on the current stream except where a comment says it synchronizes.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/cuda/cuda_backend.hpp"
#include "model/cuda/kernels.cuh"
#ifdef LLMTRAIN_HAVE_CUDNN
#include "model/cuda/cudnn_attention.hpp"  // nvcc builds with cuDNN only (never under cuda_emu)
#endif

namespace llmtrain {
namespace {

using cuda::LtContext;
using bf16 = __nv_bfloat16;

constexpr size_t kLtWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper

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

class CudaOps final : public Ops {
public:
    /// `choice`: opt.attention resolved (resolve_attention); opt.attention = automatic allows the
    /// fallback to cublas when cuDNN rejects a shape.
    CudaOps(DType act, const CudaBackendOptions& opt, AttentionChoice choice)
        : act_(act), opt_(opt), attention_(std::move(choice)) {
        const bool automatic = opt_.attention == Attention::automatic;
        opt_.attention = attention_.path;
        attention_automatic_ = automatic;
        if (cublasLtCreate(&lt_.handle) != CUBLAS_STATUS_SUCCESS) throw CudaError("cublasLtCreate failed");
        lt_.workspace = internal_malloc(kLtWorkspaceBytes);
        lt_.workspace_bytes = kLtWorkspaceBytes;
        lt_.autotune = opt_.matmul_autotune;
        for (BucketBuffer& b : buckets_) CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
        if (opt_.attention == Attention::cublas && cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS)
            throw CudaError("cublasCreate failed");
#ifdef LLMTRAIN_HAVE_CUDNN
        if (opt_.attention == Attention::cudnn) cudnn_ = std::make_unique<cuda::CudnnAttention>();
#endif
    }
    ~CudaOps() override {
        cudaDeviceSynchronize();
#ifdef LLMTRAIN_HAVE_CUDNN
        cudnn_.reset();
#endif
        for (auto& [s, buf] : scratch_) cudaFree(buf.ptr);
        for (auto& [s, buf] : gqa_) cudaFree(buf.ptr);
        for (BucketBuffer& b : buckets_) {
            cudaFree(b.dev);
            cudaFreeHost(b.host);
            cudaEventDestroy(b.done);
        }
        for (TokenSlot& c : token_slots_) {
            cudaFreeHost(c.host);
            cudaEventDestroy(c.ready);
        }
        if (blas_ != nullptr) cublasDestroy(blas_);
        cudaFree(lt_.workspace);
        cublasLtDestroy(lt_.handle);
        note_internal_memory(-static_cast<std::ptrdiff_t>(internal_bytes()));
    }

    const char* name() const override { return "cuda"; }
    DType act_dtype() const override { return act_; }

    // ---- memory ----
    void* malloc(size_t bytes) override {
        void* p = nullptr;
        const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
        if (err != cudaSuccess) {
            cudaGetLastError();  // clear it: out of memory is reported by the exception
            throw std::runtime_error("cuda: cannot allocate " + std::to_string(bytes) + " bytes of device memory (" +
                                     cudaGetErrorString(err) + ")");
        }
        return p;
    }
    void free(void* p) override { CUDA_CHECK(cudaFree(p)); }
    void* malloc_host(size_t bytes) override {
        void* p = nullptr;
        CUDA_CHECK(cudaMallocHost(&p, bytes == 0 ? 1 : bytes));
        return p;
    }
    void free_host(void* p) override { CUDA_CHECK(cudaFreeHost(p)); }
    void memcpy_h2d(void* dst, const void* src, size_t bytes) override {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    }
    void memcpy_d2h(void* dst, const void* src, size_t bytes) override {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    }
    void memcpy_d2d(void* dst, const void* src, size_t bytes) override {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    }
    void memset(void* p, int value, size_t bytes) override { CUDA_CHECK(cudaMemsetAsync(p, value, bytes, stream_)); }
    void synchronize() override { CUDA_CHECK(cudaDeviceSynchronize()); }
    void mem_info(size_t* free_bytes, size_t* total_bytes) override {
        CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    }

    // ---- streams and events ----
    Stream create_stream() override {
        cudaStream_t s;  // non-blocking: ordered against the default stream only through events
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        return s;
    }
    void destroy_stream(Stream s) override {
        for (auto* m : {&scratch_, &gqa_}) {
            auto it = m->find(static_cast<cudaStream_t>(s));
            if (it == m->end()) continue;
            CUDA_CHECK(cudaStreamSynchronize(it->first));
            internal_free(it->second.ptr, it->second.bytes);
            m->erase(it);
        }
        CUDA_CHECK(cudaStreamDestroy(static_cast<cudaStream_t>(s)));
    }
    void set_stream(Stream s) override { stream_ = static_cast<cudaStream_t>(s); }
    Event create_event() override {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        return e;
    }
    void destroy_event(Event e) override { CUDA_CHECK(cudaEventDestroy(static_cast<cudaEvent_t>(e))); }
    void record_event(Event e) override { CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), stream_)); }
    void wait_event(Event e) override { CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(e), 0)); }
    void synchronize_event(Event e) override { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e))); }
    bool query_event(Event e) override {
        const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
        if (r == cudaErrorNotReady) return false;
        CUDA_CHECK(r);
        return true;
    }
    Event create_timed_event() override {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        return e;
    }
    double elapsed_seconds(Event start, Event end) override {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
        return ms / 1e3;
    }

    // ---- casts ----
    void cast(void* dst, DType dst_t, const void* src, DType src_t, size_t n) override {
        if (dst_t == src_t) return memcpy_d2d(dst, src, n * dtype_size(dst_t));
        if (dst_t == DType::bf16)
            cuda::cast(static_cast<bf16*>(dst), static_cast<const float*>(src), n, stream_);
        else
            cuda::cast(static_cast<float*>(dst), static_cast<const bf16*>(src), n, stream_);
    }

    // ---- GPT ops ----
    /// Buckets the ids for inp's next encoder_backward now, on the host (see encoder_backward).
    void encoder_host_tokens(const int* dev, const int* host, int n) override {
        TokenSlot& c = token_slot_for(dev, n);
        c.nb = cuda::build_encoder_buckets(host, n, c.packed);
        c.hinted = true;
    }
    /// Without an encoder_host_tokens hint for inp, also starts copying the ids to pinned host memory
    /// for the backward's bucketing.
    void encoder_forward(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C) override {
        encoder_forward_range(out, inp, wte, wpe, B, T, C, 0, INT_MAX);
    }
    /// Positions are bucketed by token on the host (encoder.cu). The buckets of the forward that read
    /// inp (one slot per token buffer, so micro-batches in flight together each find their own) were
    /// built from the caller's ids when it gave them (encoder_host_tokens): then the host waits for no
    /// device work of this micro-batch. Else they are built now from the copy that forward started
    /// (the host waits for that copy), or, with no such forward, from a copy made now (waiting for
    /// the stream). The upload goes through one of kBucketBuffers pinned + device buffer pairs, in
    /// turn: the host waits only for the kernels of the backward that used the pair before.
    void encoder_backward(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C) override {
        encoder_backward_range(dwte, dwpe, dout, inp, B, T, C, 0, INT_MAX);
    }
    /// Vocab-parallel embedding (Megatron-LM's VocabParallelEmbedding, Shoeybi et al. 2019):
    /// out (B,T,C) act dtype = wte[inp - v0] + wpe[t] at the positions whose token is in
    /// [v0, v0 + nv), exact zeros elsewhere; wte (nv,C) this rank's token rows, wpe (maxT,C), inp (B,T)
    /// int32 device. The owning rank's values are bitwise encoder_forward's (the same kernel). Token ids
    /// are taken for the backward as in encoder_forward. Errors: std::invalid_argument for v0 < 0 or
    /// nv < 1.
    void encoder_forward_vocab(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                               int v0, int nv) override {
        require_vocab_range(v0, nv, "encoder_forward_vocab");
        encoder_forward_range(out, inp, wte, wpe, B, T, C, v0, nv);
    }
    /// dwte (nv,C) act dtype += dout (B,T,C) summed per token over the positions whose token is in
    /// [v0, v0 + nv) (row = token - v0); dwpe (maxT,C) += sum over b of dout, as encoder_backward.
    /// Deterministic: the buckets of encoder_backward restricted to the range (a contiguous run of
    /// them), so every dwte row and dwpe are bitwise what encoder_backward gives. Errors:
    /// std::invalid_argument for v0 < 0 or nv < 1.
    void encoder_backward_vocab(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                int v0, int nv) override {
        require_vocab_range(v0, nv, "encoder_backward_vocab");
        encoder_backward_range(dwte, dwpe, dout, inp, B, T, C, v0, nv);
    }
    void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                           const void* bias, int N, int C) override {
        require_packed_rows(C, "layernorm_forward");
        require_aligned({out, inp, weight, bias}, "layernorm_forward");
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::layernorm_forward(as<X>(out), mean, rstd, static_cast<X*>(nullptr), as<X>(inp),
                                    static_cast<const X*>(nullptr), as<X>(weight), as<X>(bias), N, C, stream_);
        });
    }
    void fused_residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                          const void* b, const void* weight, const void* bias, int N,
                                          int C) override {
        require_packed_rows(C, "fused_residual_layernorm_forward");
        require_aligned({residual, out, a, b, weight, bias}, "fused_residual_layernorm_forward");
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::layernorm_forward(as<X>(out), mean, rstd, as<X>(residual), as<X>(a), as<X>(b), as<X>(weight),
                                    as<X>(bias), N, C, stream_);
        });
    }
    void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                            const void* weight, const float* mean, const float* rstd, int N, int C) override {
        require_packed_rows(C, "layernorm_backward");
        require_aligned({dinp, dout, inp, weight}, "layernorm_backward");
        float* scratch = scratch_for(cuda::layernorm_backward_scratch_bytes(N, C));
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::layernorm_backward(as<X>(dinp), as<X>(dweight), as<X>(dbias), as<X>(dout), as<X>(inp),
                                     as<X>(weight), mean, rstd, N, C, scratch, stream_);
        });
    }
    void residual_forward(void* out, const void* a, const void* b, size_t n) override {
        require_aligned({out, a, b}, "residual_forward");
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::residual_forward(as<X>(out), as<X>(a), as<X>(b), n, stream_);
        });
    }
    void matmul_forward(void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias, int N,
                        int C, int OC) override {
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::matmul_forward(lt_, as<X>(out), as<X>(pre_gelu), as<X>(inp), as<X>(weight), as<X>(bias), N, C, OC,
                                 stream_);
        });
    }
    void matmul_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                         const void* weight, const void* pre_gelu, int N, int C, int OC) override {
        float* scratch = dbias != nullptr ? scratch_for(cuda::matmul_backward_scratch_bytes(N, OC)) : nullptr;
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::matmul_backward(lt_, as<X>(dinp), as<X>(dweight), as<X>(dbias), as<X>(dout), as<X>(inp),
                                  as<X>(weight), as<X>(pre_gelu), N, C, OC, scratch, stream_);
        });
    }
    const char* attention_name() const override { return llmtrain::attention_name(attention_.path); }
    /// The path's reason; on cuDNN, once a grouped-query call ran, also which route it took.
    std::string attention_reason() const override {
        return cudnn_active() ? attention_.why + gqa_note_ : attention_.why;
    }
    void attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH) override {
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
    void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse, int B,
                            int T, int C, int NH) override {
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
                                                  T, C, NH, NH, flash_scratch(B, T, C, NH), stream_);
        float* scratch = scratch_for(cuda::attention_backward_scratch_bytes(B, T, NH));
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::attention_backward(as<X>(dqkv), as<X>(dout), as<X>(qkv), as<X>(out), lse, B, T, C, NH, scratch,
                                     stream_);
        });
    }
    // ---- Llama's pieces (docs/cuda.md "Llama kernels"): rmsnorm.cu, rope.cu, swiglu.cu, gqa.cu ----
    bool implements(OpFamily) const override { return true; }
    void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                         float eps) override {
        require_packed_rows(C, "rmsnorm_forward");
        require_aligned({out, inp, weight}, "rmsnorm_forward");
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::rmsnorm_forward(as<X>(out), rstd, static_cast<X*>(nullptr), as<X>(inp), static_cast<const X*>(nullptr),
                                  as<X>(weight), N, C, eps, stream_);
        });
    }
    void fused_residual_rmsnorm_forward(void* residual, void* out, float* rstd, const void* a, const void* b,
                                        const void* weight, int N, int C, float eps) override {
        require_packed_rows(C, "fused_residual_rmsnorm_forward");
        require_aligned({residual, out, a, b, weight}, "fused_residual_rmsnorm_forward");
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::rmsnorm_forward(as<X>(out), rstd, as<X>(residual), as<X>(a), as<X>(b), as<X>(weight), N, C, eps,
                                  stream_);
        });
    }
    void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
                          const float* rstd, int N, int C) override {
        require_packed_rows(C, "rmsnorm_backward");
        require_aligned({dinp, dout, inp, weight}, "rmsnorm_backward");
        float* scratch = scratch_for(cuda::rmsnorm_backward_scratch_bytes(N, C));
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::rmsnorm_backward(as<X>(dinp), as<X>(dweight), as<X>(dout), as<X>(inp), as<X>(weight), rstd, N, C,
                                   scratch, stream_);
        });
    }
    void rope_forward(void* qkv, int B, int T, int NH, int NKV, int HS, float theta) override {
        dispatch([&](auto t) { cuda::rope(as<decltype(t)>(qkv), B, T, NH, NKV, HS, theta, false, stream_); });
    }
    void rope_backward(void* dqkv, int B, int T, int NH, int NKV, int HS, float theta) override {
        dispatch([&](auto t) { cuda::rope(as<decltype(t)>(dqkv), B, T, NH, NKV, HS, theta, true, stream_); });
    }
    void swiglu_forward(void* out, const void* inp, int N, int F) override {
        dispatch([&](auto t) { cuda::swiglu_forward(as<decltype(t)>(out), as<decltype(t)>(inp), N, F, stream_); });
    }
    void swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int F) override {
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::swiglu_backward(as<X>(dinp), as<X>(dout), as<X>(inp), N, F, stream_);
        });
    }
    /// Grouped-query attention: NKV = NH is attention_forward; the cublas path maps query head h to
    /// key/value head h / (NH/NKV) in its head split, FlashAttention-2 in its tile loads, cuDNN in its
    /// graph (K/V with NKV heads, cudnn_gqa_native); native attention.cu, and cuDNN where it refuses
    /// that graph, run multi-head on a copy of qkv with the key/value heads expanded (gqa.cu), in a
    /// per-stream backend buffer of 3 B*T*NH*HS elements (6 for the backward) counted as workspace.
    void attention_forward_gqa(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                               int HS) override {
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
    void attention_backward_gqa(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                int B, int T, int NH, int NKV, int HS) override {
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
                                                  T, C, NH, NKV, flash_scratch(B, T, C, NH), stream_);
        }
        const size_t n3 = static_cast<size_t>(B) * T * 3 * C, es = dtype_size(act_);
        char* buf = static_cast<char*>(gqa_for(2 * n3 * es));
        void *q3 = buf, *d3 = buf + n3 * es;
        dispatch([&](auto t) { cuda::gqa_expand(as<decltype(t)>(q3), as<decltype(t)>(qkv), B, T, NH, NKV, HS, stream_); });
        attention_backward(d3, dout, q3, out, lse, B, T, C, NH);
        dispatch([&](auto t) { cuda::gqa_reduce(as<decltype(t)>(dqkv), as<decltype(t)>(d3), B, T, NH, NKV, HS, stream_); });
    }
    void gelu_forward(void* out, const void* inp, size_t n) override {
        require_aligned({out, inp}, "gelu_forward");
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::gelu_forward(as<X>(out), as<X>(inp), n, stream_);
        });
    }
    void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) override {
        require_aligned({dinp, inp, dout}, "gelu_backward");
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::gelu_backward(as<X>(dinp), as<X>(inp), as<X>(dout), n, stream_);
        });
    }
    void fused_classifier(void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss,
                          bool write_grad) override {
        require_aligned({logits}, "fused_classifier");
        if (Vp % cuda::kPackElems != 0)
            throw std::invalid_argument("cuda fused_classifier: padded vocab " + std::to_string(Vp) +
                                        " must be a multiple of " + std::to_string(cuda::kPackElems));
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::fused_classifier(as<X>(logits), losses, targets, N, V, Vp, dloss, write_grad, stream_);
        });
    }

    /// Vocab-parallel cross-entropy, pass 1 (Megatron-LM's vocab_parallel_cross_entropy, Shoeybi et
    /// al. 2019): stats (N,3) fp32 = per row of this rank's logits (N,nv) act dtype, columns
    /// [v0, v0 + nv) of the padded vocab, the max m over the columns below V, s = sum exp(x - m) over
    /// them, and the logit of targets[n] (int32) when it lies in the slice, else 0; (-inf, 0, .) for a
    /// row with no column below V. One block per row (classifier.cu), 16-byte packs when nv % 8 == 0.
    /// Errors: std::invalid_argument for v0 < 0, nv < 1 or V < 1.
    void classifier_partial(float* stats, const void* logits, const int* targets, int N, int nv, int v0,
                            int V) override {
        require_vocab_range(v0, nv, "classifier_partial");
        if (V < 1) throw std::invalid_argument("cuda classifier_partial: vocab_size V must be >= 1, got " + std::to_string(V));
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::classifier_partial(stats, as<X>(logits), targets, N, nv, v0, V, stream_);
        });
    }
    /// Pass 2, from all (tp,N,3) fp32, the group's stats in rank order: M = max_r m_r,
    /// S = sum_r s_r exp(m_r - M) in rank order, losses (N) fp32 = M + log S - sum_r t_r, the same bits
    /// on every rank; with write_grad logits (N,nv) is overwritten by dloss * (exp(x - M) / S - onehot)
    /// below V and 0 on the padding, as fused_classifier does for the whole row. Errors:
    /// std::invalid_argument for tp < 1, v0 < 0, nv < 1 or V < 1.
    void classifier_finish(void* logits, float* losses, const float* all, int tp, const int* targets, int N, int nv,
                           int v0, int V, float dloss, bool write_grad) override {
        require_vocab_range(v0, nv, "classifier_finish");
        if (tp < 1 || V < 1)
            throw std::invalid_argument("cuda classifier_finish: expected tp >= 1 and V >= 1, got tp " +
                                        std::to_string(tp) + ", V " + std::to_string(V));
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::classifier_finish(as<X>(logits), losses, all, tp, targets, N, nv, v0, V, dloss, write_grad, stream_);
        });
    }

    // ---- optimizer and norms ----
    void adamw_update(void* params, float* master, const void* grads, float* m, float* v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t,
                      size_t index0) override {
        if (master == nullptr && act_ != DType::f32)
            throw std::invalid_argument("cuda adamw_update: bf16 params need fp32 master weights (master is null)");
        if (t < 1) throw std::invalid_argument("cuda adamw_update: step count t must be >= 1, got " + std::to_string(t));
        const AdamWCoeffs c = adamw_coeffs(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
        dispatch([&](auto x) {
            using X = decltype(x);
            cuda::adamw_update(as<X>(params), master, as<X>(grads), m, v, n, c, opt_.stochastic_rounding, index0,
                               stream_);
        });
    }
    void norm_squared(float* out, const void* x, size_t n, bool accumulate) override {
        float* scratch = scratch_for(cuda::norm_squared_scratch_bytes());
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::norm_squared(out, as<X>(x), n, accumulate, scratch, stream_);
        });
    }
    void scale(void* x, float s, size_t n) override {
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::scale(as<X>(x), s, n, stream_);
        });
    }

private:
    /// A device buffer of the backend's own (internal_malloc).
    struct Buffer {
        void* ptr = nullptr;
        size_t bytes = 0;
    };
    /// Throws std::invalid_argument unless NKV divides NH.
    static void require_gqa(int NH, int NKV) {
        if (NKV < 1 || NH % NKV != 0)
            throw std::invalid_argument("cuda attention: n_kv_head " + std::to_string(NKV) + " must divide n_head " +
                                        std::to_string(NH));
    }
    /// Whether attention of width C over NH heads runs FlashAttention-2 (native path in bf16, head size
    /// 64 or 128; neither cublas nor cuDNN in use).
    bool flash_path(int C, int NH) const {
        return blas_ == nullptr && !cudnn_active() && act_ == DType::bf16 && cuda::flash_attention_supported(C, NH);
    }
    /// Whether attention calls go to cuDNN (its graph then takes the expanded multi-head qkv).
    bool cudnn_active() const {
#ifdef LLMTRAIN_HAVE_CUDNN
        return cudnn_ != nullptr;
#else
        return false;
#endif
    }
    /// Throws std::invalid_argument naming `op` unless [v0, v0 + nv) is a non-empty vocab slice.
    static void require_vocab_range(int v0, int nv, const char* op) {
        if (v0 < 0 || nv < 1)
            throw std::invalid_argument(std::string("cuda ") + op + ": expected a vocab slice v0 >= 0, nv >= 1, got v0 " +
                                        std::to_string(v0) + ", nv " + std::to_string(nv));
    }
    /// encoder_forward over the token rows [v0, v0 + nv) (the whole table: 0, INT_MAX), then the
    /// token-id bookkeeping for the backward (see encoder_backward).
    void encoder_forward_range(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C, int v0,
                               int nv) {
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::encoder_forward(as<X>(out), inp, as<X>(wte), as<X>(wpe), B, T, C, v0, nv, stream_);
        });
        const int N = B * T;
        TokenSlot& c = token_slot_for(inp, N);
        c.have_buckets = c.hinted;
        c.copy_started = !c.hinted;
        c.hinted = false;
        if (c.have_buckets) return;
        ensure_pinned_ids(c);
        CUDA_CHECK(cudaMemcpyAsync(c.host, inp, sizeof(int) * N, cudaMemcpyDeviceToHost, stream_));
        CUDA_CHECK(cudaEventRecord(c.ready, stream_));
    }
    /// encoder_backward over the token rows [v0, v0 + nv) (the whole table: 0, INT_MAX): the buckets
    /// of inp's ids, of which the run with tokens in the range is launched (dwte row = token - v0).
    void encoder_backward_range(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C, int v0,
                                int nv) {
        const int N = B * T;
        auto it = std::find_if(token_slots_.begin(), token_slots_.end(),
                               [&](const TokenSlot& c) { return c.src == inp && c.n == N; });
        TokenSlot* found = it != token_slots_.end() ? &*it : nullptr;
        if (found == nullptr || !found->have_buckets) {
            TokenSlot& c = found != nullptr ? *found : token_slot_for(inp, N);
            if (!c.copy_started) {
                ensure_pinned_ids(c);
                CUDA_CHECK(cudaMemcpyAsync(c.host, inp, sizeof(int) * N, cudaMemcpyDeviceToHost, stream_));
                CUDA_CHECK(cudaStreamSynchronize(stream_));
            } else {
                host_wait_event(c.ready, "the encoder backward's copy of its token ids");  // timed in a pipeline
            }
            c.nb = cuda::build_encoder_buckets(c.host, N, c.packed);
            c.have_buckets = true;
            found = &c;
        }
        const TokenSlot& c = *found;
        ensure_buckets(3 * size_t(N) + 1);  // the most any N ids need: never regrown (no cudaFree mid-step)
        BucketBuffer& b = buckets_[next_bucket_];
        next_bucket_ = (next_bucket_ + 1) % kBucketBuffers;
        host_wait_event(b.done, "the encoder backward's bucket buffer");  // the pair's previous upload has left it
        std::copy(c.packed.begin(), c.packed.end(), b.host);
        CUDA_CHECK(cudaStreamWaitEvent(stream_, b.done, 0));  // ... and its kernels the device buffer
        CUDA_CHECK(cudaMemcpyAsync(b.dev, b.host, sizeof(int) * c.packed.size(), cudaMemcpyHostToDevice, stream_));
        const int nb = c.nb;
        // Buckets are in ascending token order: those in [v0, v0 + nv) are the run [k0, k1).
        const int* tok = c.packed.data();
        const int k0 = static_cast<int>(std::lower_bound(tok, tok + nb, v0) - tok);
        const int k1 = static_cast<int>(
            std::lower_bound(tok, tok + nb, static_cast<int64_t>(v0) + nv,
                             [](int token, int64_t end) { return static_cast<int64_t>(token) < end; }) -
            tok);
        const cuda::EncoderBuckets buckets{b.dev + k0, b.dev + nb + k0, b.dev + 2 * nb + 1, k1 - k0, v0};
        dispatch([&](auto t) {
            using X = decltype(t);
            cuda::encoder_backward(as<X>(dwte), as<X>(dwpe), as<X>(dout), buckets, B, T, C, stream_);
        });
        CUDA_CHECK(cudaEventRecord(b.done, stream_));
    }
    /// Calls f(float{}) or f(bf16{}) for the act dtype.
    template <class F>
    void dispatch(F&& f) {
        if (act_ == DType::f32)
            f(float{});
        else
            f(bf16{});
    }
    template <class X>
    static X* as(void* p) {
        return static_cast<X*>(p);
    }
    template <class X>
    static const X* as(const void* p) {
        return static_cast<const X*>(p);
    }

#ifdef LLMTRAIN_HAVE_CUDNN
    /// True when cuDNN has (deterministic) forward and backward plans for this shape, built here at
    /// its first call. When cuDNN rejects the graph: with model.attention = "auto", switches this
    /// backend to cublas for good, says so on stderr and returns false; with "cudnn", throws its error.
    bool cudnn_plans_or_fallback(int B, int T, int C, int NH) {
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
    /// True when cuDNN has forward and backward plans for grouped-query attention with NKV key/value
    /// heads (the graph without the expanded copy). When cuDNN refuses that graph, says so once on
    /// stderr and in attention_reason(), and returns false for good: grouped-query calls then run
    /// the multi-head cuDNN graph on the expanded copy (gqa.cu), the former route.
    bool cudnn_gqa_native(int B, int T, int C, int NH, int NKV) {
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

    /// Points the cuBLAS handle at the current stream and at the cuBLASLt workspace (cublasSetStream
    /// resets the workspace to cuBLAS's own pool, whose memory the Allocator would not see).
    void bind_blas() {
        if (cublasSetStream(blas_, stream_) != CUBLAS_STATUS_SUCCESS ||
            cublasSetWorkspace(blas_, lt_.workspace, lt_.workspace_bytes) != CUBLAS_STATUS_SUCCESS)
            throw CudaError("cuda cublas attention: cublasSetStream/cublasSetWorkspace failed");
    }
    /// Device memory for the backend's own use, reported to the Allocator's listener.
    /// Errors: CudaError when the device is out of memory.
    void* internal_malloc(size_t bytes) {
        void* p = nullptr;
        CUDA_CHECK(cudaMalloc(&p, bytes));
        note_internal_memory(static_cast<std::ptrdiff_t>(bytes));
        return p;
    }
    /// Frees `bytes` at p from internal_malloc (null is ignored).
    void internal_free(void* p, size_t bytes) {
        if (p == nullptr) return;
        CUDA_CHECK(cudaFree(p));
        note_internal_memory(-static_cast<std::ptrdiff_t>(bytes));
    }
    /// The current stream's scratch, at least `bytes` long. Growing it waits for the stream's
    /// queued work (which may still read the old buffer), so it happens only when shapes grow.
    float* scratch_for(size_t bytes) { return static_cast<float*>(grow(scratch_[stream_], bytes)); }
    /// The scratch of FlashAttention-2's backward: D and the dQ partials (flash_attention.hpp).
    float* flash_scratch(int B, int T, int C, int NH) {
        return scratch_for(cuda::flash_attention_backward_scratch_bytes(B, T, C, NH));
    }
    /// The current stream's buffer for grouped-query attention's expanded heads, as scratch_for.
    void* gqa_for(size_t bytes) { return grow(gqa_[stream_], bytes); }
    /// buf, grown to at least `bytes` (after the current stream's queued work).
    void* grow(Buffer& buf, size_t bytes) {
        if (buf.bytes < bytes) {
            if (buf.ptr != nullptr) CUDA_CHECK(cudaStreamSynchronize(stream_));
            internal_free(buf.ptr, buf.bytes);
            buf.ptr = internal_malloc(bytes);
            buf.bytes = bytes;
        }
        return buf.ptr;
    }
    /// Every bucket buffer pair holds at least `ints` ints (grown together, after their kernels).
    void ensure_buckets(size_t ints) {
        if (bucket_ints_ >= ints) return;
        for (BucketBuffer& b : buckets_) {
            CUDA_CHECK(cudaEventSynchronize(b.done));
            internal_free(b.dev, sizeof(int) * bucket_ints_);
            CUDA_CHECK(cudaFreeHost(b.host));
            b.dev = static_cast<int*>(internal_malloc(sizeof(int) * ints));
            CUDA_CHECK(cudaMallocHost(&b.host, sizeof(int) * ints));
        }
        bucket_ints_ = ints;
    }
    /// What the encoder backward needs of one token buffer `src` (n ids) an encoder_forward read:
    /// the buckets (packed as build_encoder_buckets returns them, nb of them) once built, and the
    /// pinned copy of the ids they are built from when the caller gave no host ids.
    struct TokenSlot {
        const int* src = nullptr;
        int n = 0, nb = 0;
        bool hinted = false;        ///< encoder_host_tokens bucketed ids for src's next forward
        bool have_buckets = false;  ///< packed holds the buckets of src's last forward
        bool copy_started = false;  ///< src's last forward started the pinned copy below
        std::vector<int> packed;
        int* host = nullptr;  ///< pinned copy of the ids (cap ints), complete after `ready`
        int cap = 0;
        cudaEvent_t ready = nullptr;
        uint64_t written = 0;  ///< orders the slots for reuse
    };
    static constexpr size_t kTokenSlots = 16;  ///< token buffers remembered (micro-batches in flight)
    /// The slot of n ids read from device buffer src: src's own slot, else a new one (up to
    /// kTokenSlots), else the least recently written one.
    TokenSlot& token_slot_for(const int* src, int n) {
        auto it = std::find_if(token_slots_.begin(), token_slots_.end(), [&](const TokenSlot& c) { return c.src == src; });
        if (it == token_slots_.end() && token_slots_.size() < kTokenSlots) {
            TokenSlot c;
            CUDA_CHECK(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming));
            token_slots_.push_back(c);
            it = token_slots_.end() - 1;
        } else if (it == token_slots_.end()) {
            it = std::min_element(token_slots_.begin(), token_slots_.end(),
                                  [](const TokenSlot& a, const TokenSlot& b) { return a.written < b.written; });
        }
        if (it->src != src || it->n != n) it->hinted = it->have_buckets = it->copy_started = false;
        it->src = src;
        it->n = n;
        it->written = ++token_clock_;
        return *it;
    }
    /// Grows c's pinned id copy to c.n ints (after its last copy landed).
    void ensure_pinned_ids(TokenSlot& c) {
        if (c.cap >= c.n) return;
        CUDA_CHECK(cudaEventSynchronize(c.ready));
        CUDA_CHECK(cudaFreeHost(c.host));
        c.host = nullptr;
        CUDA_CHECK(cudaMallocHost(&c.host, sizeof(int) * c.n));
        c.cap = c.n;
    }
    /// A pinned + device buffer pair the encoder backward uploads buckets through; `done` is
    /// recorded after the kernels that read the device buffer.
    struct BucketBuffer {
        int* host = nullptr;
        int* dev = nullptr;
        cudaEvent_t done = nullptr;
    };
    static constexpr int kBucketBuffers = 2;

    DType act_;
    CudaBackendOptions opt_;            ///< opt_.attention: the path in use (never automatic)
    AttentionChoice attention_;         ///< that path and why, for Ops::attention_name / attention_reason
    bool attention_automatic_ = false;  ///< model.attention = "auto": cuDNN may fall back to cublas
    bool cudnn_gqa_refused_ = false;    ///< cuDNN refused its grouped-query graph: the expanded copy instead
    std::string gqa_note_;              ///< which grouped-query route cuDNN took, for attention_reason()
    cudaStream_t stream_ = nullptr;
    LtContext lt_;
    cublasHandle_t blas_ = nullptr;  ///< set when the attention path is cublas
    std::unordered_map<cudaStream_t, Buffer> scratch_;
    std::unordered_map<cudaStream_t, Buffer> gqa_;  ///< grouped-query attention's expanded qkv / dqkv
    BucketBuffer buckets_[kBucketBuffers];
    int next_bucket_ = 0;
    size_t bucket_ints_ = 0;  ///< ints in each bucket buffer
    std::vector<TokenSlot> token_slots_;
    uint64_t token_clock_ = 0;
#ifdef LLMTRAIN_HAVE_CUDNN
    std::unique_ptr<cuda::CudnnAttention> cudnn_;  ///< set when the attention path is cudnn
#endif
};

/// The node-local rank from the launcher's environment, 0 when absent. Same variables in the same
/// order as parallel/comm.hpp's local_rank() (the metrics port), so a rank's device and port agree;
/// the model layer cannot call into parallel/, hence this twin.
int local_rank() {
    for (const char* var : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
        if (const char* v = std::getenv(var)) return std::atoi(v);
    return 0;
}

}  // namespace

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

std::unique_ptr<Ops> make_cuda_backend(const std::string& precision, const CudaBackendOptions& options) {
    DType act;
    if (precision == "bf16")
        act = DType::bf16;
    else if (precision == "fp32")
        act = DType::f32;
    else
        throw std::invalid_argument("training.precision: expected \"bf16\" or \"fp32\", got \"" + precision + "\"");
    if (options.attention_workspace_mb < 1)
        throw std::invalid_argument("model.attention_workspace_mb: expected an integer >= 1, got " +
                                    std::to_string(options.attention_workspace_mb));
    if (options.attention == Attention::cudnn) {
#ifndef LLMTRAIN_HAVE_CUDNN
        throw std::invalid_argument(
            "model.attention = \"cudnn\": this build has no cuDNN (use \"auto\" or \"cublas\")");
#endif
        if (act != DType::bf16)
            throw std::invalid_argument("model.attention = \"cudnn\" needs training.precision = \"bf16\"");
    }
    const int n = cuda_device_count();
    if (n == 0) throw std::runtime_error("run.backend = \"cuda\": no CUDA device is present");
    const int device = local_rank() % n;
    CUDA_CHECK(cudaSetDevice(device));
    AttentionEnv env;
    env.bf16 = act == DType::bf16;
    env.head_size = options.head_size;
    CUDA_CHECK(cudaDeviceGetAttribute(&env.cc_major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&env.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    if (const std::string e = attention_fit_error(options.attention, env); !e.empty()) throw std::invalid_argument(e);
#ifdef LLMTRAIN_HAVE_CUDNN  // cudnn_version stays 0 otherwise: "this build has no cuDNN"
    env.cudnn_version = cuda::CudnnAttention::version();
#endif
    return std::make_unique<CudaOps>(act, options, resolve_attention(options.attention, env));
}

}  // namespace llmtrain
