// model/cpu/moe_layer.cpp — CpuOps::moe_forward / moe_backward and their three steps each way
// (moe_dispatch_*, moe_ffn_*, moe_combine_*; expert parallelism runs the steps apart): one mixture-of-experts layer composed
// from model/moe.hpp's pieces (router, dispatch plan, permute, the experts' SwiGLU FFNs, combine,
// the load-balancing loss; their sources are there). fp32 (the CPU's act dtype); the buffers are
// model/moe_layer.hpp's. Deterministic: each piece sums in a fixed order.
#include <algorithm>

#include "model/cpu/cpu_ops.hpp"
#include "model/moe.hpp"

namespace llmtrain {

namespace {
const float* f(const void* p) { return static_cast<const float*>(p); }
float* f(void* p) { return static_cast<float*>(p); }
MoeRouterOptions router_options(const MoeShape& s) {
    MoeRouterOptions o;
    o.score = s.score;
    o.norm_topk = true;  // Mixtral's Softmax(TopK), Qwen3-MoE's norm_topk_prob, DeepSeek-V3's eq. 13
    return o;
}
/// Grouped rows [offsets[E], N*k) of rows (N*k, C) = 0: a capacity-limited plan's dropped pairs.
void zero_dropped_rows(void* rows, const MoeShape& s, const int* offsets) {
    std::fill(f(rows) + size_t(offsets[s.E]) * size_t(s.C), f(rows) + size_t(s.N) * size_t(s.k) * size_t(s.C), 0.0f);
}
}  // namespace

float CpuOps::moe_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* out, const void* x,
                          const void* w_router, const void* w13, const void* w2, bool combine) {
    const float aux = moe_dispatch_forward(s, a, w, x, w_router);
    moe_ffn_forward(a.yg, a.gu, a.h, a.xg, w13, w2, a.offsets, s.E, s.C, s.F);
    if (combine) moe_combine_forward(s, a, out, a.yg);
    return aux;
}

void CpuOps::moe_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx, void* dw_router,
                          void* dw13, void* dw2, const void* dout, const void* x, const void* w_router,
                          const void* w13, const void* w2, float aux_scale) {
    moe_combine_backward(s, a, w, w.dyg, dout, a.yg);
    moe_ffn_backward(w.dxg, dw13, dw2, w.dgu, w.dh, w.dyg, a.xg, a.gu, a.h, w13, w2, a.offsets, s.E, s.C, s.F);
    if (s.capacity > 0) zero_dropped_rows(w.dxg, s, a.offsets);  // no expert ran them: no gradient to x
    moe_dispatch_backward(s, a, w, dx, dw_router, w.dxg, x, w_router, aux_scale);
}

float CpuOps::moe_dispatch_forward(const MoeShape& s, const MoeActs& a, const MoeWork& w, const void* x,
                                   const void* w_router) {
    moe_router_forward(w.logits, a.scores, a.ids, a.gates, f(x), f(w_router), s.bias, s.N, s.C, s.E, s.k,
                       router_options(s));
    if (s.capacity > 0) {  // Switch Transformer's expert capacity: the dropped pairs' outputs stay zero
        moe_dispatch_plan_capped(w.counts, a.offsets, w.pair_of, a.pos, a.ids, s.N, s.k, s.E, s.capacity);
        zero_dropped_rows(a.yg, s, a.offsets);
    } else {
        moe_dispatch_plan(w.counts, a.offsets, w.pair_of, a.pos, a.ids, s.N, s.k, s.E);
    }
    moe_permute_forward(f(a.xg), f(x), w.pair_of, s.N, s.k, s.C);
    if (s.aux_coef == 0.0f) return 0.0f;
    return moe_aux_loss(nullptr, a.scores, a.ids, s.N, s.E, s.k, s.score, s.aux_coef);
}

void CpuOps::moe_ffn_forward(void* yg, void* gu, void* h, const void* xg, const void* w13, const void* w2,
                             const int* offsets, int E, int C, int F) {
    moe_experts_forward(f(yg), f(gu), f(h), f(xg), f(w13), f(w2), offsets, E, C, F);
}

void CpuOps::moe_combine_forward(const MoeShape& s, const MoeActs& a, void* out, const void* yg) {
    llmtrain::moe_combine_forward(f(out), f(yg), a.gates, a.pos, s.N, s.k, s.C);
}

void CpuOps::moe_combine_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dyg,
                                  const void* dout, const void* yg) {
    llmtrain::moe_combine_backward(f(dyg), w.dgates, f(dout), f(yg), a.gates, a.pos, s.N, s.k, s.C);
}

void CpuOps::moe_ffn_backward(void* dxg, void* dw13, void* dw2, void* dgu, void* dh, const void* dyg,
                              const void* xg, const void* gu, const void* h, const void* w13, const void* w2,
                              const int* offsets, int E, int C, int F) {
    moe_experts_backward(f(dxg), f(dw13), f(dw2), f(dgu), f(dh), f(dyg), f(xg), f(gu), f(h), f(w13), f(w2),
                         offsets, E, C, F);
}

void CpuOps::moe_dispatch_backward(const MoeShape& s, const MoeActs& a, const MoeWork& w, void* dx,
                                   void* dw_router, const void* dxg, const void* x, const void* w_router,
                                   float aux_scale) {
    moe_permute_backward(f(dx), f(dxg), a.pos, s.N, s.k, s.C);
    const float* dscores = nullptr;
    if (aux_scale != 0.0f) {  // d(aux_scale * E * sum f_e P_e) / d scores
        if (s.aux_f != nullptr)  // the fractions over the whole window (context parallelism)
            moe_aux_grad(w.dscores, a.scores, s.aux_f, s.N, s.E, s.score, aux_scale);
        else
            moe_aux_loss(w.dscores, a.scores, a.ids, s.N, s.E, s.k, s.score, aux_scale);
        dscores = w.dscores;
    }
    moe_router_backward(f(dx), f(dw_router), w.logits, dscores, w.dgates, a.scores, a.ids, f(x), f(w_router), s.N,
                        s.C, s.E, s.k, router_options(s));
}

}  // namespace llmtrain
