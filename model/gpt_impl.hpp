// model/gpt_impl.hpp — the GPT's private state, shared by model/gpt.cpp (the stack: embedding,
// layer range, head, loss, the trainer's helpers) and model/gpt_block.cpp (one transformer block
// built from the architecture's pieces, model/arch.hpp). Not part of the public interface.
//
// Buffers of one activation context, one per micro-batch in flight (N = B*T rows, act dtype unless
// noted):
//   res[i]    (N,C)  the residual stream entering local layer i; res[n] leaves the range   activations
//   acts[i]          what layer i keeps for backward (LayerActs below)                    activations
//   tokens    (N) int32: the micro-batch's token ids (first stage only)                   activations
//   doc_start, pos (N) int32: document starts and positions (document masking; pos with cp) activations
//   lnf (N,C), lnf_mean (N, LayerNorm only)/rstd (N) fp32, logits (N,Vp), losses (N) fp32 (last stage) activations
// and, shared by the contexts:
//   recompute        one LayerActs shared by all checkpointed layers                      workspace
//   tmp (N,C)        attproj / fcproj outputs, consumed at once by the residual adds       workspace
//   dres (N,C), dbuf_c (N, max(C, Ct)), dbuf_4c (N, max(mlp_in, qkv) columns), with SwiGLU dbuf_f (N,Ft):
//                    backward gradients of activations                                    workspace
// Checkpointing: the first checkpoint_layers (else floor(ratio * n)) layers of the range keep only
// res[i] (their input) and recompute their forward into `recompute` just before their backward.
// Parameters and gradients come from a ParamStore one unit at a time (model/param_store.hpp):
// acquired before a unit is used, released after; grads_done(u) once a unit's backward is over.
// Tensor parallelism (GPTOptions::tp, docs/distributed.md "Tensor parallelism"): the layout is this TP
// rank's; qkv, atty, the attention's lse and the MLP's buffers hold its NH/tp query heads, NKV/tp
// key/value heads and F/tp columns, and logits its Vp/tp vocabulary columns. Megatron's f/g: the
// row-parallel matmuls (attention and MLP output projections) give partial sums that are
// all-reduced in forward, and the input gradients of the column-parallel ones (q|k|v, the MLP's
// input, the LM head) are all-reduced in backward.
// Sequence parallelism (GPTOptions::sequence_parallel, Korthikanti et al. 2022): this rank keeps
// only its R = N/tp rows [tp_rank*R, (tp_rank+1)*R) of the flattened (B*T) rows in res, the norm
// outputs (and their statistics) and res2, so those buffers above are (R,C) / (R); the norm
// outputs are all-gathered into `gath` (N,C workspace) before the column-parallel matmuls (and
// again in backward), and the row-parallel partial sums are reduce-scattered instead of
// all-reduced; the backward uses the conjugates. The norms' gradients, computed from R rows, are
// summed over the group through `lng` (4C workspace) at the end of each unit's backward.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "model/arch.hpp"
#include "model/gpt.hpp"
#include "model/moe_ep_buffers.hpp"

namespace llmtrain {

/// What a transformer layer keeps for backward (Korthikanti et al. 2022 count these per token).
/// Ct = NH*HS/tp, Qt = (NH + 2 NKV)*HS/tp, Ft = F/tp, Mt = Ft (GELU) or 2Ft (SwiGLU): this TP rank's
/// attention channels, q|k|v columns, MLP columns and MLP-input columns.
struct LayerActs {
    void* ln1 = nullptr;       // (R,C)  first norm's output
    float* ln1_mean = nullptr; // (R)    LayerNorm only
    float* ln1_rstd = nullptr; // (R)
    void* qkv = nullptr;       // (N,Qt) this rank's [q | k | v] (rotated, with rotary positions)
    void* qk_pre = nullptr;    // (N,(NHt+NKVt)*HS) with model.qk_norm: q|k before their norm
    float* qk_rstd = nullptr;  // (N,NHt+NKVt) with model.qk_norm: each head's 1/rms
    void* atty = nullptr;      // (N,Ct) attention output, before the output projection
    float* att_lse = nullptr;  // (B,NHt,T)
    void* res2 = nullptr;      // (R,C)  x + attproj
    void* ln2 = nullptr;       // (R,C)
    float* ln2_mean = nullptr; // (R)    LayerNorm only
    float* ln2_rstd = nullptr; // (R)
    void* fch_pre = nullptr;   // (N,Mt) the MLP input matmul's output: before GELU, or [gate | up]
    void* fch = nullptr;       // (N,Ft) GELU(fch_pre) or silu(gate) * up: the output projection's input
    MoeActs moe;               // with model.moe: the router's and experts' buffers (model/moe_layer.hpp)
    MoeEpActs moe_ep;          // with parallel.ep > 1: the received rows and local experts' buffers
};

/// One micro-batch's activations between its forward and its backward (see the header comment).
struct Context {
    std::vector<void*> res;       // n_local + 1 buffers (R,C)
    std::vector<LayerActs> acts;  // n_local; checkpointed layers point at the shared `recompute`
    int* tokens = nullptr;        // (N) first stage
    int* doc_start = nullptr;     // (N) int32, with doc_mask: model/documents.hpp (null: causal)
    int* pos = nullptr;           // (N) int32, with doc_positions: position inside the document; with cp
                                  // without them the rows' window positions (null: t)
    void *lnf = nullptr, *logits = nullptr;  // logits (N,Vpt): this TP rank's vocabulary columns
    float *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr;
    bool have_logit_grad = false;
    bool pos_set = false;  // cp without doc_positions: pos holds the rows' window positions (GPT::forward)
    bool docs_set = false; // doc_start / pos set for the next forward (GPT::set_documents, cp_take)
    float dloss = 0.0f;    // the forward's loss scale (d loss / d per-position loss): MoE's balance loss gradient
    double moe_aux = 0.0;  // with model.moe: the sum of this range's layers' balance losses (forward)
    int* moe_load_dst = nullptr;  // with model.moe, set by a training GPT::forward: (n_local, E+1) host int32 the
                                  // forward copies each layer's dispatch offsets to (null: not recorded)
    std::vector<double> moe_f;    // MoE with cp: (n_local, E) the window's assignment fractions of each layer's
                                  // last forward, for its balance loss's gradient (gpt_moe.cpp moe_cp_aux)
};

/// Element offset of a tensor from the start of its unit; kNoTensor where the architecture has none.
constexpr size_t kNoTensor = std::numeric_limits<size_t>::max();

/// Element offsets of one layer's tensors from the start of its unit (by role; packed groups by
/// their first tensor: q_proj for q|k|v, gate_proj for gate|up).
struct LayerParams {
    size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
    size_t router = kNoTensor, w13 = kNoTensor, w2 = kNoTensor;  // model.moe: router, experts' [gate; up], down
    size_t qnorm = kNoTensor, knorm = kNoTensor;  // model.qk_norm: q_norm, k_norm weights (HS)
};

inline size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct GPT::Impl {
    GPTConfig cfg;
    GPTOptions opt;
    ParamLayout layout;
    ArchSpec spec;  // the block's pieces (model/arch.hpp)
    Allocator& alloc;
    Ops& ops;
    size_t es;  // bytes per act-dtype element
    TensorParallel* tp = nullptr;  // null or a group of one: no collectives
    int ntp = 1, tp_rank = 0;      // TP group size and this rank's index
    int Ct = 0, NHt = 0, NKVt = 0, Ft = 0;  // NH*HS/tp, NH/tp, NKV/tp, F/tp
    int Qt = 0, Mt = 0;            // q|k|v columns, MLP-input columns (this rank's)
    int Vpt = 0, v0 = 0;           // Vp/tp vocabulary rows of wte from row v0
    int n_local = 0, n_ckpt = 0;
    bool first = false, last = false;
    bool sp = false;  // sequence parallelism (needs a group of tp > 1)
    int R = 0;        // rows of the residual stream this rank holds: N/tp with sp, else N

    ParamStore* store = nullptr;
    std::unique_ptr<FullParamStore> own_store;  // when no store was given
    std::vector<LayerParams> lp;  // per local layer, unit-relative
    size_t wte = 0, wpe = kNoTensor;  // in unit 0 (wpe: learned positions only)
    size_t lnfw = 0, lnfb = kNoTensor;  // in unit n_layer + 1
    size_t lm_head = kNoTensor;   // untied head, in unit n_layer + 1
    int u_lnf = 0;                // unit of the final norm

    std::vector<Context> ctxs;
    LayerActs recompute;
    void *tmp = nullptr, *dres = nullptr, *dbuf_c = nullptr, *dbuf_4c = nullptr, *dbuf_f = nullptr;
    void *gath = nullptr, *lng = nullptr;  // sp only: (N,C) gathered rows; (4C) norm grads of R rows
    // Context parallelism (GPTOptions::cp, model/gpt_cp.cpp): opt.T is this rank's Tl = Tw/cp rows of
    // each Tw-token window, chunks cp_rank and 2cp-1-cp_rank of its 2cp chunks (load balance for the
    // causal mask). cp_full (B,Tw,Qt): the window's q|k|v all-gathered; cp_stage (cp,B,Tl,Qt): the
    // gather's rank-major order; cp_dfull (B,Tw,Qt): d q|k|v of this rank's queries (workspace).
    TensorParallel* cpg = nullptr;  // null: no context parallelism
    int ncp = 1, cp_rank = 0, Tw = 0;
    void *cp_full = nullptr, *cp_stage = nullptr, *cp_dfull = nullptr;
    // The backward's gather of local layer cp_next_layer's q|k|v into cp_stage, started a layer
    // ahead; cp_full_of: the q|k|v whose window cp_full holds (null: none); GPT::cp_prefetches'
    // counts (cp_attention_backward).
    std::unique_ptr<TpPending> cp_next;
    int cp_next_layer = -1;
    const void* cp_full_of = nullptr;
    uint64_t cp_layers = 0, cp_prefetched = 0, cp_ready = 0, cp_kept = 0;
    std::vector<int> cp_host;  // (2,B,Tl) this rank's inputs then targets, taken from the window's
    std::vector<int> cp_pos;   // (B,Tl) the window positions of this rank's rows (every context's c.pos)
    int *tok_dev = nullptr, *tgt_dev = nullptr;  // (B,T) for the whole-model helpers
    std::vector<int> doc_host;  // (2,B,Tw) doc_start and window positions, then (B,T) pos: host, per micro-batch
    /// Context c's documents from window (B,Tw) host int32, the micro-batch's whole windows:
    /// c.doc_start (B,Tw) and, with doc_positions, c.pos (B,T) (this rank's rows' positions
    /// restarted at each document); marks c.docs_set. With doc_mask or doc_positions only
    /// (gpt_documents.cpp).
    void window_documents(Context& c, const int* window);
    /// GPT::forward's documents of context ctx (number for the message): those set for it
    /// (c.docs_set, cleared here), else on the first stage without cp from its ids (host_tokens
    /// (B,T) host when given, else copied back from tokens (B,T) device: a host wait). Nothing
    /// without doc_mask and doc_positions. Errors: std::logic_error on another stage or with cp
    /// when none were set (GPT::set_documents).
    void forward_documents(Context& c, int ctx, const int* tokens, const int* host_tokens);

    /// The whole-model helpers' batch: inputs and targets (B,T) host int32 (the windows with cp)
    /// into tok_dev and tgt_dev (this rank's rows with cp, via cp_take). Returns the host ids of
    /// what was uploaded (B, act rows per batch row).
    const int* upload_batch(const int* inputs, const int* targets);

    // ---- context parallelism (gpt_cp.cpp) ----
    /// Window row of local row t (in [0, Tl)) of CP rank r (default: this rank): chunk r for
    /// t < Tl/2, else chunk 2cp-1-r.
    int cp_window_row(int t, int r = -1) const;
    /// This rank's rows (B,T) of window (B,Tw) host int32: its two chunks with cp, else the window
    /// itself (GPT::window_rows, cp_take, window_documents).
    void take_rows(const int* window, int* rows) const;
    /// The inverse on this rank: the local row of window row w (in [0, Tw)), or -1 when another
    /// CP rank holds it.
    int cp_local_row(int w) const;
    /// The whole-model helpers' start with cp: this rank's rows of the window's inputs and targets
    /// ((B,Tw) host int32; targets may be null) into tok_dev / tgt_dev, and with doc_mask or
    /// doc_positions c's documents from the window's inputs (window_documents; without
    /// doc_positions GPT::forward gives c.pos the rows' window positions, cp_pos). Returns this
    /// rank's inputs (B,Tl) on the host.
    const int* cp_take(Context& c, const int* inputs, const int* targets);
    /// Attention of this rank's rows against the window: a.qkv (B,Tl,Qt) all-gathered into cp_full,
    /// then the two chunks' rows (Ops::attention_forward_rows) into a.atty and a.att_lse.
    void cp_attention_forward(Context& c, const LayerActs& a);
    /// Its backward for local layer i: dbuf_4c (B,Tl,Qt) = d a.qkv from dbuf_c = d a.atty, the
    /// window's d q|k|v of each rank's queries summed over the group (reduce-scatter, rank order).
    /// Starts the gather of layer i-1's kept q|k|v (not a recomputed layer) before its attention
    /// backward, for layer i-1 to wait on; gathers nothing when cp_full still holds the window.
    void cp_attention_backward(Context& c, int i, const LayerActs& a);
    /// cp_stage (cp,B,Tl,Qt) rank-major <-> cp_full-shaped (B,Tw,Qt) window order, copied by chunks.
    void cp_permute(void* window, void* stage, bool to_window);
    float* logit_row = nullptr;                  // (Vp) fp32 for logits_at
    float* logit_part = nullptr;                 // (Vpt) fp32, this rank's part of it (tp > 1)
    float *cls_stats = nullptr, *cls_all = nullptr;  // (N,3), (tp,N,3) fp32: vocab-parallel loss (tp > 1)
    std::vector<void*> owned;                    // every allocation, released in ~Impl
    // The whole-model helpers' losses: one pinned (B*T) fp32 slot per micro-batch queued by
    // forward_backward and not yet taken (grown on demand, kept), and the event after the last copy.
    std::vector<float*> loss_host;
    int loss_pending = 0;
    double aux_pending = 0.0;  // MoE balance losses of the training forwards not yet taken
    // MoE: one (n_local, E+1) host int32 slot of dispatch offsets per micro-batch queued by
    // a training GPT::forward and not yet taken (GPT::take_moe_load; grown on demand, kept).
    // Page-locked (Ops::malloc_host, as loss_host) so the copies stay asynchronous inside a
    // pipeline stage; freed in ~Impl.
    std::vector<int*> load_host;
    int load_pending = 0;
    Event loss_ready = nullptr;

    /// Validates the sequence-parallel options and derives this rank's widths (gpt.cpp).
    Impl(const GPTConfig& c, const GPTOptions& o, Allocator& a);
    ~Impl();

    // ---- TP / sequence-parallel helpers (gpt.cpp) ----
    /// Sum of buf (n act-dtype elements) over the TP group, in place (nothing without one).
    void tp_sum(void* buf, size_t n);
    /// This rank's rows (R,C) of an activation, whole: with sp, all-gathered into gath (N,C) in
    /// rank order (rank r's rows are rows [r*R, (r+1)*R) of the (B,T) flattening, so the
    /// concatenation is the (B,T,C) tensor); without, `local` itself (it has all N rows).
    const void* gather_rows(const void* local);
    /// The group's sum of the (N,C) partial sums in `part`: with sp, this rank's rows of it
    /// reduce-scattered into dst (R,C), returned; without, all-reduced in place (part returned).
    const void* sum_rows(void* part, void* dst);
    /// Where a norm's k-th gradient (k-th C block of lng) goes: with sp the scratch lng (this
    /// rank's rows only, summed by add_ln_grads), else g's tensor at `off`; null for kNoTensor.
    void* ln_grad(void* g, size_t off, int k);
    /// With sp: the (n * C) norm gradients in lng, each from this rank's rows, summed over the
    /// group (all-reduce, rank order: every rank gets the same bits) and added to g's tensors at
    /// offs (in lng's order; kNoTensor entries skipped, they hold no slot); lng is then zeroed for
    /// the next unit. Nothing without sp.
    void add_ln_grads(void* g, const std::vector<size_t>& offs);

    size_t n_rows() const { return static_cast<size_t>(opt.B) * opt.T; }
    float* loss_slot(size_t k);
    void record_ready();
    float mean_loss(const float* l) const;
    void* get(MemCategory cat, size_t bytes);

    /// Element `off` of a unit's parameters (or gradients) at `base`; null for kNoTensor.
    const char* P(const void* base, size_t off) const {
        return off == kNoTensor ? nullptr : static_cast<const char*>(base) + off * es;
    }
    char* G(void* base, size_t off) const { return off == kNoTensor ? nullptr : static_cast<char*>(base) + off * es; }
    int unit_of_local(int i) const { return 1 + opt.l0 + i; }
    Context& context(int ctx);

    // ---- the block's pieces (gpt_block.cpp), chosen by spec ----
    /// One block holding a LayerActs set, carved at 256-byte boundaries (local heads and columns).
    LayerActs make_acts(MemCategory cat);
    /// out (rows,C) = the architecture's norm of x (LayerNorm with weight w and bias b, or RMSNorm
    /// with weight w); mean (LayerNorm only) and rstd (rows) fp32 saved for backward.
    void norm_forward(void* out, float* mean, float* rstd, const void* x, const void* w, const void* b, int rows);
    /// residual = a + b, then out = the norm of residual (one fused op).
    void residual_norm_forward(void* residual, void* out, float* mean, float* rstd, const void* a, const void* b,
                               const void* w, const void* bias, int rows);
    /// dx (rows,C) +=, dw (C) +=, db (C) += (LayerNorm only) from dout.
    void norm_backward(void* dx, void* dw, void* db, const void* dout, const void* x, const void* w,
                       const float* mean, const float* rstd, int rows);
    /// A block's linear layer, as Ops::matmul_forward; with opt.fp8 on, the FP8 GEMM
    /// (Ops::matmul_forward_fp8) and GELU as its own op after it (docs/fp8.md). The LM head stays in
    /// the compute dtype.
    void linear_forward(void* out, void* pre_gelu, const void* inp, const void* w, const void* b, int N, int C, int OC);
    /// As Ops::matmul_backward; with opt.fp8 on, Ops::matmul_backward_fp8 and then GELU's backward
    /// in place on dinp.
    void linear_backward(void* dinp, void* dw, void* db, const void* dout, const void* inp, const void* w,
                         const void* pre_gelu, int N, int C, int OC);
    /// Norm-gradient slots per norm in lng: 2 (weight, bias) with biases, else 1.
    int norm_slots() const { return spec.bias ? 2 : 1; }
    /// Forward of local layer i (parameters at w) from c.res[i] into the activations `a`; writes
    /// c.res[i+1] when write_out.
    void layer_forward(Context& c, int i, const void* w, const LayerActs& a, bool write_out);
    /// Backward of local layer i (parameters at w, gradients accumulated at g): on entry
    /// dres = d(c.res[i+1]), on exit dres = d(c.res[i]).
    void layer_backward(Context& c, int i, const void* w, void* g, const LayerActs& a);

    // ---- mixture of experts (gpt_moe.cpp; docs/model.md "Mixture of experts") ----
    MoeWork moe_work;  // scratch shared by the layers (workspace)
    /// What MoE does not run with yet: a backend without Ops::implements_moe, cp (ncp > 1) with a
    /// balance loss on a backend without Ops::implements_moe_aux_fractions, training.fp8.
    /// std::invalid_argument naming it.
    void check_moe(int ncp) const;
    /// With sp: (N,C) workspace — the routed experts' output over every row (the shared experts' sum
    /// in this rank's rows) in forward, the whole d out and then d ln2's rows in backward.
    void* moe_rows = nullptr;
    /// With cp and a balance loss: (2E) fp32 device scratch for moe_cp_aux's all-reduce.
    float* moe_cp_stats = nullptr;
    /// Context parallelism: layer i's balance loss over the whole window (this rank holds N of its
    /// ncp·N rows): each rank's per-expert assignment counts and score sums (from a.scores, a.ids)
    /// all-reduced over the CP group (fp32, rank order), c.moe_f's row i = the window's fractions
    /// f_e; returns alpha E sum_e f_e P_e, the value one rank holding the window computes (within
    /// fp32 rounding of the score sums). A host wait for the scores.
    float moe_cp_aux(Context& c, int i, const MoeActs& a);
    /// The layers' MoE shape (N = B*T rows, expert width Fe, the config's router and alpha); with
    /// local layer i >= 0 and a sigmoid router also that layer's selection bias (moe_bias).
    MoeShape moe_shape(int i = -1) const;
    /// Sigmoid routers: (n_local, E) fp32 selection biases (workspace; zeros until GPT::set_moe_bias).
    float* moe_bias = nullptr;
    /// One layer's MoeActs carved from one block of `cat` (256-byte boundaries).
    MoeActs make_moe_acts(MemCategory cat);
    /// moe_work's buffers (MemCategory::workspace).
    void make_moe_work();
    /// The MLP half of layer i with MoE, from a.ln2 (N,C): the shared experts (a dense SwiGLU of
    /// width F, when F > 0) plus the routed experts' combine into tmp, then c.res[i+1] = a.res2 +
    /// tmp and c.moe_aux += the layer's balance loss (only when write_out; a recomputation runs the
    /// router and the experts for their activations only).
    void moe_mlp_forward(Context& c, int i, const void* w, const LayerActs& a, bool write_out);
    /// Its backward from dres = d c.res[i+1] (R,C): returns d a.ln2 (R,C: this rank's rows; in
    /// dbuf_c or moe_rows); the balance loss's gradient scaled by alpha * c.dloss * N (dloss is per
    /// position, the balance loss per micro-batch). Under tp the routed experts run on every rank
    /// over the whole (N,C) rows (gathered with sp): their gradients and d ln2 are whole; the
    /// shared experts' are split as the dense MLP's and summed over the group.
    const void* moe_mlp_backward(Context& c, int i, const void* w, void* g, const LayerActs& a);
    /// The next free slot of load_host ((n_local, E+1) int32), load_pending counted.
    int* load_slot();

    // ---- expert parallelism (gpt_moe_ep.cpp; docs/parallelism.md "Expert parallelism") ----
    ExpertParallel* epg = nullptr;  // null: no expert parallelism
    int nep = 1, ep_rank = 0;       // ep group size and this rank's index
    MoeEpWork moe_ep_work;          // scratch shared by the layers (workspace)
    /// Takes opt.ep (a group of > 1) after checking model.moe and E % P; std::invalid_argument
    /// naming parallel.ep otherwise.
    void set_expert_parallel(ExpertParallel* ep);
    /// One layer's MoeEpActs (empty without ep), and moe_ep_work's buffers.
    MoeEpActs make_moe_ep_acts(MemCategory cat);
    void make_moe_ep_work();
    /// Local layer i: moe_forward's work with the experts spread over the ep group: dispatch here, rows to their
    /// experts' ranks, this rank's experts on what it received, outputs back, combine into out
    /// when write_out. Returns the balance loss.
    float moe_ep_forward(int i, const void* w, const LayerActs& a, const void* x, void* out, bool write_out);
    /// Its backward for shape s: dx (N,C) OVERWRITTEN from dout; router, w13, w2 gradients += (this
    /// rank's experts). x (N,C): the layer's input rows (a.ln2, or gathered with sp).
    void moe_ep_backward(const MoeShape& s, int i, const void* w, void* g, const LayerActs& a, const void* x,
                         void* dx, const void* dout, float aux_scale);
};

}  // namespace llmtrain
