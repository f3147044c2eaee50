// tests/app/test_plan_moe.cpp — the planner with a mixture of experts (app/plan/plan.hpp make_plan,
// plan_problem; app/plan/plan_times.hpp flops_layer_times; llmtrain-plan), each against an
// independent reference:
//  - the search: only tp 1, cp 1 (what the MoE model runs) at every depth; a dp that parallel.ep
//    does not divide is a skipped row with the reason, not an exception; a forced tp / cp > 1 is
//    refused;
//  - a layer's FLOP-derived seconds count its active parameters, against a hand count from
//    moe-tiny.toml's shape (attention, two RMSNorms, the router, top_k of the 8 SwiGLU experts)
//    plus the attention's 6·T·C per token, exact to 1e-12 relative;
//  - ep 2 adds, per layer, 2 all-to-alls in forward, 2 in backward and 2 when recomputed, each
//    (ep − 1)/ep of the rank's B·T·top_k rows of n_embd fp32 (by hand: 1 MiB), at the link rate;
//    the traffic table's ep row the same bytes (16 MiB per rank for 4 layers, nothing recomputed);
//  - the tail per layer at ep 2 (parallel/ep_grads.hpp's groups): the rank's dense + 4 of 8 experts
//    synced over the 2 ranks with the same experts, AdamW ÷ Ne, ZeRO-3's extra reduce-scatters and
//    all-gathers over Ne = 2, the dense part all-reduced over the EP pair; closed forms, 1e-12 rel.;
//  - the traffic table at ep 2: zero / replica rows over the expert-dp groups (world 8, two nodes),
//    the ep-dense row's job total 16 x the dense parameters, ZeRO-0's dp row over 2 ranks; at pp 2
//    each stage's EP pair sums its own stage's dense part (the tied wte on both stages);
//  - llmtrain-plan on configs/moe-tiny.toml at world 4, with and without parallel.ep = 2 (and under
//    a 280 MiB device, where ep 1 escalates to ZeRO-1 and ep 2, each rank holding half the experts,
//    fits at ZeRO-0 with recomputation; under 210 MiB, where ep 1 fits neither at ZeRO-1, nor with
//    the optimizer offloaded, nor at ZeRO-2, the escalation reaches ZeRO-3): exit 0, tp 1 / cp 1
//    / pp 1, and the planned per-rank device MiB equals `llmtrain --dry-run` of the planned layout
//    (ZeRO stage, recomputed layers) within 0.1 MiB (both print to 0.1 MiB); the same for each
//    stage of a --pp 2 plan at ep 1 and 2; a forced --tp or --cp 2 exits 2 naming the flag and
//    model.moe.
// FLOP-derived layer times (--device-tflops), so nothing depends on this machine's speed.
#include <gtest/gtest.h>

#include <array>
#include <regex>
#include <stdexcept>
#include <string>
#include <utility>

#include "app/config/config.hpp"
#include "app/plan/plan.hpp"
#include "app/plan/traffic.hpp"
#include "app/state/model_state.hpp"
#include "tests/app/shell_util.hpp"

using namespace llmtrain;

namespace {

Config moe(std::vector<std::string> sets = {}) {
    sets.push_back("run.sample_interval=0");
    return load_config(LLMTRAIN_CONFIGS "/moe-tiny.toml", sets);
}

PlanOptions options(const Config& cfg, int world, double link_gbps = 50) {
    PlanOptions o;
    o.world = world;
    o.device_memory = 1073741824.0;
    o.link_gbps = link_gbps;
    o.times = flops_layer_times(cfg, 10, 3350);
    return o;
}

const std::string kMoe = " --config " LLMTRAIN_CONFIGS "/moe-tiny.toml --set run.sample_interval=0";

}  // namespace

TEST(PlanMoe, SearchesWhatTheModelRuns) {
    // tp 1, cp 1 and every depth (divisors of 4 up to n_layer 4): pp 1, 2, 4; at ep 2 the depth 4
    // leaves dp 1, which ep 2 does not divide (each stage's ep group is ep of its dp ranks).
    for (int ep : {1, 2}) {
        const Config cfg = moe({"parallel.ep=" + std::to_string(ep)});
        const PlanResult r = make_plan(cfg, options(cfg, 4));
        ASSERT_EQ(r.candidates.size(), 3u) << "ep " << ep;
        for (int i = 0; i < 3; ++i) {
            const PlanCandidate& c = r.candidates[size_t(i)];
            const int pp = 1 << i;
            EXPECT_EQ((std::array<int, 4>{c.tp, c.cp, c.pp, c.dp}), (std::array<int, 4>{1, 1, pp, 4 / pp}));
            if (ep == 2 && pp == 4) EXPECT_EQ(c.skipped, "parallel.ep 2 does not divide dp 1");
            else EXPECT_TRUE(c.skipped.empty()) << c.skipped;
        }
        ASSERT_GE(r.best, 0);
        EXPECT_EQ(apply_plan(cfg, r.candidates[size_t(r.best)]).parallel.ep, ep);
    }
    // 2 ranks cannot hold expert groups of 4 at any depth: skipped rows, nothing planned, no exception.
    const Config ep4 = moe({"parallel.ep=4"});
    const PlanResult r = make_plan(ep4, options(ep4, 2));
    ASSERT_EQ(r.candidates.size(), 2u);
    EXPECT_EQ(r.candidates[0].skipped, "parallel.ep 4 does not divide dp 2");
    EXPECT_EQ(r.candidates[1].skipped, "parallel.ep 4 does not divide dp 1");
    EXPECT_EQ(r.best, -1);
    // The report says no row was sized rather than that nothing fits.
    const std::vector<std::string> rep = plan_report(ep4, options(ep4, 2), r);
    EXPECT_EQ(rep.back(), "nothing planned: every candidate above was skipped, for the reason on its row.");
    PlanOptions forced = options(ep4, 4);
    forced.tp = 2;
    EXPECT_THROW(make_plan(ep4, forced), std::invalid_argument);
}

TEST(PlanMoe, LayerTimeIsTheActiveParametersFlops) {
    const Config cfg = moe();
    const double C = 256, kv = 2 * 64, E = 8, k = 2, Fe = 384, B = 4, T = 256;
    const double active = C * C + 2 * C * kv + C * C  // wq, wk, wv, wo
                          + 2 * C                     // the two RMSNorm weights
                          + C * E                     // the router
                          + k * 3 * Fe * C;           // top_k SwiGLU experts of width Fe
    const double flops = 6 * (active + T * C) * B * T;  // training: forward + backward
    const LayerTimes t = flops_layer_times(cfg, 10, 3350);
    EXPECT_NEAR(t.layer_fwd, flops / 3 / 10e12, 1e-12 * t.layer_fwd);
    EXPECT_NEAR(t.layer_bwd, 2 * flops / 3 / 10e12, 1e-12 * t.layer_bwd);
}

TEST(PlanMoe, ExpertParallelAddsTheAllToAlls) {
    const double link = 20;
    Config c1 = moe(), c2 = moe({"parallel.ep=2"});
    c1.parallel.dp = c2.parallel.dp = 4;
    const PlanOptions o = options(c1, 4, link);
    const PlanProblem p1 = plan_problem(c1, run_shape(c1, 4), o), p2 = plan_problem(c2, run_shape(c2, 4), o);
    ASSERT_EQ(p1.stages.size(), 1u);
    ASSERT_EQ(p2.stages.size(), 1u);
    // B·T·top_k = 4·256·2 rows of 256 fp32, half of them to the other rank of the pair: 1 MiB.
    const double a2a = 0.5 * 4 * 256 * 2 * 256 * 4 / (link * 1e9);
    const double C = 256, kv = 2 * 64, E = 8, Fe = 384;
    const StageModel &a = p1.stages[0], &b = p2.stages[0];
    EXPECT_NEAR(b.fwd_layer, a.fwd_layer + 2 * a2a, 1e-15);
    EXPECT_NEAR(b.bwd_layer, a.bwd_layer + 2 * a2a, 1e-15);
    EXPECT_NEAR(b.recompute, a.recompute + 2 * a2a, 1e-15);
    EXPECT_NEAR(b.fwd0, a.fwd0, 1e-15);
    // The tail per layer: at ep 1 the layer's 2,558,464 parameters all-reduced over dp 4 in fp32 and
    // stepped by AdamW; at ep 2 each rank holds the dense 199,168 and 4 of the 8 experts (1,179,648),
    // all-reduced over the 2 ranks with the same experts, and the dense part once more over the EP pair.
    const double dense = 2 * C * C + 2 * C * kv + 2 * C + C * E, experts = E * 3 * Fe * C, adam = o.times.adam_per_param;
    ASSERT_EQ(dense, 199168.0);
    EXPECT_NEAR(a.tail_layer, (dense + experts) * (2.0 * 3 / 4 * 4 / (link * 1e9) + adam), 1e-12 * a.tail_layer);
    const double ar2 = 2.0 * 1 / 2 * 4 / (link * 1e9);  // per element of an fp32 all-reduce over 2 ranks
    EXPECT_NEAR(b.tail_layer, (dense + experts / 2) * (ar2 + adam) + dense * ar2, 1e-12 * b.tail_layer);
    // The traffic table's ep row, the same bytes: 4 layers x (2 + 2) all-to-alls of 1 MiB per rank.
    double sent = -1;
    for (const GroupTraffic& g : step_traffic(run_shape(c2, 4), 8).groups)
        if (g.kind == GroupKind::ep) sent = g.per_rank;
    EXPECT_NEAR(sent, 16.0 * 1048576, 1e-6);
}

TEST(PlanMoe, ExpertParallelZeroShardsOverTheRanksWithTheSameExperts) {
    // ep 2 at dp 4 with ZeRO-1 (zero_group_size 4: Ne = 2) and ZeRO-3 over 2 micro-batches: the ZeRO
    // group is the 2 ranks with the same experts, so AdamW covers half of the rank's layer, the
    // gradient sync is the all-reduce's worth over 2 ranks (reduce-scatter + all-gather), ZeRO-3 adds
    // m − 1 reduce-scatters and 2m − 1 all-gathers of half the layer each, and the dense half-shard is
    // all-reduced over the EP pair.
    const double link = 20, C = 256, kv = 2 * 64, E = 8, Fe = 384;
    const double dense = 2 * C * C + 2 * C * kv + 2 * C + C * E, experts = E * 3 * Fe * C;
    for (int zero : {1, 3}) {
        Config c = moe({"parallel.ep=2", "parallel.zero_stage=" + std::to_string(zero), "training.grad_accum_steps=2"});
        c.parallel.dp = 4;
        const PlanOptions o = options(c, 4, link);
        const PlanProblem p = plan_problem(c, run_shape(c, 4), o);
        const double m = 2, byte = 4 / (link * 1e9), n = dense + experts / 2;
        const double extra = zero == 3 ? ((m - 1) + (2 * m - 1)) * 0.5 * byte : 0;
        const double want = n * (2.0 * 1 / 2 * byte + o.times.adam_per_param / 2 + extra) + dense / 2 * (2.0 * 1 / 2 * byte);
        EXPECT_NEAR(p.stages[0].tail_layer, want, 1e-12 * want) << "ZeRO-" << zero;
    }
}

TEST(PlanMoe, TrafficFollowsTheExpertDpGroups) {
    // world 8 on 2 nodes of 4, ep 2, ZeRO-1 in groups of 4: Ne = 2 ranks with the same experts per
    // ZeRO group ({0, 2}, inside a node), R = 2 replicas ({0, 4}, across the nodes), the EP pairs
    // ({0, 1}) all-reduce the dense part of their shard. Ψ: EP rank 0's padded layout, checked against
    // the hand count wte 2,097,152 + 4 x (199,168 dense + 1,179,648 experts) + ln_f 256.
    const Config c = moe({"parallel.ep=2", "parallel.zero_stage=1", "parallel.zero_group_size=4"});
    const GPTConfig g = gpt_config_of(c);
    const ParamLayout l(g, 8 * 2, 1, 0, 2, 0);
    ASSERT_EQ(l.num_parameters(), size_t(7612672));
    const double psi = double(l.total_numel()), dense = 2097152 + 4 * 199168.0 + 256;
    const StepTraffic t = step_traffic(run_shape(c, 8), 4);
    auto row = [&](GroupKind k) -> const GroupTraffic& {
        for (const GroupTraffic& gt : t.groups)
            if (gt.kind == k) return gt;
        throw std::runtime_error(std::string("no row ") + group_kind_name(k));
    };
    const GroupTraffic &z = row(GroupKind::zero), &r = row(GroupKind::replica), &d = row(GroupKind::ep_dense);
    EXPECT_EQ((std::array<int, 3>{z.size, z.groups, z.spanning}), (std::array<int, 3>{2, 4, 0}));
    EXPECT_NEAR(z.per_rank, 0.5 * (psi * 4 + psi * 4), 1e-6);
    EXPECT_EQ((std::array<int, 3>{r.size, r.groups, r.spanning}), (std::array<int, 3>{2, 4, 4}));
    EXPECT_EQ(r.example, std::vector<int>({0, 4}));
    EXPECT_NEAR(r.per_rank, 2.0 * 1 / 2 * psi / 2 * 4, 1e-6);
    EXPECT_NEAR(r.crossing, r.total, 1e-6);
    // Every dense element is in one of the two shards, each shard's EP pair twice over the world:
    // the job sends 2 groups x 2 ranks x 2(1/2) x 4 bytes per dense element of each shard.
    EXPECT_EQ((std::array<int, 3>{d.size, d.groups, d.spanning}), (std::array<int, 3>{2, 4, 0}));
    EXPECT_NEAR(d.total, 16 * dense, 1e-6);
    // ZeRO-0 at world 4: the all-reduce runs over the 2 ranks with the same experts, not all 4.
    const Config c0 = moe({"parallel.ep=2"});
    const StepTraffic t0 = step_traffic(run_shape(c0, 4), 4);
    ASSERT_EQ(t0.groups.size(), 3u);  // dp, ep, ep-dense
    EXPECT_EQ(t0.groups[0].kind, GroupKind::dp);
    EXPECT_EQ(t0.groups[0].size, 2);
    EXPECT_NEAR(t0.groups[0].per_rank, 2.0 * 1 / 2 * double(ParamLayout(g, 1, 1, 0, 2, 0).total_numel()) * 4, 1e-6);
    EXPECT_EQ(t0.groups[2].kind, GroupKind::ep_dense);
    EXPECT_NEAR(t0.groups[2].per_rank, 2.0 * 1 / 2 * dense * 4, 1e-6);
    // pp 2 at world 4 (dp 2 per stage, one EP pair per stage): each pair sums its stage's dense part,
    // the first stage's wte and layers 0-1, the last stage's copy of the tied wte, layers 2-3 and ln_f.
    const Config c2 = moe({"parallel.ep=2", "parallel.pp=2", "training.grad_accum_steps=2", "pipeline.layers_per_stage=[2, 2]"});
    const StepTraffic t2 = step_traffic(run_shape(c2, 4), 4);
    double epd = -1, most = 0;
    for (const GroupTraffic& gt : t2.groups)
        if (gt.kind == GroupKind::ep_dense) epd = gt.total, most = gt.per_rank;
    const double s0 = 2097152 + 2 * 199168.0, s1 = 2097152 + 2 * 199168.0 + 256;
    EXPECT_NEAR(epd, 2 * (s0 + s1) * 4, 1e-6);  // 2 ranks per stage x 2(1/2) x 4 bytes
    EXPECT_NEAR(most, s1 * 4, 1e-6);
}

TEST(PlanMoe, PlanIsTheDryRunsCount) {
    // 1 GiB: ZeRO-0, nothing recomputed; 280 MiB: ep 1 escalates to ZeRO-1, while at ep 2 (each rank
    // holding half the experts' weights, gradients and AdamW state) ZeRO-0 with recomputation fits.
    // 210 MiB (cap 189): ep 1 with every layer recomputed needs 216.3 at ZeRO-1, 192.8 at ZeRO-1 with
    // the optimizer offloaded, 203.7 at ZeRO-2 and fits only at ZeRO-3 (184.2; dry-run rows).
    const std::pair<std::string, std::string> cases[] = {{"1", "1GiB"},   {"2", "1GiB"},  {"1", "280MiB"},
                                                         {"2", "280MiB"}, {"1", "210MiB"}};
    for (const auto& [ep, memory] : cases) {
        const std::string sets = kMoe + " --set parallel.ep=" + ep;
        const shell::Result p = shell::sh(std::string(LLMTRAIN_PLAN_BIN) + sets +
                                          " --world-size 4 --device-tflops 10 --device-memory " + memory);
        ASSERT_EQ(p.code, 0) << p.out;
        EXPECT_NE(p.out.find("best: pp 1 x dp 4 x tp 1,"), std::string::npos) << p.out;
        EXPECT_NE(p.out.find("\n  tp = 1\n  pp = 1\n  cp = 1\n"), std::string::npos) << p.out;
        // The plan's one stage row "    0  layers ckpt in_flight ... device MiB |" and its TOML.
        std::smatch m;
        ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(\n +0 +4 +([0-9]) +1 +[^|\n]* ([0-9.]+) \|)"))) << p.out;
        const std::string ckpt = m[1];
        const double predicted = std::stod(m[2]);
        ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(\n  zero_stage = ([0-9])\n)"))) << p.out;
        const std::string zero = m[1];
        ASSERT_EQ(p.out.find("offload = \"cpu\""), std::string::npos) << p.out;
        const shell::Result d = shell::sh(std::string(LLMTRAIN_BIN) + sets + " --dry-run --world-size 4 --set parallel.zero_stage=" +
                                          zero + " --set 'activation_checkpoint.layers_per_stage=[" + ckpt + "]'");
        ASSERT_EQ(d.code, 0) << d.out;
        // The pp 1 dry run's row for that ZeRO stage: "zero params grads ... host device total |".
        ASSERT_TRUE(std::regex_search(d.out, m, std::regex("\n +" + zero + R"( +[0-9. ]* ([0-9.]+) \|)")))
            << d.out;
        EXPECT_NEAR(predicted, std::stod(m[1]), 0.1) << "ep " << ep << " " << memory << "\n" << p.out << d.out;
        if (memory == "210MiB") {
            EXPECT_EQ(zero, "3") << p.out;
            EXPECT_EQ(ckpt, "4") << p.out;
            EXPECT_LE(predicted, 210 * 0.9 + 0.05) << p.out;
        }
        if (memory == "280MiB") {
            EXPECT_EQ(zero, ep == "1" ? "1" : "0") << p.out;
            EXPECT_LE(predicted, 280 * 0.9 + 0.05) << p.out;
        }
    }
}

// --pp 2 (issue 45: MoE runs in the pipeline, each stage's experts over its ep group): the plan's
// per-stage device MiB against `llmtrain --dry-run` of the planned layout (layers and recomputed
// layers per stage, ZeRO stage, the planned micro-batches per step) within 0.1 MiB, both stages.
TEST(PlanMoe, PipelineStagesAreTheDryRunsCount) {
    for (const std::string ep : {"1", "2"}) {
        const std::string sets = kMoe + " --set parallel.ep=" + ep;
        const shell::Result p = shell::sh(std::string(LLMTRAIN_PLAN_BIN) + sets +
                                          " --world-size 4 --pp 2 --device-tflops 10 --device-memory 280MiB");
        ASSERT_EQ(p.code, 0) << p.out;
        std::smatch m;
        ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(best: pp 2 x dp 2 x tp 1, ([0-9]+) micro-batches)"))) << p.out;
        const std::string accum = m[1];
        ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(
  zero_stage = ([0-9])
)"))) << p.out;
        const std::string zero = m[1];
        ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(
  layers_per_stage = (\[[0-9, ]+\])
  \[activation)")))
            << p.out;
        const std::string layers = m[1];
        ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(\[activation_checkpoint\]
  layers_per_stage = (\[[0-9, ]+\]))")))
            << p.out;
        const std::string ckpt = m[1];
        ASSERT_EQ(p.out.find("offload = \"cpu\""), std::string::npos) << p.out;
        const shell::Result d = shell::sh(std::string(LLMTRAIN_BIN) + sets + " --dry-run --world-size 4 --set parallel.pp=2" +
                                          " --set parallel.zero_stage=" + zero + " --set training.grad_accum_steps=" + accum +
                                          " --set 'pipeline.layers_per_stage=" + layers +
                                          "' --set 'activation_checkpoint.layers_per_stage=" + ckpt + "'");
        ASSERT_EQ(d.code, 0) << d.out;
        for (const std::string stage : {"0", "1"}) {
            // The plan's row "stage layers ckpt in_flight ... device MiB |", the dry run's "zero pp_stage ... total |".
            ASSERT_TRUE(std::regex_search(p.out, m, std::regex("\n +" + stage + R"( +[0-9]+ +[0-9]+ +[0-9]+ +[^|\n]* ([0-9.]+) \|)")))
                << p.out;
            const double planned = std::stod(m[1]);
            ASSERT_TRUE(std::regex_search(d.out, m, std::regex("\n +" + zero + " +" + stage + R"( +[0-9. ]* ([0-9.]+) \|)")))
                << d.out;
            EXPECT_NEAR(planned, std::stod(m[1]), 0.1) << "ep " << ep << " stage " << stage << "\n" << p.out << d.out;
            EXPECT_LE(planned, 280 * 0.9 + 0.05) << p.out;
        }
    }
}

TEST(PlanMoe, ForcedSplitsExitTwoNamingThem) {
    const std::string plan = std::string(LLMTRAIN_PLAN_BIN) + kMoe + " --world-size 4 --device-memory 1GiB --device-tflops 10";
    for (const std::string flag : {"--tp", "--cp"}) {  // --pp plans (PipelineStagesAreTheDryRunsCount)
        const shell::Result b = shell::sh(plan + " " + flag + " 2");
        EXPECT_EQ(b.code, 2) << flag << "\n" << b.out;
        EXPECT_NE(b.out.find(flag + ": a mixture of experts (model.moe)"), std::string::npos) << b.out;
    }
}
