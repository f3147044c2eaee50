// tests/optim/test_lr_wsd.cpp — the warmup-stable-decay schedule (optim/lr_schedule.hpp) against
// torchtitan's linear_warmup_stable_decay written out here in double precision (0-based steps,
// "+1" in warmup and decay, min_lr absolute instead of torchtitan's factor), at every step of
// several runs; and that a stable-phase checkpoint resumed under a config whose decay starts
// later or earlier gets exactly the new config's closed form from its step on.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/lr_schedule.hpp"

namespace llmtrain {
namespace {

// torchtitan (torchtitan/components/lr_scheduler.py), step by step.
double reference(int step, double lr, double min_lr, int warmup, int total, double ratio, const std::string& type) {
    const int decay = int(std::round(total * ratio));  // Python's round is half-to-even: ratios here avoid .5
    const int warmup_stable = total - decay;
    double f;
    if (step < warmup) return lr * double(step + 1) / warmup;
    if (step < warmup_stable) return lr;
    double p = double(step + 1 - warmup_stable) / decay;
    p = std::min(p, 1.0);
    if (type == "linear") f = 1 - p;
    else if (type == "sqrt") f = 1 - std::sqrt(p);
    else f = 0.5 * (1 + std::cos(M_PI * p));
    return min_lr + (lr - min_lr) * f;
}

LRSchedule wsd(int warmup, int total, float ratio, const std::string& type) {
    LRSchedule s;
    s.lr = 3e-3f;
    s.min_lr = 3e-5f;
    s.warmup_steps = warmup;
    s.decay_steps = total;
    s.decay = parse_lr_decay("wsd");
    s.decay_ratio = ratio;
    s.decay_type = parse_wsd_decay_type(type);
    return s;
}

TEST(WSD, EveryStepMatchesTheClosedForm) {
    for (const std::string type : {"linear", "sqrt", "cosine"})
        for (auto [warmup, total, ratio] : {std::tuple{10, 100, 0.2f}, std::tuple{0, 1000, 0.1f},
                                           std::tuple{50, 777, 0.33f}, std::tuple{5, 40, 1.0f}}) {
            const LRSchedule s = wsd(warmup, total, ratio, type);
            for (int step = 0; step < total + 5; ++step) {
                const double ref = reference(step, 3e-3, 3e-5, warmup, total, ratio, type);
                ASSERT_NEAR(s.at(step), ref, 2e-7 * 3e-3) << type << " " << total << " step " << step;
            }
            EXPECT_FLOAT_EQ(s.at(total - 1), 3e-5f);  // the last step is at min_lr
            if (ratio < 1) {
                EXPECT_FLOAT_EQ(s.at(total - s.wsd_decay_len() - 1), 3e-3f);  // the stable phase's last
            }
        }
    // ratio 0: no decay at all; the stable phase runs to the end.
    EXPECT_FLOAT_EQ(wsd(10, 100, 0.0f, "linear").at(99), 3e-3f);
    EXPECT_THROW(parse_wsd_decay_type("exp"), std::invalid_argument);
}

// A run planned for 1000 steps with the last 10% decaying, checkpointed at step 600 (stable), then
// resumed with max_steps 2000 (decay from 1800) or with decay_ratio 0.35 (decay from 650): up to
// step 600 all three agree, and from 600 on the resumed run's lr is its own config's closed form.
TEST(WSD, StablePhaseCheckpointResumesIntoAnotherDecay) {
    const LRSchedule planned = wsd(100, 1000, 0.1f, "sqrt");
    const LRSchedule later = wsd(100, 2000, 0.1f, "sqrt");
    const LRSchedule earlier = wsd(100, 1000, 0.35f, "sqrt");
    for (int step = 0; step < 600; ++step) {
        ASSERT_EQ(planned.at(step), later.at(step)) << step;
        ASSERT_EQ(planned.at(step), earlier.at(step)) << step;
    }
    for (int step = 600; step < 2000; ++step)
        ASSERT_NEAR(later.at(step), reference(step, 3e-3, 3e-5, 100, 2000, 0.1, "sqrt"), 6e-10) << step;
    for (int step = 600; step < 1000; ++step)
        ASSERT_NEAR(earlier.at(step), reference(step, 3e-3, 3e-5, 100, 1000, 0.35, "sqrt"), 6e-10) << step;
    EXPECT_FLOAT_EQ(later.at(1799), 3e-3f);
    EXPECT_LT(later.at(1800), 3e-3f);
    EXPECT_FLOAT_EQ(earlier.at(649), 3e-3f);
    EXPECT_LT(earlier.at(650), 3e-3f);
}

}  // namespace
}  // namespace llmtrain
