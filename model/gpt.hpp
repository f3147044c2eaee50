// model/gpt.hpp — the model (GPT-2 or Llama, GPTConfig::arch): parameters, activations, and
// forward/backward over a layer range. The block's pieces come from model/arch.hpp.
//
// docs/design.md "Forward and backward over a layer range": one micro-batch runs over layers
// [l0, l1). The first stage (l0 == 0) takes token ids and runs the embeddings; the last stage
// (l1 == n_layer) runs ln_f, the LM head tied to wte, and the fused softmax-cross-entropy; other
// stages take and return (B,T,C) activations. A process without a pipeline owns [0, n_layer).
// Activation checkpointing: floor(ratio * (l1-l0)) layers keep only their input and recompute their
// internals in backward. Activation contexts: each micro-batch in flight between its forward and
// its backward (a pipeline stage holds up to min(P - s, m) under 1F1B) keeps its activations, its
// token ids and its logits in a context of its own; the backward workspaces are shared. Models:
// GPT-2 (Radford et al. 2019): learned positions, pre-LN blocks, causal MHA, GELU(tanh), 4x MLP,
// final LN; Llama (Touvron et al. 2023): pre-RMSNorm blocks, rotary positions, grouped-query
// attention, SwiGLU MLP, no biases, tied or untied head. Vocab padded to a multiple of 128.
// Tensor parallelism (GPTOptions::tp; docs/distributed.md "Tensor parallelism"): each rank of a TP
// group holds its part of every split tensor (ParamLayout's TPSplit), runs n_head/tp query heads,
// n_kv_head/tp key/value heads and F/tp MLP columns, and Vp/tp vocabulary columns of the logits; the group's collectives go
// through model/tensor_parallel.hpp. With GPTOptions::sequence_parallel the residual stream, the
// LayerNorms and the residual adds also run on the rank's 1/tp of the B*T rows (Korthikanti et al.
// 2022).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/allocator.hpp"
#include "model/ops.hpp"
#include "model/param_layout.hpp"
#include "model/param_store.hpp"
#include "model/expert_parallel.hpp"
#include "model/tensor_parallel.hpp"

namespace llmtrain {

/// Run-time shape and memory options of one GPT instance.
struct GPTOptions {
    int B = 4;                      ///< micro_batch_size
    int T = 256;                    ///< sequence length per row (<= GPTConfig::seq_len)
    int l0 = 0, l1 = -1;            ///< layer range [l0, l1); l1 = -1 means n_layer
    float checkpoint_ratio = 0.0f;  ///< fraction of this range's layers recomputed in backward, [0,1]
    int shard_multiple = 1;         ///< ParamLayout padding (ZeRO group size * alignment)
    int checkpoint_layers = -1;     ///< layers recomputed in backward; >= 0 overrides checkpoint_ratio
    int contexts = 1;               ///< activation contexts: micro-batches in flight at once, >= 1
    /// The tensor-parallel group (not owned; it must outlive the GPT); null = no tensor parallelism
    /// (tp = 1). Every rank of the group builds its GPT with the same config and options and calls
    /// forward/backward and the helpers in the same order (they run the group's collectives).
    TensorParallel* tp = nullptr;
    /// Sequence parallelism (Korthikanti et al. 2022; docs/distributed.md "Tensor parallelism"), only
    /// with a tp group of size > 1: the residual stream, LayerNorms and residual adds run on this TP
    /// rank's N/tp rows of the N = B*T rows (contiguous: rows [tp_rank*N/tp, (tp_rank+1)*N/tp) of
    /// the (B,T) flattening), all-gathered before the column-parallel matmuls and reduce-scattered
    /// after the row-parallel ones. act_in / act_out / dact_* are then this rank's (N/tp, C) rows.
    bool sequence_parallel = false;
    /// The context-parallel group (not owned; model/gpt_cp.cpp, docs/parallelism.md "Context
    /// parallelism"); null or a group of one: none. With cp ranks, T stays the window's length: the
    /// whole-model helpers take (B,T) windows and this rank keeps T/cp rows of each (chunks i and
    /// 2cp-1-i of 2cp), so act_rows(), losses() and the layer-range API are (B,T/cp): a pipeline
    /// stage passes window_rows() of its windows' ids. Every context's positions are its rows'
    /// window positions, on every stage. Needs T a multiple of 2cp and a backend with
    /// Ops::attention_forward_rows. Every rank of the group calls forward/backward and the helpers
    /// alike.
    TensorParallel* cp = nullptr;
    /// The expert-parallel group (not owned; model/gpt_moe_ep.cpp, docs/parallelism.md "Expert
    /// parallelism"); null or a group of one: none. With P ranks, each MoE layer's rank r runs
    /// experts [r·E/P, (r+1)·E/P) on the rows the group's ranks route to them (all-to-all there and
    /// back); the store's layout holds only those experts (ParamLayout ep = P, ep_rank r), whose
    /// gradients the expert-data-parallel sum completes (parallel/ep_grads.hpp). Needs model.moe with
    /// P dividing n_experts. Every rank of the group calls forward/backward and evaluations alike.
    ExpertParallel* ep = nullptr;
    /// Documents inside a window (data.document_mask, data.reset_position_ids; docs/attention.md
    /// "Document masking"): doc_eos is the token id that ends a document (the dataset's eos_id), the
    /// boundaries model/documents.hpp finds from the token ids. doc_mask: attention stays inside a
    /// document (block-causal); doc_positions: positions (RoPE angles or learned rows) restart at 0
    /// at each document. Either needs doc_eos >= 0. Every layer reads the boundaries, so with the
    /// layer-range API each forward's context needs them from the whole windows (set_documents; the
    /// first stage without cp may leave that to forward, which finds them from its token ids).
    int doc_eos = -1;
    bool doc_mask = false;
    bool doc_positions = false;
    /// training.fp8 (docs/fp8.md): the blocks' linear layers through the backend's FP8 GEMMs
    /// (Ops::matmul_forward_fp8); the embedding, LM head, norms and attention stay in the compute
    /// dtype. The constructor refuses it when Ops::fp8_unsupported() says why not.
    Fp8Recipe fp8 = Fp8Recipe::off;
};

class GPT {
public:
    /// Allocates activations for (B,T). Parameters and gradients come from `store` (not owned; it must
    /// use a layout equal to ParamLayout(cfg, opt.shard_multiple, tp, tp rank) and outlive the GPT); without one the
    /// GPT owns a FullParamStore (params and grads: one buffer each, layout().total_numel() elements of
    /// ops.act_dtype(), MemCategory::params/grads). Errors: std::invalid_argument for bad shapes
    /// (T > seq_len, empty range, ratio outside [0,1], checkpoint_layers above the range's layers,
    /// contexts < 1; a tp that does not divide n_head or Vp, from ParamLayout; an architecture whose
    /// ops the backend does not implement (Ops::implements), naming model.arch; sequence_parallel
    /// without a group of tp > 1, or with B*T not a multiple of tp); std::runtime_error
    /// when out of memory.
    GPT(const GPTConfig& cfg, const GPTOptions& opt, Allocator& alloc, ParamStore* store = nullptr);
    ~GPT();
    GPT(const GPT&) = delete;
    GPT& operator=(const GPT&) = delete;

    const GPTConfig& config() const;
    const GPTOptions& options() const;
    const ParamLayout& layout() const;
    Ops& ops();
    Allocator& allocator();  ///< the allocator every buffer of this GPT comes from
    ParamStore& store();  ///< where the parameters and gradients live
    /// (layout().total_numel()) act dtype, device. Only with the GPT's own FullParamStore
    /// (std::logic_error otherwise).
    void* params();
    void* grads();   ///< same layout as params(); same condition

    /// GPT-2's init scheme for every architecture, computed on the host in fp32 from `seed` (so
    /// every backend gets identical weights): N(0, 0.02); the projections into the residual stream
    /// (c_proj / o_proj, down_proj) N(0, 0.02/sqrt(2*n_layer)); norm weights 1; biases 0; padded
    /// vocabulary rows 0 (model/arch.hpp's TensorInit). The whole model is drawn on every rank and each TP rank keeps its parts
    /// (ParamLayout::cut_local_flat), so any tp starts from the tp = 1 weights. Handed to the store
    /// (ParamStore::load_params).
    void init_params(uint64_t seed);
    /// grads() = 0 (own FullParamStore only, like grads()).
    void zero_grads();

    // ---- layer-range API (one micro-batch, in activation context ctx in [0, contexts)) ----
    /// Forward over [l0,l1) into context ctx. tokens (B,T) device int32 is used when l0 == 0 (copied
    /// into the context: the embedding gradient reads them), else act_in (act_rows(), C) (copied;
    /// (B,T,C) unless sequence_parallel). When
    /// l1 == n_layer, targets (B,T) device int32 gives losses(ctx) (B*T) fp32, and if `training`
    /// the logit gradient (scaled by dloss) is kept for backward(ctx). host_tokens (B,T) host int32,
    /// optional: the same ids as `tokens`, when the caller has them (it copied them to the device);
    /// the backend then prepares the embedding backward from them instead of copying the ids back
    /// (Ops::encoder_host_tokens).
    /// With doc_mask or doc_positions: the documents set_documents gave context ctx for this
    /// forward; on the first stage without cp, if none were set, those of `tokens` (from
    /// host_tokens, else read back). Errors: std::logic_error when none were set elsewhere.
    void forward(const int* tokens, const void* act_in, const int* targets, float dloss, bool training,
                 int ctx = 0, const int* host_tokens = nullptr);
    /// Documents of context ctx's next forward (doc_mask, doc_positions; nothing without them),
    /// on any stage: from `window` (B, window_length()) host int32, the micro-batch's whole
    /// windows' input ids (with cp the full windows, not this rank's rows), the window's document
    /// starts and, with doc_positions, the positions of this rank's rows restarted at each
    /// document, copied to the context (model/documents.hpp; gpt_documents.cpp). One call per
    /// forward; the backward of that forward reads them too. Errors: std::out_of_range for ctx.
    void set_documents(const int* window, int ctx = 0);
    /// Backward of context ctx's forward(training = true); the context is then free. dact_out
    /// (act_rows(), C) is the gradient of our output when l1 < n_layer (ignored at the last stage);
    /// dact_in (act_rows(), C) receives the gradient of act_in when l0 > 0. Parameter gradients are
    /// accumulated (with sequence_parallel the LayerNorms' are summed over the TP group here).
    void backward(const void* dact_out, void* dact_in, int ctx = 0);
    const void* act_out(int ctx = 0) const;  ///< (act_rows(), C) output of the range when l1 < n_layer
    /// Rows of act_in / act_out / dact_*: B*T, or B*T/tp with sequence_parallel (this TP rank's
    /// contiguous rows of the (B,T) flattening).
    size_t act_rows() const;
    /// The layer-range API's ids from whole windows: `window` (B, options().T x cp) host int32 ->
    /// `rows` (B, options().T) host int32, with cp this rank's rows of each window (chunks i and
    /// 2cp-1-i, the order of act_rows() and losses()); without cp a copy.
    void window_rows(const int* window, int* rows) const;
    const float* losses(int ctx = 0) const;  ///< (B*T) per-position losses, device, at the last stage
    /// (B,T,Vp/tp) act dtype, device, at the last stage: this TP rank's vocabulary columns
    /// [tp_rank * Vp/tp, ...) of the logits after forward(training = false) (no rank holds the full
    /// logits); after forward(training = true) their gradient (padded columns 0), consumed by backward().
    const void* logits(int ctx = 0) const;
    /// Queues the fp32 logits of position `pos` of row 0 of context ctx into out (Vp fp32, device;
    /// padded columns included) at the last stage, after a forward: a cast of this rank's columns,
    /// all-gathered from the TP group when tp > 1 (collective: every TP rank calls it). pos is a
    /// window position: with cp the CP rank holding it hands its row to the group (an fp32
    /// all-reduce in which the others add zeros: exact; collective over the CP group too).
    /// Errors: std::out_of_range for pos outside [0, the window's length); std::logic_error before
    /// the last stage.
    void logit_row(int ctx, int pos, float* out);
    /// Layers of this range that are recomputed in backward: the first checkpoint_layers, or
    /// floor(ratio * (l1-l0)).
    int num_checkpointed_layers() const;
    int num_contexts() const;

    // ---- whole-model helpers for the trainer (require l0 == 0 and l1 == n_layer) ----
    /// Queues one micro-batch: copies inputs/targets (B,T) host int32 to the device, runs forward +
    /// backward, accumulates grads scaled by dloss, and queues a copy of its B*T losses to pinned
    /// host memory (one slot per micro-batch until take_loss_sum). Never waits for the device.
    void forward_backward(const int* inputs, const int* targets, float dloss);
    /// The micro-batches queued since the last call: the sum, in double and in queue order, of each
    /// one's mean loss (its B*T fp32 losses summed in position order in double, divided by B*T and
    /// rounded to float). The host waits for the last loss copy through one event (never a
    /// device-wide synchronize); 0 when nothing was queued.
    double take_loss_sum();
    /// With model.moe: the sum over this range's layers of the load-balancing losses (alpha * E *
    /// sum_e f_e P_e, over the micro-batch's B*T rows, docs/model.md "Mixture of experts") of
    /// context ctx's last forward; 0 without MoE or when alpha = 0. They are part of the objective
    /// the backward differentiates (with the cross-entropy's dloss * B*T, i.e. per micro-batch), not
    /// of losses() or take_loss_sum().
    double moe_aux_loss(int ctx = 0) const;
    /// The sum of moe_aux_loss of the training forwards (forward_backward's, or a pipeline stage's
    /// forward with training = true) queued since the last call: this stage's layers only.
    double take_moe_aux_sum();
    /// With model.moe: counts (n_layer, E) int64, OVERWRITTEN (resized) with the tokens routed to
    /// each expert of each layer, layer-major, summed over the training forwards queued since the
    /// last call (each contributes B*T*top_k per layer: every (token, slot) pair counts once); a
    /// pipeline stage fills its layers' rows [l0, l1) and leaves the others 0 (a sum over the stages
    /// completes it). Waits for the queued copies of the dispatch offsets like take_loss_sum (one event).
    /// All zeros when nothing was queued; empty without MoE. Evaluations are not counted.
    void take_moe_load(std::vector<int64_t>& counts);
    /// With model.moe and router = "sigmoid": bias (n_layer, E) host fp32, layer-major (the whole
    /// model's: a pipeline stage takes its rows [l0, l1)), becomes each layer's selection bias (DeepSeek-V3's auxiliary-loss-free balancing, eq. 16: added to the
    /// scores for the top-k only, never to a gate or a gradient; zeros until set). Copied in stream
    /// order before the next forward. std::logic_error without a sigmoid router.
    void set_moe_bias(const float* bias);
    /// Mean loss of a micro-batch without gradients (waits for it on an event).
    float evaluate(const int* inputs, const int* targets);
    /// fp32 logits (V values, padding dropped) at position `pos` of row 0 after a forward of
    /// inputs (B,T) host int32; used for sampling (waits for them on an event). With tp > 1 the
    /// row is all-gathered from the group (collective). With cp the group runs the window's forward
    /// together (each rank its rows) and the rank holding window row `pos` hands its logits to the
    /// others (an fp32 all-reduce over the CP group in which the other ranks add zeros: exact), so
    /// every CP rank returns the same row (collective over the CP group). Errors:
    /// std::out_of_range for pos outside [0, window_length()).
    std::vector<float> logits_at(const int* inputs, int pos);
    /// The per-position losses of context 0's last forward (evaluate) in window order: out
    /// (B, window_length()) fp32 host, row-major. With cp every rank's (B,T/cp) rows are
    /// all-gathered from the CP group (collective: every CP rank calls it) and put back at their
    /// window positions; the gather borrows a context-parallel workspace buffer (none added).
    /// Waits for the device. Needs the last stage (std::logic_error otherwise).
    void window_losses(float* out);
    /// T of the whole-model helpers' (B,T) inputs: options().T, or with cp the window's length
    /// (cp x options().T, options().T being this rank's rows of a window).
    int window_length() const;
    /// Context parallelism's backward since the GPT was built (model/gpt_cp.cpp): [0] the layers
    /// it ran, [1] of them those whose q|k|v window was gathered a layer ahead, [2] of these the
    /// gathers already complete when needed, as far as the Comm can tell (MPI's test; 0 where it
    /// cannot, as NCCL's), [3] the layers whose window was still there from their forward (a
    /// recomputed layer, the top layer right after the forward): no gather. The rest, [0] - [1] -
    /// [3], gathered when needed. All 0 without cp.
    std::array<uint64_t, 4> cp_prefetches() const;
    /// Start-up warm-up: makes the loss slots of `micro_batches` per step and runs one forward and
    /// backward on zero tokens, so that the backend's lazy set-up (scratch, encoder buckets,
    /// cuBLASLt plans, attention plans, kernel loading) happens before the first step. Leaves junk
    /// in the gradients (the step's zeroing clears them); waits for the device at its end.
    void warm_up(int micro_batches);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// Training FLOPs per token, docs/reference.md "Training FLOPs and MFU": 6*N_params + 6*n_layer*T*n_embd
/// (fwd + bwd, no recompute), N_params without an untied Llama's input table (ArchSpec::flops_per_token).
double flops_per_token(const GPTConfig& cfg, size_t num_parameters, int T);

}  // namespace llmtrain
