// tests/model/test_ops_attention.cpp — causal attention forward (out and log-sum-exp) against the
// naive double-precision form, backward against central finite differences. T crosses the
// 64-row query block of attention.cpp so both full and partial blocks run.
#include "model/cpu/cpu_ops.hpp"
#include "tests/model/ref_ops.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

TEST(CpuAttention, ForwardMatchesDouble) {
    CpuOps ops;
    const int B = 2, T = 130, NH = 4, C = 64;
    auto qkv = randu(static_cast<size_t>(B) * T * 3 * C, 1, -2.0f, 2.0f);
    std::vector<float> out(static_cast<size_t>(B) * T * C), lse(static_cast<size_t>(B) * NH * T);
    ops.attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    Vec want_lse;
    const Vec want = ref_attention(to_double(qkv), B, T, C, NH, &want_lse);
    // Outputs are convex combinations of values in [-2,2]; fp32 softmax/sums over <= 130 keys.
    expect_close("out", out, want, 1e-5, 1e-5);
    expect_close("lse", lse, want_lse, 1e-6, 1e-5);
}

TEST(CpuAttention, BackwardMatchesFiniteDifferences) {
    CpuOps ops;
    const int B = 1, T = 67, NH = 2, C = 8;
    const size_t n_qkv = static_cast<size_t>(B) * T * 3 * C, n_out = static_cast<size_t>(B) * T * C;
    auto qkv = randu(n_qkv, 2, -2.0f, 2.0f), R = randu(n_out, 3);
    std::vector<float> out(n_out), lse(static_cast<size_t>(B) * NH * T), dqkv(n_qkv, 7.0f);
    ops.attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    ops.attention_backward(dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
    const Vec Rd = to_double(R);
    const Vec g = finite_diff(
        [&](const Vec& q) {
            const Vec y = ref_attention(q, B, T, C, NH);
            double s = 0;
            for (size_t i = 0; i < y.size(); ++i) s += Rd[i] * y[i];
            return s;
        },
        to_double(qkv), 1e-5);
    // Gradients are O(1); fp32 recomputed probabilities (relative ~1e-6) over <= 67 keys.
    expect_close("dqkv", dqkv, g, 1e-4, 2e-5);
}

}  // namespace
}  // namespace llmtrain::test
