// tests/optim/test_host_adamw.cpp — the host AdamW step of the offloaded optimizer: against a
// double-precision loop (tolerance), bit for bit against the CPU backend's Ops::adamw_update (what the
// offloaded step must reproduce), its bf16 grads/params paths against model/bf16.hpp's rounding, and
// the stochastically rounded params of a step rebuilt from its master weights (a resume).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "model/backend.hpp"
#include "model/bf16.hpp"
#include "optim/adamw.hpp"
#include "optim/host_adamw.hpp"

namespace llmtrain {
namespace {

constexpr size_t kN = 10007;  // odd: vector remainders and uneven thread ranges
const HostAdamWStep kStep{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 3};

std::vector<float> randn(size_t n, uint32_t seed, float sd) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, sd);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

struct State {
    std::vector<float> w = randn(kN, 1, 0.02f), m = randn(kN, 2, 1e-3f), v, g = randn(kN, 4, 1e-2f);
    State() {
        v = randn(kN, 3, 1e-3f);
        for (float& x : v) x = x * x;  // second moments are >= 0
    }
};

TEST(HostAdamW, MatchesDoubleReference) {
    State s;
    const State ref = s;
    std::vector<float> p(kN);
    host_adamw(s.w.data(), s.m.data(), s.v.data(), s.g.data(), DType::f32, p.data(), DType::f32, kN, kStep);
    const double b1 = kStep.beta1, b2 = kStep.beta2, lr = kStep.lr;
    for (size_t i = 0; i < kN; ++i) {
        const double g = double(ref.g[i]) * kStep.grad_scale;
        const double m = b1 * ref.m[i] + (1 - b1) * g, v = b2 * ref.v[i] + (1 - b2) * g * g;
        const double mh = m / (1 - std::pow(b1, kStep.t)), vh = v / (1 - std::pow(b2, kStep.t));
        const double w = ref.w[i] * (1 - lr * kStep.weight_decay) - lr * mh / (std::sqrt(vh) + kStep.eps);
        // fp32 vs double: a few ulps of the terms added (sums may cancel, so not of the result).
        ASSERT_NEAR(s.m[i], m, 1e-6 * (b1 * std::fabs(ref.m[i]) + (1 - b1) * std::fabs(g)) + 1e-15) << i;
        ASSERT_NEAR(s.v[i], v, 1e-6 * (b2 * ref.v[i] + (1 - b2) * g * g) + 1e-18) << i;
        ASSERT_NEAR(s.w[i], w, 1e-6 * (std::fabs(ref.w[i]) + lr * std::fabs(mh) / (std::sqrt(vh) + kStep.eps))) << i;
        ASSERT_EQ(p[i], s.w[i]) << "the fp32 params copy is the weights";
    }
}

TEST(HostAdamW, EqualsTheCpuBackendsStepBitForBit) {
    State a, b;
    std::vector<float> pa(kN), pb(kN);
    host_adamw(a.w.data(), a.m.data(), a.v.data(), a.g.data(), DType::f32, pa.data(), DType::f32, kN, kStep);
    auto ops = make_backend("cpu", "fp32");
    ops->adamw_update(pb.data(), b.w.data(), b.g.data(), b.m.data(), b.v.data(), kN, kStep.lr, kStep.beta1,
                      kStep.beta2, kStep.eps, kStep.weight_decay, kStep.grad_scale, kStep.t, 0);
    EXPECT_EQ(std::memcmp(a.w.data(), b.w.data(), kN * 4), 0);
    EXPECT_EQ(std::memcmp(a.m.data(), b.m.data(), kN * 4), 0);
    EXPECT_EQ(std::memcmp(a.v.data(), b.v.data(), kN * 4), 0);
    EXPECT_EQ(std::memcmp(pa.data(), pb.data(), kN * 4), 0);
}

TEST(HostAdamW, Bf16GradsAndParams) {
    // bf16 grads: the same step as fp32 grads holding the widened bf16 values (widening is exact);
    // bf16 params: each the round-to-nearest-even of the updated fp32 weight (model/bf16.hpp).
    State a, b;
    std::vector<uint16_t> g16(kN), p16(kN);
    for (size_t i = 0; i < kN; ++i) {
        g16[i] = f32_to_bf16(a.g[i]);
        b.g[i] = bf16_to_f32(g16[i]);
    }
    a.w[7] = std::numeric_limits<float>::quiet_NaN();  // a NaN weight stays NaN in bf16
    b.w[7] = a.w[7];
    host_adamw(a.w.data(), a.m.data(), a.v.data(), g16.data(), DType::bf16, p16.data(), DType::bf16, kN, kStep);
    host_adamw(b.w.data(), b.m.data(), b.v.data(), b.g.data(), DType::f32, nullptr, DType::f32, kN, kStep);
    EXPECT_EQ(std::memcmp(a.w.data(), b.w.data(), kN * 4), 0);
    EXPECT_EQ(std::memcmp(a.m.data(), b.m.data(), kN * 4), 0);
    for (size_t i = 0; i < kN; ++i) {
        if (i == 7) {
            EXPECT_TRUE(std::isnan(bf16_to_f32(p16[i])));
            continue;
        }
        ASSERT_EQ(p16[i], f32_to_bf16(a.w[i])) << i;
    }
    EXPECT_THROW(host_adamw(a.w.data(), a.m.data(), a.v.data(), g16.data(), DType::u8, nullptr, DType::f32, kN, kStep),
                 std::invalid_argument);
}

TEST(HostAdamW, StochasticRoundingIsUnbiasedAndKeyedByFlatIndex) {
    // lr 0 leaves every weight at x, a value 0.3 of the way from its lower bf16 neighbour to the upper:
    // each param must be one of the two, the upper one with probability 0.3 (binomial, 5 sigma).
    const float lo = 1.0f, hi = bf16_to_f32(uint16_t(f32_to_bf16(lo) + 1)), x = lo + 0.3f * (hi - lo);
    std::vector<float> w(kN, x), m(kN, 0.0f), v(kN, 0.0f), g(kN, 0.5f);
    std::vector<uint16_t> p(kN);
    HostAdamWStep st{0.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 5, true, 1000};
    host_adamw(w.data(), m.data(), v.data(), g.data(), DType::f32, p.data(), DType::bf16, kN, st);
    size_t up = 0;
    for (size_t i = 0; i < kN; ++i) {
        ASSERT_EQ(w[i], x);
        ASSERT_TRUE(p[i] == f32_to_bf16(lo) || p[i] == f32_to_bf16(hi)) << i;
        up += p[i] == f32_to_bf16(hi);
    }
    const double n = double(kN), sd = std::sqrt(n * 0.3 * 0.7);
    EXPECT_NEAR(double(up), 0.3 * n, 5 * sd);
    // Element i at flat index 1000 + i: a call starting 5 elements later reproduces the same bits, so
    // splitting an update (shards, chunks) does not change the rounding.
    std::vector<uint16_t> q(kN - 5);
    st.index0 = 1005;
    host_adamw(w.data() + 5, m.data() + 5, v.data() + 5, g.data() + 5, DType::f32, q.data(), DType::bf16, kN - 5, st);
    for (size_t i = 0; i + 5 < kN; ++i) ASSERT_EQ(q[i], p[i + 5]) << i;
    st.t = 6;  // another step draws other bits
    host_adamw(w.data(), m.data(), v.data(), g.data(), DType::f32, q.data(), DType::bf16, kN - 5, st);
    EXPECT_NE(std::memcmp(q.data(), p.data() + 5, (kN - 5) * 2), 0);
}

TEST(HostAdamW, ParamsOfAStepAreRebuiltFromItsMasterWeights) {
    // A resume sees the master weights after step t and t (optim/adamw.hpp round_params_of_step): it
    // must give the params step t wrote with stochastic rounding, every bit, for a slice starting at
    // any flat index; with t - 1's bits they differ. lr 3e-3 on weights of 0.02 moves every weight
    // off the bf16 grid, so nearly every element is a draw.
    State s;
    std::vector<uint16_t> p(kN);
    HostAdamWStep st = kStep;
    st.stochastic_rounding = true;
    st.index0 = 77777;
    host_adamw(s.w.data(), s.m.data(), s.v.data(), s.g.data(), DType::f32, p.data(), DType::bf16, kN, st);
    std::vector<float> r(s.w.begin() + 10, s.w.end());
    round_params_of_step(r.data(), r.size(), st.index0 + 10, st.t);
    for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r[i], bf16_to_f32(p[i + 10])) << i;
    std::vector<float> other(s.w.begin() + 10, s.w.end());
    round_params_of_step(other.data(), other.size(), st.index0 + 10, st.t - 1);
    size_t differ = 0;
    for (size_t i = 0; i < r.size(); ++i) differ += other[i] != r[i];
    EXPECT_GT(differ, r.size() / 10);  // P(differ) = 2f(1 - f) at fraction f: a third for uniform f
}

}  // namespace
}  // namespace llmtrain
