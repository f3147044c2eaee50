// model/gpt_moe.cpp — the mixture-of-experts MLP of a Llama block (model.moe; docs/model.md "Mixture
// of experts"): the router picks k of E SwiGLU experts per token (Mixtral, Jiang et al. 2024; Qwen3-MoE;
// DeepSeek-V3's sigmoid scores), their gated outputs are summed, and optional shared experts
// (DeepSeek-V3, Liu et al. 2024: experts every token visits) run as one dense SwiGLU of width
// n_shared * Fe beside them. The load-balancing loss (Switch Transformer, Fedus et al. 2021, eq.
// 4-6; alpha * E * sum_e f_e P_e) is added to the training objective per micro-batch and layer.
// The backend runs the layer (Ops::moe_forward / moe_backward, model/moe_layer.hpp); this file
// carves its buffers and wires it between the block's second norm and the residual add.
// Tensor parallelism (docs/parallelism.md "Mixture of experts under tp and cp"): the shared experts
// split as the dense MLP does (column- then row-parallel, their output summed over the group); the
// router and the routed experts are replicated — every TP rank routes the whole (N,C) rows (with
// sequence parallelism gathered first, as the dense MLP's input is) and runs every expert (or its
// ep share) on them, so routing, balance loss and expert gradients are the same on every TP rank,
// like a norm weight's, and d ln2 through them is whole (no sum). Context parallelism: each rank
// routes its own rows; the balance loss is taken over the whole window (moe_cp_aux).
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/gpt_impl.hpp"

namespace llmtrain {

void GPT::Impl::check_moe(int ncp) const {
    auto no = [](const std::string& what) {
        throw std::invalid_argument("model.moe: mixture of experts does not run with " + what + " yet");
    };
    if (!ops.implements_moe()) no(std::string("the ") + ops.name() + " backend (run it with run.backend = \"cpu\")");
    if (ncp > 1 && cfg.moe_aux_loss_coef > 0.0f && !ops.implements_moe_aux_fractions())
        no(std::string("context parallelism (parallel.cp > 1) and a balance loss on the ") + ops.name() +
           " backend (run it with run.backend = \"cpu\", or model.moe.aux_loss_coef = 0)");
    if (opt.fp8 != Fp8Recipe::off) no("training.fp8");
}

MoeShape GPT::Impl::moe_shape(int i) const {
    MoeShape s;
    s.N = static_cast<int>(n_rows());
    s.C = cfg.n_embd;
    s.E = spec.E;
    s.k = spec.K;
    s.F = spec.Fe;
    s.score = cfg.moe_sigmoid ? MoeScore::sigmoid : MoeScore::softmax;
    s.aux_coef = cfg.moe_aux_loss_coef;
    if (i >= 0 && moe_bias != nullptr) s.bias = moe_bias + size_t(i) * size_t(s.E);
    if (cfg.moe_capacity_factor > 0.0f)  // Switch Transformer: ceil(c * N*k / E) rows per expert
        s.capacity = static_cast<int>(std::ceil(double(cfg.moe_capacity_factor) * double(s.N) * s.k / s.E));
    return s;
}

MoeActs GPT::Impl::make_moe_acts(MemCategory cat) {
    const MoeShape s = moe_shape();
    const size_t N = size_t(s.N), NK = N * size_t(s.k), C = size_t(s.C), E = size_t(s.E), F = size_t(s.F);
    const size_t ne = align256(N * E * 4), nk = align256(N * size_t(s.k) * 4), noff = align256((E + 1) * 4);
    const size_t nc = align256(NK * C * es), ngu = align256(NK * 2 * F * es), nh = align256(NK * F * es);
    char* p = static_cast<char*>(get(cat, ne + 2 * nk + noff + nk + 2 * nc + ngu + nh));
    auto take = [&](size_t bytes) { char* q = p; p += bytes; return q; };
    MoeActs a;
    a.scores = reinterpret_cast<float*>(take(ne));
    a.ids = reinterpret_cast<int*>(take(nk));
    a.gates = reinterpret_cast<float*>(take(nk));
    a.offsets = reinterpret_cast<int*>(take(noff));
    a.pos = reinterpret_cast<int*>(take(nk));  // N*k int32, as ids
    a.xg = take(nc);
    a.yg = take(nc);
    a.gu = take(ngu);
    a.h = take(nh);
    return a;
}

void GPT::Impl::make_moe_work() {
    const MoeShape s = moe_shape();
    const size_t N = size_t(s.N), NK = N * size_t(s.k), C = size_t(s.C), E = size_t(s.E), F = size_t(s.F);
    const size_t ne = align256(N * E * 4), nk = align256(NK * 4), ncount = align256(E * 4);
    const size_t nc = align256(NK * C * es), ngu = align256(NK * 2 * F * es), nh = align256(NK * F * es);
    char* p = static_cast<char*>(get(MemCategory::workspace, 2 * ne + ncount + 2 * nk + 2 * nc + ngu + nh));
    auto take = [&](size_t bytes) { char* q = p; p += bytes; return q; };
    MoeWork& w = moe_work;
    w.logits = reinterpret_cast<float*>(take(ne));
    w.dscores = reinterpret_cast<float*>(take(ne));
    w.counts = reinterpret_cast<int*>(take(ncount));
    w.pair_of = reinterpret_cast<int*>(take(nk));
    w.dgates = reinterpret_cast<float*>(take(nk));  // N*k fp32
    w.dyg = take(nc);
    w.dxg = take(nc);
    w.dgu = take(ngu);
    w.dh = take(nh);
    if (sp) moe_rows = get(MemCategory::workspace, N * C * es);
    if (ncp > 1 && cfg.moe_aux_loss_coef > 0.0f)
        moe_cp_stats = static_cast<float*>(get(MemCategory::workspace, align256(2 * E * 4)));
    if (!cfg.moe_sigmoid) return;
    moe_bias = static_cast<float*>(get(MemCategory::workspace, align256(size_t(n_local) * E * 4)));
    ops.memset(moe_bias, 0, size_t(n_local) * E * 4);  // no bias until set_moe_bias
}

void GPT::set_moe_bias(const float* bias) {
    Impl& m = *impl_;
    if (m.moe_bias == nullptr)
        throw std::logic_error("GPT::set_moe_bias: needs model.moe with router = \"sigmoid\"");
    const size_t E = size_t(m.spec.E);  // this stage's rows [l0, l1) of the whole model's
    m.ops.memcpy_h2d(m.moe_bias, bias + size_t(m.opt.l0) * E, size_t(m.n_local) * E * 4);
}

float GPT::Impl::moe_cp_aux(Context& c, int i, const MoeActs& a) {
    const MoeShape s = moe_shape();
    const size_t N = size_t(s.N), E = size_t(s.E), k = size_t(s.k);
    std::vector<float> scores(N * E);
    std::vector<int> ids(N * k);
    ops.memcpy_d2h(scores.data(), a.scores, scores.size() * 4);
    ops.memcpy_d2h(ids.data(), a.ids, ids.size() * 4);
    ops.synchronize();
    // This rank's counts per expert and sums of q (the scores, or for sigmoid over their row sum),
    // as moe_aux_loss sums them (model/cpu/moe.cpp), then the window's by one all-reduce.
    std::vector<double> cnt(E, 0.0), P(E, 0.0);
    for (size_t r = 0; r < N * k; ++r) cnt[size_t(ids[r])] += 1.0;
    for (size_t n = 0; n < N; ++n) {
        const float* q = scores.data() + n * E;
        double rowsum = 1.0;
        if (s.score == MoeScore::sigmoid) {
            rowsum = 0.0;
            for (size_t e = 0; e < E; ++e) rowsum += q[e];
        }
        for (size_t e = 0; e < E; ++e) P[e] += q[e] / rowsum;
    }
    std::vector<float> st(2 * E);
    for (size_t e = 0; e < E; ++e) st[e] = float(cnt[e]), st[E + e] = float(P[e]);  // counts exact below 2^24
    ops.memcpy_h2d(moe_cp_stats, st.data(), st.size() * 4);
    cpg->all_reduce(moe_cp_stats, 2 * E, DType::f32);
    ops.memcpy_d2h(st.data(), moe_cp_stats, st.size() * 4);
    ops.synchronize();
    const double rows = double(N) * double(ncp);  // the window's rows
    if (c.moe_f.size() != size_t(n_local) * E) c.moe_f.assign(size_t(n_local) * E, 0.0);
    double* f = c.moe_f.data() + size_t(i) * E;
    double loss = 0.0;
    for (size_t e = 0; e < E; ++e) {
        f[e] = double(st[e]) / (rows * double(k));
        loss += f[e] * (double(st[E + e]) / rows);
    }
    return float(loss * double(s.aux_coef) * double(E));
}

void GPT::Impl::moe_mlp_forward(Context& c, int i, const void* w, const LayerActs& a, bool write_out) {
    const LayerParams& p = lp[i];
    const int N = static_cast<int>(n_rows()), C = cfg.n_embd;
    const size_t nc = static_cast<size_t>(N) * C;
    const void* x = gather_rows(a.ln2);  // whole rows (with sp gathered into gath, kept through the layer)
    // out: what the routed experts' combine adds to, the shared experts' output there first (whole
    // rows; with sp this rank's rows of moe_rows, the rest zero: only this rank's rows are used).
    void* out = sp ? moe_rows : tmp;
    void* mine = sp ? static_cast<char*>(moe_rows) + size_t(tp_rank) * size_t(R) * C * es : tmp;
    if (spec.F > 0) {  // the shared experts: [gate | up] in one matmul, silu(gate) * up; split as the dense MLP
        linear_forward(a.fch_pre, nullptr, x, P(w, p.fcw), nullptr, N, C, Mt);  // column-parallel
        ops.swiglu_forward(a.fch, a.fch_pre, N, Ft);
        if (write_out) {
            linear_forward(tmp, nullptr, a.fch, P(w, p.fcprojw), nullptr, N, Ft, C);  // row-parallel: partial sums
            if (sp) ops.memset(moe_rows, 0, nc * es);
            sum_rows(tmp, mine);  // the group's sum (nothing at tp 1); with sp this rank's rows into moe_rows
        }
    } else if (write_out) {
        ops.memset(out, 0, nc * es);
    }
    float aux = nep > 1 ? moe_ep_forward(i, w, a, x, out, write_out)  // the experts over the ep group (gpt_moe_ep.cpp)
                        : ops.moe_forward(moe_shape(i), a.moe, moe_work, out, x, P(w, p.router), P(w, p.w13),
                                          P(w, p.w2), write_out);
    if (!write_out) return;
    if (ncp > 1 && cfg.moe_aux_loss_coef > 0.0f) aux = moe_cp_aux(c, i, a.moe);  // over the whole window
    c.moe_aux += aux;
    if (c.moe_load_dst != nullptr)  // the routing's per-expert row counts, for GPT::take_moe_load
        ops.memcpy_d2h(c.moe_load_dst + size_t(i) * size_t(spec.E + 1), a.moe.offsets, size_t(spec.E + 1) * 4);
    ops.residual_forward(c.res[i + 1], a.res2, mine, static_cast<size_t>(R) * C);
}

const void* GPT::Impl::moe_mlp_backward(Context& c, int i, const void* w, void* g, const LayerActs& a) {
    const LayerParams& p = lp[i];
    const int N = static_cast<int>(n_rows()), C = cfg.n_embd;
    const size_t nc = static_cast<size_t>(N) * C, mine = size_t(tp_rank) * size_t(R) * C * es;
    MoeShape s = moe_shape();
    if (ncp > 1 && s.aux_coef > 0.0f) s.aux_f = c.moe_f.data() + size_t(i) * size_t(s.E);  // the window's f_e
    const float aux_scale = s.aux_coef * c.dloss * static_cast<float>(N);
    const void* dout = dres;  // d out (N,C), whole
    if (sp) {  // this rank's rows gathered, kept in moe_rows while gath takes the input rows
        ops.memcpy_d2d(moe_rows, gather_rows(dres), nc * es);
        dout = moe_rows;
    }
    const void* x = gather_rows(a.ln2);
    if (nep > 1)
        moe_ep_backward(s, i, w, g, a, x, dbuf_c, dout, aux_scale);  // dbuf_c = d ln2 via the experts (gpt_moe_ep.cpp)
    else
        ops.moe_backward(s, a.moe, moe_work, dbuf_c, G(g, p.router), G(g, p.w13), G(g, p.w2), dout, x,
                         P(w, p.router), P(w, p.w13), P(w, p.w2), aux_scale);  // dbuf_c = d ln2 via the experts
    void* routed = static_cast<char*>(dbuf_c) + (sp ? mine : 0);  // whole on every TP rank: this rank's rows
    if (spec.F == 0) return routed;
    linear_backward(dbuf_f, G(g, p.fcprojw), nullptr, dout, a.fch, P(w, p.fcprojw), nullptr, N, Ft, C);
    ops.swiglu_backward(dbuf_4c, dbuf_f, a.fch_pre, N, Ft);
    linear_backward(tmp, G(g, p.fcw), nullptr, dbuf_4c, x, P(w, p.fcw), nullptr, N, C, Mt);  // partial over tp
    // + d ln2 via the shared experts, summed over the group (with sp this rank's rows, into moe_rows:
    // d out is used up)
    const void* shared = sum_rows(tmp, moe_rows);
    ops.residual_forward(routed, routed, shared, static_cast<size_t>(R) * C);
    return routed;
}

int* GPT::Impl::load_slot() {
    const size_t k = static_cast<size_t>(load_pending++);
    while (load_host.size() <= k)  // page-locked: the d2h copies do not wait on the host
        load_host.push_back(static_cast<int*>(ops.malloc_host(size_t(n_local) * size_t(spec.E + 1) * 4)));
    return load_host[k];
}

void GPT::take_moe_load(std::vector<int64_t>& counts) {
    Impl& m = *impl_;
    counts.clear();
    if (!m.spec.moe()) return;
    const int E = m.spec.E;
    counts.assign(size_t(m.cfg.n_layer) * size_t(E), 0);  // a pipeline stage fills its rows [l0, l1)
    if (m.load_pending == 0) return;
    m.store->host_wait(m.ops, m.loss_ready, "reading the step's expert loads");  // after the copies
    int64_t* mine = counts.data() + size_t(m.opt.l0) * size_t(E);
    for (int k = 0; k < m.load_pending; ++k) {
        const int* off = m.load_host[size_t(k)];
        for (int l = 0; l < m.n_local; ++l)
            for (int e = 0; e < E; ++e)
                mine[size_t(l) * size_t(E) + size_t(e)] += off[l * (E + 1) + e + 1] - off[l * (E + 1) + e];
    }
    m.load_pending = 0;
}

}  // namespace llmtrain
