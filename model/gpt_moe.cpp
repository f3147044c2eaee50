// model/gpt_moe.cpp — the mixture-of-experts MLP of a Llama block (model.moe; docs/model.md "Mixture
// of experts"): the router picks k of E SwiGLU experts per token (Mixtral, Jiang et al. 2024; Qwen3-MoE;
// DeepSeek-V3's sigmoid scores), their gated outputs are summed, and optional shared experts
// (DeepSeek-V3, Liu et al. 2024: experts every token visits) run as one dense SwiGLU of width
// n_shared * Fe beside them. The load-balancing loss (Switch Transformer, Fedus et al. 2021, eq.
// 4-6; alpha * E * sum_e f_e P_e) is added to the training objective per micro-batch and layer.
// The backend runs the layer (Ops::moe_forward / moe_backward, model/moe_layer.hpp); this file
// carves its buffers and wires it between the block's second norm and the residual add. No tensor,
// sequence or context parallelism yet (the constructor refuses them); a pipeline stage runs its layers.
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/gpt_impl.hpp"

namespace llmtrain {

void GPT::Impl::check_moe(int ncp) const {
    auto no = [](const std::string& what) {
        throw std::invalid_argument("model.moe: mixture of experts does not run with " + what + " yet");
    };
    if (!ops.implements_moe()) no(std::string("the ") + ops.name() + " backend (run it with run.backend = \"cpu\")");
    if (ntp > 1) no("tensor parallelism (parallel.tp > 1)");
    if (ncp > 1) no("context parallelism (parallel.cp > 1)");
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

void GPT::Impl::moe_mlp_forward(Context& c, int i, const void* w, const LayerActs& a, bool write_out) {
    const LayerParams& p = lp[i];
    const int N = static_cast<int>(n_rows()), C = cfg.n_embd;
    if (spec.F > 0) {  // the shared experts: [gate | up] in one matmul, silu(gate) * up
        linear_forward(a.fch_pre, nullptr, a.ln2, P(w, p.fcw), nullptr, N, C, Mt);
        ops.swiglu_forward(a.fch, a.fch_pre, N, Ft);
        if (write_out) linear_forward(tmp, nullptr, a.fch, P(w, p.fcprojw), nullptr, N, Ft, C);
    } else if (write_out) {
        ops.memset(tmp, 0, static_cast<size_t>(N) * C * es);
    }
    const float aux = nep > 1 ? moe_ep_forward(i, w, a, tmp, write_out)  // the experts over the ep group (gpt_moe_ep.cpp)
                              : ops.moe_forward(moe_shape(i), a.moe, moe_work, tmp, a.ln2, P(w, p.router),
                                                P(w, p.w13), P(w, p.w2), write_out);
    if (!write_out) return;
    c.moe_aux += aux;
    if (c.moe_load_dst != nullptr)  // the routing's per-expert row counts, for GPT::take_moe_load
        ops.memcpy_d2h(c.moe_load_dst + size_t(i) * size_t(spec.E + 1), a.moe.offsets, size_t(spec.E + 1) * 4);
    ops.residual_forward(c.res[i + 1], a.res2, tmp, static_cast<size_t>(N) * C);
}

void GPT::Impl::moe_mlp_backward(Context& c, int i, const void* w, void* g, const LayerActs& a) {
    const LayerParams& p = lp[i];
    const int N = static_cast<int>(n_rows()), C = cfg.n_embd;
    const MoeShape s = moe_shape();
    const float aux_scale = s.aux_coef * c.dloss * static_cast<float>(N);
    if (nep > 1)
        moe_ep_backward(i, w, g, a, dbuf_c, dres, aux_scale);  // dbuf_c = d ln2 via the experts (gpt_moe_ep.cpp)
    else
        ops.moe_backward(s, a.moe, moe_work, dbuf_c, G(g, p.router), G(g, p.w13), G(g, p.w2), dres, a.ln2,
                         P(w, p.router), P(w, p.w13), P(w, p.w2), aux_scale);  // dbuf_c = d ln2 via the experts
    if (spec.F == 0) return;
    linear_backward(dbuf_f, G(g, p.fcprojw), nullptr, dres, a.fch, P(w, p.fcprojw), nullptr, N, Ft, C);
    ops.swiglu_backward(dbuf_4c, dbuf_f, a.fch_pre, N, Ft);
    linear_backward(tmp, G(g, p.fcw), nullptr, dbuf_4c, a.ln2, P(w, p.fcw), nullptr, N, C, Mt);
    ops.residual_forward(dbuf_c, dbuf_c, tmp, static_cast<size_t>(N) * C);  // + d ln2 via the shared experts
}

int* GPT::Impl::load_slot() {
    const size_t k = static_cast<size_t>(load_pending++);
    if (load_host.size() <= k) load_host.emplace_back(size_t(n_local) * size_t(spec.E + 1), 0);
    return load_host[k].data();
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
        const int* off = m.load_host[size_t(k)].data();
        for (int l = 0; l < m.n_local; ++l)
            for (int e = 0; e < E; ++e)
                mine[size_t(l) * size_t(E) + size_t(e)] += off[l * (E + 1) + e + 1] - off[l * (E + 1) + e];
    }
    m.load_pending = 0;
}

}  // namespace llmtrain
