// tests/optim/test_lr_schedule_clip.cpp — the LR schedule at points with closed-form values, and
// the global gradient norm and clipping factor against double sums and PyTorch's formula.
#include <gtest/gtest.h>

#include <cmath>

#include "model/backend.hpp"
#include "optim/grad_clip.hpp"
#include "optim/lr_schedule.hpp"

namespace llmtrain {
namespace {

TEST(LRSchedule, WarmupThenCosineToMinLr) {
    LRSchedule s;
    s.lr = 1.0f;
    s.min_lr = 0.1f;
    s.warmup_steps = 4;
    s.decay_steps = 16;  // decay over steps 4..16
    EXPECT_FLOAT_EQ(s.at(0), 0.25f);
    EXPECT_FLOAT_EQ(s.at(3), 1.0f);
    EXPECT_FLOAT_EQ(s.at(4), 1.0f);                              // cos(0) = 1
    EXPECT_FLOAT_EQ(s.at(8), 0.1f + 0.9f * 0.75f);               // cos(pi/3) = 1/2
    EXPECT_FLOAT_EQ(s.at(10), 0.55f);                            // cos(pi/2) = 0: the midpoint
    EXPECT_FLOAT_EQ(s.at(12), 0.1f + 0.9f * 0.25f);              // cos(2pi/3) = -1/2
    EXPECT_FLOAT_EQ(s.at(16), 0.1f);
    EXPECT_FLOAT_EQ(s.at(1000), 0.1f);
    for (int i = 5; i < 16; ++i) EXPECT_LT(s.at(i), s.at(i - 1)) << "monotone decay at " << i;
}

TEST(LRSchedule, LinearConstantAndErrors) {
    LRSchedule s;
    s.lr = 2.0f;
    s.min_lr = 0.0f;
    s.warmup_steps = 0;
    s.decay_steps = 10;
    s.decay = parse_lr_decay("linear");
    EXPECT_FLOAT_EQ(s.at(0), 2.0f);
    EXPECT_FLOAT_EQ(s.at(5), 1.0f);
    EXPECT_FLOAT_EQ(s.at(10), 0.0f);
    s.decay = parse_lr_decay("constant");
    EXPECT_FLOAT_EQ(s.at(7), 2.0f);
    EXPECT_FLOAT_EQ(s.at(70), 2.0f);
    EXPECT_EQ(parse_lr_decay("cosine"), LRDecay::cosine);
    EXPECT_THROW(parse_lr_decay("step"), std::invalid_argument);
}

TEST(GradClip, NormAndScale) {
    auto ops = make_backend("cpu", "fp32");
    std::vector<float> g(12345);
    double sq = 0;
    for (size_t i = 0; i < g.size(); ++i) {
        g[i] = std::sin(0.1 * i) * 1e-2f;
        sq += static_cast<double>(g[i]) * g[i];
    }
    float scratch = -1.0f;
    const float norm = grad_norm(*ops, g.data(), g.size(), &scratch);
    EXPECT_NEAR(norm, std::sqrt(sq), 1e-6 * std::sqrt(sq));  // double partial sums, one fp32 rounding
    // torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), clamped to 1.
    EXPECT_FLOAT_EQ(clip_scale(4.0f, 1.0f), 1.0f / (4.0f + 1e-6f));
    EXPECT_EQ(clip_scale(0.5f, 1.0f), 1.0f);
    EXPECT_EQ(clip_scale(100.0f, 0.0f), 1.0f);  // disabled
}

}  // namespace
}  // namespace llmtrain
