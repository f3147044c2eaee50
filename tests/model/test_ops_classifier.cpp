// tests/model/test_ops_classifier.cpp — fused softmax + cross-entropy: losses against double loops,
// the in-place logit gradient against central finite differences, padded columns excluded.
#include "model/cpu/cpu_ops.hpp"
#include "tests/model/ref_ops.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

constexpr int N = 9, V = 101, Vp = 128;

std::vector<int> make_targets() {
    std::vector<int> t(N);
    for (int n = 0; n < N; ++n) t[n] = (n * 37 + 5) % V;
    t[N - 1] = V - 1;  // the last real column
    return t;
}

TEST(CpuClassifier, LossesMatchDoubleAndLeaveLogits) {
    CpuOps ops;
    auto logits = randu(N * Vp, 1, -4.0f, 4.0f);
    for (int n = 0; n < N; ++n)  // huge padded logits must not leak into the loss
        for (int j = V; j < Vp; ++j) logits[n * Vp + j] = 1e4f;
    const auto orig = logits;
    const auto targets = make_targets();
    std::vector<float> losses(N);
    ops.fused_classifier(logits.data(), losses.data(), targets.data(), N, V, Vp, 1.0f, false);
    // log-sum-exp over 101 fp32 terms of O(1): absolute error ~1e-6.
    expect_close("losses", losses, ref_cross_entropy(to_double(orig), targets, N, V, Vp), 1e-6, 5e-6);
    EXPECT_EQ(logits, orig) << "write_grad = false must not modify logits";
}

TEST(CpuClassifier, GradientMatchesFiniteDifferences) {
    CpuOps ops;
    auto logits = randu(N * Vp, 2, -4.0f, 4.0f);
    const auto orig = logits;
    const auto targets = make_targets();
    const float dloss = 1.0f / 7.0f;
    std::vector<float> losses(N);
    ops.fused_classifier(logits.data(), losses.data(), targets.data(), N, V, Vp, dloss, true);
    expect_close("losses", losses, ref_cross_entropy(to_double(orig), targets, N, V, Vp), 1e-6, 5e-6);
    // FD over the real columns of L = dloss * sum_n loss_n; padded columns must be exactly 0.
    const Vec g = finite_diff(
        [&](const Vec& x) {
            double s = 0;
            for (double l : ref_cross_entropy(x, targets, N, V, Vp)) s += dloss * l;
            return s;
        },
        to_double(orig), 1e-5);
    // Probabilities in fp32 (relative ~1e-6) times dloss.
    expect_close("dlogits", logits, g, 1e-4, 1e-7);
    for (int n = 0; n < N; ++n)
        for (int j = V; j < Vp; ++j) EXPECT_EQ(logits[n * Vp + j], 0.0f);
}

}  // namespace
}  // namespace llmtrain::test
