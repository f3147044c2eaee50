// tests/app/test_sampler.cpp — top-k sampling with temperature (app/sampler.hpp).
// Reference: the closed-form distribution softmax(top-k logits / temperature), computed here in
// double; 40,000 seeded draws must match each probability within 5 standard errors (the draws are
// deterministic for the fixed seed, so the test cannot flake).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "app/sampler.hpp"

using namespace llmtrain;

TEST(Sampler, TopKTemperatureFollowsTheSoftmax) {
    const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 2.5f, 2.9f, 0.0f};
    const int k = 3;
    const float temp = 0.7f;
    // Top 3: ids 1 (3.0), 4 (2.9), 3 (2.5).
    const int top[3] = {1, 4, 3};
    double z = 0, p[3];
    for (int i = 0; i < 3; ++i) z += p[i] = std::exp(logits[top[i]] / temp);
    std::mt19937_64 rng(42);
    const int N = 40000;
    std::vector<int> count(logits.size(), 0);
    for (int n = 0; n < N; ++n) ++count[sample_top_k(logits, k, temp, rng)];
    for (int i = 0; i < 3; ++i) {
        const double q = p[i] / z, se = std::sqrt(q * (1 - q) / N);
        EXPECT_NEAR(double(count[top[i]]) / N, q, 5 * se) << "id " << top[i];
    }
    EXPECT_EQ(count[0] + count[2] + count[5], 0);  // outside the top k: never drawn
}

TEST(Sampler, GreedyAndFullVocabularyEdges) {
    std::mt19937_64 rng(1);
    const std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f};
    EXPECT_EQ(sample_top_k(logits, 2, 0.0f, rng), 1);  // argmax, lower id wins ties
    // k = 0 and k > V mean the whole vocabulary: every id appears.
    std::vector<int> seen(4, 0);
    const std::vector<float> flat = {0, 0, 0, 0};
    for (int n = 0; n < 400; ++n) ++seen[sample_top_k(flat, 0, 1.0f, rng)];
    for (int i = 0; i < 4; ++i) EXPECT_GT(seen[i], 50) << i;
    for (int n = 0; n < 100; ++n) EXPECT_LT(sample_top_k(flat, 99, 1.0f, rng), 4);
    // Same state, same draws: the sequence depends only on the rng state.
    std::mt19937_64 a(7), b(7);
    for (int n = 0; n < 50; ++n) EXPECT_EQ(sample_top_k(logits, 3, 1.3f, a), sample_top_k(logits, 3, 1.3f, b));
}
