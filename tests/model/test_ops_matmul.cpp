// tests/model/test_ops_matmul.cpp — CPU matmul (+bias, +fused GELU) forward against double loops,
// backward against central finite differences of the double forward. Odd sizes exercise the
// per-thread row/column splits and their tails.
#include "model/cpu/cpu_ops.hpp"
#include "tests/model/ref_ops.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

constexpr int N = 13, C = 37, OC = 67;

TEST(CpuMatmul, ForwardMatchesDouble) {
    CpuOps ops;
    auto x = randu(N * C, 1), w = randu(OC * C, 2), b = randu(OC, 3);
    for (bool gelu : {false, true})
        for (bool bias : {false, true}) {
            std::vector<float> out(N * OC), pre(N * OC);
            ops.matmul_forward(out.data(), gelu ? pre.data() : nullptr, x.data(), w.data(),
                               bias ? b.data() : nullptr, N, C, OC);
            const Vec want = ref_matmul(to_double(x), to_double(w), bias ? to_double(b) : Vec{}, N, C, OC, gelu);
            // fp32 dot products of 37 terms of magnitude <= 1: error well below 1e-5.
            expect_close("out", out, want, 1e-5, 1e-5);
            if (gelu) {
                const Vec want_pre = ref_matmul(to_double(x), to_double(w), bias ? to_double(b) : Vec{}, N, C, OC, false);
                expect_close("pre_gelu", pre, want_pre, 1e-5, 1e-5);
            }
        }
}

TEST(CpuMatmul, BackwardMatchesFiniteDifferences) {
    CpuOps ops;
    auto x = randu(N * C, 4), w = randu(OC * C, 5), b = randu(OC, 6), R = randu(N * OC, 7);
    const Vec Rd = to_double(R);
    auto loss = [&](const Vec& xd, const Vec& wd, const Vec& bd) {
        const Vec y = ref_matmul(xd, wd, bd, N, C, OC, false);
        double s = 0;
        for (size_t i = 0; i < y.size(); ++i) s += Rd[i] * y[i];
        return s;
    };
    // dweight and dbias accumulate: start them from random values.
    auto dw0 = randu(OC * C, 8), db0 = randu(OC, 9);
    std::vector<float> dx(N * C, 123.0f), dw = dw0, db = db0;
    ops.matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), nullptr, N, C, OC);
    const Vec gx = finite_diff([&](const Vec& v) { return loss(v, to_double(w), to_double(b)); }, to_double(x));
    Vec gw = finite_diff([&](const Vec& v) { return loss(to_double(x), v, to_double(b)); }, to_double(w));
    Vec gb = finite_diff([&](const Vec& v) { return loss(to_double(x), to_double(w), v); }, to_double(b));
    for (size_t i = 0; i < gw.size(); ++i) gw[i] += dw0[i];
    for (size_t i = 0; i < gb.size(); ++i) gb[i] += db0[i];
    // fp32 sums of <= 67 products of magnitude <= 1 (FD error of a linear function ~1e-11).
    expect_close("dinp", dx, gx, 1e-5, 2e-5);
    expect_close("dweight", dw, gw, 1e-5, 2e-5);
    expect_close("dbias", db, gb, 1e-5, 2e-5);
}

TEST(CpuMatmul, FusedGeluBackwardMatchesFiniteDifferences) {
    // out = gelu(pre) @ w^T + b; the fused backward gives d/d pre.
    CpuOps ops;
    auto pre = randu(N * C, 10, -3.0f, 3.0f), w = randu(OC * C, 11), R = randu(N * OC, 12);
    std::vector<float> inp(N * C);
    ops.gelu_forward(inp.data(), pre.data(), inp.size());
    std::vector<float> dpre(N * C), dw(OC * C, 0.0f);
    ops.matmul_backward(dpre.data(), dw.data(), nullptr, R.data(), inp.data(), w.data(), pre.data(), N, C, OC);
    const Vec wd = to_double(w), Rd = to_double(R);
    const Vec g = finite_diff(
        [&](const Vec& p) {
            Vec act(p.size());
            for (size_t i = 0; i < p.size(); ++i) act[i] = ref_gelu(p[i]);
            const Vec y = ref_matmul(act, wd, {}, N, C, OC, false);
            double s = 0;
            for (size_t i = 0; i < y.size(); ++i) s += Rd[i] * y[i];
            return s;
        },
        to_double(pre), 1e-5);
    // GELU's derivative in fp32 (vexp-based tanh, ~3e-7 absolute) times sums of magnitude ~10.
    expect_close("dpre", dpre, g, 1e-4, 2e-5);
}

}  // namespace
}  // namespace llmtrain::test
