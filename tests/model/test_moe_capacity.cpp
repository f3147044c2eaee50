// tests/model/test_moe_capacity.cpp — capacity-limited routing (model.moe.capacity_factor; Switch
// Transformer's expert capacity, Fedus et al. 2021 §2.2), model/moe.hpp moe_dispatch_plan_capped and
// the CPU layer (CpuOps::moe_forward / moe_backward with MoeShape::capacity). References written here:
//  - the plan against a double loop over experts and pairs (exact integers): expert e keeps the
//    first `capacity` pairs i = n*k + j with ids[i] = e, in pair order; the dropped pairs follow the
//    kept ones in pair order; pos is pair_of's inverse; capacity 0 or >= N*k is the dropless plan;
//  - the layer's output against a double loop that skips the dropped pairs (1e-5 relative + 1e-6),
//    with a token whose pairs were all dropped giving exactly 0 (the residual carries it);
//  - its gradients (x, router, experts; loss sum(out * R) + the balance loss, alpha 0.1) against
//    central finite differences of that double loop with the selection held (1e-4 relative +
//    1e-5, as test_moe_ops' dropless case).
#include <algorithm>
#include <cmath>

#include "model/backend.hpp"
#include "model/moe.hpp"
#include "model/moe_layer.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

using Vec = std::vector<double>;

TEST(MoeCapacity, PlanKeepsEachExpertsFirstPairsInPairOrder) {
    const int N = 13, k = 2, E = 5, P = N * k;
    std::vector<int> ids(P);
    for (int i = 0; i < P; ++i) ids[i] = (i * 7 + i / 3) % 4;  // expert 4 gets none; 0..3 uneven
    for (int cap : {0, 1, 3, 5, P}) {
        SCOPED_TRACE("capacity " + std::to_string(cap));
        std::vector<int> counts(E), offsets(E + 1), pair_of(P), pos(P);
        const int dropped = moe_dispatch_plan_capped(counts.data(), offsets.data(), pair_of.data(), pos.data(),
                                                     ids.data(), N, k, E, cap);
        std::vector<int> want_pairs, dropped_pairs, want_counts(E, 0);
        for (int e = 0; e < E; ++e)  // the reference: per expert, its pairs in order, the first cap kept
            for (int i = 0; i < P; ++i)
                if (ids[i] == e) {
                    if (cap <= 0 || want_counts[e] < cap) ++want_counts[e], want_pairs.push_back(i);
                }
        for (int i = 0; i < P; ++i) {
            int before = 0;
            for (int q = 0; q < i; ++q) before += ids[q] == ids[i];
            if (cap > 0 && before >= cap) dropped_pairs.push_back(i);
        }
        want_pairs.insert(want_pairs.end(), dropped_pairs.begin(), dropped_pairs.end());
        EXPECT_EQ(counts, want_counts);
        EXPECT_EQ(dropped, int(dropped_pairs.size()));
        EXPECT_EQ(offsets[E], P - dropped);
        for (int e = 0; e < E; ++e) EXPECT_EQ(offsets[e + 1] - offsets[e], want_counts[e]);
        EXPECT_EQ(pair_of, want_pairs);
        for (int p = 0; p < P; ++p) EXPECT_EQ(pos[pair_of[p]], p);
        if (cap == 0 || cap == P) {  // no drop: the dropless plan
            std::vector<int> c2(E), o2(E + 1), pf2(P), ps2(P);
            moe_dispatch_plan(c2.data(), o2.data(), pf2.data(), ps2.data(), ids.data(), N, k, E);
            EXPECT_EQ(pair_of, pf2);
            EXPECT_EQ(offsets, o2);
        }
    }
    EXPECT_GT(moe_dispatch_plan_capped(std::vector<int>(E).data(), std::vector<int>(E + 1).data(),
                                       std::vector<int>(P).data(), std::vector<int>(P).data(), ids.data(), N, k, E, 2),
              0);
}

constexpr int N = 16, C = 8, E = 4, K = 2, F = 6;
constexpr double kAlpha = 0.1;

/// The layer in double with the selection `ids` held: softmax scores, gates renormalized over the k
/// (Mixtral), pair i = n*k + j kept when fewer than cap earlier pairs chose its expert; out (N,C) =
/// sum over kept pairs of gate * SwiGLU_e(x[n]); returns sum(out * R) + alpha E sum_e f_e P_e (f over
/// all pairs: the balance loss counts the routing before the drop).
double ref_layer(const Vec& x, const Vec& wr, const Vec& w13, const Vec& w2, const Vec& R, const std::vector<int>& ids,
                 int cap, Vec* out_p = nullptr) {
    Vec out(size_t(N) * C, 0.0), f(E, 0.0), Pm(E, 0.0);
    std::vector<int> seen(E, 0);
    for (int n = 0; n < N; ++n) {
        Vec s(E);
        double z = 0;
        for (int e = 0; e < E; ++e) {
            double l = 0;
            for (int i = 0; i < C; ++i) l += x[size_t(n) * C + i] * wr[size_t(e) * C + i];
            s[e] = std::exp(l);
            z += s[e];
        }
        for (int e = 0; e < E; ++e) s[e] /= z, Pm[e] += s[e] / N;
        double sel = 0;
        for (int j = 0; j < K; ++j) sel += s[ids[size_t(n) * K + j]];
        for (int j = 0; j < K; ++j) {
            const int e = ids[size_t(n) * K + j];
            f[e] += 1.0 / (N * K);
            if (seen[e]++ >= cap) continue;  // dropped
            Vec h(F);
            for (int q = 0; q < F; ++q) {
                double g = 0, u = 0;
                for (int i = 0; i < C; ++i) {
                    g += w13[(size_t(e) * 2 * F + q) * C + i] * x[size_t(n) * C + i];
                    u += w13[(size_t(e) * 2 * F + F + q) * C + i] * x[size_t(n) * C + i];
                }
                h[q] = g / (1.0 + std::exp(-g)) * u;
            }
            for (int i = 0; i < C; ++i) {
                double y = 0;
                for (int q = 0; q < F; ++q) y += w2[(size_t(e) * C + i) * F + q] * h[q];
                out[size_t(n) * C + i] += s[e] / sel * y;
            }
        }
    }
    double loss = 0;
    for (size_t i = 0; i < out.size(); ++i) loss += out[i] * R[i];
    for (int e = 0; e < E; ++e) loss += kAlpha * E * f[e] * Pm[e];
    if (out_p) *out_p = out;
    return loss;
}

TEST(MoeCapacity, LayerDropsPairsPastCapacityAndMatchesFiniteDifferences) {
    auto ops = make_backend("cpu", "fp32");
    std::vector<float> x = randu(size_t(N) * C, 41), wr = randu(size_t(E) * C, 42),
                       w13 = randu(size_t(E) * 2 * F * C, 43, -0.5f, 0.5f), w2 = randu(size_t(E) * C * F, 44, -0.5f, 0.5f),
                       R = randu(size_t(N) * C, 45);
    for (int i = 0; i < C; ++i) wr[i] += 1.5f * x[i];  // expert 0 favoured by token 0 and its like: overflow
    MoeShape s;
    s.N = N, s.C = C, s.E = E, s.k = K, s.F = F, s.aux_coef = float(kAlpha);
    s.capacity = int(std::ceil(0.5 * N * K / E));  // capacity factor 0.5: 4 pairs per expert
    const size_t P = size_t(N) * K;
    std::vector<float> scores(size_t(N) * E), gates(P), xg(P * C), gu(P * 2 * F), hh(P * F), yg(P * C, NAN);
    std::vector<int> ids(P), offsets(E + 1), pos(P), counts(E), pair_of(P);
    std::vector<float> logits(size_t(N) * E), dgates(P), dscores(size_t(N) * E), dyg(P * C), dxg(P * C, NAN),
        dgu(P * 2 * F), dh(P * F);
    MoeActs a{scores.data(), ids.data(), gates.data(), offsets.data(), pos.data(), xg.data(), gu.data(), hh.data(),
              yg.data()};
    MoeWork w{logits.data(), counts.data(), pair_of.data(), dgates.data(), dscores.data(), dyg.data(), dxg.data(),
              dgu.data(), dh.data()};
    std::vector<float> out(size_t(N) * C, 0.0f);
    const float aux = ops->moe_forward(s, a, w, out.data(), x.data(), wr.data(), w13.data(), w2.data(), true);
    const int dropped = int(P) - offsets[E];
    ASSERT_GT(dropped, 0) << "the case must overflow an expert";
    Vec ref_out;
    const double ref_loss = ref_layer(to_double(x), to_double(wr), to_double(w13), to_double(w2), to_double(R), ids,
                                      s.capacity, &ref_out);
    expect_close("out", out, ref_out, 1e-5, 1e-6);
    double loss = aux;
    for (size_t i = 0; i < out.size(); ++i) loss += double(out[i]) * R[i];
    EXPECT_NEAR(loss, ref_loss, 1e-5 * std::abs(ref_loss));
    int all_dropped = 0;  // tokens whose k pairs were all dropped: exactly zero output
    for (int n = 0; n < N; ++n) {
        bool none = true;
        for (int j = 0; j < K; ++j) none = none && pos[size_t(n) * K + j] >= offsets[E];
        if (!none) continue;
        ++all_dropped;
        for (int i = 0; i < C; ++i) EXPECT_EQ(out[size_t(n) * C + i], 0.0f) << "token " << n;
    }
    std::vector<float> dx(x.size()), dwr(wr.size(), 0.0f), dw13(w13.size(), 0.0f), dw2(w2.size(), 0.0f);
    ops->moe_backward(s, a, w, dx.data(), dwr.data(), dw13.data(), dw2.data(), R.data(), x.data(), wr.data(),
                      w13.data(), w2.data(), float(kAlpha));
    const Vec xd = to_double(x), wrd = to_double(wr), w13d = to_double(w13), w2d = to_double(w2), Rd = to_double(R);
    const int cap = s.capacity;
    expect_close("dx", dx, finite_diff([&](const Vec& v) { return ref_layer(v, wrd, w13d, w2d, Rd, ids, cap); }, xd),
                 1e-4, 1e-5);
    expect_close("dw_router", dwr,
                 finite_diff([&](const Vec& v) { return ref_layer(xd, v, w13d, w2d, Rd, ids, cap); }, wrd), 1e-4, 1e-5);
    expect_close("dw13", dw13,
                 finite_diff([&](const Vec& v) { return ref_layer(xd, wrd, v, w2d, Rd, ids, cap); }, w13d), 1e-4, 1e-5);
    expect_close("dw2", dw2,
                 finite_diff([&](const Vec& v) { return ref_layer(xd, wrd, w13d, v, Rd, ids, cap); }, w2d), 1e-4, 1e-5);
    RecordProperty("dropped_pairs", dropped);
    RecordProperty("tokens_all_dropped", all_dropped);
}

}  // namespace
}  // namespace llmtrain::test
