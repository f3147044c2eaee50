// model/gpt.cpp — the stack over a layer range: embedding (first stage), the layers
// (model/gpt_block.cpp builds each from the architecture's pieces), final norm, LM head and loss
// (last stage), per-layer activation checkpointing, and the trainer's whole-model helpers. The
// buffers, the TP and sequence-parallel scheme: model/gpt_impl.hpp.
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/gpt_impl.hpp"

namespace llmtrain {

GPT::Impl::Impl(const GPTConfig& c, const GPTOptions& o, Allocator& a)
    : cfg(c), opt(o),
      layout(c, o.shard_multiple, o.tp ? o.tp->size() : 1, o.tp ? o.tp->rank() : 0, o.ep ? o.ep->size() : 1,
             o.ep ? o.ep->rank() : 0),  // with ep > 1: this EP rank's experts only
      spec(c),
      alloc(a), ops(a.ops()), es(dtype_size(a.ops().act_dtype())) {
    ntp = layout.tp();
    tp_rank = layout.tp_rank();
    tp = ntp > 1 ? o.tp : nullptr;
    NHt = spec.NH / ntp;
    NKVt = spec.NKV / ntp;
    Ct = NHt * spec.HS;
    Qt = spec.qkv_width(ntp);
    Ft = spec.F / ntp;
    Mt = spec.mlp_in_width(ntp);
    Vpt = c.padded_vocab_size() / ntp;
    v0 = tp_rank * Vpt;
    sp = o.sequence_parallel;
    const int N = o.B * o.T;
    if (spec.norm != NormKind::layernorm && !ops.implements(OpFamily::llama))
        throw std::invalid_argument(std::string("model.arch = \"") + arch_name(c.arch) + "\": the " + ops.name() +
                                    " backend has no RMSNorm, rotary, SwiGLU or grouped-query attention ops yet "
                                    "(run it with run.backend = \"cpu\")");
    if (spec.qk_norm && !ops.implements_qk_norm())
        throw std::invalid_argument(std::string("model.qk_norm: the ") + ops.name() +
                                    " backend has no QK-norm ops yet (run it with run.backend = \"cpu\")");
    if (spec.qk_norm && ntp > 1)
        throw std::invalid_argument("model.qk_norm: tensor parallelism (parallel.tp = " + std::to_string(ntp) +
                                    ") is not supported with QK-norm yet (its weights' gradients would need a sum over the "
                                    "heads' ranks)");
    if (o.fp8 != Fp8Recipe::off && !ops.fp8_unsupported(o.fp8).empty())
        throw std::invalid_argument(std::string("training.fp8 = \"") + fp8_recipe_name(o.fp8) +
                                    "\": " + ops.fp8_unsupported(o.fp8));
    if (sp && ntp < 2)
        throw std::invalid_argument("GPT: sequence_parallel needs a tensor-parallel group of tp > 1, got tp = " +
                                    std::to_string(ntp));
    if (sp && N % ntp != 0)
        throw std::invalid_argument("GPT: sequence_parallel splits micro_batch_size * seq_len = " +
                                    std::to_string(o.B) + " * " + std::to_string(o.T) + " = " + std::to_string(N) +
                                    " rows over tp = " + std::to_string(ntp) + " ranks: it must be a multiple of tp");
    R = sp ? N / ntp : N;
}

void GPT::Impl::tp_sum(void* buf, size_t n) {
    if (tp != nullptr) tp->all_reduce(buf, n, ops.act_dtype());
}

const void* GPT::Impl::gather_rows(const void* local) {
    if (!sp) return local;
    tp->all_gather(gath, local, static_cast<size_t>(R) * cfg.n_embd, ops.act_dtype());
    return gath;
}

const void* GPT::Impl::sum_rows(void* part, void* dst) {
    if (!sp) {
        tp_sum(part, n_rows() * cfg.n_embd);
        return part;
    }
    tp->reduce_scatter(dst, part, static_cast<size_t>(R) * cfg.n_embd, ops.act_dtype());
    return dst;
}

void* GPT::Impl::ln_grad(void* g, size_t off, int k) {
    if (off == kNoTensor) return nullptr;
    return sp ? static_cast<char*>(lng) + static_cast<size_t>(k) * cfg.n_embd * es : G(g, off);
}

void GPT::Impl::add_ln_grads(void* g, const std::vector<size_t>& offs) {
    if (!sp) return;
    const size_t C = cfg.n_embd;
    size_t n = 0;
    for (size_t off : offs) n += off != kNoTensor;
    tp->all_reduce(lng, n * C, ops.act_dtype());
    size_t k = 0;
    for (size_t off : offs) {
        if (off == kNoTensor) continue;
        char* d = G(g, off);
        ops.residual_forward(d, d, static_cast<char*>(lng) + k++ * C * es, C);
    }
    ops.memset(lng, 0, 4 * C * es);
}

GPT::Impl::~Impl() {
    if (loss_ready != nullptr) {
        try {
            ops.synchronize_event(loss_ready);  // no copy may still write a slot freed below
            ops.destroy_event(loss_ready);
        } catch (const std::exception&) {  // a failed device (the error is already being reported)
        }
    }
    for (float* p : loss_host) ops.free_host(p);
    for (int* p : load_host) ops.free_host(p);
    for (void* p : owned) alloc.release(p);
}

float* GPT::Impl::loss_slot(size_t k) {
    while (loss_host.size() <= k) loss_host.push_back(static_cast<float*>(ops.malloc_host(n_rows() * 4)));
    return loss_host[k];
}

void GPT::Impl::record_ready() {
    if (loss_ready == nullptr) loss_ready = ops.create_event();
    ops.record_event(loss_ready);
}

float GPT::Impl::mean_loss(const float* l) const {
    double sum = 0.0;
    for (size_t i = 0; i < n_rows(); ++i) sum += l[i];
    return static_cast<float>(sum / static_cast<double>(n_rows()));
}

void* GPT::Impl::get(MemCategory cat, size_t bytes) {
    void* p = alloc.alloc(cat, bytes);
    owned.push_back(p);
    return p;
}

Context& GPT::Impl::context(int ctx) {
    if (ctx < 0 || ctx >= static_cast<int>(ctxs.size()))
        throw std::out_of_range("GPT: activation context " + std::to_string(ctx) + " outside [0, " +
                                std::to_string(ctxs.size()) + ")");
    return ctxs[static_cast<size_t>(ctx)];
}

const int* GPT::Impl::upload_batch(const int* inputs, const int* targets) {
    if (cpg != nullptr) return cp_take(ctxs[0], inputs, targets);  // this rank's rows of the windows (gpt_cp.cpp)
    ops.memcpy_h2d(tok_dev, inputs, n_rows() * 4);  // pageable sources: staged at the call
    if (targets != nullptr) ops.memcpy_h2d(tgt_dev, targets, n_rows() * 4);
    return inputs;
}

GPT::GPT(const GPTConfig& cfg, const GPTOptions& opt_in, Allocator& alloc, ParamStore* store) {
    GPTOptions opt = opt_in;
    if (opt.l1 < 0) opt.l1 = cfg.n_layer;
    const int ncp = opt.cp != nullptr ? opt.cp->size() : 1;
    if (ncp > 1) {  // from here on T is this rank's rows of a window (model/gpt_cp.cpp)
        if (opt.T % (2 * ncp) != 0)
            throw std::invalid_argument("GPT: context parallelism over cp = " + std::to_string(ncp) +
                                        " ranks needs T = " + std::to_string(opt.T) + " a multiple of 2 x cp");
        if (!alloc.ops().implements_attention_rows())
            throw std::invalid_argument(std::string("parallel.cp: the ") + alloc.ops().name() +
                                        " backend has no attention over a window's rows yet (run it with "
                                        "run.backend = \"cpu\")");
        opt.T /= ncp;
    }
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
    if ((opt.doc_mask || opt.doc_positions) && opt.doc_eos < 0)
        throw std::invalid_argument("GPT: data.document_mask / data.reset_position_ids need the dataset's eos_id, got " +
                                    std::to_string(opt.doc_eos));
    if (impl_->spec.moe()) impl_->check_moe(ncp);
    impl_->set_expert_parallel(opt.ep);  // gpt_moe_ep.cpp
    Impl& m = *impl_;
    m.Tw = opt_in.T;
    if (ncp > 1) m.cpg = opt.cp, m.ncp = ncp, m.cp_rank = opt.cp->rank();
    m.n_local = opt.l1 - opt.l0;
    m.n_ckpt = opt.checkpoint_layers >= 0
                   ? opt.checkpoint_layers
                   : static_cast<int>(std::floor(static_cast<double>(opt.checkpoint_ratio) * m.n_local));
    m.first = opt.l0 == 0;
    m.last = opt.l1 == cfg.n_layer;

    const ParamLayout& L = m.layout;
    m.u_lnf = cfg.n_layer + 1;
    auto rel = [&](int u, TensorRole r) {  // offset of unit u's tensor of role r inside the unit, or kNoTensor
        const ParamTensor* t = L.find_role(u, r);
        return t == nullptr ? kNoTensor : t->offset - L.units()[size_t(u)].offset;
    };
    m.wte = rel(0, TensorRole::tok_emb);
    m.wpe = rel(0, TensorRole::pos_emb);
    m.lnfw = rel(m.u_lnf, TensorRole::normf_w);
    m.lnfb = rel(m.u_lnf, TensorRole::normf_b);
    m.lm_head = rel(m.u_lnf, TensorRole::lm_head);
    for (int l = opt.l0; l < opt.l1; ++l) {
        const int u = L.unit_of_layer(l);
        using R = TensorRole;
        m.lp.push_back({rel(u, R::norm1_w), rel(u, R::norm1_b), rel(u, R::qkv_w), rel(u, R::qkv_b), rel(u, R::proj_w),
                        rel(u, R::proj_b), rel(u, R::norm2_w), rel(u, R::norm2_b), rel(u, R::fc_w), rel(u, R::fc_b),
                        rel(u, R::fcproj_w), rel(u, R::fcproj_b), rel(u, R::moe_router), rel(u, R::moe_w13),
                        rel(u, R::moe_w2), rel(u, R::q_norm_w), rel(u, R::k_norm_w)});
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
        // With cp the document starts are the window's (B,Tw) and every row has its window position.
        if (opt.doc_mask) c.doc_start = static_cast<int*>(m.get(MemCategory::activations, N * m.ncp * 4));
        if (opt.doc_positions || m.ncp > 1) c.pos = static_cast<int*>(m.get(MemCategory::activations, N * 4));
        if (m.last) {
            c.lnf = m.get(MemCategory::activations, N * C * es);  // whole rows (gathered with sp): the LM head's input
            if (m.spec.norm == NormKind::layernorm)  // RMSNorm keeps no mean
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
    m.dbuf_c = m.get(MemCategory::workspace, N * std::max(C, size_t(m.Ct)) * es);  // d ln (N,C), d atty (N,Ct)
    m.dbuf_4c = m.get(MemCategory::workspace, N * size_t(std::max(m.Mt, m.Qt)) * es);  // (N,Mt) and (N,Qt)
    if (m.spec.mlp == MlpKind::swiglu && m.Ft > 0) m.dbuf_f = m.get(MemCategory::workspace, N * size_t(m.Ft) * es);  // d fch
    if (m.spec.moe()) m.make_moe_work(), m.make_moe_ep_work();  // gpt_moe.cpp, gpt_moe_ep.cpp
    if (m.ncp > 1) {  // the window's q|k|v, the gather's order, and the window's d q|k|v (gpt_cp.cpp)
        const size_t window_qkv = N * m.ncp * size_t(m.Qt) * es;
        m.cp_full = m.get(MemCategory::workspace, window_qkv);
        m.cp_stage = m.get(MemCategory::workspace, window_qkv);
        m.cp_dfull = m.get(MemCategory::workspace, window_qkv);
    }
    m.tok_dev = static_cast<int*>(m.get(MemCategory::workspace, N * 4));
    m.tgt_dev = static_cast<int*>(m.get(MemCategory::workspace, N * 4));
    if (m.ncp > 1) {  // the rows' window positions: each context's c.pos from its first forward on
        m.cp_pos.resize(N);
        for (size_t r = 0; r < N; ++r) m.cp_pos[r] = m.cp_window_row(static_cast<int>(r % size_t(opt.T)));
    }
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

void GPT::window_rows(const int* window, int* rows) const { impl_->take_rows(window, rows); }
const float* GPT::losses(int ctx) const { return impl_->context(ctx).losses; }
const void* GPT::logits(int ctx) const { return impl_->context(ctx).logits; }
int GPT::num_checkpointed_layers() const { return impl_->n_ckpt; }
int GPT::num_contexts() const { return static_cast<int>(impl_->ctxs.size()); }

void GPT::zero_grads() { full_store(impl_->own_store, "zero_grads").zero_grads(); }

void GPT::forward(const int* tokens, const void* act_in, const int* targets, float dloss, bool training, int ctx,
                  const int* host_tokens) {
    Impl& m = *impl_;
    Context& c = m.context(ctx);
    if (m.cpg != nullptr && !m.opt.doc_positions && !c.pos_set) {  // fixed: once per context (per document
        m.ops.memcpy_h2d(c.pos, m.cp_pos.data(), m.n_rows() * 4);     // set_documents / cp_take set them)
        c.pos_set = true;
    }
    m.forward_documents(c, ctx, tokens, host_tokens);
    const int B = m.opt.B, T = m.opt.T, C = m.cfg.n_embd, N = B * T;
    ParamStore& st = *m.store;
    c.dloss = dloss;
    c.moe_aux = 0.0;
    // A training forward counts its MoE layers' expert loads and balance loss (GPT::take_moe_load,
    // take_moe_aux_sum): forward_backward's and a pipeline stage's alike (evaluations do not count).
    c.moe_load_dst = training && m.spec.moe() ? m.load_slot() : nullptr;  // gpt_moe.cpp
    if (m.first) {
        m.ops.memcpy_d2d(c.tokens, tokens, static_cast<size_t>(N) * 4);  // the backward reads this copy
        if (host_tokens != nullptr) m.ops.encoder_host_tokens(c.tokens, host_tokens, N);
        // cp's window positions of learned rows, fixed (per document, window_documents hints them)
        if (m.cpg != nullptr && !m.opt.doc_positions && m.wpe != kNoTensor)
            m.ops.encoder_host_tokens(c.pos, m.cp_pos.data(), N);
        const void* we = st.acquire_params(0, m.unit_of_local(0));
        if (c.pos != nullptr && m.wpe != kNoTensor) {  // learned positions restarting at each document
            void* part = m.sp ? m.tmp : c.res[0];
            const int v0 = m.tp == nullptr ? 0 : m.v0, nv = m.tp == nullptr ? m.cfg.padded_vocab_size() : m.Vpt;
            m.ops.encoder_forward_pos(part, c.tokens, c.pos, m.P(we, m.wte), m.P(we, m.wpe), B, T, C, v0, nv);
            if (m.sp) m.sum_rows(part, c.res[0]);
            else m.tp_sum(part, static_cast<size_t>(N) * C);
        } else if (m.tp == nullptr) {
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
    if (c.moe_load_dst != nullptr) {  // the loads' copies are queued: take_moe_load waits on this event
        c.moe_load_dst = nullptr;
        m.aux_pending += c.moe_aux;
        m.record_ready();
    }
    c.have_logit_grad = false;
    if (!m.last) return;
    const int Vp = m.cfg.padded_vocab_size(), V = m.cfg.vocab_size;
    const bool tied = m.spec.tied;
    const void* wf = st.acquire_params(m.u_lnf, tied ? 0 : -1);
    // With sp: the final norm on this rank's rows, all-gathered for the LM head (whose logits need whole rows).
    void* lnf_local = m.sp ? m.tmp : c.lnf;
    m.norm_forward(lnf_local, c.lnf_mean, c.lnf_rstd, c.res[m.n_local], m.P(wf, m.lnfw), m.P(wf, m.lnfb), m.R);
    if (m.sp) m.tp->all_gather(c.lnf, lnf_local, static_cast<size_t>(m.R) * C, m.ops.act_dtype());
    // The LM head, tied to wte (unit 0) or its own lm_head (the final unit): this rank's Vpt rows
    // give its Vpt columns of the logits.
    if (tied) st.release_params(m.u_lnf);
    const void* wh = tied ? st.acquire_params(0, -1) : wf;
    m.ops.matmul_forward(c.logits, nullptr, c.lnf, m.P(wh, tied ? m.wte : m.lm_head), nullptr, N, C, m.Vpt);
    st.release_params(tied ? 0 : m.u_lnf);
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
        // d lnf: the LM head is column-parallel (with sp: reduce-scattered to this rank's rows)
        const void* dlnf = nullptr;
        const void* wf = nullptr;
        void* gf = nullptr;
        if (m.spec.tied) {  // the head's gradient goes to wte (unit 0)
            const void* we = st.acquire_params(0, m.u_lnf);
            ge = st.acquire_grads(0);
            m.ops.matmul_backward(m.dbuf_c, m.G(ge, m.wte), nullptr, c.logits, c.lnf, m.P(we, m.wte), nullptr, N, C,
                                  m.Vpt);
            st.release_params(0);
            dlnf = m.sum_rows(m.dbuf_c, m.tmp);
            if (!m.first) st.grads_done(0);
            wf = st.acquire_params(m.u_lnf, m.unit_of_local(m.n_local - 1));
            gf = st.acquire_grads(m.u_lnf);
        } else {  // to lm_head, in the final unit with the norm
            wf = st.acquire_params(m.u_lnf, m.unit_of_local(m.n_local - 1));
            gf = st.acquire_grads(m.u_lnf);
            m.ops.matmul_backward(m.dbuf_c, m.G(gf, m.lm_head), nullptr, c.logits, c.lnf, m.P(wf, m.lm_head), nullptr,
                                  N, C, m.Vpt);
            dlnf = m.sum_rows(m.dbuf_c, m.tmp);
        }
        m.ops.memset(m.dres, 0, act_bytes);
        m.norm_backward(m.dres, m.ln_grad(gf, m.lnfw, 0), m.ln_grad(gf, m.lnfb, 1), dlnf, c.res[m.n_local],
                        m.P(wf, m.lnfw), c.lnf_mean, c.lnf_rstd, m.R);
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
        if (c.pos != nullptr && m.wpe != kNoTensor)
            m.ops.encoder_backward_pos(m.G(ge, m.wte), m.G(ge, m.wpe), m.tp == nullptr ? m.dres : m.gather_rows(m.dres),
                                       c.tokens, c.pos, B, T, C, m.tp == nullptr ? 0 : m.v0,
                                       m.tp == nullptr ? m.cfg.padded_vocab_size() : m.Vpt);
        else if (m.tp == nullptr)
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
    inputs = m.upload_batch(inputs, targets);
    forward(m.tok_dev, nullptr, m.tgt_dev, dloss, true, 0, inputs);  // counts the MoE loads and balance loss
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

double GPT::moe_aux_loss(int ctx) const { return impl_->context(ctx).moe_aux; }

double GPT::take_moe_aux_sum() {
    const double s = impl_->aux_pending;
    impl_->aux_pending = 0.0;
    return s;
}

float GPT::evaluate(const int* inputs, const int* targets) {
    Impl& m = *impl_;
    require_whole_model(m.opt, m.cfg.n_layer, "evaluate");
    const size_t N = m.n_rows();
    inputs = m.upload_batch(inputs, targets);
    forward(m.tok_dev, nullptr, m.tgt_dev, 0.0f, false, 0, m.opt.doc_eos >= 0 ? inputs : nullptr);
    float* slot = m.loss_slot(static_cast<size_t>(m.loss_pending));  // a slot no queued micro-batch holds
    m.ops.memcpy_d2h(slot, m.ctxs[0].losses, N * 4);
    m.record_ready();
    m.store->host_wait(m.ops, m.loss_ready, "reading the eval loss");
    return m.mean_loss(slot);
}

std::vector<float> GPT::logits_at(const int* inputs, int pos) {
    Impl& m = *impl_;
    require_whole_model(m.opt, m.cfg.n_layer, "logits_at");
    if (pos < 0 || pos >= m.Tw)
        throw std::out_of_range("GPT::logits_at: position " + std::to_string(pos) + " outside [0, " +
                                std::to_string(m.Tw) + ")");
    const int* host = m.upload_batch(inputs, nullptr);  // with cp this rank's rows (gpt_cp.cpp)
    forward(m.tok_dev, nullptr, nullptr, 0.0f, false, 0, m.opt.doc_eos >= 0 ? host : nullptr);
    logit_row(0, pos, m.logit_row);  // with cp from the rank holding the row
    std::vector<float> out(m.cfg.vocab_size);
    m.ops.memcpy_d2h(out.data(), m.logit_row, out.size() * 4);
    m.record_ready();
    m.store->host_wait(m.ops, m.loss_ready, "reading the sampled logits");  // ZeRO-3 gathers feed it
    return out;
}

int GPT::window_length() const { return impl_->Tw; }

void GPT::logit_row(int ctx, int pos, float* out) {
    Impl& m = *impl_;
    if (!m.last) throw std::logic_error("GPT::logit_row: only the last stage has logits");
    if (pos < 0 || pos >= m.Tw)
        throw std::out_of_range("GPT::logit_row: position " + std::to_string(pos) + " outside [0, " +
                                std::to_string(m.Tw) + ")");
    const int local = m.cpg == nullptr ? pos : m.cp_local_row(pos);  // -1: another CP rank holds it
    const size_t Vpt = size_t(m.Vpt), Vp = size_t(m.cfg.padded_vocab_size());
    const char* row = static_cast<const char*>(m.context(ctx).logits) + static_cast<size_t>(std::max(local, 0)) * Vpt * m.es;
    if (local < 0) {  // every TP rank of this CP index alike: no TP gather
        m.ops.memset(out, 0, Vp * 4);
    } else if (m.tp == nullptr) {
        m.ops.cast(out, DType::f32, row, m.ops.act_dtype(), Vpt);
    } else {  // every rank's Vpt columns, in rank order: the full padded row
        m.ops.cast(m.logit_part, DType::f32, row, m.ops.act_dtype(), Vpt);
        m.tp->all_gather(out, m.logit_part, Vpt, DType::f32);
    }
    if (m.cpg != nullptr) m.cpg->all_reduce(out, Vp, DType::f32);  // the holder's row + zeros: exact
}

void GPT::warm_up(int micro_batches) {
    Impl& m = *impl_;
    require_whole_model(m.opt, m.cfg.n_layer, "warm_up");
    for (int k = 0; k < micro_batches; ++k) m.loss_slot(static_cast<size_t>(k));
    const std::vector<int> zeros(static_cast<size_t>(m.opt.B) * m.Tw, 0);  // a whole window; token 0: any valid id does
    forward_backward(zeros.data(), zeros.data(), 1.0f);
    take_loss_sum();
    if (m.spec.moe()) {  // not a step: its balance loss and expert loads must not join step 1's
        take_moe_aux_sum();
        std::vector<int64_t> load;
        take_moe_load(load);
    }
    m.ops.synchronize();  // start-up, not a step: every queue drained
}

}  // namespace llmtrain
