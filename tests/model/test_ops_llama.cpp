// tests/model/test_ops_llama.cpp — Llama's CPU ops against double-precision loops written here from
// the papers' formulas (RMSNorm: Zhang & Sennrich 2019; rotary positions in HuggingFace's
// rotate-half form: Su et al. 2021; SwiGLU: Shazeer 2020; grouped-query attention: Ainslie et al.
// 2023), and every backward against central finite differences of those loops. Also: grouped-query
// attention with NKV = NH is bitwise the multi-head op, and the embedding without positions.
#include <cmath>

#include "model/cpu/cpu_ops.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

using Vec = std::vector<double>;

/// out (N,C) = x / sqrt(mean(x^2) + eps) * w.
Vec ref_rmsnorm(const Vec& x, const Vec& w, int N, int C, double eps, Vec* rstd = nullptr) {
    Vec out(x.size());
    for (int n = 0; n < N; ++n) {
        double ss = 0;
        for (int c = 0; c < C; ++c) ss += x[size_t(n) * C + c] * x[size_t(n) * C + c];
        const double s = 1.0 / std::sqrt(ss / C + eps);
        for (int c = 0; c < C; ++c) out[size_t(n) * C + c] = x[size_t(n) * C + c] * s * w[c];
        if (rstd) rstd->push_back(s);
    }
    return out;
}

/// Rotates q (NH heads) and k (NKV heads) of each (b,t) row of x (B,T,(NH+2NKV)*HS): the pair
/// (i, i + HS/2) by t * theta^(-2i/HS), HF's rotate_half: x*cos + rotate_half(x)*sin.
Vec ref_rope(Vec x, int B, int T, int NH, int NKV, int HS, double theta) {
    const int half = HS / 2, W = (NH + 2 * NKV) * HS;
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < NH + NKV; ++h) {
                double* r = &x[(size_t(b) * T + t) * W + size_t(h) * HS];
                Vec y(HS);
                for (int d = 0; d < HS; ++d) {
                    const int i = d % half;
                    const double a = t * std::pow(theta, -2.0 * i / HS);
                    const double rot = d < half ? -r[d + half] : r[d - half];  // rotate_half(x)[d]
                    y[d] = r[d] * std::cos(a) + rot * std::sin(a);
                }
                for (int d = 0; d < HS; ++d) r[d] = y[d];
            }
    return x;
}

/// out (N,F) = silu(gate) * up from x (N,2F) = [gate | up].
Vec ref_swiglu(const Vec& x, int N, int F) {
    Vec out(size_t(N) * F);
    for (int n = 0; n < N; ++n)
        for (int f = 0; f < F; ++f) {
            const double g = x[size_t(n) * 2 * F + f], u = x[size_t(n) * 2 * F + F + f];
            out[size_t(n) * F + f] = g / (1.0 + std::exp(-g)) * u;
        }
    return out;
}

/// Causal grouped-query attention, the textbook way: out (B,T,NH*HS) from qkv (B,T,(NH+2NKV)*HS),
/// query head h using key/value head h / (NH/NKV).
Vec ref_gqa(const Vec& qkv, int B, int T, int NH, int NKV, int HS) {
    const int W = (NH + 2 * NKV) * HS, C = NH * HS;
    Vec out(size_t(B) * T * C, 0.0);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const int g = h / (NH / NKV);
            auto q = [&](int t, int d) { return qkv[(size_t(b) * T + t) * W + size_t(h) * HS + d]; };
            auto k = [&](int t, int d) { return qkv[(size_t(b) * T + t) * W + C + size_t(g) * HS + d]; };
            auto v = [&](int t, int d) { return qkv[(size_t(b) * T + t) * W + C + size_t(NKV + g) * HS + d]; };
            for (int i = 0; i < T; ++i) {
                Vec s(i + 1);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= i; ++j) {
                    double d = 0;
                    for (int e = 0; e < HS; ++e) d += q(i, e) * k(j, e);
                    s[j] = d / std::sqrt(double(HS));
                    mx = std::max(mx, s[j]);
                }
                for (double& x : s) sum += (x = std::exp(x - mx));
                for (int e = 0; e < HS; ++e) {
                    double o = 0;
                    for (int j = 0; j <= i; ++j) o += s[j] / sum * v(j, e);
                    out[(size_t(b) * T + i) * C + size_t(h) * HS + e] = o;
                }
            }
        }
    return out;
}

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

constexpr int N = 9, C = 40;
constexpr float kEps = 1e-6f;

TEST(CpuRmsNorm, ForwardAndFusedResidualMatchDouble) {
    CpuOps ops;
    auto x = randu(N * C, 1, -2.0f, 3.0f), w = randu(C, 2), a = randu(N * C, 3);
    std::vector<float> out(N * C), rstd(N), res(N * C), out2(N * C), rstd2(N);
    ops.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
    Vec wr;
    expect_close("out", out, ref_rmsnorm(to_double(x), to_double(w), N, C, kEps, &wr), 1e-5, 1e-6);
    expect_close("rstd", rstd, wr, 1e-5, 0);
    ops.fused_residual_rmsnorm_forward(res.data(), out2.data(), rstd2.data(), a.data(), x.data(), w.data(), N, C, kEps);
    Vec sum(N * C);
    for (int i = 0; i < N * C; ++i) {
        EXPECT_EQ(res[i], a[i] + x[i]);
        sum[i] = double(a[i] + x[i]);
    }
    expect_close("fused out", out2, ref_rmsnorm(sum, to_double(w), N, C, kEps), 1e-5, 1e-6);
}

TEST(CpuRmsNorm, BackwardMatchesFiniteDifferences) {
    CpuOps ops;
    auto x = randu(N * C, 4, -2.0f, 3.0f), w = randu(C, 5), R = randu(N * C, 6);
    std::vector<float> out(N * C), rstd(N);
    ops.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
    auto dx0 = randu(N * C, 7), dw0 = randu(C, 8);  // both accumulate (+=)
    std::vector<float> dx = dx0, dw = dw0;
    ops.rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
    const Vec Rd = to_double(R);
    Vec gx = finite_diff([&](const Vec& v) { return dot(Rd, ref_rmsnorm(v, to_double(w), N, C, kEps)); }, to_double(x),
                         1e-5);
    Vec gw = finite_diff([&](const Vec& v) { return dot(Rd, ref_rmsnorm(to_double(x), v, N, C, kEps)); }, to_double(w),
                         1e-5);
    for (size_t i = 0; i < gx.size(); ++i) gx[i] += dx0[i];
    for (int i = 0; i < C; ++i) gw[i] += dw0[i];
    // fp32 row sums over 40 channels and 9 rows; FD truncation ~1e-9.
    expect_close("dinp", dx, gx, 1e-4, 2e-5);
    expect_close("dweight", dw, gw, 1e-4, 2e-5);
}

// Rotary positions: T = 70 positions so the angles pass several turns; 3 query and 1 key/value heads.
constexpr int RB = 2, RT = 70, RNH = 3, RNKV = 1, RHS = 8;
constexpr float kTheta = 10000.0f;
constexpr int RW = (RNH + 2 * RNKV) * RHS;

TEST(CpuRope, ForwardMatchesDoubleAndLeavesVAlone) {
    CpuOps ops;
    auto x = randu(RB * RT * RW, 9);
    std::vector<float> y = x;
    ops.rope_forward(y.data(), RB, RT, RNH, RNKV, RHS, kTheta);
    // cos/sin rounded to fp32 and one fp32 product-sum: ~2 ulp of |x| <= 1.
    expect_close("rope", y, ref_rope(to_double(x), RB, RT, RNH, RNKV, RHS, kTheta), 0, 3e-7);
    for (int r = 0; r < RB * RT; ++r)
        for (int d = (RNH + RNKV) * RHS; d < RW; ++d) EXPECT_EQ(y[size_t(r) * RW + d], x[size_t(r) * RW + d]);
    // Position 0 is the identity.
    for (int d = 0; d < RW; ++d) EXPECT_EQ(y[d], x[d]);
}

TEST(CpuRope, BackwardMatchesFiniteDifferences) {
    CpuOps ops;
    const int T = 20;  // one forward per element: a shorter sequence
    auto x = randu(T * RW, 10), R = randu(T * RW, 11);
    std::vector<float> d = R;
    ops.rope_backward(d.data(), 1, T, RNH, RNKV, RHS, kTheta);  // d(R . rope(x)) / dx
    const Vec Rd = to_double(R);
    const Vec g = finite_diff([&](const Vec& v) { return dot(Rd, ref_rope(v, 1, T, RNH, RNKV, RHS, kTheta)); },
                              to_double(x), 1e-3);  // linear in x: FD exact up to rounding
    expect_close("drope", d, g, 1e-5, 1e-6);
}

TEST(CpuSwiGlu, ForwardMatchesDoubleAndBackwardFiniteDifferences) {
    CpuOps ops;
    constexpr int F = 13;
    auto x = randu(N * 2 * F, 12, -4.0f, 4.0f), R = randu(N * F, 13);
    std::vector<float> y(N * F), dx(N * 2 * F);
    ops.swiglu_forward(y.data(), x.data(), N, F);
    expect_close("swiglu", y, ref_swiglu(to_double(x), N, F), 1e-6, 1e-6);  // exp to ~3e-7 relative
    ops.swiglu_backward(dx.data(), R.data(), x.data(), N, F);
    const Vec Rd = to_double(R);
    expect_close("dswiglu", dx,
                 finite_diff([&](const Vec& v) { return dot(Rd, ref_swiglu(v, N, F)); }, to_double(x), 1e-5), 1e-5,
                 1e-6);
}

// Grouped-query attention: 4 query heads over 2 key/value heads (groups of 2) and multi-query
// (1 key/value head); T = 70 crosses the CPU kernel's 64-row query blocks.
struct GqaShape {
    int B, T, NH, NKV, HS;
};

TEST(CpuGqa, ForwardMatchesDoubleAndBackwardFiniteDifferences) {
    CpuOps ops;
    for (const GqaShape s : {GqaShape{2, 70, 4, 2, 8}, GqaShape{1, 9, 4, 1, 6}}) {
        SCOPED_TRACE("NH " + std::to_string(s.NH) + " NKV " + std::to_string(s.NKV));
        const int W = (s.NH + 2 * s.NKV) * s.HS, C = s.NH * s.HS;
        auto qkv = randu(size_t(s.B) * s.T * W, 14, -1.5f, 1.5f);
        std::vector<float> out(size_t(s.B) * s.T * C), lse(size_t(s.B) * s.NH * s.T);
        ops.attention_forward_gqa(out.data(), lse.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.HS);
        expect_close("out", out, ref_gqa(to_double(qkv), s.B, s.T, s.NH, s.NKV, s.HS), 1e-5, 2e-6);
        if (s.T > 20) continue;  // the backward's finite differences on the small shape (one forward per element)
        auto R = randu(out.size(), 15);
        std::vector<float> dqkv(qkv.size(), 7.0f);  // overwritten
        ops.attention_backward_gqa(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), s.B, s.T, s.NH, s.NKV,
                                   s.HS);
        const Vec Rd = to_double(R);
        const Vec g = finite_diff(
            [&](const Vec& v) { return dot(Rd, ref_gqa(v, s.B, s.T, s.NH, s.NKV, s.HS)); }, to_double(qkv), 1e-5);
        expect_close("dqkv", dqkv, g, 1e-4, 2e-5);
    }
}

TEST(CpuGqa, BackwardOfGroupsMatchesFiniteDifferencesAcrossQueryBlocks) {
    // Groups of 2 at T = 70 (two query blocks): finite differences on a sample of the elements.
    CpuOps ops;
    const int B = 1, T = 70, NH = 4, NKV = 2, HS = 4, W = (NH + 2 * NKV) * HS, C = NH * HS;
    auto qkv = randu(size_t(B) * T * W, 16, -1.5f, 1.5f), R = randu(size_t(B) * T * C, 17);
    std::vector<float> out(R.size()), lse(size_t(B) * NH * T), dqkv(qkv.size());
    ops.attention_forward_gqa(out.data(), lse.data(), qkv.data(), B, T, NH, NKV, HS);
    ops.attention_backward_gqa(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, NH, NKV, HS);
    const Vec Rd = to_double(R);
    Vec x = to_double(qkv);
    for (size_t i = 3; i < x.size(); i += 37) {  // q, k and v columns of early and late rows
        const double x0 = x[i], h = 1e-5;
        x[i] = x0 + h;
        const double fp = dot(Rd, ref_gqa(x, B, T, NH, NKV, HS));
        x[i] = x0 - h;
        const double fm = dot(Rd, ref_gqa(x, B, T, NH, NKV, HS));
        x[i] = x0;
        const double want = (fp - fm) / (2 * h);
        EXPECT_NEAR(dqkv[i], want, 2e-5 + 1e-4 * std::fabs(want)) << "element " << i;
    }
}

TEST(CpuGqa, MultiHeadIsTheMhaOpBitwise) {
    CpuOps ops;
    const int B = 2, T = 67, NH = 3, HS = 8, C = NH * HS;
    auto qkv = randu(size_t(B) * T * 3 * C, 18), R = randu(size_t(B) * T * C, 19);
    std::vector<float> o1(R.size()), o2(R.size()), l1(size_t(B) * NH * T), l2(l1.size()), d1(qkv.size()),
        d2(qkv.size());
    ops.attention_forward(o1.data(), l1.data(), qkv.data(), B, T, C, NH);
    ops.attention_forward_gqa(o2.data(), l2.data(), qkv.data(), B, T, NH, NH, HS);
    ops.attention_backward(d1.data(), R.data(), qkv.data(), o1.data(), l1.data(), B, T, C, NH);
    ops.attention_backward_gqa(d2.data(), R.data(), qkv.data(), o2.data(), l2.data(), B, T, NH, NH, HS);
    EXPECT_EQ(o1, o2);
    EXPECT_EQ(l1, l2);
    EXPECT_EQ(d1, d2);
}

TEST(CpuEncoder, NoPositionTableIsTheTokenRow) {
    CpuOps ops;
    const int B = 2, T = 5, Cc = 12, V = 7;
    auto wte = randu(V * Cc, 20), dout = randu(B * T * Cc, 21);
    const std::vector<int> ids = {0, 6, 3, 3, 1, 2, 2, 5, 4, 0};
    std::vector<float> out(B * T * Cc), dwte(V * Cc, 0.0f);
    ops.encoder_forward(out.data(), ids.data(), wte.data(), nullptr, B, T, Cc);
    for (int bt = 0; bt < B * T; ++bt)
        for (int c = 0; c < Cc; ++c) EXPECT_EQ(out[size_t(bt) * Cc + c], wte[size_t(ids[bt]) * Cc + c]);
    ops.encoder_backward(dwte.data(), nullptr, dout.data(), ids.data(), B, T, Cc);
    for (int v = 0; v < V; ++v)
        for (int c = 0; c < Cc; ++c) {
            double want = 0;
            for (int bt = 0; bt < B * T; ++bt)
                if (ids[bt] == v) want += dout[size_t(bt) * Cc + c];
            EXPECT_NEAR(dwte[size_t(v) * Cc + c], want, 1e-6);
        }
}

}  // namespace
}  // namespace llmtrain::test
