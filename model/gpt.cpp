// model/gpt.cpp — GPT-2 forward/backward over a layer range, with per-layer activation checkpointing.
//
// Buffers of one activation context, one per micro-batch in flight (N = B*T rows, act dtype unless
// noted):
//   res[i]    (N,C)  the residual stream entering local layer i; res[n] leaves the range   activations
//   acts[i]          what layer i keeps for backward (LayerActs below)                    activations
//   tokens    (N) int32: the micro-batch's token ids (first stage only)                   activations
//   lnf (N,C), lnf_mean/rstd (N) fp32, logits (N,Vp), losses (N) fp32 (last stage only)    activations
// and, shared by the contexts:
//   recompute        one LayerActs shared by all checkpointed layers                      workspace
//   tmp (N,C)        attproj / fcproj outputs, consumed at once by the residual adds       workspace
//   dres (N,C), dbuf_c (N,C), dbuf_4c (N,4C)   backward gradients of activations           workspace
// Checkpointing: the first checkpoint_layers (else floor(ratio * n)) layers of the range keep only
// res[i] (their input) and recompute their forward into `recompute` just before their backward.
// Parameters and gradients come from a ParamStore one unit at a time (model/param_store.hpp):
// acquired before a unit is used, released after; grads_done(u) once a unit's backward is over.
// Tensor parallelism (GPTOptions::tp, docs/design.md "Tensor parallelism"): the layout is this TP
// rank's; qkv, atty, the attention's lse and the MLP's (N,4C) buffers hold its NH/tp heads and 4C/tp
// columns, and logits its Vp/tp vocabulary columns. Megatron's f/g: the row-parallel matmuls
// (attn.c_proj, mlp.c_proj) give partial sums that are all-reduced in forward, and the input
// gradients of the column-parallel ones (c_attn, c_fc, the LM head) are all-reduced in backward.
// Sequence parallelism (GPTOptions::sequence_parallel, Korthikanti et al. 2022): this rank keeps
// only its R = N/tp rows [tp_rank*R, (tp_rank+1)*R) of the flattened (B*T) rows in res, ln1/ln2
// (and their mean/rstd) and res2, so those buffers above are (R,C) / (R); the LayerNorm outputs are
// all-gathered into `gath` (N,C workspace) before c_attn / c_fc (and again in backward), and the
// row-parallel partial sums are reduce-scattered instead of all-reduced; the backward uses the
// conjugates. The LayerNorm gradients, computed from R rows, are summed over the group through
// `lng` (4C workspace) at the end of each unit's backward.
#include "model/gpt.hpp"

#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace llmtrain {

namespace {

/// What a transformer layer keeps for backward (Korthikanti et al. 2022 count these per token).
/// Ct = C/tp, NHt = NH/tp, Ft = 4C/tp: this TP rank's channels, heads and MLP columns.
struct LayerActs {
    void* ln1 = nullptr;       // (N,C)  LN1 output
    float* ln1_mean = nullptr; // (N)
    float* ln1_rstd = nullptr; // (N)
    void* qkv = nullptr;       // (N,3Ct) this rank's [q | k | v]
    void* atty = nullptr;      // (N,Ct) attention output, before c_proj
    float* att_lse = nullptr;  // (B,NHt,T)
    void* res2 = nullptr;      // (N,C)  x + attproj
    void* ln2 = nullptr;       // (N,C)
    float* ln2_mean = nullptr; // (N)
    float* ln2_rstd = nullptr; // (N)
    void* fch_pre = nullptr;   // (N,Ft) c_fc output before GELU
    void* fch = nullptr;       // (N,Ft) GELU output
};

/// One micro-batch's activations between its forward and its backward (see the header comment).
struct Context {
    std::vector<void*> res;       // n_local + 1 buffers (N,C)
    std::vector<LayerActs> acts;  // n_local; checkpointed layers point at the shared `recompute`
    int* tokens = nullptr;        // (N) first stage
    void *lnf = nullptr, *logits = nullptr;  // logits (N,Vpt): this TP rank's vocabulary columns
    float *lnf_mean = nullptr, *lnf_rstd = nullptr, *losses = nullptr;
    bool have_logit_grad = false;
};

/// Element offsets of one layer's tensors from the start of its unit.
struct LayerParams {
    size_t ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb;
};

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

struct GPT::Impl {
    GPTConfig cfg;
    GPTOptions opt;
    ParamLayout layout;
    Allocator& alloc;
    Ops& ops;
    size_t es;  // bytes per act-dtype element
    TensorParallel* tp = nullptr;  // null or a group of one: no collectives
    int ntp = 1, tp_rank = 0;      // TP group size and this rank's index
    int Ct = 0, NHt = 0, Ft = 0;   // C/tp, NH/tp, 4C/tp
    int Vpt = 0, v0 = 0;           // Vp/tp vocabulary rows of wte from row v0
    int n_local = 0, n_ckpt = 0;
    bool first = false, last = false;
    bool sp = false;  // sequence parallelism (needs a group of tp > 1)
    int R = 0;        // rows of the residual stream this rank holds: N/tp with sp, else N

    ParamStore* store = nullptr;
    std::unique_ptr<FullParamStore> own_store;  // when no store was given
    std::vector<LayerParams> lp;  // per local layer, unit-relative
    size_t wte = 0, wpe = 0;      // in unit 0
    size_t lnfw = 0, lnfb = 0;    // in unit n_layer + 1
    int u_lnf = 0;                // unit of ln_f

    std::vector<Context> ctxs;
    LayerActs recompute;
    void *tmp = nullptr, *dres = nullptr, *dbuf_c = nullptr, *dbuf_4c = nullptr;
    void *gath = nullptr, *lng = nullptr;  // sp only: (N,C) gathered rows; (4C) LayerNorm grads of R rows
    int *tok_dev = nullptr, *tgt_dev = nullptr;  // (B,T) for the whole-model helpers
    float* logit_row = nullptr;                  // (Vp) fp32 for logits_at
    float* logit_part = nullptr;                 // (Vpt) fp32, this rank's part of it (tp > 1)
    float *cls_stats = nullptr, *cls_all = nullptr;  // (N,3), (tp,N,3) fp32: vocab-parallel loss (tp > 1)
    std::vector<void*> owned;                    // every allocation, released in ~Impl
    // The whole-model helpers' losses: one pinned (B*T) fp32 slot per micro-batch queued by
    // forward_backward and not yet taken (grown on demand, kept), and the event after the last copy.
    std::vector<float*> loss_host;
    int loss_pending = 0;
    Event loss_ready = nullptr;

    Impl(const GPTConfig& c, const GPTOptions& o, Allocator& a)
        : cfg(c), opt(o), layout(c, o.shard_multiple, o.tp ? o.tp->size() : 1, o.tp ? o.tp->rank() : 0),
          alloc(a), ops(a.ops()), es(dtype_size(a.ops().act_dtype())) {
        ntp = layout.tp();
        tp_rank = layout.tp_rank();
        tp = ntp > 1 ? o.tp : nullptr;
        Ct = c.n_embd / ntp;
        NHt = c.n_head / ntp;
        Ft = 4 * c.n_embd / ntp;
        Vpt = c.padded_vocab_size() / ntp;
        v0 = tp_rank * Vpt;
        sp = o.sequence_parallel;
        const int N = o.B * o.T;
        if (sp && ntp < 2)
            throw std::invalid_argument("GPT: sequence_parallel needs a tensor-parallel group of tp > 1, got tp = " +
                                        std::to_string(ntp));
        if (sp && N % ntp != 0)
            throw std::invalid_argument("GPT: sequence_parallel splits micro_batch_size * seq_len = " +
                                        std::to_string(o.B) + " * " + std::to_string(o.T) + " = " +
                                        std::to_string(N) + " rows over tp = " + std::to_string(ntp) +
                                        " ranks: it must be a multiple of tp");
        R = sp ? N / ntp : N;
    }

    /// Sum of buf (n act-dtype elements) over the TP group, in place (nothing without one).
    void tp_sum(void* buf, size_t n) {
        if (tp != nullptr) tp->all_reduce(buf, n, ops.act_dtype());
    }

    /// This rank's rows (R,C) of an activation, whole: with sp, all-gathered into gath (N,C) in
    /// rank order (rank r's rows are rows [r*R, (r+1)*R) of the (B,T) flattening, so the
    /// concatenation is the (B,T,C) tensor); without, `local` itself (it has all N rows).
    const void* gather_rows(const void* local) {
        if (!sp) return local;
        tp->all_gather(gath, local, static_cast<size_t>(R) * cfg.n_embd, ops.act_dtype());
        return gath;
    }
    /// The group's sum of the (N,C) partial sums in `part`: with sp, this rank's rows of it
    /// reduce-scattered into dst (R,C), returned; without, all-reduced in place (part returned).
    const void* sum_rows(void* part, void* dst) {
        if (!sp) {
            tp_sum(part, n_rows() * cfg.n_embd);
            return part;
        }
        tp->reduce_scatter(dst, part, static_cast<size_t>(R) * cfg.n_embd, ops.act_dtype());
        return dst;
    }
    /// Where a LayerNorm's k-th gradient (k-th C block; weight then bias) goes: with sp the
    /// scratch lng (this rank's rows only, summed by add_ln_grads), else g's tensor at `off`.
    void* ln_grad(void* g, size_t off, int k) {
        return sp ? static_cast<char*>(lng) + static_cast<size_t>(k) * cfg.n_embd * es : G(g, off);
    }
    /// With sp: the (n * C) LayerNorm gradients in lng, each from this rank's rows, summed over the
    /// group (all-reduce, rank order: every rank gets the same bits) and added to g's tensors at
    /// offs (in lng's order); lng is then zeroed for the next unit. Nothing without sp.
    void add_ln_grads(void* g, std::initializer_list<size_t> offs) {
        if (!sp) return;
        const size_t C = cfg.n_embd;
        tp->all_reduce(lng, offs.size() * C, ops.act_dtype());
        size_t k = 0;
        for (size_t off : offs) {
            char* d = G(g, off);
            ops.residual_forward(d, d, static_cast<char*>(lng) + k++ * C * es, C);
        }
        ops.memset(lng, 0, 4 * C * es);
    }

    ~Impl() {
        if (loss_ready != nullptr) {
            try {
                ops.synchronize_event(loss_ready);  // no copy may still write a slot freed below
                ops.destroy_event(loss_ready);
            } catch (const std::exception&) {  // a failed device (the error is already being reported)
            }
        }
        for (float* p : loss_host) ops.free_host(p);
        for (void* p : owned) alloc.release(p);
    }

    size_t n_rows() const { return static_cast<size_t>(opt.B) * opt.T; }
    /// Loss slot k (B*T fp32, pinned), made when first asked for.
    float* loss_slot(size_t k) {
        while (loss_host.size() <= k) loss_host.push_back(static_cast<float*>(ops.malloc_host(n_rows() * 4)));
        return loss_host[k];
    }
    /// Records loss_ready (made at first use) on the current stream, after the copies queued so far.
    void record_ready() {
        if (loss_ready == nullptr) loss_ready = ops.create_event();
        ops.record_event(loss_ready);
    }
    /// The mean of B*T losses on the host: summed in position order in double, rounded to float.
    float mean_loss(const float* l) const {
        double sum = 0.0;
        for (size_t i = 0; i < n_rows(); ++i) sum += l[i];
        return static_cast<float>(sum / static_cast<double>(n_rows()));
    }

    void* get(MemCategory cat, size_t bytes) {
        void* p = alloc.alloc(cat, bytes);
        owned.push_back(p);
        return p;
    }

    /// Element `off` of a unit's parameters (or gradients) at `base`.
    const char* P(const void* base, size_t off) const { return static_cast<const char*>(base) + off * es; }
    char* G(void* base, size_t off) const { return static_cast<char*>(base) + off * es; }
    int unit_of_local(int i) const { return 1 + opt.l0 + i; }

    /// One block holding a LayerActs set, carved at 256-byte boundaries (local heads and columns).
    LayerActs make_acts(MemCategory cat) {
        const size_t N = static_cast<size_t>(opt.B) * opt.T, C = cfg.n_embd, Ct_ = size_t(Ct), Ft_ = size_t(Ft);
        const size_t Rr = size_t(R);  // ln1, ln2, res2 and the LayerNorm statistics: this rank's rows
        const size_t nc = align256(Rr * C * es), nf = align256(Rr * 4), nct = align256(N * Ct_ * es);
        const size_t nlse = align256(static_cast<size_t>(opt.B) * NHt * opt.T * 4);
        const size_t total = 3 * nc + nct + align256(N * 3 * Ct_ * es) + 2 * align256(N * Ft_ * es) + 4 * nf + nlse;
        char* p = static_cast<char*>(get(cat, total));
        auto take = [&](size_t bytes) { char* q = p; p += bytes; return q; };
        LayerActs a;
        a.ln1 = take(nc);
        a.ln1_mean = reinterpret_cast<float*>(take(nf));
        a.ln1_rstd = reinterpret_cast<float*>(take(nf));
        a.qkv = take(align256(N * 3 * Ct_ * es));
        a.atty = take(nct);
        a.att_lse = reinterpret_cast<float*>(take(nlse));
        a.res2 = take(nc);
        a.ln2 = take(nc);
        a.ln2_mean = reinterpret_cast<float*>(take(nf));
        a.ln2_rstd = reinterpret_cast<float*>(take(nf));
        a.fch_pre = take(align256(N * Ft_ * es));
        a.fch = take(align256(N * Ft_ * es));
        return a;
    }

    Context& context(int ctx) {
        if (ctx < 0 || ctx >= static_cast<int>(ctxs.size()))
            throw std::out_of_range("GPT: activation context " + std::to_string(ctx) + " outside [0, " +
                                    std::to_string(ctxs.size()) + ")");
        return ctxs[static_cast<size_t>(ctx)];
    }

    /// Forward of local layer i (parameters at w) from c.res[i] into the activations `a`; writes
    /// c.res[i+1] when write_out.
    /// With tp > 1, the row-parallel matmuls' partial sums are all-reduced (their replicated bias
    /// added on TP rank 0 only, so it is counted once); recomputation repeats the first all-reduce.
    /// With sp the LayerNorms and residual adds run on this rank's R rows: ln1 and ln2 are
    /// all-gathered before the column-parallel matmuls and the partial sums reduce-scattered.
    void layer_forward(Context& c, int i, const void* w, const LayerActs& a, bool write_out) {
        const int B = opt.B, T = opt.T, C = cfg.n_embd, N = B * T;
        const LayerParams& p = lp[i];
        auto P = [&](size_t off) { return this->P(w, off); };
        const bool bias_here = tp_rank == 0;
        const void* x = c.res[i];
        ops.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, P(p.ln1w), P(p.ln1b), R, C);
        ops.matmul_forward(a.qkv, nullptr, gather_rows(a.ln1), P(p.qkvw), P(p.qkvb), N, C, 3 * Ct);  // column-parallel
        ops.attention_forward(a.atty, a.att_lse, a.qkv, B, T, Ct, NHt);                 // local heads
        ops.matmul_forward(tmp, nullptr, a.atty, P(p.attprojw), bias_here ? P(p.attprojb) : nullptr, N, Ct, C);
        const void* att = sum_rows(tmp, gath);  // row-parallel: sum of the partial products
        ops.fused_residual_layernorm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, x, att, P(p.ln2w),
                                             P(p.ln2b), R, C);
        ops.matmul_forward(a.fch, a.fch_pre, gather_rows(a.ln2), P(p.fcw), P(p.fcb), N, C, Ft);  // column-parallel
        if (!write_out) return;  // recomputation needs only the layer's internals
        ops.matmul_forward(tmp, nullptr, a.fch, P(p.fcprojw), bias_here ? P(p.fcprojb) : nullptr, N, Ft, C);
        const void* mlp = sum_rows(tmp, gath);
        ops.residual_forward(c.res[i + 1], a.res2, mlp, static_cast<size_t>(R) * C);
    }

    /// Backward of local layer i (parameters at w, gradients accumulated at g): on entry
    /// dres = d(c.res[i+1]), on exit dres = d(c.res[i]). With tp > 1 the gradients of the
    /// column-parallel matmuls' (replicated) inputs ln2 and ln1 are partial sums over the local
    /// columns: all-reduced. The replicated biases' gradients are whole on every rank (dres is).
    /// With sp, dres is (R,C): all-gathered before each row-parallel matmul's backward (the
    /// conjugate of its forward reduce-scatter), ln2 / ln1 all-gathered again for the weight
    /// gradients, the column-parallel input gradients reduce-scattered to this rank's rows, and the
    /// LayerNorm gradients of the R rows summed over the group (add_ln_grads). The row-parallel
    /// biases' gradients come from the gathered, whole output gradient: no sum needed.
    void layer_backward(Context& c, int i, const void* w, void* g, const LayerActs& a) {
        const int B = opt.B, T = opt.T, C = cfg.n_embd, N = B * T;
        const LayerParams& p = lp[i];
        auto P = [&](size_t off) { return this->P(w, off); };
        auto G = [&](size_t off) { return this->G(g, off); };
        // MLP branch: out = res2 + c_proj(gelu(c_fc(ln2)))
        ops.matmul_backward(dbuf_4c, G(p.fcprojw), G(p.fcprojb), gather_rows(dres), a.fch, P(p.fcprojw),
                            a.fch_pre, N, Ft, C);  // dbuf_4c = d fch_pre (GELU backward fused), (N,Ft)
        ops.matmul_backward(dbuf_c, G(p.fcw), G(p.fcb), dbuf_4c, gather_rows(a.ln2), P(p.fcw), nullptr, N, C, Ft);
        const void* dln2 = sum_rows(dbuf_c, tmp);
        ops.layernorm_backward(dres, ln_grad(g, p.ln2w, 2), ln_grad(g, p.ln2b, 3), dln2, a.res2, P(p.ln2w),
                               a.ln2_mean, a.ln2_rstd, R, C);  // dres = d res2
        // attention branch: res2 = x + c_proj(attention(c_attn(ln1)))
        ops.matmul_backward(dbuf_c, G(p.attprojw), G(p.attprojb), gather_rows(dres), a.atty, P(p.attprojw),
                            nullptr, N, Ct, C);  // dbuf_c = d atty (N,Ct)
        ops.attention_backward(dbuf_4c, dbuf_c, a.qkv, a.atty, a.att_lse, B, T, Ct, NHt);  // d qkv (N,3Ct)
        ops.matmul_backward(dbuf_c, G(p.qkvw), G(p.qkvb), dbuf_4c, gather_rows(a.ln1), P(p.qkvw), nullptr, N, C,
                            3 * Ct);  // dbuf_c = d ln1 (partial sums over the local heads)
        const void* dln1 = sum_rows(dbuf_c, tmp);
        ops.layernorm_backward(dres, ln_grad(g, p.ln1w, 0), ln_grad(g, p.ln1b, 1), dln1, c.res[i], P(p.ln1w),
                               a.ln1_mean, a.ln1_rstd, R, C);  // dres = d x
        add_ln_grads(g, {p.ln1w, p.ln1b, p.ln2w, p.ln2b});
    }
};

GPT::GPT(const GPTConfig& cfg, const GPTOptions& opt_in, Allocator& alloc, ParamStore* store) {
    GPTOptions opt = opt_in;
    if (opt.l1 < 0) opt.l1 = cfg.n_layer;
    impl_ = std::make_unique<Impl>(cfg, opt, alloc);  // validates cfg (ParamLayout)
    if (opt.B < 1) throw std::invalid_argument("GPT: micro_batch_size must be >= 1, got " + std::to_string(opt.B));
    if (opt.T < 1 || opt.T > cfg.seq_len)
        throw std::invalid_argument("GPT: sequence length T = " + std::to_string(opt.T) +
                                    " must be in [1, seq_len = " + std::to_string(cfg.seq_len) + "]");
    if (opt.l0 < 0 || opt.l1 > cfg.n_layer || opt.l0 >= opt.l1)
        throw std::invalid_argument("GPT: layer range [" + std::to_string(opt.l0) + ", " +
                                    std::to_string(opt.l1) + ") must be non-empty inside [0, n_layer = " +
                                    std::to_string(cfg.n_layer) + ")");
    if (!(opt.checkpoint_ratio >= 0.0f && opt.checkpoint_ratio <= 1.0f))
        throw std::invalid_argument("GPT: activation_checkpoint.ratio must be in [0, 1], got " +
                                    std::to_string(opt.checkpoint_ratio));
    if (opt.checkpoint_layers > opt.l1 - opt.l0)
        throw std::invalid_argument("GPT: " + std::to_string(opt.checkpoint_layers) +
                                    " checkpointed layers, but the range has " + std::to_string(opt.l1 - opt.l0));
    if (opt.contexts < 1)
        throw std::invalid_argument("GPT: activation contexts must be >= 1, got " + std::to_string(opt.contexts));
    Impl& m = *impl_;
    m.n_local = opt.l1 - opt.l0;
    m.n_ckpt = opt.checkpoint_layers >= 0
                   ? opt.checkpoint_layers
                   : static_cast<int>(std::floor(static_cast<double>(opt.checkpoint_ratio) * m.n_local));
    m.first = opt.l0 == 0;
    m.last = opt.l1 == cfg.n_layer;

    const ParamLayout& L = m.layout;
    m.u_lnf = cfg.n_layer + 1;
    auto rel = [&](const std::string& n) {  // offset of tensor n inside its unit
        const ParamTensor& t = L.find(n);
        return t.offset - L.units()[t.unit].offset;
    };
    m.wte = rel("wte");
    m.wpe = rel("wpe");
    m.lnfw = rel("ln_f.weight");
    m.lnfb = rel("ln_f.bias");
    for (int l = opt.l0; l < opt.l1; ++l) {
        const std::string p = "h." + std::to_string(l) + ".";
        auto off = [&](const char* n) { return rel(p + n); };
        m.lp.push_back({off("ln_1.weight"), off("ln_1.bias"), off("attn.c_attn.weight"), off("attn.c_attn.bias"),
                        off("attn.c_proj.weight"), off("attn.c_proj.bias"), off("ln_2.weight"), off("ln_2.bias"),
                        off("mlp.c_fc.weight"), off("mlp.c_fc.bias"), off("mlp.c_proj.weight"),
                        off("mlp.c_proj.bias")});
    }

    const size_t N = static_cast<size_t>(opt.B) * opt.T, C = cfg.n_embd, es = m.es;
    const size_t R = size_t(m.R);  // rows of the residual stream on this rank (N / tp with sp)
    if (store == nullptr) {
        m.own_store = std::make_unique<FullParamStore>(alloc, m.layout);
        store = m.own_store.get();
    }
    m.store = store;
    if (m.n_ckpt > 0) m.recompute = m.make_acts(MemCategory::workspace);
    const size_t Vp = cfg.padded_vocab_size();  // Vpt = Vp / tp of them per TP rank
    for (int k = 0; k < opt.contexts; ++k) {
        Context c;
        for (int i = 0; i <= m.n_local; ++i) c.res.push_back(m.get(MemCategory::activations, R * C * es));
        for (int i = 0; i < m.n_local; ++i)
            c.acts.push_back(i < m.n_ckpt ? m.recompute : m.make_acts(MemCategory::activations));
        if (m.first) c.tokens = static_cast<int*>(m.get(MemCategory::activations, N * 4));
        if (m.last) {
            c.lnf = m.get(MemCategory::activations, N * C * es);  // whole rows (gathered with sp): the LM head's input
            c.lnf_mean = static_cast<float*>(m.get(MemCategory::activations, R * 4));
            c.lnf_rstd = static_cast<float*>(m.get(MemCategory::activations, R * 4));
            c.logits = m.get(MemCategory::activations, N * size_t(m.Vpt) * es);
            c.losses = static_cast<float*>(m.get(MemCategory::activations, N * 4));
        }
        m.ctxs.push_back(std::move(c));
    }
    if (m.last) m.logit_row = static_cast<float*>(m.get(MemCategory::workspace, Vp * 4));
    if (m.last && m.ntp > 1) {
        m.logit_part = static_cast<float*>(m.get(MemCategory::workspace, size_t(m.Vpt) * 4));
        m.cls_stats = static_cast<float*>(m.get(MemCategory::workspace, N * 3 * 4));
        m.cls_all = static_cast<float*>(m.get(MemCategory::workspace, size_t(m.ntp) * N * 3 * 4));
    }
    m.tmp = m.get(MemCategory::workspace, N * C * es);
    m.dres = m.get(MemCategory::workspace, R * C * es);
    if (m.sp) {
        m.gath = m.get(MemCategory::workspace, N * C * es);
        m.lng = m.get(MemCategory::workspace, 4 * C * es);
        alloc.ops().memset(m.lng, 0, 4 * C * es);
    }
    m.dbuf_c = m.get(MemCategory::workspace, N * C * es);
    m.dbuf_4c = m.get(MemCategory::workspace, N * size_t(m.Ft) * es);  // (N,Ft) and (N,3Ct)
    m.tok_dev = static_cast<int*>(m.get(MemCategory::workspace, N * 4));
    m.tgt_dev = static_cast<int*>(m.get(MemCategory::workspace, N * 4));
}

GPT::~GPT() = default;

const GPTConfig& GPT::config() const { return impl_->cfg; }
const GPTOptions& GPT::options() const { return impl_->opt; }
const ParamLayout& GPT::layout() const { return impl_->layout; }
Ops& GPT::ops() { return impl_->ops; }
Allocator& GPT::allocator() { return impl_->alloc; }
ParamStore& GPT::store() { return *impl_->store; }

namespace {
FullParamStore& full_store(const std::unique_ptr<FullParamStore>& s, const char* what) {
    if (!s) throw std::logic_error(std::string("GPT::") + what + ": the parameters live in an external ParamStore");
    return *s;
}
}  // namespace

void* GPT::params() { return full_store(impl_->own_store, "params").params(); }
void* GPT::grads() { return full_store(impl_->own_store, "grads").grads(); }
const void* GPT::act_out(int ctx) const { return impl_->context(ctx).res[impl_->n_local]; }
size_t GPT::act_rows() const { return static_cast<size_t>(impl_->R); }
const float* GPT::losses(int ctx) const { return impl_->context(ctx).losses; }
const void* GPT::logits(int ctx) const { return impl_->context(ctx).logits; }
int GPT::num_checkpointed_layers() const { return impl_->n_ckpt; }
int GPT::num_contexts() const { return static_cast<int>(impl_->ctxs.size()); }

void GPT::zero_grads() { full_store(impl_->own_store, "zero_grads").zero_grads(); }

void GPT::forward(const int* tokens, const void* act_in, const int* targets, float dloss, bool training, int ctx,
                  const int* host_tokens) {
    Impl& m = *impl_;
    Context& c = m.context(ctx);
    const int B = m.opt.B, T = m.opt.T, C = m.cfg.n_embd, N = B * T;
    ParamStore& st = *m.store;
    if (m.first) {
        m.ops.memcpy_d2d(c.tokens, tokens, static_cast<size_t>(N) * 4);  // the backward reads this copy
        if (host_tokens != nullptr) m.ops.encoder_host_tokens(c.tokens, host_tokens, N);
        const void* we = st.acquire_params(0, m.unit_of_local(0));
        if (m.tp == nullptr) {
            m.ops.encoder_forward(c.res[0], c.tokens, m.P(we, m.wte), m.P(we, m.wpe), B, T, C);
        } else {  // vocab-parallel: the owner of each token's row writes it, the others 0; then the sum
            // (with sp reduce-scattered: this rank's rows only; tmp is free before the first layer)
            void* part = m.sp ? m.tmp : c.res[0];
            m.ops.encoder_forward_vocab(part, c.tokens, m.P(we, m.wte), m.P(we, m.wpe), B, T, C, m.v0, m.Vpt);
            if (m.sp) m.sum_rows(part, c.res[0]);
            else m.tp_sum(part, static_cast<size_t>(N) * C);
        }
        st.release_params(0);
    } else {
        m.ops.memcpy_d2d(c.res[0], act_in, static_cast<size_t>(m.R) * C * m.es);
    }
    for (int i = 0; i < m.n_local; ++i) {
        const int u = m.unit_of_local(i);
        const int next = i + 1 < m.n_local ? u + 1 : m.last ? m.u_lnf : -1;
        m.layer_forward(c, i, st.acquire_params(u, next), c.acts[i], true);
        st.release_params(u);
    }
    c.have_logit_grad = false;
    if (!m.last) return;
    const int Vp = m.cfg.padded_vocab_size(), V = m.cfg.vocab_size;
    const void* wf = st.acquire_params(m.u_lnf, 0);
    // With sp: ln_f on this rank's rows, all-gathered for the LM head (whose logits need whole rows).
    void* lnf_local = m.sp ? m.tmp : c.lnf;
    m.ops.layernorm_forward(lnf_local, c.lnf_mean, c.lnf_rstd, c.res[m.n_local], m.P(wf, m.lnfw), m.P(wf, m.lnfb),
                            m.R, C);
    if (m.sp) m.tp->all_gather(c.lnf, lnf_local, static_cast<size_t>(m.R) * C, m.ops.act_dtype());
    st.release_params(m.u_lnf);
    const void* we = st.acquire_params(0, -1);
    // LM head tied to wte: this rank's Vpt rows give its Vpt columns of the logits.
    m.ops.matmul_forward(c.logits, nullptr, c.lnf, m.P(we, m.wte), nullptr, N, C, m.Vpt);
    st.release_params(0);
    if (targets != nullptr) {
        if (m.tp == nullptr) {
            m.ops.fused_classifier(c.logits, c.losses, targets, N, V, Vp, dloss, training);
        } else {  // vocab-parallel cross-entropy: local (max, sum, target logit), gathered, combined
            m.ops.classifier_partial(m.cls_stats, c.logits, targets, N, m.Vpt, m.v0, V);
            m.tp->all_gather(m.cls_all, m.cls_stats, static_cast<size_t>(N) * 3, DType::f32);
            m.ops.classifier_finish(c.logits, c.losses, m.cls_all, m.ntp, targets, N, m.Vpt, m.v0, V, dloss,
                                    training);
        }
        c.have_logit_grad = training;
    }
}

void GPT::backward(const void* dact_out, void* dact_in, int ctx) {
    Impl& m = *impl_;
    Context& c = m.context(ctx);
    const int B = m.opt.B, T = m.opt.T, C = m.cfg.n_embd, N = B * T;
    const size_t act_bytes = static_cast<size_t>(m.R) * C * m.es;  // this rank's rows of a (B,T,C) activation
    ParamStore& st = *m.store;
    void* ge = nullptr;  // unit 0's gradients: from the LM head (last stage) and the encoder (first)
    if (m.last) {
        if (!c.have_logit_grad)
            throw std::logic_error("GPT::backward: context " + std::to_string(ctx) +
                                   "'s forward() had no targets or training = false");
        const void* we = st.acquire_params(0, m.u_lnf);
        ge = st.acquire_grads(0);
        m.ops.matmul_backward(m.dbuf_c, m.G(ge, m.wte), nullptr, c.logits, c.lnf, m.P(we, m.wte), nullptr, N, C,
                              m.Vpt);
        st.release_params(0);
        // d lnf: the LM head is column-parallel (with sp: reduce-scattered to this rank's rows)
        const void* dlnf = m.sum_rows(m.dbuf_c, m.tmp);
        if (!m.first) st.grads_done(0);
        const void* wf = st.acquire_params(m.u_lnf, m.unit_of_local(m.n_local - 1));
        void* gf = st.acquire_grads(m.u_lnf);
        m.ops.memset(m.dres, 0, act_bytes);
        m.ops.layernorm_backward(m.dres, m.ln_grad(gf, m.lnfw, 0), m.ln_grad(gf, m.lnfb, 1), dlnf, c.res[m.n_local],
                                 m.P(wf, m.lnfw), c.lnf_mean, c.lnf_rstd, m.R, C);
        m.add_ln_grads(gf, {m.lnfw, m.lnfb});
        st.release_params(m.u_lnf);
        st.grads_done(m.u_lnf);
        c.have_logit_grad = false;  // logits now hold consumed gradients
    } else {
        m.ops.memcpy_d2d(m.dres, dact_out, act_bytes);
    }
    for (int i = m.n_local - 1; i >= 0; --i) {
        const int u = m.unit_of_local(i);
        const void* w = st.acquire_params(u, i > 0 ? u - 1 : m.first ? 0 : -1);
        void* g = st.acquire_grads(u);
        if (i < m.n_ckpt) m.layer_forward(c, i, w, m.recompute, false);  // recompute this layer's internals
        m.layer_backward(c, i, w, g, c.acts[i]);
        st.release_params(u);
        st.grads_done(u);
    }
    if (m.first) {
        if (ge == nullptr) ge = st.acquire_grads(0);
        if (m.tp == nullptr)
            m.ops.encoder_backward(m.G(ge, m.wte), m.G(ge, m.wpe), m.dres, c.tokens, B, T, C);
        else  // with sp the gradient of the whole (B,T,C) embedding is gathered first
            m.ops.encoder_backward_vocab(m.G(ge, m.wte), m.G(ge, m.wpe), m.gather_rows(m.dres), c.tokens, B, T, C,
                                         m.v0, m.Vpt);
        st.grads_done(0);
    } else {
        m.ops.memcpy_d2d(dact_in, m.dres, act_bytes);
    }
}

namespace {
void require_whole_model(const GPTOptions& o, int n_layer, const char* what) {
    if (o.l0 != 0 || o.l1 != n_layer)
        throw std::logic_error(std::string("GPT::") + what + ": needs the whole model, layers [0, n_layer)");
}
}  // namespace

void GPT::forward_backward(const int* inputs, const int* targets, float dloss) {
    Impl& m = *impl_;
    require_whole_model(m.opt, m.cfg.n_layer, "forward_backward");
    const size_t N = m.n_rows();
    m.ops.memcpy_h2d(m.tok_dev, inputs, N * 4);  // pageable sources: staged at the call
    m.ops.memcpy_h2d(m.tgt_dev, targets, N * 4);
    forward(m.tok_dev, nullptr, m.tgt_dev, dloss, true, 0, inputs);
    backward(nullptr, nullptr);
    m.ops.memcpy_d2h(m.loss_slot(static_cast<size_t>(m.loss_pending++)), m.ctxs[0].losses, N * 4);
    m.record_ready();
}

double GPT::take_loss_sum() {
    Impl& m = *impl_;
    if (m.loss_pending == 0) return 0.0;
    // Copies run in stream order: the last covers them all. The store's wait is timed against its
    // collectives (ZeRO-2/3 reduce during the backward), so a hung one ends in an error, not a hang.
    m.store->host_wait(m.ops, m.loss_ready, "reading the step's losses");
    double total = 0.0;
    for (int k = 0; k < m.loss_pending; ++k) total += m.mean_loss(m.loss_host[static_cast<size_t>(k)]);
    m.loss_pending = 0;
    return total;
}

float GPT::evaluate(const int* inputs, const int* targets) {
    Impl& m = *impl_;
    require_whole_model(m.opt, m.cfg.n_layer, "evaluate");
    const size_t N = m.n_rows();
    m.ops.memcpy_h2d(m.tok_dev, inputs, N * 4);
    m.ops.memcpy_h2d(m.tgt_dev, targets, N * 4);
    forward(m.tok_dev, nullptr, m.tgt_dev, 0.0f, false);
    float* slot = m.loss_slot(static_cast<size_t>(m.loss_pending));  // a slot no queued micro-batch holds
    m.ops.memcpy_d2h(slot, m.ctxs[0].losses, N * 4);
    m.record_ready();
    m.store->host_wait(m.ops, m.loss_ready, "reading the eval loss");
    return m.mean_loss(slot);
}

std::vector<float> GPT::logits_at(const int* inputs, int pos) {
    Impl& m = *impl_;
    require_whole_model(m.opt, m.cfg.n_layer, "logits_at");
    if (pos < 0 || pos >= m.opt.T)
        throw std::out_of_range("GPT::logits_at: position " + std::to_string(pos) + " outside [0, " +
                                std::to_string(m.opt.T) + ")");
    const size_t N = static_cast<size_t>(m.opt.B) * m.opt.T;
    m.ops.memcpy_h2d(m.tok_dev, inputs, N * 4);
    forward(m.tok_dev, nullptr, nullptr, 0.0f, false);
    logit_row(0, pos, m.logit_row);
    std::vector<float> out(m.cfg.vocab_size);
    m.ops.memcpy_d2h(out.data(), m.logit_row, out.size() * 4);
    m.record_ready();
    m.store->host_wait(m.ops, m.loss_ready, "reading the sampled logits");  // ZeRO-3 gathers feed it
    return out;
}

void GPT::logit_row(int ctx, int pos, float* out) {
    Impl& m = *impl_;
    if (!m.last) throw std::logic_error("GPT::logit_row: only the last stage has logits");
    if (pos < 0 || pos >= m.opt.T)
        throw std::out_of_range("GPT::logit_row: position " + std::to_string(pos) + " outside [0, " +
                                std::to_string(m.opt.T) + ")");
    const size_t Vpt = size_t(m.Vpt);
    const char* row = static_cast<const char*>(m.context(ctx).logits) + static_cast<size_t>(pos) * Vpt * m.es;  // (b=0, pos)
    if (m.tp == nullptr) {
        m.ops.cast(out, DType::f32, row, m.ops.act_dtype(), Vpt);
    } else {  // every rank's Vpt columns, in rank order: the full padded row
        m.ops.cast(m.logit_part, DType::f32, row, m.ops.act_dtype(), Vpt);
        m.tp->all_gather(out, m.logit_part, Vpt, DType::f32);
    }
}

void GPT::warm_up(int micro_batches) {
    Impl& m = *impl_;
    require_whole_model(m.opt, m.cfg.n_layer, "warm_up");
    for (int k = 0; k < micro_batches; ++k) m.loss_slot(static_cast<size_t>(k));
    const std::vector<int> zeros(m.n_rows(), 0);  // token 0: any valid id does
    forward_backward(zeros.data(), zeros.data(), 1.0f);
    take_loss_sum();
    m.ops.synchronize();  // start-up, not a step: every queue drained
}

}  // namespace llmtrain
