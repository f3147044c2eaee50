// tests/model/moe_layer_run.hpp — the MoE layer of model/moe.hpp run the way the model will run it
// (router, dispatch plan, permute, experts, combine; then the aux loss and every backward, for the
// loss sum(out * R) + aux), shared by test_moe_ops.cpp (double loops, finite differences) and
// test_moe_torch.cpp (the float64 PyTorch layer of moe_ref.py).
#pragma once
#include <cstdint>
#include <vector>

#include "model/moe.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {

/// Sizes and router options of one case: N tokens, C channels, E experts, k per token, F the
/// experts' hidden width; bias: a selection bias (sigmoid only); alpha: the aux-loss coefficient.
struct Cfg {
    int N = 8, C = 8, E = 4, k = 2, F = 6;
    MoeRouterOptions opt{};
    bool bias = false;
    double alpha = 0.1;
};

/// Random layer data; x[:,0] = 1 and w_router[E-1][0] = -6 so that the last expert is never chosen
/// (an expert with no tokens) when zero_last.
struct Data {
    std::vector<float> x, wr, w13, w2, bias, R;
};

inline Data make_data(const Cfg& c, uint64_t seed, bool zero_last) {
    Data d;
    d.x = randu(size_t(c.N) * c.C, seed);
    d.wr = randu(size_t(c.E) * c.C, seed + 1);
    d.w13 = randu(size_t(c.E) * 2 * c.F * c.C, seed + 2, -0.5f, 0.5f);
    d.w2 = randu(size_t(c.E) * c.C * c.F, seed + 3, -0.5f, 0.5f);
    d.bias = randu(c.E, seed + 4, -0.2f, 0.2f);
    d.R = randu(size_t(c.N) * c.C, seed + 5);
    if (zero_last) {
        for (int n = 0; n < c.N; ++n) d.x[size_t(n) * c.C] = 1.0f;
        d.wr[size_t(c.E - 1) * c.C] = -6.0f;
    }
    return d;
}

/// The layer's float pipeline, forward and backward, as the model will run it.
struct LayerRun {
    std::vector<float> logits, scores, gates, xg, gu, h, yg, out, dx, dwr, dw13, dw2;
    std::vector<int> ids, counts, offsets, pair_of, pos;
    float aux = 0;
};

inline LayerRun run_layer(const Cfg& c, const Data& d) {
    LayerRun r;
    const size_t P = size_t(c.N) * c.k;
    r.logits.resize(size_t(c.N) * c.E);
    r.scores.resize(r.logits.size());
    r.ids.resize(P);
    r.gates.resize(P);
    moe_router_forward(r.logits.data(), r.scores.data(), r.ids.data(), r.gates.data(), d.x.data(),
                       d.wr.data(), c.bias ? d.bias.data() : nullptr, c.N, c.C, c.E, c.k, c.opt);
    r.counts.resize(c.E);
    r.offsets.resize(c.E + 1);
    r.pair_of.resize(P);
    r.pos.resize(P);
    moe_dispatch_plan(r.counts.data(), r.offsets.data(), r.pair_of.data(), r.pos.data(), r.ids.data(),
                      c.N, c.k, c.E);
    r.xg.resize(P * c.C);
    r.gu.resize(P * 2 * c.F);
    r.h.resize(P * c.F);
    r.yg.resize(P * c.C);
    moe_permute_forward(r.xg.data(), d.x.data(), r.pair_of.data(), c.N, c.k, c.C);
    moe_experts_forward(r.yg.data(), r.gu.data(), r.h.data(), r.xg.data(), d.w13.data(), d.w2.data(),
                        r.offsets.data(), c.E, c.C, c.F);
    r.out.assign(size_t(c.N) * c.C, 0.0f);
    moe_combine_forward(r.out.data(), r.yg.data(), r.gates.data(), r.pos.data(), c.N, c.k, c.C);
    // Backward of sum(out * R) + aux.
    std::vector<float> dscores(r.scores.size()), dyg(r.yg.size()), dgates(P), dxg(r.xg.size()),
        dgu(r.gu.size()), dh(r.h.size()), dlogits(r.logits.size());
    r.aux = moe_aux_loss(dscores.data(), r.scores.data(), r.ids.data(), c.N, c.E, c.k, c.opt.score,
                         float(c.alpha));
    moe_combine_backward(dyg.data(), dgates.data(), d.R.data(), r.yg.data(), r.gates.data(),
                         r.pos.data(), c.N, c.k, c.C);
    r.dw13.assign(d.w13.size(), 0.0f);
    r.dw2.assign(d.w2.size(), 0.0f);
    r.dwr.assign(d.wr.size(), 0.0f);
    r.dx.assign(d.x.size(), 0.0f);
    moe_experts_backward(dxg.data(), r.dw13.data(), r.dw2.data(), dgu.data(), dh.data(), dyg.data(),
                         r.xg.data(), r.gu.data(), r.h.data(), d.w13.data(), d.w2.data(),
                         r.offsets.data(), c.E, c.C, c.F);
    moe_permute_backward(r.dx.data(), dxg.data(), r.pos.data(), c.N, c.k, c.C);
    moe_router_backward(r.dx.data(), r.dwr.data(), dlogits.data(), dscores.data(), dgates.data(),
                        r.scores.data(), r.ids.data(), d.x.data(), d.wr.data(), c.N, c.C, c.E, c.k,
                        c.opt);
    return r;
}

}  // namespace llmtrain::test
