// tests/app/test_traffic.cpp — step traffic and the bytes crossing nodes (app/plan/traffic.hpp), and the
// planner's inter-node term (llmtrain-plan --inter-node-gbps), each against an independent reference:
//  - closed forms written out here for hand-picked layouts (flat DP and ZeRO over two nodes, ZeRO-3
//    in node-local groups, ZeRO-1 over four nodes, a pipeline with a stage per node, TP across nodes,
//    sequence parallelism): per rank, job total and crossing bytes, relative 1e-12;
//  - a brute-force enumeration over every rank of several layouts: each rank's ring successor (or
//    pipeline neighbour) in each of its groups, counting the bytes it sends when that one is on
//    another node; equal to step_traffic's crossing and total per kind, relative 1e-12;
//  - `llmtrain --dry-run --world-size 4 --ranks-per-node 2` prints the table with those numbers (to
//    its 0.1 MiB resolution) and refuses a --ranks-per-node that does not divide the world (exit 2);
//  - the planner: at a small --inter-node-gbps the pp 1 step grows by exactly the crossing share of
//    the dp all-reduce at the slower rate, and the best plan changes from pp 1 to pp 2 (whose dp
//    groups stay inside a node).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <regex>
#include <string>

#include "app/config/config.hpp"
#include "app/state/model_state.hpp"
#include "app/plan/plan.hpp"
#include "app/plan/traffic.hpp"
#include "tests/app/shell_util.hpp"
#include "parallel/topology.hpp"

using namespace llmtrain;

namespace {

/// tiny.toml with 8 layers, half of them recomputed, micro-batch 2 x 64, 3 micro-batches per step.
Config tiny(std::vector<std::string> extra = {}) {
    std::vector<std::string> sets = {"model.n_layer=8", "model.seq_len=64", "training.micro_batch_size=2",
                                     "training.grad_accum_steps=3", "activation_checkpoint.ratio=0.5"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return load_config(LLMTRAIN_CONFIGS "/tiny.toml", sets);
}

const GroupTraffic* kind(const StepTraffic& t, GroupKind k) {
    for (const GroupTraffic& g : t.groups)
        if (g.kind == k) return &g;
    return nullptr;
}

void expect_rel(double got, double want, const std::string& what) {
    EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::abs(want))) << what;
}

constexpr double m = 3, B = 2, T = 64, C = 256;  // micro-batches, micro-batch, sequence, width of tiny()
constexpr double rows = B * T;

}  // namespace

TEST(Traffic, FlatDataParallelOverTwoNodes) {
    // 16 ranks, 8 per node, plain DP in fp32: one ring of 16 on 2 nodes, 2 of its 16 hops cross.
    const Config c = tiny();
    const StepTraffic t = step_traffic(run_shape(c, 16), 8);
    const double psi = double(ParamLayout(gpt_config_of(c)).total_numel());
    const double v = 2.0 * 15 / 16 * psi * 4;
    ASSERT_EQ(t.groups.size(), 1u);
    const GroupTraffic* g = kind(t, GroupKind::dp);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->size, 16);
    EXPECT_EQ(g->groups, 1);
    EXPECT_EQ(g->spanning, 1);
    EXPECT_EQ(g->max_nodes, 2);
    expect_rel(g->per_rank, v, "per rank");
    expect_rel(g->total, 16 * v, "total");
    expect_rel(g->crossing, 2 * v, "crossing: k = 2 of 16 hops");
    expect_rel(t.crossing, 2 * v, "job crossing");
    EXPECT_EQ(t.nodes, 2);
    // One node: nothing crosses.
    EXPECT_EQ(step_traffic(run_shape(c, 16), 16).crossing, 0.0);
}

TEST(Traffic, ContextParallelGathersTheWindowsQkvPerLayer) {
    // 8 ranks, 4 per node, cp 2 (dp 4 data shards x cp 2): CP groups are 2 consecutive ranks, inside a
    // node; per layer and micro-batch 3 collectives of the window's q|k|v (B*T, 3C): the forward's
    // gather, the backward's (or the recomputed forward's: tiny() recomputes its first 4 of 8) and
    // the reduce-scatter, less the top layer's backward gather (its window is still there from the
    // forward, model/gpt_cp.cpp), each rank sending (cp-1)/cp of it (fp32 on the CPU).
    const Config c = tiny({"parallel.cp=2", "run.sample_interval=0"});
    const StepTraffic t = step_traffic(run_shape(c, 8), 4);
    EXPECT_EQ(t.cp, 2);
    EXPECT_EQ(t.dp, 4);
    const GroupTraffic* g = kind(t, GroupKind::cp);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->size, 2);
    EXPECT_EQ(g->groups, 4);
    EXPECT_EQ(g->spanning, 0);
    const double v = m * (3.0 * 8 - 1) * 0.5 * (rows * 3 * C * 4);
    expect_rel(g->per_rank, v, "per rank");
    expect_rel(g->total, 8 * v, "total");
    EXPECT_EQ(g->crossing, 0.0);
    // The gradient's all-reduce runs over dp x cp = 8 ranks on 2 nodes.
    const GroupTraffic* d = kind(t, GroupKind::dp);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->size, 8);
    EXPECT_NE(traffic_report(t)[0].find("pp 1 x dp 4 x cp 2 x tp 1"), std::string::npos) << traffic_report(t)[0];
}

TEST(Traffic, ZeroThreeFlatAndInNodeLocalGroups) {
    // bf16 training, gradients reduced in fp32 (es 2, rb 4: a swap would show).
    const Config flat = tiny({"run.backend=\"cuda\"", "training.precision=\"bf16\"", "parallel.grad_reduce_dtype=\"fp32\"", "parallel.zero_stage=3"});
    const GPTConfig g = gpt_config_of(flat);
    {
        const ParamLayout l(g, 8 * 16);  // units padded to split over 16
        const double psi = double(l.total_numel()), psi0 = double(l.units()[0].numel);
        const double v = 15.0 / 16 * (m * psi * 4 + (2 * m * (psi - psi0) + psi0) * 2);
        const StepTraffic t = step_traffic(run_shape(flat, 16), 8);
        ASSERT_EQ(t.groups.size(), 1u);
        const GroupTraffic* z = kind(t, GroupKind::zero);
        ASSERT_NE(z, nullptr);
        expect_rel(z->per_rank, v, "ZeRO-3 per rank");
        expect_rel(z->crossing, 2 * v, "ZeRO-3 flat crossing");
        EXPECT_EQ(z->example, std::vector<int>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
    }
    Config sub = flat;
    sub.parallel.zero_group_size = 8;
    const ParamLayout l(g, 8 * 8);
    const double psi = double(l.total_numel()), psi0 = double(l.units()[0].numel);
    const double vz = 7.0 / 8 * (m * psi * 4 + (2 * m * (psi - psi0) + psi0) * 2);
    const double vr = 2.0 * 1 / 2 * psi / 8 * 4;  // the shard's all-reduce over 2 replicas
    const StepTraffic t = step_traffic(run_shape(sub, 16), 8);
    const GroupTraffic *z = kind(t, GroupKind::zero), *r = kind(t, GroupKind::replica);
    ASSERT_NE(z, nullptr);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(z->groups, 2);
    EXPECT_EQ(z->spanning, 0);
    expect_rel(z->per_rank, vz, "zero per rank");
    expect_rel(z->total, 16 * vz, "zero total");
    EXPECT_EQ(z->crossing, 0.0);
    EXPECT_EQ(r->groups, 8);
    EXPECT_EQ(r->spanning, 8);
    EXPECT_EQ(r->example, std::vector<int>({0, 8}));
    expect_rel(r->total, 16 * vr, "replica total");
    expect_rel(r->crossing, 16 * vr, "replica: every hop crosses");
    expect_rel(t.crossing, 16 * vr, "job crossing");
}

TEST(Traffic, ZeroOneOverFourNodes) {
    // ZeRO-1 over 16 ranks, 4 per node: k = 4 of 16 hops cross (a quarter).
    const Config c = tiny({"parallel.zero_stage=1"});
    const double psi = double(ParamLayout(gpt_config_of(c), 8 * 16).total_numel());
    const double v = 15.0 / 16 * (psi * 4 + psi * 4);
    const StepTraffic t = step_traffic(run_shape(c, 16), 4);
    const GroupTraffic* z = kind(t, GroupKind::zero);
    ASSERT_NE(z, nullptr);
    EXPECT_EQ(z->max_nodes, 4);
    expect_rel(z->total, 16 * v, "total");
    expect_rel(z->crossing, 4 * v, "crossing");
    EXPECT_EQ(t.nodes, 4);
}

TEST(Traffic, PipelineWithAStagePerNode) {
    // pp 4 x dp 2 x tp 2 on nodes of 4: each stage is one node, so every pipeline boundary and the
    // tied embedding's pair cross; the TP and dp groups stay inside a stage's node.
    const Config c = tiny({"parallel.pp=4", "parallel.tp=2"});
    const GPTConfig g = gpt_config_of(c);
    const StepTraffic t = step_traffic(run_shape(c, 16), 4);
    const double A = rows * C * 4;
    const GroupTraffic *p = kind(t, GroupKind::pipeline), *e = kind(t, GroupKind::embedding),
                       *tp = kind(t, GroupKind::tp), *dp = kind(t, GroupKind::dp);
    ASSERT_TRUE(p && e && tp && dp);
    EXPECT_EQ(p->groups, 4);
    expect_rel(p->per_rank, 2 * m * A, "a middle stage sends both ways");
    expect_rel(p->total, 4 * 3 * 2 * m * A, "4 pipelines x 3 boundaries");
    expect_rel(p->crossing, p->total, "every boundary crosses");
    const double psi0 = double(ParamLayout(g, 1, 2, 0).units()[0].numel);
    expect_rel(e->total, 4 * 2 * psi0 * 4, "embedding pairs");
    expect_rel(e->crossing, e->total, "first and last stage on two nodes");
    EXPECT_EQ(tp->crossing, 0.0);
    EXPECT_EQ(dp->crossing, 0.0);
    EXPECT_EQ(tp->groups, 8);
    EXPECT_EQ(dp->groups, 8);
    // TP per stage: (4 n + c + ends) all-reduces of A at 2 (2 - 1)/2, the loss gather on the last.
    double tp_total = 0;
    const auto plan = stage_plan_of(c);
    for (int s = 0; s < 4; ++s) {
        const double n = plan[size_t(s)].l1 - plan[size_t(s)].l0, ck = plan[size_t(s)].checkpointed;
        const double ends = (s == 0) + (s == 3);
        tp_total += 2 * 2 * m * ((4 * n + ck + ends) * A + (s == 3 ? rows * 12 : 0));  // 2 groups x 2 ranks
    }
    expect_rel(tp->total, tp_total, "tp total");
    expect_rel(t.crossing, p->total + e->total, "job crossing");
}

TEST(Traffic, UntiedHeadHasNoEmbeddingPair) {
    // llama-tiny at pp 2 x dp 2 (plain DP, fp32), one stage per node. A tied head keeps the token
    // table on both end stages and sums its gradient in the embedding pair (an all-reduce of psi0 in
    // each of the 2 pipelines: 2 ranks x psi0 x 4 bytes). An untied one keeps the table on the first
    // stage only (app/state/model_state.cpp stage_units): no pair, and its last stage's DP ring carries
    // lm_head.weight instead of the table, the same number of elements, so the DP totals are equal
    // (a last stage holding both, as before issue 30's fix, would add 2 x psi0 x 4 per pipeline).
    double dp_total[2] = {0, 0};
    for (bool tied : {true, false}) {
        SCOPED_TRACE(tied ? "tied" : "untied");
        const Config c = load_config(LLMTRAIN_CONFIGS "/llama-tiny.toml",
                                     {"model.n_layer=4", "model.seq_len=64", "training.micro_batch_size=2",
                                      "training.precision=\"fp32\"", "parallel.pp=2",
                                      std::string("model.tie_embeddings=") + (tied ? "true" : "false")});
        const StepTraffic t = step_traffic(run_shape(c, 4), 2);
        const GroupTraffic *e = kind(t, GroupKind::embedding), *dp = kind(t, GroupKind::dp);
        ASSERT_NE(dp, nullptr);
        const double psi0 = double(ParamLayout(gpt_config_of(c)).units()[0].numel);
        if (tied) {
            ASSERT_NE(e, nullptr);
            expect_rel(e->total, 2 * 2 * psi0 * 4, "2 pipelines' pairs all-reduce the table");
        } else {
            EXPECT_TRUE(e == nullptr || e->total == 0.0) << "an untied head has no embedding pair";
        }
        dp_total[tied ? 0 : 1] = dp->total;
    }
    expect_rel(dp_total[1], dp_total[0], "the untied last stage's DP ring: lm_head instead of the table");
}

TEST(Traffic, TensorParallelAcrossNodesAndSequenceParallel) {
    // tp 4 on nodes of 2: each TP group spans 2 nodes (half its hops cross); dp pairs (0,4) cross.
    const Config c = tiny({"parallel.tp=4"});
    const double A = rows * C * 4;
    const auto plan = stage_plan_of(c);
    const double ck = plan[0].checkpointed;
    const double v = m * ((4 * 8 + ck + 2) * 2.0 * 3 / 4 * A + 3 * rows * 12);
    const StepTraffic t = step_traffic(run_shape(c, 8), 2);
    const GroupTraffic* tp = kind(t, GroupKind::tp);
    ASSERT_NE(tp, nullptr);
    EXPECT_EQ(tp->spanning, 2);
    expect_rel(tp->per_rank, v, "tp per rank");
    expect_rel(tp->crossing, 2 * 2 * v, "2 groups, 2 crossing hops each");
    // Sequence parallelism, pp 2 x tp 2 on nodes of 2: a stage per node; sends are the rank's rows.
    const Config s = tiny({"parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=true"});
    const auto sp = stage_plan_of(s);
    const StepTraffic u = step_traffic(run_shape(s, 4), 2);
    const GroupTraffic *p = kind(u, GroupKind::pipeline), *t2 = kind(u, GroupKind::tp);
    ASSERT_TRUE(p && t2);
    expect_rel(p->total, 2 * 2 * m * A / 2, "2 pipelines, one boundary, half the rows");
    double tp_total = 0;
    for (int st = 0; st < 2; ++st) {
        const double n = sp[size_t(st)].l1 - sp[size_t(st)].l0, k = sp[size_t(st)].checkpointed;
        tp_total += 2 * m * ((5 * n + 1.5 * k + 1) * A + (st == 1 ? rows * 12 : 0));  // 2 ranks, 2·(1/2)·A each
    }
    expect_rel(t2->total, tp_total, "sequence-parallel tp total");
    EXPECT_EQ(t2->crossing, 0.0);
}

namespace {

/// A layout to enumerate: config overrides, world size, ranks per node.
struct Layout {
    std::vector<std::string> sets;
    int world, per_node;
};

/// Brute force: for every rank, the bytes it sends per step in each group it is in (traffic.hpp's
/// formulas written out for its stage) and where they go: its ring successor in the group's order, or
/// its pipeline neighbours; returns {total, bytes sent to another node} per kind.
std::array<std::array<double, 2>, size_t(GroupKind::count)> enumerate(const Config& c, int world, int per_node) {
    std::array<std::array<double, 2>, size_t(GroupKind::count)> out{};
    const int pp = c.parallel.pp, tp = c.parallel.tp, zs = c.parallel.zero_stage;
    const Topology probe(world, 0, pp, zero_group_of(c), tp);
    const int N = probe.zero_group_size(), R = probe.replicas();
    const GPTConfig g = gpt_config_of(c);
    const ParamLayout l(g, N > 1 ? 8 * N : 1, tp, 0);
    const double es = c.training.precision == "bf16" ? 2 : 4, rb = c.parallel.grad_reduce_dtype == "bf16" ? 2 : 4;
    const bool sp = tp > 1 && c.parallel.sequence_parallel;
    const double A = rows * C * es, mm = c.training.grad_accum_steps;
    const auto plan = stage_plan_of(c);
    auto node = [&](int r) { return r / per_node; };
    auto add = [&](GroupKind k, double v, int from, int to) {
        out[size_t(k)][0] += v;
        if (node(from) != node(to)) out[size_t(k)][1] += v;
    };
    auto succ = [](const std::vector<int>& grp, int r) {
        const size_t i = size_t(std::find(grp.begin(), grp.end(), r) - grp.begin());
        return grp[(i + 1) % grp.size()];
    };
    for (int r = 0; r < world; ++r) {
        const Topology t(world, r, pp, zero_group_of(c), tp);
        const int s = t.stage();
        const bool first = s == 0, last = s == pp - 1;
        double psi = 0;
        for (size_t u = 0; u < l.units().size(); ++u) {
            const bool layer = u >= 1 && u <= size_t(g.n_layer);
            const bool held = pp == 1 || (u == 0 && (first || last)) || (u == size_t(g.n_layer) + 1 && last) ||
                              (layer && int(u) - 1 >= plan[size_t(s)].l0 && int(u) - 1 < plan[size_t(s)].l1);
            if (held) psi += double(l.units()[u].numel);
        }
        const double psi0 = (pp == 1 || first || last) ? double(l.units()[0].numel) : 0;
        if (tp > 1) {
            const double n = plan[size_t(s)].l1 - plan[size_t(s)].l0, ck = plan[size_t(s)].checkpointed;
            const double ars = (sp ? 5 * n + 1.5 * ck : 4 * n + ck) + first + last;
            add(GroupKind::tp, mm * (ars * 2.0 * (tp - 1) / tp * A + (last ? (tp - 1) * rows * 12 : 0)), r,
                succ(t.tp_group(), r));
        }
        if (zs >= 1 && N > 1) {
            const double rs = (zs >= 2 ? mm : 1) * psi * rb, ag = (zs == 3 ? 2 * mm * (psi - psi0) + psi0 : psi) * es;
            add(GroupKind::zero, double(N - 1) / N * (rs + ag), r, succ(t.zero_group(), r));
        }
        if (R > 1)
            add(zs == 0 ? GroupKind::dp : GroupKind::replica, 2.0 * (R - 1) / R * psi / N * rb, r,
                succ(t.replica_group(), r));
        if (pp > 1) {
            const std::vector<int> pipe = t.stage_group();
            const double a = mm * A / (sp ? tp : 1);
            if (!last) add(GroupKind::pipeline, a, r, pipe[size_t(s) + 1]);
            if (!first) add(GroupKind::pipeline, a, r, pipe[size_t(s) - 1]);
            if (first) add(GroupKind::embedding, double(l.units()[0].numel) * es, r, pipe.back());
            if (last) add(GroupKind::embedding, double(l.units()[0].numel) * es, r, pipe.front());
        }
    }
    return out;
}

}  // namespace

TEST(Traffic, EqualsTheBruteForceOverRanks) {
    const std::vector<Layout> layouts = {
        {{}, 16, 8},
        {{"parallel.zero_stage=3"}, 16, 8},
        {{"parallel.zero_stage=3", "parallel.zero_group_size=8"}, 16, 8},
        {{"parallel.zero_stage=1", "parallel.zero_group_size=4"}, 16, 8},
        {{"parallel.zero_stage=2"}, 16, 4},
        {{"parallel.zero_stage=1"}, 24, 8},
        {{"parallel.zero_stage=1", "parallel.zero_group_size=3"}, 12, 4},  // groups on 1 or 2 nodes
        {{"parallel.zero_stage=1", "parallel.zero_group_size=3"}, 12, 5},  // a last node of 2 ranks
        {{"parallel.pp=2", "parallel.tp=2", "parallel.zero_stage=1"}, 16, 4},
        {{"parallel.pp=4", "parallel.tp=2"}, 16, 2},
        {{"parallel.tp=4"}, 8, 2},
        {{"parallel.pp=2", "parallel.tp=2", "parallel.sequence_parallel=true"}, 8, 3},
        {{"parallel.pp=2", "run.backend=\"cuda\"", "training.precision=\"bf16\"", "parallel.grad_reduce_dtype=\"fp32\""}, 8, 8},
    };
    for (const Layout& lay : layouts) {
        const Config c = tiny(lay.sets);
        std::string name = "world " + std::to_string(lay.world) + ", " + std::to_string(lay.per_node) + " per node:";
        for (const auto& s : lay.sets) name += " " + s;
        const StepTraffic t = step_traffic(run_shape(c, lay.world), lay.per_node);
        const auto want = enumerate(c, lay.world, lay.per_node);
        double total = 0, crossing = 0;
        for (int k = 0; k < int(GroupKind::count); ++k) {
            const GroupTraffic* g = kind(t, GroupKind(k));
            const double gt = g ? g->total : 0, gc = g ? g->crossing : 0;
            expect_rel(gt, want[size_t(k)][0], name + ": total of " + group_kind_name(GroupKind(k)));
            expect_rel(gc, want[size_t(k)][1], name + ": crossing of " + group_kind_name(GroupKind(k)));
            total += want[size_t(k)][0];
            crossing += want[size_t(k)][1];
        }
        expect_rel(t.total, total, name + ": job total");
        expect_rel(t.crossing, crossing, name + ": job crossing");
    }
}

TEST(Traffic, CrossingSharesAreKOverP) {
    // World 16, pp 2, tp 2, ZeRO groups of 2 (dp 4, 2 replicas), nodes of 4: stage 0 is ranks 0-7.
    // TP {0,1}: 1 node; ZeRO [0,2]: 1 node; replicas (0,4): 2 nodes of 2 -> 1; pipeline 0 -> 8 crosses;
    // embedding pair (0, 8): 1.
    const CrossingShares s = crossing_shares(16, 2, 2, 2, 4);
    EXPECT_EQ(s.tp, 0.0);
    EXPECT_EQ(s.zero, 0.0);
    EXPECT_EQ(s.replica, 1.0);
    EXPECT_EQ(s.embedding, 1.0);
    EXPECT_EQ(s.pipeline, std::vector<double>({1.0}));
    // Plain DP over 16 on 4 nodes: 4 / 16.
    EXPECT_EQ(crossing_shares(16, 1, 1, 1, 4).replica, 0.25);
    EXPECT_THROW(crossing_shares(16, 1, 1, 1, 0), std::invalid_argument);
    EXPECT_THROW(step_traffic(run_shape(tiny(), 16), 0), std::invalid_argument);
}

TEST(Traffic, DryRunPrintsTheTable) {
    // tiny.toml at ZeRO-1 in groups of 2 on 4 ranks, 2 per node, 2 micro-batches: the ZeRO groups
    // [0,1] [2,3] stay in a node, the replica pairs (0,2) (1,3) cross. Rows printed in MiB to 0.1.
    const std::string base = std::string(LLMTRAIN_BIN) + " --config " LLMTRAIN_CONFIGS "/tiny.toml --dry-run "
                             "--set parallel.zero_stage=1 --set parallel.zero_group_size=2 "
                             "--set training.grad_accum_steps=2 --world-size 4";
    const shell::Result p = shell::sh(base + " --ranks-per-node 2");
    ASSERT_EQ(p.code, 0) << p.out;
    const Config c = load_config(LLMTRAIN_CONFIGS "/tiny.toml", {});
    const double psi = double(ParamLayout(gpt_config_of(c), 16).total_numel()), mib = 1048576.0;
    const double vz = 0.5 * (psi * 4 + psi * 4), vr = 2.0 * 0.5 * psi / 2 * 4;
    std::smatch mz, mr;
    const std::regex row_z(R"(\nzero +2 +2 +0 +1 +([0-9.]+) +([0-9.]+) +([0-9.]+) +0\.0% +-)");
    const std::regex row_r(R"(\nreplica +2 +2 +2 +2 +([0-9.]+) +([0-9.]+) +([0-9.]+) +100\.0% +ranks 0,2)");
    ASSERT_TRUE(std::regex_search(p.out, mz, row_z)) << p.out;
    ASSERT_TRUE(std::regex_search(p.out, mr, row_r)) << p.out;
    const double tol = 0.051;  // printed to 0.1 MiB
    EXPECT_NEAR(std::stod(mz[1]), vz / mib, tol);
    EXPECT_NEAR(std::stod(mz[2]), 4 * vz / mib, tol);
    EXPECT_NEAR(std::stod(mz[3]), 0.0, tol);
    EXPECT_NEAR(std::stod(mr[1]), vr / mib, tol);
    EXPECT_NEAR(std::stod(mr[2]), 4 * vr / mib, tol);
    EXPECT_NEAR(std::stod(mr[3]), 4 * vr / mib, tol);
    EXPECT_NE(p.out.find("world 4 on 2 nodes of 2 ranks"), std::string::npos) << p.out;
    EXPECT_NE(p.out.find("groups spanning nodes: replica\n"), std::string::npos) << p.out;
    // Without --ranks-per-node: one node, nothing crosses.
    const shell::Result one = shell::sh(base);
    ASSERT_EQ(one.code, 0) << one.out;
    EXPECT_NE(one.out.find("world 4 on 1 node of 4 ranks"), std::string::npos) << one.out;
    EXPECT_NE(one.out.find("no group spans nodes"), std::string::npos) << one.out;
    // Errors: exit 2 naming the flag and what was expected.
    const shell::Result bad = shell::sh(base + " --ranks-per-node 3");
    EXPECT_EQ(bad.code, 2) << bad.out;
    EXPECT_NE(bad.out.find("--ranks-per-node: expected a divisor of --world-size 4, got 3"), std::string::npos) << bad.out;
    const shell::Result alone = shell::sh(std::string(LLMTRAIN_BIN) + " --dry-run --ranks-per-node 2");
    EXPECT_EQ(alone.code, 2) << alone.out;
    EXPECT_NE(alone.out.find("--ranks-per-node requires --world-size"), std::string::npos) << alone.out;
}

namespace {

PlanOptions plan_options(const Config& cfg, int world, int per_node, double link, double inter) {
    PlanOptions o;
    o.world = world;
    o.device_memory = 64.0 * 1073741824;
    o.link_gbps = link;
    o.inter_node_gbps = inter;
    o.gpus_per_node = per_node;
    o.tp = 1;
    o.times = flops_layer_times(cfg, 0.1, 100);
    return o;
}

const PlanCandidate* at_pp(const PlanResult& r, int pp) {
    for (const PlanCandidate& c : r.candidates)
        if (c.pp == pp && c.cp == 1 && c.skipped.empty() && c.choice.feasible) return &c;
    return nullptr;
}

}  // namespace

TEST(PlanNodes, SlowInterNodeLinkChargesTheCrossingShareAndChangesThePlan) {
    // tiny.toml with 12 layers, 4 micro-batches, world 4 on nodes of 2, FLOP-derived times.
    const Config cfg = load_config(LLMTRAIN_CONFIGS "/tiny.toml", {"model.n_layer=12", "training.grad_accum_steps=4"});
    const double link = 10, slow = 0.01;
    const PlanResult fast = make_plan(cfg, plan_options(cfg, 4, 2, link, 0));
    const PlanResult same = make_plan(cfg, plan_options(cfg, 4, 2, link, link));
    const PlanResult cut = make_plan(cfg, plan_options(cfg, 4, 2, link, slow));
    ASSERT_GE(fast.best, 0);
    ASSERT_GE(cut.best, 0);
    // Unset and equal to --link-gbps are the same model.
    ASSERT_EQ(fast.candidates.size(), same.candidates.size());
    for (size_t i = 0; i < fast.candidates.size(); ++i)
        EXPECT_EQ(fast.candidates[i].step_seconds, same.candidates[i].step_seconds) << "candidate " << i;
    // pp 1: dp 4 over 2 nodes, a ring with 2 of its 4 hops crossing. The step's only communication
    // is the tail's all-reduce of every gradient (fp32), 2 (4 - 1)/4 of its bytes per rank, half of
    // them now at the slow rate: the step grows by that half's time difference.
    const PlanCandidate *f1 = at_pp(fast, 1), *s1 = at_pp(cut, 1);
    ASSERT_TRUE(f1 && s1);
    const double bytes = 2.0 * 3 / 4 * double(ParamLayout(gpt_config_of(cfg)).total_numel()) * 4;
    const double grow = bytes * 0.5 * (1 / slow - 1 / link) / 1e9;
    EXPECT_NEAR(s1->step_seconds - f1->step_seconds, grow, 1e-9 * s1->step_seconds);
    EXPECT_NEAR(s1->crossing_bytes, 2 * bytes, 1e-12 * bytes);  // the job's: one ring, 2 crossing hops of `bytes`
    // The best plan: pp 1 on one rate; pp 2 (each stage's dp pair inside a node, only the pipeline
    // sends and the tied embedding's sum cross) once crossing is slow.
    EXPECT_EQ(fast.candidates[size_t(fast.best)].pp, 1);
    EXPECT_EQ(cut.candidates[size_t(cut.best)].pp, 2);
    const PlanCandidate* s2 = at_pp(cut, 2);
    ASSERT_NE(s2, nullptr);
    EXPECT_LT(s2->crossing_bytes, s1->crossing_bytes);
    // The report's candidate rows carry the crossing MiB.
    PlanOptions o = plan_options(cfg, 4, 2, link, slow);
    std::string text;
    for (const auto& l : plan_report(cfg, o, cut)) text += l + "\n";
    char want[64];
    std::snprintf(want, sizeof want, " %10.1f  [12] / [0]", s1->crossing_bytes / 1048576.0);
    EXPECT_NE(text.find(want), std::string::npos) << text;
    EXPECT_NE(text.find("between nodes of 2 ranks 0.01 GB/s"), std::string::npos) << text;
}
