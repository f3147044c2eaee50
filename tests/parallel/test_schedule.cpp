// tests/parallel/test_schedule.cpp — the 1F1B and GPipe op lists per stage against the paper's
// figure (P = 4, m = 8) and against an independent event-driven reconstruction (every stage greedily
// runs whatever is ready, on a clock), their invariants (each micro-batch once per pass, B after F,
// activations in flight, 1F1B's warm-up), and simulate()'s timeline against the bubble formula
// (P − 1)/(m + P − 1), its dependencies, and deadlock detection. One process, no MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "parallel/schedule.hpp"

namespace llmtrain {
namespace {

constexpr PipelineSchedule kBoth[] = {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe};

const char* name(PipelineSchedule s) { return s == PipelineSchedule::gpipe ? "gpipe" : "1f1b"; }

// (P, m) for P in 1..6 and m in {1, P − 1, P, 2P + 1, 7}, m >= 1, without repeats.
std::vector<std::pair<int, int>> cases() {
    std::vector<std::pair<int, int>> out;
    for (int P = 1; P <= 6; ++P)
        for (int m : {1, P - 1, P, 2 * P + 1, 7})
            if (m >= 1 && std::find(out.begin(), out.end(), std::make_pair(P, m)) == out.end()) out.emplace_back(P, m);
    return out;
}

std::string describe(const std::vector<PipeOp>& ops) {
    std::string s;
    for (const PipeOp& op : ops) s += (op.kind == PipeOp::forward ? " F" : " B") + std::to_string(op.micro_batch);
    return s;
}

TEST(PipelineSchedule, ParsesNamesAndRefusesOthers) {
    EXPECT_EQ(parse_pipeline_schedule("1f1b"), PipelineSchedule::one_f_one_b);
    EXPECT_EQ(parse_pipeline_schedule("gpipe"), PipelineSchedule::gpipe);
    for (const char* bad : {"1F1B", "interleaved", ""}) {
        try {
            parse_pipeline_schedule(bad);
            ADD_FAILURE() << "accepted \"" << bad << "\"";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("pipeline.schedule"), std::string::npos) << e.what();
        }
    }
}

TEST(PipelineSchedule, RefusesBadStageOrMicroBatches) {
    for (auto [stage, stages, m] : {std::tuple{0, 0, 1}, {-1, 2, 1}, {2, 2, 1}, {0, 2, 0}}) {
        EXPECT_THROW(stage_schedule(PipelineSchedule::one_f_one_b, stage, stages, m), std::invalid_argument);
        EXPECT_THROW(max_in_flight(PipelineSchedule::gpipe, stage, stages, m), std::invalid_argument);
    }
}

// Each micro-batch once as F and once as B, B(i) after F(i), and both passes in ascending order (so
// on every link the sender's order equals the receiver's).
TEST(PipelineSchedule, EveryMicroBatchOnceEachWayInOrder) {
    for (PipelineSchedule sch : kBoth)
        for (auto [P, m] : cases())
            for (int s = 0; s < P; ++s) {
                const auto ops = stage_schedule(sch, s, P, m);
                SCOPED_TRACE(std::string(name(sch)) + " P=" + std::to_string(P) + " m=" + std::to_string(m) +
                             " stage " + std::to_string(s) + ":" + describe(ops));
                ASSERT_EQ(ops.size(), 2u * m);
                std::vector<int> fwd, bwd;
                for (const PipeOp& op : ops) (op.kind == PipeOp::forward ? fwd : bwd).push_back(op.micro_batch);
                ASSERT_EQ(fwd.size(), size_t(m));
                ASSERT_EQ(bwd.size(), size_t(m));
                for (int i = 0; i < m; ++i) {
                    EXPECT_EQ(fwd[i], i);
                    EXPECT_EQ(bwd[i], i);
                    const auto f = std::find(ops.begin(), ops.end(), PipeOp{PipeOp::forward, i});
                    const auto b = std::find(ops.begin(), ops.end(), PipeOp{PipeOp::backward, i});
                    EXPECT_LT(f, b) << "B(" << i << ") before F(" << i << ")";
                }
            }
}

// Forwards run minus backwards run never exceeds max_in_flight and reaches it; the paper's bound is
// min(P − s, m) for 1F1B and m for GPipe.
TEST(PipelineSchedule, InFlightBoundedAndReached) {
    for (PipelineSchedule sch : kBoth)
        for (auto [P, m] : cases())
            for (int s = 0; s < P; ++s) {
                SCOPED_TRACE(std::string(name(sch)) + " P=" + std::to_string(P) + " m=" + std::to_string(m) +
                             " stage " + std::to_string(s));
                const int bound = max_in_flight(sch, s, P, m);
                EXPECT_EQ(bound, sch == PipelineSchedule::gpipe ? m : std::min(P - s, m));
                int held = 0, peak = 0;
                for (const PipeOp& op : stage_schedule(sch, s, P, m)) {
                    held += op.kind == PipeOp::forward ? 1 : -1;
                    EXPECT_LE(held, bound);
                    peak = std::max(peak, held);
                }
                EXPECT_EQ(peak, bound);
            }
}

// 1F1B: min(P − s − 1, m) warm-up forwards, then (while forwards remain) one forward and one
// backward alternately, then the min(P − s − 1, m) cool-down backwards: min(P − s, m) forwards come
// before the first backward, no two forwards are adjacent after it, and min(P − s, m) backwards
// (the one paired with the last forward, if any, and the cool-down) follow the last forward.
TEST(PipelineSchedule, OneFOneBWarmupThenAlternation) {
    for (auto [P, m] : cases())
        for (int s = 0; s < P; ++s) {
            const auto ops = stage_schedule(PipelineSchedule::one_f_one_b, s, P, m);
            SCOPED_TRACE("P=" + std::to_string(P) + " m=" + std::to_string(m) + " stage " + std::to_string(s) + ":" +
                         describe(ops));
            auto is_f = [](const PipeOp& o) { return o.kind == PipeOp::forward; };
            const auto first_b = std::find_if_not(ops.begin(), ops.end(), is_f);
            EXPECT_EQ(first_b - ops.begin(), std::min(P - s, m));
            for (auto it = first_b; it + 1 != ops.end(); ++it)
                EXPECT_FALSE(is_f(*it) && is_f(*(it + 1)));
            const auto last_f = std::find_if(ops.rbegin(), ops.rend(), is_f);
            EXPECT_EQ(last_f - ops.rbegin(), std::min(P - s, m)) << "backwards after the last forward";
        }
}

// Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM", arXiv 2104.04473), Figure 4 top: the default 1F1B schedule on 4 devices with 8
// micro-batches, read row by row (device 1 = stage 0), numbered from 1 as in the figure.
TEST(PipelineSchedule, OneFOneBMatchesPaperFigure) {
    const char* figure[4] = {
        "F1 F2 F3 F4 B1 F5 B2 F6 B3 F7 B4 F8 B5 B6 B7 B8",
        "F1 F2 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 F8 B6 B7 B8",
        "F1 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 F8 B7 B8",
        "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 F8 B8",
    };
    for (int s = 0; s < 4; ++s) {
        std::vector<PipeOp> expected;
        std::istringstream in(figure[s]);
        for (std::string tok; in >> tok;)
            expected.push_back({tok[0] == 'F' ? PipeOp::forward : PipeOp::backward, std::stoi(tok.substr(1)) - 1});
        EXPECT_EQ(stage_schedule(PipelineSchedule::one_f_one_b, s, 4, 8), expected) << "stage " << s;
    }
}

// Independent reconstruction: a clock where every op takes one tick. At each tick every stage that
// has an op whose inputs are ready runs one: with backward_first (1F1B: PipeDream-Flush runs a
// backward as soon as it can, and admits a new micro-batch only while it holds fewer than
// `cap` = P − s) or forward_first with cap m (GPipe). Ties go to the lowest micro-batch.
std::vector<std::vector<PipeOp>> event_driven(int P, int m, bool backward_first, bool cap_by_stage) {
    std::vector<std::vector<int>> f_end(P, std::vector<int>(m, -1)), b_end(P, std::vector<int>(m, -1));
    std::vector<std::vector<PipeOp>> order(P);
    std::vector<int> held(P, 0);
    for (int tick = 0, left = 2 * P * m; left > 0; ++tick) {
        if (tick >= 100 * P * m) {
            ADD_FAILURE() << "reference stuck";
            break;
        }
        for (int s = 0; s < P; ++s) {
            auto done = [tick](int end) { return end >= 0 && end <= tick; };
            int f = -1, b = -1;
            for (int i = m - 1; i >= 0; --i) {
                if (f_end[s][i] < 0 && (s == 0 || done(f_end[s - 1][i]))) f = i;
                if (b_end[s][i] < 0 && done(f_end[s][i]) && (s == P - 1 || done(b_end[s + 1][i]))) b = i;
            }
            if (held[s] >= (cap_by_stage ? P - s : m)) f = -1;
            const bool run_b = b >= 0 && (backward_first || f < 0);
            if (run_b) {
                b_end[s][b] = tick + 1;
                --held[s];
                order[s].push_back({PipeOp::backward, b});
            } else if (f >= 0) {
                f_end[s][f] = tick + 1;
                ++held[s];
                order[s].push_back({PipeOp::forward, f});
            }
            left -= run_b || f >= 0;
        }
    }
    return order;
}

TEST(PipelineSchedule, MatchesEventDrivenReconstruction) {
    for (PipelineSchedule sch : kBoth)
        for (auto [P, m] : cases()) {
            const bool one_f_one_b = sch == PipelineSchedule::one_f_one_b;
            const auto ref = event_driven(P, m, one_f_one_b, one_f_one_b);
            for (int s = 0; s < P; ++s)
                EXPECT_EQ(describe(stage_schedule(sch, s, P, m)), describe(ref[s]))
                    << name(sch) << " P=" << P << " m=" << m << " stage " << s;
        }
}

// simulate(): no deadlock; every op waits for its inputs and its stage's previous op, takes its
// duration and starts at the latest of those (no idle time without a cause); every stage idles
// (P − 1)/(m + P − 1) of the makespan (m + P − 1)(t_f + t_b), for equal times and t_b = 2 t_f.
TEST(PipelineSchedule, SimulatedBubbleMatchesFormula) {
    for (PipelineSchedule sch : kBoth)
        for (auto [P, m] : cases())
            for (auto [tf, tb] : {std::pair{1.0, 1.0}, {1.0, 2.0}, {0.37e-3, 0.74e-3}, {0.25, 0.25}}) {
                SCOPED_TRACE(std::string(name(sch)) + " P=" + std::to_string(P) + " m=" + std::to_string(m) +
                             " tf=" + std::to_string(tf) + " tb=" + std::to_string(tb));
                const Timeline tl = simulate(sch, P, m, tf, tb);
                ASSERT_EQ(tl.stages.size(), size_t(P));
                ASSERT_EQ(tl.idle_fraction.size(), size_t(P));
                EXPECT_NEAR(tl.makespan, (m + P - 1) * (tf + tb), 1e-12 * (m + P) * (tf + tb));
                for (int s = 0; s < P; ++s) {
                    EXPECT_NEAR(tl.idle_fraction[s], double(P - 1) / (m + P - 1), 1e-12) << "stage " << s;
                    const auto ops = stage_schedule(sch, s, P, m);
                    ASSERT_EQ(tl.stages[s].size(), ops.size());
                    double prev_end = 0;
                    for (size_t k = 0; k < ops.size(); ++k) {
                        const TimedOp& t = tl.stages[s][k];
                        EXPECT_EQ(t.op, ops[k]);
                        const bool fwd = t.op.kind == PipeOp::forward;
                        EXPECT_NEAR(t.end - t.start, fwd ? tf : tb, 1e-12 * tl.makespan);
                        std::vector<double> ready{prev_end};
                        auto end_of = [&](int stage, PipeOp op) {
                            for (const TimedOp& o : tl.stages[stage])
                                if (o.op == op) return o.end;
                            ADD_FAILURE() << "missing op";
                            return 0.0;
                        };
                        const int i = t.op.micro_batch;
                        if (fwd && s > 0) ready.push_back(end_of(s - 1, {PipeOp::forward, i}));
                        if (!fwd) ready.push_back(end_of(s, {PipeOp::forward, i}));
                        if (!fwd && s < P - 1) ready.push_back(end_of(s + 1, {PipeOp::backward, i}));
                        EXPECT_EQ(t.start, *std::max_element(ready.begin(), ready.end())) << "op " << k;
                        prev_end = t.end;
                    }
                }
            }
}

// Bad orders: stage 0 running all its backwards first waits on its own forwards; a later stage
// taking forwards in reverse order waits for a forward that stage 0 runs only after a backward
// that needs the later stage; a single stage with B(0) before F(0).
TEST(PipelineSchedule, DeadlockIsDetected) {
    const int P = 3, m = 4;
    std::vector<std::vector<PipeOp>> lists;
    for (int s = 0; s < P; ++s) lists.push_back(stage_schedule(PipelineSchedule::one_f_one_b, s, P, m));
    auto backwards_first = lists;
    std::stable_partition(backwards_first[0].begin(), backwards_first[0].end(),
                          [](const PipeOp& o) { return o.kind == PipeOp::backward; });
    auto reversed = lists;
    reversed[1].clear();
    for (int i = m - 1; i >= 0; --i) reversed[1].push_back({PipeOp::forward, i});
    for (int i = 0; i < m; ++i) reversed[1].push_back({PipeOp::backward, i});
    const std::vector<std::vector<PipeOp>> single{{{PipeOp::backward, 0}, {PipeOp::forward, 0}}};
    for (const auto& bad : {backwards_first, reversed, single}) {
        try {
            simulate(bad, 1.0, 2.0);
            ADD_FAILURE() << "no deadlock found; stage 0:" << describe(bad[0]);
        } catch (const std::logic_error& e) {
            EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
        }
    }
}

TEST(PipelineSchedule, SimulateRefusesListsThatAreNotPermutations) {
    const auto good = stage_schedule(PipelineSchedule::gpipe, 0, 1, 2);  // F0 F1 B0 B1
    auto duplicate = good;
    duplicate[1] = {PipeOp::forward, 0};
    auto outside = good;
    outside[3] = {PipeOp::backward, 2};
    for (const auto& bad : {std::vector<std::vector<PipeOp>>{duplicate}, {outside}, {good, {good[0], good[2]}}, {}}) {
        EXPECT_THROW(simulate(bad, 1.0, 1.0), std::invalid_argument);
    }
    try {
        simulate({duplicate}, 1.0, 1.0);
        ADD_FAILURE() << "accepted F0 twice";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("stage 0, position 1"), std::string::npos) << e.what();
    }
    EXPECT_THROW(simulate({good}, 0.0, 1.0), std::invalid_argument);
    EXPECT_THROW(simulate({good}, 1.0, -1.0), std::invalid_argument);
}

}  // namespace
}  // namespace llmtrain
