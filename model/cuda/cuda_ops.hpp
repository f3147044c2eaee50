// model/cuda/cuda_ops.hpp — CudaOps: the Ops interface (model/ops.hpp) on a CUDA device.
//
// Holds the device state every op shares: the current stream, the cuBLASLt handle and its 32 MiB
// workspace, one scratch buffer per stream (reduction partials, attention's D = dO.O, cuDNN's
// workspace, the cublas attention's workspace), the token buckets of the encoder backward (built on
// the host from the caller's token ids, else from a copy the forward starts), with attention =
// "cublas" a cuBLAS handle (it shares the cuBLASLt workspace: both run in stream order on the
// current stream), and, with attention = "cudnn" in nvcc builds with cuDNN, the cuDNN fused-attention
// plans (model.attention = "auto" is resolved once, in make_cuda_backend, by resolve_attention; a
// shape cuDNN rejects then falls back to cublas). These device buffers are reported through
// Ops::note_internal_memory, so the Allocator counts them as workspace. Each GPT op converts its
// void* tensors to the act dtype (float in fp32 mode, __nv_bfloat16 in bf16 mode) and calls the
// launchers of kernels.cuh. Everything is asynchronous on the current stream except where a comment
// says it synchronizes.
//
// A header (CUDA, included by the backend's .cu files only) because the members are defined by
// family in several translation units: cuda_ops.cu (construction, memory, streams and events,
// casts, the backend's buffers, make_cuda_backend), cuda_ops_attention.cu (attention, grouped-query
// included, and the choice among cuDNN, cublas, FlashAttention-2 and the CUDA-core kernels),
// cuda_ops_encoder.cu (the embedding and its backward's token buckets), cuda_ops_layers.cu (norms,
// matmuls, activations, rope, residual, classifier), cuda_ops_fp8.cu (the FP8 linear layers),
// cuda_ops_moe.cu (the mixture-of-experts layer) and cuda_ops_optim.cu (AdamW, norms, scaling).
// The Ops overrides' contracts are model/ops.hpp's; the comments here say what is CUDA-specific.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "model/cuda/cuda_backend.hpp"
#include "model/cuda/kernels.cuh"
#ifdef LLMTRAIN_HAVE_CUDNN
#include "model/cuda/cudnn_attention.hpp"  // nvcc builds with cuDNN only (never under cuda_emu)
#endif

namespace llmtrain::cuda {

/// The CUDA backend's Ops (see the file comment); created by make_cuda_backend.
class CudaOps final : public Ops {
    using bf16 = __nv_bfloat16;

public:
    /// `choice`: opt.attention resolved (resolve_attention); opt.attention = automatic allows the
    /// fallback to cublas when cuDNN rejects a shape. smem_optin: the device's
    /// cudaDevAttrMaxSharedMemoryPerBlockOptin (bytes; make_cuda_backend has read it for "auto").
    /// Errors: CudaError when cuBLASLt, cuBLAS or the workspace cannot be set up.
    CudaOps(DType act, const CudaBackendOptions& opt, AttentionChoice choice, int smem_optin);
    /// Waits for the device, then frees every buffer, event and handle the backend owns.
    ~CudaOps() override;

    const char* name() const override { return "cuda"; }
    DType act_dtype() const override { return act_; }

    // ---- memory (cuda_ops.cu) ----
    /// Errors: std::runtime_error naming the size when the device is out of memory.
    void* malloc(size_t bytes) override;
    void free(void* p) override;
    void* malloc_host(size_t bytes) override;
    void free_host(void* p) override;
    void memcpy_h2d(void* dst, const void* src, size_t bytes) override;
    void memcpy_d2h(void* dst, const void* src, size_t bytes) override;
    void memcpy_d2d(void* dst, const void* src, size_t bytes) override;
    void memset(void* p, int value, size_t bytes) override;
    void synchronize() override;
    void mem_info(size_t* free_bytes, size_t* total_bytes) override;

    // ---- streams and events (cuda_ops.cu) ----
    /// A non-blocking stream: ordered against the default stream only through events.
    Stream create_stream() override;
    /// Also frees the stream's scratch and grouped-query buffers (after its queued work).
    void destroy_stream(Stream s) override;
    void set_stream(Stream s) override { stream_ = static_cast<cudaStream_t>(s); }
    Event create_event() override;
    void destroy_event(Event e) override;
    void record_event(Event e) override;
    void wait_event(Event e) override;
    void synchronize_event(Event e) override;
    bool query_event(Event e) override;
    Event create_timed_event() override;
    double elapsed_seconds(Event start, Event end) override;

    // ---- casts (cuda_ops.cu) ----
    void cast(void* dst, DType dst_t, const void* src, DType src_t, size_t n) override;

    // ---- the embedding (cuda_ops_encoder.cu) ----
    /// Buckets the ids for inp's next encoder_backward now, on the host (see encoder_backward).
    void encoder_host_tokens(const int* dev, const int* host, int n) override;
    /// Without an encoder_host_tokens hint for inp, also starts copying the ids to pinned host memory
    /// for the backward's bucketing.
    void encoder_forward(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C) override;
    /// Positions are bucketed by token on the host (encoder.cu). The buckets of the forward that read
    /// inp (one slot per token buffer, so micro-batches in flight together each find their own) were
    /// built from the caller's ids when it gave them (encoder_host_tokens): then the host waits for no
    /// device work of this micro-batch. Else they are built now from the copy that forward started
    /// (the host waits for that copy), or, with no such forward, from a copy made now (waiting for
    /// the stream). The upload goes through one of kBucketBuffers pinned + device buffer pairs, in
    /// turn: the host waits only for the kernels of the backward that used the pair before.
    void encoder_backward(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C) override;
    /// Vocab-parallel embedding (Megatron-LM's VocabParallelEmbedding, Shoeybi et al. 2019):
    /// out (B,T,C) act dtype = wte[inp - v0] + wpe[t] at the positions whose token is in
    /// [v0, v0 + nv), exact zeros elsewhere; wte (nv,C) this rank's token rows, wpe (maxT,C), inp (B,T)
    /// int32 device. The owning rank's values are bitwise encoder_forward's (the same kernel). Token ids
    /// are taken for the backward as in encoder_forward. Errors: std::invalid_argument for v0 < 0 or
    /// nv < 1.
    void encoder_forward_vocab(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C,
                               int v0, int nv) override;
    /// dwte (nv,C) act dtype += dout (B,T,C) summed per token over the positions whose token is in
    /// [v0, v0 + nv) (row = token - v0); dwpe (maxT,C) += sum over b of dout, as encoder_backward.
    /// Deterministic: the buckets of encoder_backward restricted to the range (a contiguous run of
    /// them), so every dwte row and dwpe are bitwise what encoder_backward gives. Errors:
    /// std::invalid_argument for v0 < 0 or nv < 1.
    void encoder_backward_vocab(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C,
                                int v0, int nv) override;
    /// Learned positions at pos (B,T) int32 (reset_position_ids): encoder_forward_vocab's kernel with
    /// row pos[b,t] of wpe. Its backward buckets the positions by their id as the tokens are (one
    /// more token slot: encoder_host_tokens(pos, host ids) spares its copy back), so dwpe[p] sums
    /// its positions in a fixed order, without atomics.
    void encoder_forward_pos(void* out, const int* inp, const int* pos, const void* wte, const void* wpe, int B,
                             int T, int C, int v0, int nv) override;
    void encoder_backward_pos(void* dwte, void* dwpe, const void* dout, const int* inp, const int* pos, int B, int T,
                              int C, int v0, int nv) override;

    // ---- layers (cuda_ops_layers.cu): rows of n_embd in 16-byte packs, 16-byte aligned tensors ----
    void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight,
                           const void* bias, int N, int C) override;
    void fused_residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd, const void* a,
                                          const void* b, const void* weight, const void* bias, int N,
                                          int C) override;
    void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                            const void* weight, const float* mean, const float* rstd, int N, int C) override;
    void residual_forward(void* out, const void* a, const void* b, size_t n) override;
    /// cuBLASLt GEMMs (matmul.cu) with the bias and GELU in the epilogue.
    void matmul_forward(void* out, void* pre_gelu, const void* inp, const void* weight, const void* bias, int N,
                        int C, int OC) override;
    void matmul_backward(void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                         const void* weight, const void* pre_gelu, int N, int C, int OC) override;
    // ---- FP8 linear layers (cuda_ops_fp8.cu): compute capability 8.9+ ----
    std::string fp8_unsupported(Fp8Recipe r) const override;
    void matmul_forward_fp8(Fp8Recipe r, void* out, const void* inp, const void* weight, const void* bias, int N,
                            int C, int OC) override;
    void matmul_backward_fp8(Fp8Recipe r, void* dinp, void* dweight, void* dbias, const void* dout, const void* inp,
                             const void* weight, int N, int C, int OC) override;

    // ---- attention (cuda_ops_attention.cu) ----
    const char* attention_name() const override { return llmtrain::attention_name(attention_.path); }
    /// The path's reason; on cuDNN, once a grouped-query call ran, also which route it took.
    std::string attention_reason() const override;
    /// cuDNN, else cublas, else FlashAttention-2 (bf16, head size 64 or 128), else attention.cu.
    void attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH) override;
    void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse, int B,
                            int T, int C, int NH) override;

    // ---- Llama's pieces (docs/cuda.md "Llama kernels"): rmsnorm.cu, rope.cu, swiglu.cu, gqa.cu ----
    bool implements(OpFamily) const override { return true; }
    void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                         float eps) override;
    void fused_residual_rmsnorm_forward(void* residual, void* out, float* rstd, const void* a, const void* b,
                                        const void* weight, int N, int C, float eps) override;
    void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
                          const float* rstd, int N, int C) override;
    /// Qwen3's QK-norm (qk_norm.cu): one warp per head, the weights' gradients by reduce.cuh.
    bool implements_qk_norm() const override { return true; }
    void qk_norm_forward(void* qkv, void* pre, float* rstd, const void* wq, const void* wk, int N, int NH, int NKV,
                         int HS, float eps) override;
    void qk_norm_backward(void* dqkv, void* dwq, void* dwk, const void* pre, const void* wq, const void* wk,
                          const float* rstd, int N, int NH, int NKV, int HS) override;
    void rope_forward(void* qkv, int B, int T, int NH, int NKV, int HS, float theta) override;
    void rope_backward(void* dqkv, int B, int T, int NH, int NKV, int HS, float theta) override;
    void swiglu_forward(void* out, const void* inp, int N, int F) override;
    void swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int F) override;
    /// Grouped-query attention: NKV = NH is attention_forward; the cublas path maps query head h to
    /// key/value head h / (NH/NKV) in its head split, FlashAttention-2 in its tile loads, cuDNN in its
    /// graph (K/V with NKV heads, cudnn_gqa_native); native attention.cu, and cuDNN where it refuses
    /// that graph, run multi-head on a copy of qkv with the key/value heads expanded (gqa.cu), in a
    /// per-stream backend buffer of 3 B*T*NH*HS elements (6 for the backward) counted as workspace.
    void attention_forward_gqa(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                               int HS) override;
    void attention_backward_gqa(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                int B, int T, int NH, int NKV, int HS) override;
    /// Document masking (docs/attention.md "Document masking"): cublas masks in its softmax kernels,
    /// FlashAttention-2 (native bf16, head size 64 or 128) skips the key blocks before a block's
    /// documents, attention.cu (other shapes, fp32) skips its tiles alike. cuDNN's graph has no
    /// document mask here: with cuDNN active these calls go to FlashAttention-2 (else attention.cu),
    /// said once on stderr and in attention_reason().
    void attention_forward_doc(void* out, float* lse, const void* qkv, const int* doc_start, int B, int T, int NH,
                               int NKV, int HS) override;
    void attention_backward_doc(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                const int* doc_start, int B, int T, int NH, int NKV, int HS) override;
    /// Context parallelism's attention over some query rows of a window (ops.hpp): always the cuBLAS
    /// path (cublas_attention.cu with CublasRows; its handle made on first use), whatever
    /// model.attention says, document mask included.
    void attention_forward_rows(void* out, float* lse, const void* qkv, const int* doc_start, int B, int T, int NH,
                                int NKV, int HS, const AttentionRows& rows) override;
    void attention_backward_rows(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                 const int* doc_start, int B, int T, int NH, int NKV, int HS,
                                 const AttentionRows& rows) override;
    bool implements_attention_rows() const override { return true; }
    /// Rotary positions at pos (B,T) int32 (reset_position_ids): rope.cu with a position per row.
    void rope_forward_pos(void* qkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                          int n_pos) override;
    void rope_backward_pos(void* dqkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                           int n_pos) override;

    // ---- mixture of experts (cuda_ops_moe.cu; moe_router.cu, moe_permute.cu; docs/cuda.md "Mixture of
    // experts"; moe_grouped_gemm.cu): the router, the plan and the experts' GEMMs on the device, the
    // GEMMs grouped over the experts reading the offsets on the device. moe_forward / moe_backward
    // never wait for the plan; the separate moe_ffn_forward / moe_ffn_backward (expert parallelism's,
    // whose all-to-all needs the counts on the host anyway) read offsets[E] to the host to size their
    // grid (the stream synchronizes), and moe_dispatch_forward waits for the balance loss it returns
    // (when aux_coef != 0); the rest is asynchronous. ----
    bool implements_moe() const override { return true; }
    /// MoeShape::aux_f's fractions (host doubles) copied into the balance-loss gradient's stats.
    bool implements_moe_aux_fractions() const override { return true; }
    float moe_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* out, const void* x,
                      const void* w_router, const void* w13, const void* w2, bool combine) override;
    void moe_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx, void* dw_router, void* dw13,
                      void* dw2, const void* dout, const void* x, const void* w_router, const void* w13,
                      const void* w2, float aux_scale) override;
    float moe_dispatch_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, const void* x,
                               const void* w_router) override;
    void moe_ffn_forward(void* yg, void* gu, void* h, const void* xg, const void* w13, const void* w2,
                         const int* offsets, int E, int C, int F) override;
    void moe_combine_forward(const MoeShape& s, const MoeActs& a, void* out, const void* yg) override;
    void moe_combine_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dyg, const void* dout,
                              const void* yg) override;
    void moe_ffn_backward(void* dxg, void* dw13, void* dw2, void* dgu, void* dh, const void* dyg, const void* xg,
                          const void* gu, const void* h, const void* w13, const void* w2, const int* offsets, int E,
                          int C, int F) override;
    void moe_dispatch_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx, void* dw_router,
                               const void* dxg, const void* x, const void* w_router, float aux_scale) override;

    // ---- activations and the classifier (cuda_ops_layers.cu) ----
    void gelu_forward(void* out, const void* inp, size_t n) override;
    void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) override;
    /// Errors also: std::invalid_argument unless Vp is a multiple of kPackElems.
    void fused_classifier(void* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss,
                          bool write_grad) override;
    /// Vocab-parallel cross-entropy, pass 1 (Megatron-LM's vocab_parallel_cross_entropy, Shoeybi et
    /// al. 2019): stats (N,3) fp32 = per row of this rank's logits (N,nv) act dtype, columns
    /// [v0, v0 + nv) of the padded vocab, the max m over the columns below V, s = sum exp(x - m) over
    /// them, and the logit of targets[n] (int32) when it lies in the slice, else 0; (-inf, 0, .) for a
    /// row with no column below V. One block per row (classifier.cu), 16-byte packs when nv % 8 == 0.
    /// Errors: std::invalid_argument for v0 < 0, nv < 1 or V < 1.
    void classifier_partial(float* stats, const void* logits, const int* targets, int N, int nv, int v0,
                            int V) override;
    /// Pass 2, from all (tp,N,3) fp32, the group's stats in rank order: M = max_r m_r,
    /// S = sum_r s_r exp(m_r - M) in rank order, losses (N) fp32 = M + log S - sum_r t_r, the same bits
    /// on every rank; with write_grad logits (N,nv) is overwritten by dloss * (exp(x - M) / S - onehot)
    /// below V and 0 on the padding, as fused_classifier does for the whole row. Errors:
    /// std::invalid_argument for tp < 1, v0 < 0, nv < 1 or V < 1.
    void classifier_finish(void* logits, float* losses, const float* all, int tp, const int* targets, int N, int nv,
                           int v0, int V, float dloss, bool write_grad) override;

    // ---- optimizer and norms (cuda_ops_optim.cu) ----
    /// Errors also: std::invalid_argument for bf16 params without master weights.
    void adamw_update(void* params, float* master, const void* grads, float* m, float* v, size_t n, float lr,
                      float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t,
                      size_t index0) override;
    void norm_squared(float* out, const void* x, size_t n, bool accumulate) override;
    void scale(void* x, float s, size_t n) override;

private:
    /// A device buffer of the backend's own (internal_malloc).
    struct Buffer {
        void* ptr = nullptr;
        size_t bytes = 0;
    };
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
    /// A pinned + device buffer pair the encoder backward uploads buckets through; `done` is
    /// recorded after the kernels that read the device buffer.
    struct BucketBuffer {
        int* host = nullptr;
        int* dev = nullptr;
        cudaEvent_t done = nullptr;
    };
    static constexpr int kBucketBuffers = 2;

    // ---- attention's helpers (cuda_ops_attention.cu) ----
    /// Throws std::invalid_argument unless NKV divides NH.
    static void require_gqa(int NH, int NKV);
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
#ifdef LLMTRAIN_HAVE_CUDNN
    /// True when cuDNN has (deterministic) forward and backward plans for this shape, built here at
    /// its first call. When cuDNN rejects the graph: with model.attention = "auto", switches this
    /// backend to cublas for good, says so on stderr and returns false; with "cudnn", throws its error.
    bool cudnn_plans_or_fallback(int B, int T, int C, int NH);
    /// True when cuDNN has forward and backward plans for grouped-query attention with NKV key/value
    /// heads (the graph without the expanded copy). When cuDNN refuses that graph, says so once on
    /// stderr and in attention_reason(), and returns false for good: grouped-query calls then run
    /// the multi-head cuDNN graph on the expanded copy (gqa.cu), the former route.
    bool cudnn_gqa_native(int B, int T, int C, int NH, int NKV);
#endif
    /// Points the cuBLAS handle at the current stream and at the cuBLASLt workspace (cublasSetStream
    /// resets the workspace to cuBLAS's own pool, whose memory the Allocator would not see).
    void bind_blas(cublasHandle_t h = nullptr);  ///< h (default blas_) on stream_ with the cuBLASLt workspace
    /// The tile of FlashAttention-2's backward on this device at this head size
    /// (flash_backward_tile of its opt-in shared memory, read once): what both the scratch below
    /// and the launch take, so they cannot disagree.
    cuda::FlashBackwardTile flash_tile(int head_size) const {
        return cuda::flash_backward_tile(head_size, smem_optin_);
    }
    /// The scratch of FlashAttention-2's backward: D and the dQ partials (flash_attention.hpp), for
    /// flash_tile's keys (the dry run, which has no device, counts the larger).
    float* flash_scratch(int B, int T, int C, int NH) {
        return scratch_for(cuda::flash_attention_backward_scratch_bytes(B, T, C, NH, flash_tile(C / NH).keys));
    }
    /// RoPE's cos/sin table at (T, HS, theta) (rope_table.hpp), built on the current stream and
    /// waited for the first time a shape asks (so every stream may read it), then kept until the
    /// backend goes: one per shape a run uses (Llama 3 8B: 4 MiB), counted as the backend's memory.
    const float* rope_table_for(int T, int HS, float theta);
    /// The current stream's buffer for grouped-query attention's expanded heads, as scratch_for.
    void* gqa_for(size_t bytes) { return grow(gqa_[stream_], bytes); }

    // ---- the embedding's helpers (cuda_ops_encoder.cu) ----
    /// Throws std::invalid_argument naming `op` unless [v0, v0 + nv) is a non-empty vocab slice.
    static void require_vocab_range(int v0, int nv, const char* op);
    /// encoder_forward over the token rows [v0, v0 + nv) (the whole table: 0, INT_MAX), then the
    /// token-id bookkeeping for the backward (see encoder_backward); with pos (B,T) int32 (null: t)
    /// the rows of wpe, and the same bookkeeping for pos's ids (the backward buckets them into dwpe).
    void encoder_forward_range(void* out, const int* inp, const void* wte, const void* wpe, int B, int T, int C, int v0,
                               int nv, const int* pos = nullptr);
    /// The token-id bookkeeping of a forward that read the N ids at `ids` (see encoder_backward).
    void note_forward_ids(const int* ids, int N);
    /// encoder_backward over the token rows [v0, v0 + nv) (the whole table: 0, INT_MAX): the buckets
    /// of inp's ids, of which the run with tokens in the range is launched (dwte row = token - v0).
    void encoder_backward_range(void* dwte, void* dwpe, const void* dout, const int* inp, int B, int T, int C, int v0,
                                int nv);
    /// Every bucket buffer pair holds at least `ints` ints (grown together, after their kernels).
    void ensure_buckets(size_t ints);
    /// The slot of n ids read from device buffer src: src's own slot, else a new one (up to
    /// kTokenSlots), else the least recently written one.
    TokenSlot& token_slot_for(const int* src, int n);
    /// Grows c's pinned id copy to c.n ints (after its last copy landed).
    void ensure_pinned_ids(TokenSlot& c);

    // ---- dtype dispatch ----
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

    // ---- the experts' FFNs on the grouped GEMM (cuda_ops_moe.cu) ----
    /// moe_ffn_forward's work with the host bound `rows` on offsets[E] (offsets[0] = 0): nothing is
    /// read to the host. The SwiGLU runs over all `rows`; zero_past: gu's rows past offsets[E] (a
    /// capacity-limited plan's dropped pairs, no expert's) are zeroed first so it reads defined values.
    void moe_experts_forward(void* yg, void* gu, void* h, const void* xg, const void* w13, const void* w2,
                             const int* offsets, int E, int C, int F, int rows, bool zero_past);
    /// moe_ffn_backward's work, as moe_experts_forward (zero_past: dh's rows past offsets[E] zeroed).
    void moe_experts_backward(void* dxg, void* dw13, void* dw2, void* dgu, void* dh, const void* dyg, const void* xg,
                              const void* gu, const void* h, const void* w13, const void* w2, const int* offsets,
                              int E, int C, int F, int rows, bool zero_past);
    /// offsets[E] read to the host (the stream synchronizes): the separate ffn ops' grid bound.
    int moe_rows_on_host(const int* offsets, int E);

    // ---- the backend's own device memory (cuda_ops.cu) ----
    /// Device memory for the backend's own use, reported to the Allocator's listener.
    /// Errors: CudaError when the device is out of memory.
    void* internal_malloc(size_t bytes);
    /// Frees `bytes` at p from internal_malloc (null is ignored).
    void internal_free(void* p, size_t bytes);
    /// The current stream's scratch, at least `bytes` long. Growing it waits for the stream's
    /// queued work (which may still read the old buffer), so it happens only when shapes grow.
    float* scratch_for(size_t bytes) { return static_cast<float*>(grow(scratch_[stream_], bytes)); }
    /// buf, grown to at least `bytes` (after the current stream's queued work).
    void* grow(Buffer& buf, size_t bytes);

    DType act_;
    CudaBackendOptions opt_;            ///< opt_.attention: the path in use (never automatic)
    AttentionChoice attention_;         ///< that path and why, for Ops::attention_name / attention_reason
    bool attention_automatic_ = false;  ///< model.attention = "auto": cuDNN may fall back to cublas
    int smem_optin_;                    ///< the device's cudaDevAttrMaxSharedMemoryPerBlockOptin (flash_tile)
    bool cudnn_gqa_refused_ = false;    ///< cuDNN refused its grouped-query graph: the expanded copy instead
    std::string gqa_note_;              ///< which grouped-query route cuDNN took, for attention_reason()
    std::string doc_note_;              ///< where document-masked calls went with cuDNN active (attention_reason())
    cudaStream_t stream_ = nullptr;
    LtContext lt_;
    cublasHandle_t blas_ = nullptr;  ///< set when the attention path is cublas
    cublasHandle_t rows_blas_ = nullptr;  ///< context parallelism's rows (always cuBLAS), made on first use
    std::unordered_map<cudaStream_t, Buffer> scratch_;
    std::unordered_map<cudaStream_t, Buffer> gqa_;  ///< grouped-query attention's expanded qkv / dqkv
    std::unordered_map<cudaStream_t, Buffer> fp8_;  ///< the FP8 linear layers' copies and scales (fp8_linear.hpp)
    int cc_ = 0;  ///< the device's compute capability, major * 10 + minor (fp8_unsupported)
    std::map<std::tuple<int, int, float>, Buffer> rope_tables_;  ///< rope_table_for's, by (T, HS, theta)
    BucketBuffer buckets_[kBucketBuffers];
    int next_bucket_ = 0;
    size_t bucket_ints_ = 0;  ///< ints in each bucket buffer
    std::vector<TokenSlot> token_slots_;
    uint64_t token_clock_ = 0;
#ifdef LLMTRAIN_HAVE_CUDNN
    std::unique_ptr<cuda::CudnnAttention> cudnn_;  ///< set when the attention path is cudnn
#endif
};

}  // namespace llmtrain::cuda
