// tests/model/test_moe_ops.cpp — the mixture-of-experts CPU ops (model/moe.hpp) against
// double-precision loops written here from the papers (Mixtral: softmax top-k, renormalized;
// Qwen3-MoE: norm_topk_prob on or off; DeepSeek-V3: sigmoid affinities, a selection-only bias,
// normalized gates, route scale; Switch/DeepSeek-V3 balance loss alpha * E * sum f_e P_e), each
// forward piece on its own, and the whole layer's backward (router + dispatch + experts + combine +
// aux loss) against central finite differences of a double forward that never permutes (each token
// runs its k experts directly). Also: ties in the top-k, an expert with no tokens, k = 1 and 2, and
// the experts' forward/backward bitwise alike with 1 and 2 OpenMP threads.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <omp.h>

#include "model/moe.hpp"
#include "tests/model/moe_layer_run.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

using Vec = std::vector<double>;

/// The reference router for one row: logits, scores, the k selected experts (repeated argmax of
/// score + bias, strict >, so a tie keeps the lower index), gates.
struct RefRoute {
    Vec logits, scores, gates;
    std::vector<int> ids;
};

RefRoute ref_route(const Cfg& c, const Vec& x, const Vec& wr, const Vec& bias, int n,
                   const int* fixed_ids) {
    RefRoute r;
    r.logits.assign(c.E, 0.0);
    for (int e = 0; e < c.E; ++e)
        for (int i = 0; i < c.C; ++i) r.logits[e] += x[size_t(n) * c.C + i] * wr[size_t(e) * c.C + i];
    r.scores.resize(c.E);
    if (c.opt.score == MoeScore::softmax) {
        double z = 0;
        for (int e = 0; e < c.E; ++e) z += std::exp(r.logits[e]);
        for (int e = 0; e < c.E; ++e) r.scores[e] = std::exp(r.logits[e]) / z;
    } else {
        for (int e = 0; e < c.E; ++e) r.scores[e] = 1.0 / (1.0 + std::exp(-r.logits[e]));
    }
    std::vector<bool> taken(c.E, false);
    for (int j = 0; j < c.k; ++j) {
        int best = -1;
        if (fixed_ids) {
            best = fixed_ids[size_t(n) * c.k + j];
        } else {
            for (int e = 0; e < c.E; ++e) {
                if (taken[e]) continue;
                const double v = r.scores[e] + (c.bias ? bias[e] : 0.0);
                if (best < 0 || v > r.scores[best] + (c.bias ? bias[best] : 0.0)) best = e;
            }
        }
        taken[best] = true;
        r.ids.push_back(best);
    }
    double sum = 0;
    for (int e : r.ids) sum += r.scores[e];
    for (int e : r.ids) r.gates.push_back(c.opt.route_scale * r.scores[e] / (c.opt.norm_topk ? sum : 1.0));
    return r;
}

/// Expert e's SwiGLU FFN on one row: w2[e] (silu(w1[e] x) * (w3[e] x)), w13[e] = [w1; w3] (2F, C).
Vec ref_ffn(const Cfg& c, const Vec& w13, const Vec& w2, int e, const double* xr) {
    Vec h(c.F), y(c.C, 0.0);
    for (int f = 0; f < c.F; ++f) {
        double g = 0, u = 0;
        for (int i = 0; i < c.C; ++i) {
            g += w13[(size_t(e) * 2 * c.F + f) * c.C + i] * xr[i];
            u += w13[(size_t(e) * 2 * c.F + c.F + f) * c.C + i] * xr[i];
        }
        h[f] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int i = 0; i < c.C; ++i)
        for (int f = 0; f < c.F; ++f) y[i] += w2[(size_t(e) * c.C + i) * c.F + f] * h[f];
    return y;
}

/// The whole layer in double: out (N,C) = sum_j gate * FFN_{id}(x[n]); returns sum(out * R) +
/// alpha * E * sum_e f_e P_e. With fixed_ids the selection is held (finite differences must not
/// cross a top-k switch); ids_out gets the selection.
double ref_layer(const Cfg& c, const Vec& x, const Vec& wr, const Vec& w13, const Vec& w2,
                 const Vec& bias, const Vec& R, const int* fixed_ids, Vec* out_p = nullptr,
                 std::vector<int>* ids_out = nullptr) {
    double loss = 0;
    Vec f(c.E, 0.0), P(c.E, 0.0), out(size_t(c.N) * c.C, 0.0);
    for (int n = 0; n < c.N; ++n) {
        const RefRoute r = ref_route(c, x, wr, bias, n, fixed_ids);
        if (ids_out) ids_out->insert(ids_out->end(), r.ids.begin(), r.ids.end());
        double ssum = 0;
        for (double s : r.scores) ssum += s;
        for (int e = 0; e < c.E; ++e)
            P[e] += (c.opt.score == MoeScore::softmax ? r.scores[e] : r.scores[e] / ssum) / c.N;
        for (int j = 0; j < c.k; ++j) {
            f[r.ids[j]] += 1.0 / (c.N * c.k);
            const Vec y = ref_ffn(c, w13, w2, r.ids[j], &x[size_t(n) * c.C]);
            for (int i = 0; i < c.C; ++i) out[size_t(n) * c.C + i] += r.gates[j] * y[i];
        }
    }
    for (size_t i = 0; i < out.size(); ++i) loss += out[i] * R[i];
    for (int e = 0; e < c.E; ++e) loss += c.alpha * c.E * f[e] * P[e];
    if (out_p) *out_p = out;
    return loss;
}

Cfg softmax_cfg(int k, bool norm) {
    Cfg c;
    c.k = k;
    c.opt.norm_topk = norm;
    return c;
}

Cfg sigmoid_cfg(int k) {
    Cfg c;
    c.k = k;
    c.opt.score = MoeScore::sigmoid;
    c.opt.route_scale = 2.5f;
    c.bias = true;
    return c;
}

std::vector<Cfg> all_cfgs() {
    return {softmax_cfg(1, true), softmax_cfg(2, true), softmax_cfg(2, false), sigmoid_cfg(1),
            sigmoid_cfg(2)};
}

std::string name(const Cfg& c) {
    return std::string(c.opt.score == MoeScore::softmax ? "softmax" : "sigmoid") + " k" +
           std::to_string(c.k) + (c.opt.norm_topk ? " norm" : " raw");
}

TEST(MoeOps, ForwardPiecesAgainstDoubleLoops) {
    for (const Cfg& c : all_cfgs())
        for (bool zero_last : {false, true}) {
            SCOPED_TRACE(name(c) + (zero_last ? " zero-token expert" : ""));
            const Data d = make_data(c, 11, zero_last);
            const LayerRun r = run_layer(c, d);
            const Vec x = to_double(d.x), wr = to_double(d.wr), bias = to_double(d.bias);
            Vec logits, scores, gates;
            for (int n = 0; n < c.N; ++n) {
                const RefRoute rr = ref_route(c, x, wr, bias, n, nullptr);
                logits.insert(logits.end(), rr.logits.begin(), rr.logits.end());
                scores.insert(scores.end(), rr.scores.begin(), rr.scores.end());
                gates.insert(gates.end(), rr.gates.begin(), rr.gates.end());
                for (int j = 0; j < c.k; ++j) EXPECT_EQ(r.ids[size_t(n) * c.k + j], rr.ids[j]) << n;
            }
            expect_close("logits", r.logits, logits, 1e-5, 1e-6);
            expect_close("scores", r.scores, scores, 1e-5, 1e-7);
            expect_close("gates", r.gates, gates, 1e-5, 1e-7);
            if (zero_last) {
                EXPECT_EQ(r.counts[c.E - 1], 0);
            }
            // The plan: counts, offsets, and each expert's pairs in increasing order (stable).
            for (int e = 0; e < c.E; ++e) {
                std::vector<int> want;
                for (int i = 0; i < c.N * c.k; ++i)
                    if (r.ids[i] == e) want.push_back(i);
                ASSERT_EQ(r.counts[e], int(want.size()));
                ASSERT_EQ(r.offsets[e + 1] - r.offsets[e], int(want.size()));
                for (size_t t = 0; t < want.size(); ++t) {
                    EXPECT_EQ(r.pair_of[r.offsets[e] + t], want[t]);
                    EXPECT_EQ(r.pos[want[t]], r.offsets[e] + int(t));
                }
            }
            // Permuted rows, each expert's FFN per pair, and the combined output.
            Vec out;
            const double loss = ref_layer(c, x, wr, to_double(d.w13), to_double(d.w2), bias,
                                          to_double(d.R), nullptr, &out);
            for (int i = 0; i < c.N * c.k; ++i) {
                const int p = r.pos[i], n = i / c.k;
                for (int ch = 0; ch < c.C; ++ch)
                    ASSERT_EQ(r.xg[size_t(p) * c.C + ch], d.x[size_t(n) * c.C + ch]);
                const Vec y = ref_ffn(c, to_double(d.w13), to_double(d.w2), r.ids[i], &x[size_t(n) * c.C]);
                const std::vector<float> got(r.yg.begin() + size_t(p) * c.C, r.yg.begin() + size_t(p + 1) * c.C);
                expect_close("expert row", got, y, 1e-5, 1e-6);
            }
            expect_close("out", r.out, out, 1e-5, 1e-6);
            // The aux loss: ref_layer's loss less sum(out * R).
            double lin = 0;
            for (size_t i = 0; i < out.size(); ++i) lin += out[i] * double(d.R[i]);
            EXPECT_NEAR(r.aux, loss - lin, 1e-6 * std::fabs(loss - lin) + 1e-7);
        }
}

TEST(MoeOps, WholeLayerBackwardAgainstFiniteDifferences) {
    for (const Cfg& c : all_cfgs())
        for (bool zero_last : {false, true}) {
            SCOPED_TRACE(name(c) + (zero_last ? " zero-token expert" : ""));
            const Data d = make_data(c, 23, zero_last);
            const LayerRun r = run_layer(c, d);
            const Vec x = to_double(d.x), wr = to_double(d.wr), w13 = to_double(d.w13),
                      w2 = to_double(d.w2), bias = to_double(d.bias), R = to_double(d.R);
            const int* ids = r.ids.data();  // hold the selection (checked equal to the double one above)
            const auto gx = finite_diff([&](const Vec& v) { return ref_layer(c, v, wr, w13, w2, bias, R, ids); }, x);
            const auto gwr = finite_diff([&](const Vec& v) { return ref_layer(c, x, v, w13, w2, bias, R, ids); }, wr);
            const auto g13 = finite_diff([&](const Vec& v) { return ref_layer(c, x, wr, v, w2, bias, R, ids); }, w13);
            const auto g2 = finite_diff([&](const Vec& v) { return ref_layer(c, x, wr, w13, v, bias, R, ids); }, w2);
            expect_close("dx", r.dx, gx, 1e-4, 1e-5);
            expect_close("dw_router", r.dwr, gwr, 1e-4, 1e-5);
            expect_close("dw13", r.dw13, g13, 1e-4, 1e-5);
            expect_close("dw2", r.dw2, g2, 1e-4, 1e-5);
            if (zero_last) {  // the unused expert's weights get exactly no gradient
                const size_t e = size_t(c.E - 1);
                for (size_t i = e * 2 * c.F * c.C; i < (e + 1) * 2 * c.F * c.C; ++i) ASSERT_EQ(r.dw13[i], 0.0f);
                for (size_t i = e * c.C * c.F; i < (e + 1) * c.C * c.F; ++i) ASSERT_EQ(r.dw2[i], 0.0f);
            }
        }
}

TEST(MoeOps, TopKTiesGoToTheLowerIndex) {
    // Rows 1 and 3 of w_router are equal and the largest: equal logits, so expert 1 is chosen
    // before 3 (k = 1 takes 1; k = 2 takes 1 then 3). With sigmoid, a bias that makes 0 and 2 tie.
    const int N = 3, C = 4, E = 5;
    std::vector<float> x = randu(size_t(N) * C, 5, 0.5f, 1.0f);
    std::vector<float> wr(size_t(E) * C, 0.0f);
    for (int i = 0; i < C; ++i) wr[1 * C + i] = wr[3 * C + i] = 1.0f;
    std::vector<float> logits(N * E), scores(N * E), gates(N * 2);
    std::vector<int> ids(N * 2);
    for (int k : {1, 2}) {
        moe_router_forward(logits.data(), scores.data(), ids.data(), gates.data(), x.data(), wr.data(),
                           nullptr, N, C, E, k, {});
        for (int n = 0; n < N; ++n) {
            EXPECT_EQ(ids[size_t(n) * k], 1);
            if (k == 2) {
                EXPECT_EQ(ids[size_t(n) * k + 1], 3);
                EXPECT_EQ(gates[size_t(n) * k], gates[size_t(n) * k + 1]);
                EXPECT_NEAR(gates[size_t(n) * k], 0.5f, 1e-7);
            } else {
                EXPECT_EQ(gates[n], 1.0f);
            }
        }
    }
    // All logits zero (sigmoid 0.5 each); bias (0.1, 0, 0.1, 0, -0.1): 0 then 2, gates 0.5 each
    // (the bias does not enter the gates).
    std::fill(wr.begin(), wr.end(), 0.0f);
    const std::vector<float> bias{0.1f, 0.0f, 0.1f, 0.0f, -0.1f};
    MoeRouterOptions opt;
    opt.score = MoeScore::sigmoid;
    moe_router_forward(logits.data(), scores.data(), ids.data(), gates.data(), x.data(), wr.data(),
                       bias.data(), N, C, E, 2, opt);
    for (int n = 0; n < N; ++n) {
        EXPECT_EQ(ids[size_t(n) * 2], 0);
        EXPECT_EQ(ids[size_t(n) * 2 + 1], 2);
        EXPECT_EQ(gates[size_t(n) * 2], 0.5f);
    }
    // All equal without a bias: experts 0 and 1.
    moe_router_forward(logits.data(), scores.data(), ids.data(), gates.data(), x.data(), wr.data(),
                       nullptr, N, C, E, 2, opt);
    for (int n = 0; n < N; ++n) EXPECT_EQ(ids[size_t(n) * 2] * 10 + ids[size_t(n) * 2 + 1], 1);
}

TEST(MoeOps, LinearPiecesAreTransposes) {
    // <permute(x), a> = <x, permute^T(a)> and <combine(y), b> with dyg/dgates: the backwards are the
    // exact transposes (checked in double against the float results).
    const int N = 5, k = 2, C = 3, E = 3;
    const std::vector<int> ids{2, 0, 0, 2, 1, 0, 2, 1, 0, 2};
    std::vector<int> counts(E), offsets(E + 1), pair_of(N * k), pos(N * k);
    moe_dispatch_plan(counts.data(), offsets.data(), pair_of.data(), pos.data(), ids.data(), N, k, E);
    EXPECT_EQ(counts, (std::vector<int>{4, 2, 4}));
    EXPECT_EQ(pair_of, (std::vector<int>{1, 2, 5, 8, 4, 7, 0, 3, 6, 9}));
    const auto x = randu(size_t(N) * C, 1), a = randu(size_t(N) * k * C, 2), gates = randu(N * k, 3);
    std::vector<float> xg(a.size()), dx(x.size());
    moe_permute_forward(xg.data(), x.data(), pair_of.data(), N, k, C);
    moe_permute_backward(dx.data(), a.data(), pos.data(), N, k, C);
    double l = 0, r = 0;
    for (size_t i = 0; i < a.size(); ++i) l += double(xg[i]) * a[i];
    for (size_t i = 0; i < x.size(); ++i) r += double(x[i]) * dx[i];
    EXPECT_NEAR(l, r, 1e-5);
    std::vector<float> out(x.size(), 0.0f), dyg(a.size()), dgates(N * k);
    moe_combine_forward(out.data(), a.data(), gates.data(), pos.data(), N, k, C);
    moe_combine_backward(dyg.data(), dgates.data(), x.data(), a.data(), gates.data(), pos.data(), N, k, C);
    l = r = 0;
    for (size_t i = 0; i < x.size(); ++i) l += double(out[i]) * x[i];
    for (size_t i = 0; i < a.size(); ++i) r += double(dyg[i]) * a[i];
    EXPECT_NEAR(l, r, 1e-5);
    double gl = 0;  // dgates . gates = <out, dout> as well (out is linear in the gates)
    for (int i = 0; i < N * k; ++i) gl += double(dgates[i]) * gates[i];
    EXPECT_NEAR(gl, l, 1e-5);
}

TEST(MoeOps, Errors) {
    std::vector<float> f(64);
    std::vector<int> ids{0, 4}, i(16);
    EXPECT_THROW(moe_router_forward(f.data(), f.data(), i.data(), f.data(), f.data(), f.data(), nullptr,
                                    2, 2, 2, 3, {}),
                 std::invalid_argument);
    EXPECT_THROW(moe_router_forward(f.data(), f.data(), i.data(), f.data(), f.data(), f.data(), f.data(),
                                    2, 2, 2, 1, {}),
                 std::invalid_argument);  // a bias with softmax
    EXPECT_THROW(moe_dispatch_plan(i.data(), i.data(), i.data(), i.data(), ids.data(), 1, 2, 4),
                 std::invalid_argument);  // id 4 of 4 experts
    EXPECT_THROW(moe_aux_loss(nullptr, f.data(), ids.data(), 2, 4, 1, MoeScore::softmax, 1.0f),
                 std::invalid_argument);
}

TEST(MoeOps, AuxLossIsAlphaAtPerfectBalance) {
    // Uniform softmax scores and every expert chosen equally often: f_e = 1/E, P_e = 1/E.
    const int N = 4, E = 4, k = 2;
    std::vector<float> scores(N * E, 0.25f);
    const std::vector<int> ids{0, 1, 2, 3, 1, 0, 3, 2};
    EXPECT_NEAR(moe_aux_loss(nullptr, scores.data(), ids.data(), N, E, k, MoeScore::softmax, 0.01f), 0.01f, 1e-8);
    // All on expert 0 with P_0 = 1: E * 1 * 1 = E.
    std::vector<float> one(N * E, 0.0f);
    for (int n = 0; n < N; ++n) one[n * E] = 1.0f;
    const std::vector<int> zeros(N, 0);
    EXPECT_NEAR(moe_aux_loss(nullptr, one.data(), zeros.data(), N, E, 1, MoeScore::softmax, 1.0f), 4.0f, 1e-6);
}

TEST(MoeOps, ExpertsDoNotDependOnTheThreadCount) {
    // Each expert's rows are computed by one thread: 1 and 2 threads give the same bits.
    Cfg c;
    c.N = 64;
    c.C = 16;
    c.E = 6;
    c.F = 24;
    const Data d = make_data(c, 7, true);
    const LayerRun r = run_layer(c, d);  // the plan and the grouped rows
    const auto dyg = randu(r.yg.size(), 8);
    auto experts = [&](int threads) {
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        std::vector<std::vector<float>> o{std::vector<float>(r.yg.size()), std::vector<float>(r.gu.size()),
                                          std::vector<float>(r.h.size()), std::vector<float>(r.xg.size()),
                                          std::vector<float>(d.w13.size(), 0.0f), std::vector<float>(d.w2.size(), 0.0f)};
        std::vector<float> dgu(r.gu.size()), dh(r.h.size());
        moe_experts_forward(o[0].data(), o[1].data(), o[2].data(), r.xg.data(), d.w13.data(), d.w2.data(),
                            r.offsets.data(), c.E, c.C, c.F);
        moe_experts_backward(o[3].data(), o[4].data(), o[5].data(), dgu.data(), dh.data(), dyg.data(),
                             r.xg.data(), o[1].data(), o[2].data(), d.w13.data(), d.w2.data(),
                             r.offsets.data(), c.E, c.C, c.F);
        omp_set_num_threads(saved);
        return o;
    };
    const auto one = experts(1), two = experts(2);
    for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << "output " << i;
}

}  // namespace
}  // namespace llmtrain::test
