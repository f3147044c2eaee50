// tests/app/test_plan_tp.cpp — the planner's tensor-parallel axis (app/plan/plan.hpp make_plan, plan_problem;
// parallel/planner.hpp ring_allreduce_seconds), each against an independent reference:
//  - the ring all-reduce time against the step-by-step ring (2(n − 1) steps of bytes/n each);
//  - a layer's and the end stages' seconds at tp 2 against the tp = 1 times over 2 plus the
//    all-reduces counted by hand (docs/distributed.md "Planner");
//  - memory forces tp > 1: a cap between what tp 1 and tp 2 need with every layer recomputed (both
//    counted by estimate_memory) is met at tp 2 only, without a pipeline;
//  - the widths tried: divisors of the world inside a node; one the heads do not split over is listed
//    as skipped with the reason;
//  - a slow link makes tp lose to pp, and the tp 2 step grows by exactly the closed-form all-reduce
//    time of the micro-batches' collectives.
// FLOP-derived layer times (--device-tflops), so nothing depends on this machine's speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "app/config/config.hpp"
#include "app/state/model_state.hpp"
#include "app/plan/plan.hpp"

using namespace llmtrain;

namespace {

/// tiny.toml (n_head 4, n_embd 256, vocab 8192: splits over tp 1, 2, 4) with n_layer 4, seq_len 128.
Config tiny(std::vector<std::string> extra = {}) {
    std::vector<std::string> sets = {"model.n_layer=4", "model.seq_len=128", "training.micro_batch_size=4",
                                     "training.grad_accum_steps=2"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return load_config(LLMTRAIN_CONFIGS "/tiny.toml", sets);
}

const StageModel& a_of(const PlanProblem& p, size_t s) { return p.stages[s]; }

/// The candidate of r at (tp, pp) without context parallelism, or nullptr.
const PlanCandidate* candidate(const PlanResult& r, int tp, int pp) {
    for (const PlanCandidate& c : r.candidates)
        if (c.tp == tp && c.cp == 1 && c.pp == pp && c.skipped.empty()) return &c;
    return nullptr;
}

PlanOptions options(const Config& cfg, int world, double memory, double link_gbps) {
    PlanOptions o;
    o.world = world;
    o.device_memory = memory;
    o.link_gbps = link_gbps;
    o.times = flops_layer_times(cfg, 0.1, 100);
    return o;
}

}  // namespace

TEST(PlanTp, RingAllReduceTimeEqualsTheStepByStepRing) {
    // A ring all-reduce over n ranks: n − 1 reduce-scatter steps and n − 1 all-gather steps, in each
    // of which every rank sends one chunk of bytes/n over its link.
    const double bytes = 3.0 * 1048576, gbps = 25;
    for (int n = 1; n <= 16; ++n) {
        double t = 0;
        for (int step = 0; step < 2 * (n - 1); ++step) t += (bytes / n) / (gbps * 1e9);
        EXPECT_NEAR(ring_allreduce_seconds(bytes, n, gbps), t, 1e-12 * std::max(t, 1.0)) << "ranks " << n;
    }
    EXPECT_EQ(ring_allreduce_seconds(bytes, 1, gbps), 0.0);
    EXPECT_THROW(ring_allreduce_seconds(bytes, 0, gbps), std::invalid_argument);
    EXPECT_THROW(ring_allreduce_seconds(bytes, 2, 0), std::invalid_argument);
}

TEST(PlanTp, StageTimesAreTheSplitWorkPlusMegatronsAllReduces) {
    const double link = 20;
    Config c1 = tiny({"parallel.pp=2"}), c2 = tiny({"parallel.pp=2", "parallel.tp=2"});
    c1.parallel.dp = 1;
    c2.parallel.dp = 1;
    const PlanOptions o = options(c1, 4, 64.0 * 1073741824, link);
    const PlanProblem p1 = plan_problem(c1, run_shape(c1, 2), o), p2 = plan_problem(c2, run_shape(c2, 4), o);
    ASSERT_EQ(p1.stages.size(), 2u);
    ASSERT_EQ(p2.stages.size(), 2u);
    // One (B·T, C) fp32 activation all-reduced over 2 ranks: each rank moves 2·(1/2) of it.
    const double N = 4.0 * 128, act = N * 256 * 4, ar = act / (link * 1e9);
    const double gather = N * 3 * 4 / (link * 1e9);  // (N,3) fp32 from the other rank
    const LayerTimes& t = o.times;
    for (size_t s = 0; s < 2; ++s) {
        const StageModel &a = p1.stages[s], &b = p2.stages[s];
        EXPECT_NEAR(b.fwd_layer, a.fwd_layer / 2 + 2 * ar, 1e-12) << s;
        EXPECT_NEAR(b.bwd_layer, a.bwd_layer / 2 + 2 * ar, 1e-12) << s;
        EXPECT_NEAR(b.recompute, a.recompute / 2 + ar, 1e-12) << s;  // model/gpt.cpp repeats the first only
    }
    const double send = act / (link * 1e9);
    EXPECT_NEAR(p2.stages[0].fwd0, t.embed_fwd + ar + send, 1e-12);
    EXPECT_NEAR(p2.stages[0].bwd0, t.embed_bwd, 1e-12);
    EXPECT_NEAR(p2.stages[1].fwd0, t.head_fwd / 2 + gather, 1e-12);
    EXPECT_NEAR(p2.stages[1].bwd0, t.head_bwd / 2 + ar + send, 1e-12);
    // --tp-link-gbps: the TP collectives at their own link, the pipeline send at link_gbps.
    PlanOptions fast = o;
    fast.tp_link_gbps = 8 * link;
    const PlanProblem p3 = plan_problem(c2, run_shape(c2, 4), fast);
    EXPECT_NEAR(p3.stages[0].fwd_layer, p1.stages[0].fwd_layer / 2 + 2 * ar / 8, 1e-12);
    EXPECT_NEAR(p3.stages[0].fwd0, t.embed_fwd + ar / 8 + send, 1e-12);
    // Sequence parallelism: all-gathers and reduce-scatters, half an all-reduce each (model/gpt.cpp):
    // a layer 4 halves forward, 6 backward, 3 recompute; each end's collective one half.
    Config c_sp = tiny({"parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=true"});
    c_sp.parallel.dp = 1;
    const PlanProblem ps = plan_problem(c_sp, run_shape(c_sp, 4), o);
    for (size_t s = 0; s < 2; ++s) {
        EXPECT_NEAR(ps.stages[s].fwd_layer, a_of(p1, s).fwd_layer / 2 + 4 * ar / 2, 1e-12) << s;
        EXPECT_NEAR(ps.stages[s].bwd_layer, a_of(p1, s).bwd_layer / 2 + 6 * ar / 2, 1e-12) << s;
        EXPECT_NEAR(ps.stages[s].recompute, a_of(p1, s).recompute / 2 + 3 * ar / 2, 1e-12) << s;
        EXPECT_LT(ps.stages[s].mem_layer, p2.stages[s].mem_layer) << s;  // the residual stream split too
    }
    EXPECT_NEAR(ps.stages[0].fwd0, t.embed_fwd + ar / 2 + send, 1e-12);
    EXPECT_NEAR(ps.stages[0].bwd0, t.embed_bwd + ar / 2, 1e-12);
    EXPECT_NEAR(ps.stages[1].fwd0, t.head_fwd / 2 + ar / 2 + gather, 1e-12);
    EXPECT_NEAR(ps.stages[1].bwd0, t.head_bwd / 2 + ar / 2 + send, 1e-12);
    // Memory per rank shrinks with tp (split weights and activations): every stage's base and per layer.
    for (size_t s = 0; s < 2; ++s) {
        EXPECT_LT(p2.stages[s].mem0, p1.stages[s].mem0) << s;
        EXPECT_LT(p2.stages[s].mem_layer, p1.stages[s].mem_layer) << s;
    }
}

TEST(PlanTp, MemoryForcesTp2WithoutAPipeline) {
    // Every layer recomputed, pp 1, on 2 ranks: the least tp 1 (dp 2) and tp 2 can need, counted.
    Config all = tiny({"activation_checkpoint.layers_per_stage=[4]"});
    all.parallel.dp = 2;
    const double need1 = double(device_bytes(estimate_memory(all, at_zero_stage(run_shape(all, 2), 0, 0))));
    all.parallel.tp = 2;
    all.parallel.dp = 1;
    const double need2 = double(device_bytes(estimate_memory(all, at_zero_stage(run_shape(all, 2), 0, 0))));
    ASSERT_LT(need2, need1);
    const double cap = 0.5 * (need1 + need2);
    PlanOptions o = options(tiny(), 2, cap / 0.9, 50);  // the default margin keeps 10% free
    o.pp = 1;
    o.escalate = false;
    const PlanResult r = make_plan(tiny(), o);
    const PlanCandidate* t1 = candidate(r, 1, 1);
    const PlanCandidate* t2 = candidate(r, 2, 1);
    ASSERT_NE(t1, nullptr);
    ASSERT_NE(t2, nullptr);
    EXPECT_FALSE(t1->choice.feasible);
    ASSERT_TRUE(t2->choice.feasible);
    ASSERT_GE(r.best, 0);
    const PlanCandidate& b = r.candidates[size_t(r.best)];
    EXPECT_EQ(b.tp, 2);
    EXPECT_EQ(b.dp, 1);
    EXPECT_EQ(b.micro_batches, 4);  // the global batch of 2 x 4 x dp 2 at dp 1
    ASSERT_EQ(b.stages.size(), 1u);
    EXPECT_LE(double(b.stages[0].device_bytes), cap);
    EXPECT_EQ(apply_plan(tiny(), b).parallel.tp, 2);
    const auto toml = plan_toml(b);
    EXPECT_NE(std::find(toml.begin(), toml.end(), "tp = 2"), toml.end());
    // With twice the memory tp 1 fits too.
    o.device_memory = 2 * need1 / 0.9;
    const PlanCandidate* loose = candidate(make_plan(tiny(), o), 1, 1);
    ASSERT_NE(loose, nullptr);
    EXPECT_TRUE(loose->choice.feasible);
}

TEST(PlanTp, SlowLinkMakesTpLoseToPp) {
    // 2 ranks, memory to spare: tp 2 against pp 2 (both dp 1, 4 micro-batches).
    const Config cfg = tiny();
    auto plan = [&](double link) {
        PlanOptions o = options(cfg, 2, 64.0 * 1073741824, link);
        return make_plan(cfg, o);
    };
    const PlanResult fast = plan(1000), slow = plan(0.05);
    const PlanCandidate *tp_fast = candidate(fast, 2, 1), *pp_fast = candidate(fast, 1, 2);
    const PlanCandidate *tp_slow = candidate(slow, 2, 1), *pp_slow = candidate(slow, 1, 2);
    for (const PlanCandidate* c : {tp_fast, pp_fast, tp_slow, pp_slow}) {
        ASSERT_NE(c, nullptr);
        ASSERT_TRUE(c->choice.feasible);
    }
    EXPECT_LT(tp_fast->step_seconds, pp_fast->step_seconds);
    EXPECT_GT(tp_slow->step_seconds, pp_slow->step_seconds);
    ASSERT_GE(slow.best, 0);
    EXPECT_NE(slow.candidates[size_t(slow.best)].tp, 2);
    // Nothing recomputed with memory to spare; the tp 2 step then grows by the micro-batches'
    // collectives alone: per micro-batch 4 all-reduces per layer, the embedding's and the head's,
    // and the loss's all-gather (dp 1: the tail has no collective).
    ASSERT_EQ(tp_fast->choice.ckpt, std::vector<int>{0});
    ASSERT_EQ(tp_slow->choice.ckpt, std::vector<int>{0});
    const double N = 4.0 * 128, act = N * 256 * 4, per_gbps = (4 * 4 + 2) * act + N * 3 * 4;  // bytes moved
    const double expected = tp_slow->micro_batches * per_gbps * (1 / (0.05e9) - 1 / 1000e9);
    EXPECT_NEAR(tp_slow->step_seconds - tp_fast->step_seconds, expected, 1e-9 * expected);
}

TEST(PlanTp, WidthsAreTheWorldsDivisorsInsideANode) {
    EXPECT_EQ(tp_widths(8, 8, 0), (std::vector<int>{1, 2, 4, 8}));
    EXPECT_EQ(tp_widths(64, 8, 0), (std::vector<int>{1, 2, 4, 8}));
    EXPECT_EQ(tp_widths(12, 8, 0), (std::vector<int>{1, 2, 4}));  // 3, 6 do not divide a node of 8
    EXPECT_EQ(tp_widths(6, 6, 0), (std::vector<int>{1, 2, 3, 6}));
    EXPECT_EQ(tp_widths(8, 8, 4), std::vector<int>{4});
    // tiny.toml's 4 heads do not split over 8: that width is listed as skipped, the others planned.
    const Config cfg = tiny();
    const PlanResult r = make_plan(cfg, options(cfg, 8, 64.0 * 1073741824, 50));
    bool skipped8 = false;
    for (const PlanCandidate& c : r.candidates) {
        EXPECT_TRUE(c.tp == 1 || c.tp == 2 || c.tp == 4 || c.tp == 8) << c.tp;
        if (c.tp == 8) {
            skipped8 = c.skipped == "n_head 4 is not a multiple of tp 8";
            EXPECT_TRUE(skipped8) << c.skipped;
        } else if (c.skipped.empty()) {
            EXPECT_EQ(c.tp * c.pp * c.dp * c.cp, 8);
        }
    }
    EXPECT_TRUE(skipped8);
    for (int tp : {1, 2, 4}) EXPECT_NE(candidate(r, tp, 1), nullptr) << tp;
}

// An untied Llama at pp 2: the last stage's LM head is lm_head.weight in the final unit, so it keeps
// no copy of the token table (a tied head does: wte is its weight). The params counted by
// estimate_memory (ZeRO stage 0) for the last stage (the real run's allocations on the dry backend) are exactly
// its layers' and final unit's elements at 4 bytes (fp32) untied, and those plus unit 0's tied;
// the first stage holds unit 0 either way.
TEST(PlanTp, UntiedLlamaLastStageHoldsNoTokenTable) {
    for (bool tied : {true, false}) {
        SCOPED_TRACE(tied ? "tied" : "untied");
        Config c = load_config(LLMTRAIN_CONFIGS "/llama-tiny.toml",
                               {"model.n_layer=4", "model.seq_len=64", "training.micro_batch_size=2",
                                "training.grad_accum_steps=2", "parallel.pp=2", "training.precision=\"fp32\"",
                                std::string("model.tie_embeddings=") + (tied ? "true" : "false")});
        const ParamLayout L(gpt_config_of(c));
        const auto& u = L.units();  // 0: token table, 1..4: layers, 5: the final norm (+ lm_head untied)
        const std::vector<StageLayers> plan = stage_plan_of(c);
        ASSERT_EQ(plan.size(), 2u);
        auto elems = [&](int l0, int l1) {  // the units of layers [l0, l1)
            size_t n = 0;
            for (int l = l0; l < l1; ++l) n += u[size_t(1 + l)].numel;
            return n;
        };
        const size_t want_first = 4 * (u[0].numel + elems(plan[0].l0, plan[0].l1));
        const size_t want_last = 4 * (elems(plan[1].l0, plan[1].l1) + u[5].numel + (tied ? u[0].numel : 0));
        EXPECT_EQ(estimate_memory(c, at_zero_stage(run_shape(c, 2), 0, 0), 0)[size_t(MemCategory::params)], want_first);  // ZeRO 0, stage 0
        EXPECT_EQ(estimate_memory(c, at_zero_stage(run_shape(c, 2), 0, 0), 1)[size_t(MemCategory::params)], want_last);   // stage 1
    }
}
