// model/ops.hpp — the op interface every backend implements (CPU reference, CUDA).
//
// The model (model/gpt.*) is written once against this interface; the backends decide how each op
// runs. Conventions, shared by every op below:
//  - Pointers are *device* pointers of the backend (on the CPU: plain host memory from malloc()).
//  - `void*` tensors hold the backend's compute dtype `act_dtype()` ("floatX" in llm.c): fp32 on the
//    CPU, bf16 or fp32 on CUDA. `float*` tensors are always fp32 (LayerNorm stats, losses, master
//    weights, AdamW moments). `int*` tensors are int32 token ids.
//  - Shapes use B (micro-batch), T (sequence), C (n_embd), NH (n_head), NKV (key/value heads), HS = C/NH,
//    F (MLP hidden width), V (vocab_size),
//    Vp (vocab padded to a multiple of 128), N = B*T rows, OC output channels.
//  - Weights are stored (OC, C) row-major, as in llm.c: out = inp @ weight^T + bias.
//  - Gradients of weights and biases are ACCUMULATED (+=) so that micro-batches sum; the gradient of
//    an activation is OVERWRITTEN unless the op says "+=".
//  - Ops are asynchronous on the backend's current stream; results are visible on the host only
//    after synchronize() (the CPU backend runs them at once).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

#include "model/fp8.hpp"
#include "model/moe_layer.hpp"

namespace llmtrain {

/// Element type of a tensor. u8 is raw bytes (control data moved by Comm; no op computes on it).
enum class DType : uint8_t { f32, bf16, u8 };

/// Bytes of one element of `t`: 4 for f32, 2 for bf16, 1 for u8.
inline size_t dtype_size(DType t) { return t == DType::f32 ? 4 : t == DType::bf16 ? 2 : 1; }

/// A family of ops an architecture needs beyond the common ones (Ops::implements): gpt2's are
/// every pure virtual op; llama adds RMSNorm, rotary positions, SwiGLU and grouped-query attention.
enum class OpFamily : uint8_t { gpt2, llama };

/// The query rows an attention call computes (context parallelism, docs/parallelism.md "Context
/// parallelism"): rows [q0, q0 + nq) of the (B,T) window, whose outputs go to rows [o0, o0 + nq) of
/// (B,Tout,...) out / dout buffers and (B,NH,Tout) lse. all(T) is the whole window in place.
struct AttentionRows {
    int q0 = 0, nq = 0, Tout = 0, o0 = 0;
    static AttentionRows all(int T) { return {0, T, T, 0}; }
};

/// Opaque stream and event handles (cudaStream_t / cudaEvent_t on CUDA; dummies on the CPU).
using Stream = void*;
using Event = void*;

/// The backend: memory, streams, and the GPT ops. One instance per process (per device).
class Ops {
public:
    virtual ~Ops() = default;

    /// Backend name for logs: "cpu" or "cuda".
    virtual const char* name() const = 0;
    /// Compute dtype of params, activations and grads on the device ("floatX").
    virtual DType act_dtype() const = 0;
    /// The attention path this backend runs, for logs and metrics: "native", "cublas" or "cudnn"
    /// (model.attention with "auto" resolved; the CPU has only its own, "native").
    virtual const char* attention_name() const { return "native"; }
    /// Why that path, e.g. "auto: this build has no cuDNN" (docs/attention.md "`auto`, the default").
    virtual std::string attention_reason() const { return "the only attention of this backend"; }

    // ---- memory (bytes). Errors: throws std::runtime_error on allocation failure. ----
    /// Allocates `bytes` of device memory, 256-byte aligned. Contents are undefined.
    virtual void* malloc(size_t bytes) = 0;
    virtual void free(void* p) = 0;
    /// Allocates page-locked host memory (cudaMallocHost) for async copies; plain memory on the CPU.
    virtual void* malloc_host(size_t bytes) = 0;
    virtual void free_host(void* p) = 0;
    virtual void memcpy_h2d(void* dst, const void* src, size_t bytes) = 0;  ///< async on the current stream
    virtual void memcpy_d2h(void* dst, const void* src, size_t bytes) = 0;  ///< async: sync before reading dst
    virtual void memcpy_d2d(void* dst, const void* src, size_t bytes) = 0;
    virtual void memset(void* p, int value, size_t bytes) = 0;
    /// Waits for all queued work on every stream of this device.
    virtual void synchronize() = 0;
    /// Device memory (free, total) in bytes; on the CPU, the host's available and total memory.
    virtual void mem_info(size_t* free_bytes, size_t* total_bytes) = 0;

    // ---- the backend's own device memory (workspaces no Allocator hands out) ----
    /// Told of every allocation (+bytes) and free (-bytes) a backend makes for its own use: the
    /// CUDA backend's cuBLASLt workspace, reduction scratch, encoder buckets and cuDNN workspace.
    /// The Allocator listens, so these bytes count under its "workspace" category.
    class InternalMemoryListener {
    public:
        virtual void internal_memory_changed(std::ptrdiff_t delta_bytes) = 0;

    protected:
        ~InternalMemoryListener() = default;
    };
    /// Installs `l` (nullptr removes it) and tells it at once of the bytes already held.
    void set_internal_memory_listener(InternalMemoryListener* l) {
        listener_ = l;
        if (l != nullptr && internal_bytes_ != 0) l->internal_memory_changed(static_cast<std::ptrdiff_t>(internal_bytes_));
    }
    InternalMemoryListener* internal_memory_listener() const { return listener_; }
    /// Device bytes the backend now holds for its own use (0 on the CPU, whose scratch is per call).
    size_t internal_bytes() const { return internal_bytes_; }

    // ---- streams and events (no-ops that run at once on the CPU) ----
    /// A new stream, ordered against every other stream (the default one included) only through events.
    virtual Stream create_stream() = 0;
    virtual void destroy_stream(Stream s) = 0;
    /// Subsequent ops are queued on `s` (nullptr = the default stream).
    virtual void set_stream(Stream s) = 0;
    virtual Event create_event() = 0;
    virtual void destroy_event(Event e) = 0;
    virtual void record_event(Event e) = 0;         ///< on the current stream
    virtual void wait_event(Event e) = 0;           ///< the current stream waits for e
    virtual void synchronize_event(Event e) = 0;    ///< the host waits for e
    /// Non-blocking: whether the work queued before e's record has completed, so that a host wait
    /// can poll other things (parallel/host_wait.hpp). The default waits and answers true (the CPU
    /// runs ops at once). Errors: the backend's (CudaError for a failed device).
    virtual bool query_event(Event e) {
        synchronize_event(e);
        return true;
    }
    /// How the backend's own host waits poll (the encoder backward's waits for its pinned buffers):
    /// waiter(done, what) must return once done() (non-blocking) is true, or throw; `what` names the
    /// wait. A pipeline stage sets parallel/host_wait.hpp's poll_with_watchdog over its links, so a
    /// wait behind a receive that never lands ends with parallel.timeout_s's CommError instead of
    /// hanging; empty (the default): synchronize_event. Whoever sets it clears it (set_host_waiter({}))
    /// before what it captures dies.
    using HostWaiter = std::function<void(const std::function<bool()>& done, const std::string& what)>;
    void set_host_waiter(HostWaiter waiter) { host_waiter_ = std::move(waiter); }
    /// An event that elapsed_seconds() can read (CUDA events are otherwise made without timing).
    virtual Event create_timed_event() = 0;
    /// Seconds from `start` to `end`, two timed events both recorded and completed (on the CPU,
    /// where ops run at once, the host clock at each record_event).
    virtual double elapsed_seconds(Event start, Event end) = 0;

    // ---- casts ----
    /// dst[i] = (dst_t) src[i] for i < n; bf16 rounding is round-to-nearest-even.
    virtual void cast(void* dst, DType dst_t, const void* src, DType src_t, size_t n) = 0;

    // ---- GPT ops (llm.c's train_gpt2 decomposition) ----
    /// out(B,T,C) = wte[inp[b,t]] + wpe[t]. inp (B,T) int32, wte (Vp,C), wpe (maxT,C). On a backend
    /// that implements OpFamily::llama, wpe may be null (no learned positions): out = wte[inp]; the
    /// same holds for dwpe below and for the vocab-parallel forms.
    virtual void encoder_forward(void* out, const int* inp, const void* wte, const void* wpe,
                                 int B, int T, int C) = 0;
    /// dwte (Vp,C) += scatter of dout by token; dwpe (maxT,C) += sum over b. Deterministic (no atomics).
    virtual void encoder_backward(void* dwte, void* dwpe, const void* dout, const int* inp,
                                  int B, int T, int C) = 0;
    /// Optional hint before encoder_forward(inp = dev): the host holds the same n token ids at
    /// `host` (read during the call only). A backend whose encoder backward needs the ids on the
    /// host (CUDA buckets positions by token there) takes them from here instead of copying them
    /// back from the device. Results are the same with or without the hint. Default: ignored.
    virtual void encoder_host_tokens(const int* dev, const int* host, int n) {
        (void)dev, (void)host, (void)n;
    }

    /// out(N,C) = (inp - mean) * rstd * weight + bias, eps 1e-5; mean, rstd (N) fp32 saved for backward.
    virtual void layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                                   const void* weight, const void* bias, int N, int C) = 0;
    /// residual(N,C) = a + b, then out = LayerNorm(residual) as above (the residual add fused in).
    virtual void fused_residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd,
                                                  const void* a, const void* b, const void* weight,
                                                  const void* bias, int N, int C) = 0;
    /// dinp (N,C) +=, dweight (C) +=, dbias (C) += from dout (N,C). Source: LayerNorm backward (Ba et al. 2016).
    virtual void layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                                    const void* inp, const void* weight, const float* mean,
                                    const float* rstd, int N, int C) = 0;

    /// out(N,C) = a + b (the residual stream at a layer's end).
    virtual void residual_forward(void* out, const void* a, const void* b, size_t n) = 0;

    /// out(N,OC) = inp(N,C) @ weight(OC,C)^T + bias(OC) (bias may be null). If pre_gelu != null:
    /// pre_gelu(N,OC) = that product and out = gelu_tanh(pre_gelu) (fused GELU epilogue).
    virtual void matmul_forward(void* out, void* pre_gelu, const void* inp, const void* weight,
                                const void* bias, int N, int C, int OC) = 0;
    /// dinp(N,C) = dout(N,OC) @ weight(OC,C) (overwritten); dweight(OC,C) += dout^T @ inp;
    /// dbias(OC) += column sums of dout (skipped when dbias is null). If pre_gelu (N,C) != null,
    /// the GELU backward is fused: dinp *= gelu_tanh'(pre_gelu) — used when inp = gelu(pre_gelu).
    virtual void matmul_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                                 const void* inp, const void* weight, const void* pre_gelu,
                                 int N, int C, int OC) = 0;

    // ---- FP8 linear layers (training.fp8; docs/fp8.md). q4(x) / q5(x): x times its current scale
    // (fp8_scale_from_amax of the operand's amax: one per tensor, or one per row along the product's
    // outer dimension with Fp8Recipe::rowwise), rounded to e4m3 / e5m2 (model/fp8.hpp); products of
    // the FP8 values summed in fp32, then times the two inverse scales. No GELU epilogue: the caller
    // runs gelu_forward / gelu_backward. ----
    /// "" when this backend runs the two ops below with recipe r, else why not (the backend, or the
    /// device's compute capability). The GPT refuses training.fp8 with this text.
    virtual std::string fp8_unsupported(Fp8Recipe r) const {
        (void)r;
        return std::string("the ") + name() + " backend has no FP8 linear layers";
    }
    /// out(N,OC) = q4(inp)(N,C) @ q4(weight)(OC,C)^T + bias(OC) (bias may be null), out in act dtype.
    /// Rowwise: inp's scales per row n, weight's per row oc.
    virtual void matmul_forward_fp8(Fp8Recipe r, void* out, const void* inp, const void* weight, const void* bias,
                                    int N, int C, int OC) {
        (void)r, (void)out, (void)inp, (void)weight, (void)bias, (void)N, (void)C, (void)OC;
        missing("matmul_forward_fp8");
    }
    /// dinp(N,C) = q5(dout) @ q4(weight) (overwritten); dweight(OC,C) += q5(dout)^T @ q4(inp);
    /// dbias(OC) += column sums of dout itself (not quantized; skipped when null). Rowwise: for dinp
    /// dout's scales per row n and weight's per column c; for dweight dout's per column oc and inp's
    /// per column c (each product's scales are constant along its summed index).
    virtual void matmul_backward_fp8(Fp8Recipe r, void* dinp, void* dweight, void* dbias, const void* dout,
                                     const void* inp, const void* weight, int N, int C, int OC) {
        (void)r, (void)dinp, (void)dweight, (void)dbias, (void)dout, (void)inp, (void)weight, (void)N, (void)C,
            (void)OC;
        missing("matmul_backward_fp8");
    }

    /// Causal multi-head self-attention, never materializing (B,NH,T,T) scores in device memory.
    /// qkv (B,T,3C) holds [q | k | v], each (NH,HS) per position; out (B,T,C); lse (B,NH,T) fp32 is the
    /// log-sum-exp of each row of scaled scores (scale 1/sqrt(HS)), saved for backward.
    /// Source: FlashAttention-2 (Dao 2023), online softmax.
    virtual void attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C,
                                   int NH) = 0;
    /// dqkv (B,T,3C) (overwritten) from dout (B,T,C), recomputing probabilities from qkv and lse.
    virtual void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out,
                                    const float* lse, int B, int T, int C, int NH) = 0;

    // ---- Llama's pieces (docs/model.md "Architectures"). A backend that implements them all says
    // so through implements(OpFamily::llama); the defaults throw std::logic_error naming the op. ----
    /// Whether this backend implements every op of `f` (the GPT refuses an architecture whose ops
    /// are missing at construction, naming the backend). Default: gpt2 only.
    virtual bool implements(OpFamily f) const { return f == OpFamily::gpt2; }
    /// RMSNorm (Zhang & Sennrich 2019), as HuggingFace's LlamaRMSNorm: rstd (N) fp32 =
    /// 1/sqrt(mean_c(inp^2) + eps), out (N,C) = inp * rstd * weight (C). No mean, no bias.
    virtual void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int N, int C,
                                 float eps) {
        (void)out, (void)rstd, (void)inp, (void)weight, (void)N, (void)C, (void)eps;
        missing("rmsnorm_forward");
    }
    /// residual (N,C) = a + b, then out = RMSNorm(residual) as above (the residual add fused in).
    virtual void fused_residual_rmsnorm_forward(void* residual, void* out, float* rstd, const void* a, const void* b,
                                                const void* weight, int N, int C, float eps) {
        (void)residual, (void)out, (void)rstd, (void)a, (void)b, (void)weight, (void)N, (void)C, (void)eps;
        missing("fused_residual_rmsnorm_forward");
    }
    /// dinp (N,C) += rstd * (w*dout - n * mean_c(w*dout*n)) with n = inp*rstd; dweight (C) += sum_n dout*n.
    virtual void rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
                                  const float* rstd, int N, int C) {
        (void)dinp, (void)dweight, (void)dout, (void)inp, (void)weight, (void)rstd, (void)N, (void)C;
        missing("rmsnorm_backward");
    }
    /// Whether this backend has qk_norm_forward / qk_norm_backward (model.qk_norm; the GPT refuses
    /// QK-norm on a backend without them, naming it). Default: no.
    virtual bool implements_qk_norm() const { return false; }
    /// Qwen3's QK-norm, in place on the q and k heads of qkv (N, (NH + 2 NKV)*HS) = [q (NH,HS) | k
    /// (NKV,HS) | v] per row: pre (N, (NH + NKV)*HS) gets each row's q|k as they were (for backward),
    /// rstd (N, NH + NKV) fp32 = 1/sqrt(mean_c x^2 + eps) of each head x, and each q head becomes
    /// x * rstd * wq (HS), each k head x * rstd * wk (HS) (HuggingFace's Qwen3RMSNorm over head_dim);
    /// v untouched.
    virtual void qk_norm_forward(void* qkv, void* pre, float* rstd, const void* wq, const void* wk, int N, int NH,
                                 int NKV, int HS, float eps) {
        (void)qkv, (void)pre, (void)rstd, (void)wq, (void)wk, (void)N, (void)NH, (void)NKV, (void)HS, (void)eps;
        missing("qk_norm_forward");
    }
    /// Its backward, in place on dqkv's q and k heads (same layout; v's gradient untouched): each
    /// head's d out becomes d x as rmsnorm_backward's (with pre's head as x, its rstd and wq or wk);
    /// dwq (HS) += sum over rows and q heads of d out * x * rstd, dwk likewise over k heads.
    virtual void qk_norm_backward(void* dqkv, void* dwq, void* dwk, const void* pre, const void* wq, const void* wk,
                                  const float* rstd, int N, int NH, int NKV, int HS) {
        (void)dqkv, (void)dwq, (void)dwk, (void)pre, (void)wq, (void)wk, (void)rstd, (void)N, (void)NH, (void)NKV,
            (void)HS;
        missing("qk_norm_backward");
    }
    /// Rotary position embedding (Su et al. 2021, RoFormer), in place on the q and k heads of
    /// qkv (B,T,(NH + 2 NKV)*HS) = [q (NH,HS) | k (NKV,HS) | v (NKV,HS)] per position; v is untouched.
    /// HuggingFace's rotate-half convention: for a head x (HS even, half = HS/2) at position t,
    /// a_i = t * theta^(-2i/HS) for i < half, x'_i = x_i cos a_i - x_{i+half} sin a_i and
    /// x'_{i+half} = x_{i+half} cos a_i + x_i sin a_i. Angles in double, cos and sin rounded to fp32.
    virtual void rope_forward(void* qkv, int B, int T, int NH, int NKV, int HS, float theta) {
        (void)qkv, (void)B, (void)T, (void)NH, (void)NKV, (void)HS, (void)theta;
        missing("rope_forward");
    }
    /// The backward: the gradient dqkv (same layout) turned back in place (the transpose of the
    /// rotation: angle -a_i) on its q and k heads; v's gradient untouched.
    virtual void rope_backward(void* dqkv, int B, int T, int NH, int NKV, int HS, float theta) {
        (void)dqkv, (void)B, (void)T, (void)NH, (void)NKV, (void)HS, (void)theta;
        missing("rope_backward");
    }
    /// SwiGLU (Shazeer 2020): inp (N,2F) = [gate | up] per row, out (N,F) = silu(gate) * up with
    /// silu(g) = g / (1 + e^-g).
    virtual void swiglu_forward(void* out, const void* inp, int N, int F) {
        (void)out, (void)inp, (void)N, (void)F;
        missing("swiglu_forward");
    }
    /// dinp (N,2F) (overwritten) from dout (N,F): d gate = dout * up * silu'(gate), d up = dout * silu(gate).
    virtual void swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int F) {
        (void)dinp, (void)dout, (void)inp, (void)N, (void)F;
        missing("swiglu_backward");
    }
    /// Causal grouped-query attention (Ainslie et al. 2023): qkv (B,T,(NH + 2 NKV)*HS) = [q | k | v]
    /// per position, q with NH heads, k and v with NKV (dividing NH); query head h reads key/value
    /// head h / (NH/NKV). out (B,T,NH*HS), lse (B,NH,T) fp32 as attention_forward (scale
    /// 1/sqrt(HS)). NKV = NH is attention_forward itself, which the default calls; other NKV throw
    /// std::logic_error unless the backend implements them.
    virtual void attention_forward_gqa(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV,
                                       int HS) {
        if (NKV != NH) missing("attention_forward_gqa");
        attention_forward(out, lse, qkv, B, T, NH * HS, NH);
    }
    /// dqkv (B,T,(NH + 2 NKV)*HS) (overwritten) from dout (B,T,NH*HS): a key/value head's gradient
    /// is summed over the NH/NKV query heads that read it. Default as attention_forward_gqa.
    virtual void attention_backward_gqa(void* dqkv, const void* dout, const void* qkv, const void* out,
                                        const float* lse, int B, int T, int NH, int NKV, int HS) {
        if (NKV != NH) missing("attention_backward_gqa");
        attention_backward(dqkv, dout, qkv, out, lse, B, T, NH * HS, NH);
    }

    // ---- document masking (data.document_mask, data.reset_position_ids; docs/attention.md
    // "Document masking"). doc_start (B,T) device int32: for position t of row b, the position in
    // that row where its document starts, so 0 <= doc_start[b,t] <= t, nondecreasing along t and
    // equal across one document. Null: one document per row (the plain ops above, which the
    // defaults call); a non-null one on a backend without the op throws std::logic_error. ----
    /// attention_forward_gqa with block-causal masking: query t sees keys j with
    /// doc_start[b,t] <= j <= t only (Megatron-LM's --reset-attention-mask).
    virtual void attention_forward_doc(void* out, float* lse, const void* qkv, const int* doc_start, int B, int T,
                                       int NH, int NKV, int HS) {
        if (doc_start != nullptr) missing("attention_forward_doc");
        attention_forward_gqa(out, lse, qkv, B, T, NH, NKV, HS);
    }
    /// The backward of attention_forward_doc (attention_backward_gqa under the same mask).
    virtual void attention_backward_doc(void* dqkv, const void* dout, const void* qkv, const void* out,
                                        const float* lse, const int* doc_start, int B, int T, int NH, int NKV,
                                        int HS) {
        if (doc_start != nullptr) missing("attention_backward_doc");
        attention_backward_gqa(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS);
    }
    // ---- context parallelism (parallel.cp, docs/parallelism.md "Context parallelism"): each rank
    // holds the whole window's q|k|v (all-gathered) and computes its own query rows against it. ----
    /// attention_forward_doc (doc_start may be null: causal) for the query rows `rows` only: qkv
    /// (B,T,(NH + 2 NKV)*HS) and doc_start (B,T) are the whole window; out (B,rows.Tout,NH*HS) and
    /// lse (B,NH,rows.Tout) fp32 get rows [o0, o0 + nq). Default: std::logic_error naming the op.
    virtual void attention_forward_rows(void* out, float* lse, const void* qkv, const int* doc_start, int B, int T,
                                        int NH, int NKV, int HS, const AttentionRows& rows) {
        (void)out, (void)lse, (void)qkv, (void)doc_start, (void)B, (void)T, (void)NH, (void)NKV, (void)HS, (void)rows;
        missing("attention_forward_rows");
    }
    /// The backward of attention_forward_rows: dout, out (B,rows.Tout,NH*HS) and lse at rows [o0,
    /// o0 + nq); dqkv (B,T,(NH + 2 NKV)*HS) += this call's gradient: dQ of window rows [q0, q0 + nq),
    /// dK and dV of every key row (the caller zeroes dqkv before its first call).
    virtual void attention_backward_rows(void* dqkv, const void* dout, const void* qkv, const void* out,
                                         const float* lse, const int* doc_start, int B, int T, int NH, int NKV,
                                         int HS, const AttentionRows& rows) {
        (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)doc_start, (void)B, (void)T, (void)NH,
            (void)NKV, (void)HS, (void)rows;
        missing("attention_backward_rows");
    }
    /// Whether this backend has the two ops above (GPT refuses parallel.cp > 1 without them).
    virtual bool implements_attention_rows() const { return false; }
    /// rope_forward with the angle of position pos[b,t] ((B,T) device int32, >= 0) instead of t
    /// (Megatron-LM's --reset-position-ids: pos = t - doc_start; context parallelism: the global
    /// position). Null: pos = t.
    /// n_pos: a bound on the positions, pos < n_pos (the angle table's rows; T, or the window's
    /// length under context parallelism).
    virtual void rope_forward_pos(void* qkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                                  int n_pos) {
        (void)n_pos;
        if (pos != nullptr) missing("rope_forward_pos");
        rope_forward(qkv, B, T, NH, NKV, HS, theta);
    }
    /// rope_backward with positions pos as rope_forward_pos.
    virtual void rope_backward_pos(void* dqkv, const int* pos, int B, int T, int NH, int NKV, int HS, float theta,
                                   int n_pos) {
        (void)n_pos;
        if (pos != nullptr) missing("rope_backward_pos");
        rope_backward(dqkv, B, T, NH, NKV, HS, theta);
    }
    /// encoder_forward_vocab with the learned position of row pos[b,t] ((B,T) device int32 in
    /// [0, seq_len): global positions under context parallelism) instead of t. Null: pos = t.
    virtual void encoder_forward_pos(void* out, const int* inp, const int* pos, const void* wte, const void* wpe,
                                     int B, int T, int C, int v0, int nv) {
        if (pos != nullptr) missing("encoder_forward_pos");
        encoder_forward_vocab(out, inp, wte, wpe, B, T, C, v0, nv);
    }
    /// encoder_backward_vocab with dwpe[pos[b,t]] += dout[b,t] (deterministic, as the vocab form).
    virtual void encoder_backward_pos(void* dwte, void* dwpe, const void* dout, const int* inp, const int* pos,
                                      int B, int T, int C, int v0, int nv) {
        if (pos != nullptr) missing("encoder_backward_pos");
        encoder_backward_vocab(dwte, dwpe, dout, inp, B, T, C, v0, nv);
    }

    // ---- Mixture of experts (model.moe; docs/model.md "Mixture of experts"; model/moe.hpp, the
    // pieces and their sources; model/moe_layer.hpp, the buffers). The defaults throw
    // std::logic_error naming the op; implements_moe() says whether a backend has them. ----
    virtual bool implements_moe() const { return false; }
    /// Whether moe_backward / moe_dispatch_backward honour MoeShape::aux_f (the balance loss's
    /// fractions over a larger token set: MoE under context parallelism). Without, the model refuses
    /// MoE at cp > 1 with a balance loss (GPT::Impl::check_moe).
    virtual bool implements_moe_aux_fractions() const { return false; }
    /// One MoE layer's forward for x (N,C): router (logits, scores, top-k ids, gates renormalized
    /// over the k), the dropless dispatch plan, the grouped rows a.xg, every expert's SwiGLU FFN on
    /// its rows (a.gu, a.h, a.yg), and, when `combine`, out (N,C) += sum_j gates[n,j] * expert
    /// output (out holds the shared experts' output, or zeros). Returns the load-balancing loss
    /// alpha * E * sum_e f_e P_e over the N rows (host float; 0 when alpha = 0).
    virtual float moe_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* out, const void* x,
                              const void* w_router, const void* w13, const void* w2, bool combine) {
        (void)s, (void)a, (void)w, (void)out, (void)x, (void)w_router, (void)w13, (void)w2, (void)combine;
        missing("moe_forward");
    }
    /// Its backward from dout (N,C) = d out: dx (N,C) OVERWRITTEN with d x through the experts and
    /// the router; dw_router (E,C), dw13 (E,2F,C), dw2 (E,C,F) +=. aux_scale multiplies the
    /// balance loss's gradient (alpha times the loss scale dloss; 0: none); the loss is alpha * aux
    /// as moe_forward returns it, so its gradient is aux_scale / alpha times that of alpha * aux.
    virtual void moe_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx, void* dw_router,
                              void* dw13, void* dw2, const void* dout, const void* x, const void* w_router,
                              const void* w13, const void* w2, float aux_scale) {
        (void)s, (void)a, (void)w, (void)dx, (void)dw_router, (void)dw13, (void)dw2, (void)dout, (void)x,
            (void)w_router, (void)w13, (void)w2, (void)aux_scale;
        missing("moe_backward");
    }
    // The same layer in three steps each way, for expert parallelism (docs/parallelism.md "Expert
    // parallelism"): the model moves the grouped rows to the ranks that own their experts between
    // them. moe_forward = moe_dispatch_forward, moe_ffn_forward over every expert, moe_combine_forward.
    /// Router, dispatch plan and permute of moe_forward: a.scores, a.ids, a.gates, a.offsets (E+1),
    /// a.pos, w.counts (E), and a.xg (N*k,C) = the rows of x (N,C) grouped by expert. Returns the
    /// balance loss as moe_forward does.
    virtual float moe_dispatch_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, const void* x,
                                       const void* w_router) {
        (void)s, (void)a, (void)w, (void)x, (void)w_router;
        missing("moe_dispatch_forward");
    }
    /// The SwiGLU FFNs of E experts (model/moe.hpp moe_experts_forward): expert e's rows
    /// [offsets[e], offsets[e+1]) of xg (rows,C) into yg (rows,C), keeping gu (rows,2F), h (rows,F);
    /// w13 (E,2F,C), w2 (E,C,F) are those E experts' weights; offsets (E+1) device int32.
    virtual void moe_ffn_forward(void* yg, void* gu, void* h, const void* xg, const void* w13, const void* w2,
                                 const int* offsets, int E, int C, int F) {
        (void)yg, (void)gu, (void)h, (void)xg, (void)w13, (void)w2, (void)offsets, (void)E, (void)C, (void)F;
        missing("moe_ffn_forward");
    }
    /// out (N,C) += sum_j gates[n,j] * yg row a.pos[n*k+j] (yg (N*k,C) grouped as a.xg).
    virtual void moe_combine_forward(const MoeShape& s, const MoeActs& a, void* out, const void* yg) {
        (void)s, (void)a, (void)out, (void)yg;
        missing("moe_combine_forward");
    }
    /// The combine's backward: dyg (N*k,C) and w.dgates (N,k) OVERWRITTEN from dout (N,C).
    virtual void moe_combine_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dyg,
                                      const void* dout, const void* yg) {
        (void)s, (void)a, (void)w, (void)dyg, (void)dout, (void)yg;
        missing("moe_combine_backward");
    }
    /// moe_ffn_forward's backward (model/moe.hpp moe_experts_backward): dxg (rows,C), dgu, dh
    /// OVERWRITTEN; dw13 (E,2F,C), dw2 (E,C,F) +=.
    virtual void moe_ffn_backward(void* dxg, void* dw13, void* dw2, void* dgu, void* dh, const void* dyg,
                                  const void* xg, const void* gu, const void* h, const void* w13, const void* w2,
                                  const int* offsets, int E, int C, int F) {
        (void)dxg, (void)dw13, (void)dw2, (void)dgu, (void)dh, (void)dyg, (void)xg, (void)gu, (void)h, (void)w13,
            (void)w2, (void)offsets, (void)E, (void)C, (void)F;
        missing("moe_ffn_backward");
    }
    /// The dispatch's backward from dxg (N*k,C) = d a.xg and w.dgates: dx (N,C) OVERWRITTEN,
    /// dw_router (E,C) +=, the balance loss's gradient scaled by aux_scale as in moe_backward.
    virtual void moe_dispatch_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx,
                                       void* dw_router, const void* dxg, const void* x, const void* w_router,
                                       float aux_scale) {
        (void)s, (void)a, (void)w, (void)dx, (void)dw_router, (void)dxg, (void)x, (void)w_router, (void)aux_scale;
        missing("moe_dispatch_backward");
    }

    /// out[i] = gelu_tanh(inp[i]) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), Hendrycks & Gimpel 2016.
    virtual void gelu_forward(void* out, const void* inp, size_t n) = 0;
    /// dinp[i] = gelu_tanh'(inp[i]) * dout[i] (overwritten; dinp may alias dout).
    virtual void gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) = 0;

    /// Fused softmax + cross-entropy over the first V of Vp logits per row (padded columns ignored).
    /// logits (N,Vp), targets (N) int32, losses (N) fp32 = -log softmax(logits[n,:V])[targets[n]].
    /// If write_grad: logits is overwritten in place by dloss * (softmax - onehot(target)) on [0,V)
    /// and 0 on [V,Vp) — no probability buffer. dloss is d(total loss)/d(loss[n]), e.g. 1/(N*accum).
    virtual void fused_classifier(void* logits, float* losses, const int* targets, int N, int V,
                                  int Vp, float dloss, bool write_grad) = 0;

    // ---- vocab-parallel embedding and cross-entropy (tensor parallelism, docs/distributed.md "Tensor
    // parallelism"; Megatron-LM's VocabParallelEmbedding / vocab_parallel_cross_entropy, Shoeybi et
    // al. 2019). This rank holds rows [v0, v0 + nv) of the padded (Vp,C) token table, so its logits
    // are the (N,nv) columns [v0, v0 + nv) of the full (N,Vp). Every backend implements them
    // (CPU, CUDA, the dry run).
    /// out(B,T,C) = wte[inp - v0] + wpe[t] where v0 <= inp[b,t] < v0 + nv, else 0, so that the
    /// group's all-reduce sums exactly one non-zero term per position (bitwise the tp = 1 result).
    /// wte (nv,C) this rank's rows, wpe (maxT,C), inp (B,T) int32 with ids in [0, Vp).
    virtual void encoder_forward_vocab(void* out, const int* inp, const void* wte, const void* wpe, int B,
                                       int T, int C, int v0, int nv) = 0;
    /// dwte (nv,C) += scatter of dout over the positions whose token is in [v0, v0 + nv);
    /// dwpe (maxT,C) += sum over b of dout (every rank: dout is the same on all of the group).
    /// Deterministic (no atomics), like encoder_backward.
    virtual void encoder_backward_vocab(void* dwte, void* dwpe, const void* dout, const int* inp, int B,
                                        int T, int C, int v0, int nv) = 0;
    /// Pass 1 of the vocab-parallel softmax cross-entropy over this rank's logits (N,nv), act dtype,
    /// whose columns are [v0, v0 + nv) of the padded vocab; columns at or above V are padding and
    /// ignored. stats (N,3) fp32 per row: the local max m over valid columns, s = sum exp(x - m) over
    /// them, and the target's logit if v0 <= targets[n] < v0 + nv, else 0. A row with no valid
    /// column here gets m = -inf, s = 0.
    virtual void classifier_partial(float* stats, const void* logits, const int* targets, int N, int nv,
                                    int v0, int V) = 0;
    /// Pass 2, after the group all-gathered every rank's stats into all (tp,N,3) fp32 in rank order:
    /// M = max_r m_r, S = sum_r s_r exp(m_r - M) (summed in rank order), losses (N) fp32 =
    /// M + log S - sum_r t_r. If write_grad: logits (N,nv) is overwritten by
    /// dloss * (exp(x - M) / S - onehot(target)) on valid columns and 0 on padding (as fused_classifier).
    virtual void classifier_finish(void* logits, float* losses, const float* all, int tp, const int* targets,
                                   int N, int nv, int v0, int V, float dloss, bool write_grad) = 0;

    // ---- optimizer and norms ----
    /// AdamW (Loshchilov & Hutter 2019), PyTorch's update order, on n elements:
    ///   g = grads*grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    ///   w = w - lr*weight_decay*w; w = w - lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps);
    /// w is `master` (fp32) when non-null, written back to `params` in act dtype; when master is null,
    /// params must be fp32 and are updated in place. t >= 1 is the step count. index0 is element 0's
    /// index in the flat parameter buffer: it keys the stochastic rounding of bf16 params, so the
    /// rounding does not depend on how an update is split into calls (model/adamw_math.hpp holds the
    /// arithmetic every backend shares).
    virtual void adamw_update(void* params, float* master, const void* grads, float* m, float* v,
                              size_t n, float lr, float beta1, float beta2, float eps,
                              float weight_decay, float grad_scale, int t, size_t index0) = 0;
    /// out[0] (device fp32) = (accumulate ? out[0] : 0) + sum_i x[i]^2, with fp32 or wider accumulation.
    virtual void norm_squared(float* out, const void* x, size_t n, bool accumulate) = 0;
    /// x[i] *= s for i < n (act dtype).
    virtual void scale(void* x, float s, size_t n) = 0;

protected:
    /// Throws std::logic_error: "<backend>: <op> is not implemented".
    [[noreturn]] void missing(const char* op) const {
        throw std::logic_error(std::string(name()) + " backend: " + op + " is not implemented");
    }
    /// The host waits for e through the waiter set with set_host_waiter (polling query_event), else
    /// synchronize_event(e). Errors: the waiter's (CommError on its deadline), the backend's.
    void host_wait_event(Event e, const std::string& what) {
        if (host_waiter_) host_waiter_([this, e] { return query_event(e); }, what);
        else synchronize_event(e);
    }
    /// Backends call this after allocating (+bytes) or freeing (-bytes) device memory of their own.
    void note_internal_memory(std::ptrdiff_t delta_bytes) {
        internal_bytes_ = static_cast<size_t>(static_cast<std::ptrdiff_t>(internal_bytes_) + delta_bytes);
        if (listener_ != nullptr) listener_->internal_memory_changed(delta_bytes);
    }

private:
    InternalMemoryListener* listener_ = nullptr;
    size_t internal_bytes_ = 0;
    HostWaiter host_waiter_;
};

}  // namespace llmtrain
