// tests/model/test_ops_layernorm.cpp — LayerNorm forward (plain and with the fused residual add)
// against double loops; backward against central finite differences; the residual add exactly.
#include "model/cpu/cpu_ops.hpp"
#include "tests/model/ref_ops.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

constexpr int N = 11, C = 45;

TEST(CpuLayerNorm, ForwardMatchesDouble) {
    CpuOps ops;
    auto x = randu(N * C, 1, -2.0f, 3.0f), w = randu(C, 2), b = randu(C, 3);
    std::vector<float> out(N * C), mean(N), rstd(N);
    ops.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    Vec wm, wr;
    const Vec want = ref_layernorm(to_double(x), to_double(w), to_double(b), N, C, &wm, &wr);
    // Normalized values are O(1); fp32 mean/variance over 45 terms: relative error ~1e-6.
    expect_close("out", out, want, 1e-5, 1e-5);
    expect_close("mean", mean, wm, 1e-5, 1e-6);
    expect_close("rstd", rstd, wr, 1e-5, 1e-6);
}

TEST(CpuLayerNorm, FusedResidualForwardMatchesDouble) {
    CpuOps ops;
    auto a = randu(N * C, 4), bb = randu(N * C, 5), w = randu(C, 6), b = randu(C, 7);
    std::vector<float> res(N * C), out(N * C), mean(N), rstd(N);
    ops.fused_residual_layernorm_forward(res.data(), out.data(), mean.data(), rstd.data(), a.data(), bb.data(),
                                         w.data(), b.data(), N, C);
    Vec sum(N * C);
    for (int i = 0; i < N * C; ++i) {
        sum[i] = static_cast<double>(a[i] + bb[i]);  // the residual is one fp32 add, exact to compare
        EXPECT_EQ(res[i], a[i] + bb[i]);
    }
    expect_close("out", out, ref_layernorm(sum, to_double(w), to_double(b), N, C), 1e-5, 1e-5);
}

TEST(CpuLayerNorm, BackwardMatchesFiniteDifferences) {
    CpuOps ops;
    auto x = randu(N * C, 8, -2.0f, 3.0f), w = randu(C, 9), b = randu(C, 10), R = randu(N * C, 11);
    std::vector<float> out(N * C), mean(N), rstd(N);
    ops.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    // All three gradients accumulate (+=): start from random values.
    auto dx0 = randu(N * C, 12), dw0 = randu(C, 13), db0 = randu(C, 14);
    std::vector<float> dx = dx0, dw = dw0, db = db0;
    ops.layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                           rstd.data(), N, C);
    const Vec Rd = to_double(R);
    auto loss = [&](const Vec& xd, const Vec& wd, const Vec& bd) {
        const Vec y = ref_layernorm(xd, wd, bd, N, C);
        double s = 0;
        for (size_t i = 0; i < y.size(); ++i) s += Rd[i] * y[i];
        return s;
    };
    Vec gx = finite_diff([&](const Vec& v) { return loss(v, to_double(w), to_double(b)); }, to_double(x), 1e-5);
    Vec gw = finite_diff([&](const Vec& v) { return loss(to_double(x), v, to_double(b)); }, to_double(w), 1e-5);
    Vec gb = finite_diff([&](const Vec& v) { return loss(to_double(x), to_double(w), v); }, to_double(b), 1e-5);
    for (size_t i = 0; i < gx.size(); ++i) gx[i] += dx0[i];
    for (int i = 0; i < C; ++i) {
        gw[i] += dw0[i];
        gb[i] += db0[i];
    }
    // fp32 row statistics and sums over 11 rows; FD truncation error ~1e-9.
    expect_close("dinp", dx, gx, 1e-4, 2e-5);
    expect_close("dweight", dw, gw, 1e-4, 2e-5);
    expect_close("dbias", db, gb, 1e-4, 2e-5);
}

TEST(CpuResidual, ForwardIsElementwiseSum) {
    CpuOps ops;
    auto a = randu(1001, 15), b = randu(1001, 16);
    std::vector<float> out(1001);
    ops.residual_forward(out.data(), a.data(), b.data(), out.size());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], a[i] + b[i]) << i;
}

}  // namespace
}  // namespace llmtrain::test
