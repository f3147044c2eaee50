// tests/app/test_plan_cp.cpp — the planner's context-parallel axis (app/plan/plan.hpp cp_sizes,
// plan_problem, make_plan; llmtrain-plan --cp), each against an independent reference:
//  - the sizes tried: the divisors of world / tp that cut seq_len into 2 cp chunks; a cp group's
//    share of bytes crossing nodes against the ranks it spans;
//  - a layer's, the embedding's and the head's seconds at cp 2 against the cp 1 ones over 2 plus the
//    q|k|v collectives counted by hand from the model's shape (B·T·(n_head + 2 n_kv_head)·head size
//    elements, each rank sending half): one per layer in forward, two in backward, none more in
//    recompute (its repeated forward's gather stands for the backward's); the traffic table's cp bytes
//    at pp 1 with nothing recomputed: 3 per layer less the top layer's backward gather;
//    the gradient sync over the same dp x cp = 4 ranks as cp 1's dp 4 (the tails equal);
//  - the search: cp x pp rows too, world = tp x cp x pp x dp on every row, --cp alone honoured;
//  - cp is what makes it fit: llama-tiny at seq_len 8192 on 2 ranks (--tp 1 --pp 1) under a cap
//    between what cp 2 and cp 1 need at the least (each counted by the binary's `--dry-run
//    --world-size 2 --set parallel.cp=C`: every layer recomputed; cp 1 also at ZeRO-1 with the
//    optimizer offloaded, the planner's last resort) is met at cp 2 only, and the plan's per-rank
//    device MiB equals the dry run of the planned config within 0.1 MiB (both print to 0.1 MiB);
//  - cp 2 x pp 2 on 4 ranks: each stage's planned device MiB equals the dry run's row for that stage
//    of the planned config (pipeline.layers_per_stage and its recomputed layers) within 0.1 MiB;
//  - llmtrain-plan's --cp (every row at that cp, the TOML's `cp = 2`), parallel.cp in the config no
//    longer refused, and bad --cp values: exit 2 naming the flag and what was expected.
// FLOP-derived layer times (--device-tflops), so nothing depends on this machine's speed.
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

using namespace llmtrain;

namespace {

/// llama-tiny.toml (4 layers, n_head 4 over n_kv_head 2, n_embd 256: head size 64) at seq_len 1024,
/// micro-batch 2, no samples.
Config llama(std::vector<std::string> extra = {}) {
    std::vector<std::string> sets = {"model.seq_len=1024", "training.micro_batch_size=2", "training.grad_accum_steps=1",
                                     "run.sample_interval=0"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return load_config(LLMTRAIN_CONFIGS "/llama-tiny.toml", sets);
}

PlanOptions options(const Config& cfg, int world, double memory, double link_gbps) {
    PlanOptions o;
    o.world = world;
    o.device_memory = memory;
    o.link_gbps = link_gbps;
    o.times = flops_layer_times(cfg, 0.1, 100);
    return o;
}

/// llama-tiny at seq_len 8192, micro-batch 1, no samples, as --config and --set flags.
const std::string kLong = " --config " LLMTRAIN_CONFIGS "/llama-tiny.toml --set model.seq_len=8192 "
                          "--set training.micro_batch_size=1 --set run.sample_interval=0";

/// The device total (MiB) of ZeRO stage `zero`'s row in a pp 1 dry run's memory table.
double dry_total(const std::string& out, int zero) {
    const size_t head = out.find("device total | model states");
    if (head == std::string::npos) return -1;
    std::istringstream in(out.substr(out.find('\n', head) + 1));
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream f(line.substr(0, line.find('|')));
        std::vector<double> v;
        for (double x; f >> x;) v.push_back(x);
        if (v.size() < 3) break;
        if (int(v[0]) == zero) return v.back();
    }
    return -1;
}

/// `llmtrain --dry-run --world-size 2` of kLong with `sets` (each "--set" already in it): ZeRO stage
/// `zero`'s device total, MiB.
double dry_run(const std::string& sets, int zero) {
    const shell::Result p = shell::sh(std::string(LLMTRAIN_BIN) + kLong + " --dry-run --world-size 2" + sets);
    EXPECT_EQ(p.code, 0) << p.out;
    const double total = dry_total(p.out, zero);
    EXPECT_GT(total, 0) << p.out;
    return total;
}

/// The candidate rows of a plan report: {tp, cp, pp, dp, fits}.
std::vector<std::array<int, 5>> plan_table(const std::string& out) {
    std::vector<std::array<int, 5>> rows;
    const std::regex re(R"(\n +([0-9]+) +([0-9]+) +([0-9]+) +([0-9]+) +[0-9]+ +[0-9]+ +(cpu|none) +(yes|no) )");
    for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
        rows.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3]), std::stoi((*it)[4]),
                        (*it)[6] == "yes" ? 1 : 0});
    return rows;
}

}  // namespace

TEST(PlanCp, SizesCutTheWindowIntoTwoChunksPerRank) {
    EXPECT_EQ(cp_sizes(llama(), 8, 1, 0), (std::vector<int>{1, 2, 4, 8}));
    EXPECT_EQ(cp_sizes(llama(), 8, 2, 0), (std::vector<int>{1, 2, 4}));   // world / tp = 4
    EXPECT_EQ(cp_sizes(llama(), 12, 1, 0), (std::vector<int>{1, 2, 4}));  // 1024 = 2^10: 3, 6, 12 cut no chunks
    EXPECT_EQ(cp_sizes(llama({"model.seq_len=12"}), 8, 1, 0), (std::vector<int>{1, 2}));  // 12 % 8 != 0
    EXPECT_EQ(cp_sizes(llama(), 8, 1, 4), std::vector<int>{4});
    EXPECT_TRUE(cp_sizes(llama({"model.seq_len=12"}), 8, 1, 4).empty());
    // A CP group is cp consecutive dp indices (tp apart): on nodes of 2 ranks, cp 4 at tp 1 spans 2
    // nodes (share 2/4); tp 2 x cp 4 inside a node of 8 crosses nothing, on nodes of 4 spans 2 of them.
    EXPECT_EQ(crossing_shares(16, 1, 1, 1, 2, 4).cp, 0.5);
    EXPECT_EQ(crossing_shares(16, 1, 1, 2, 8, 4).cp, 0.0);
    EXPECT_EQ(crossing_shares(16, 1, 1, 2, 4, 4).cp, 0.5);
    EXPECT_EQ(crossing_shares(16, 1, 1, 2, 4).cp, 0.0);  // cp 1: no group
}

TEST(PlanCp, StageTimesAreTheTokensShareAndTheQkvCollectives) {
    const double link = 20;
    Config c1 = llama(), c2 = llama({"parallel.cp=2"});
    c1.parallel.dp = 4;  // 4 ranks: dp 4, or dp 2 x cp 2: the gradient is averaged over 4 ranks either way
    c2.parallel.dp = 2;
    const PlanOptions o = options(c1, 4, 64.0 * 1073741824, link);
    const PlanProblem p1 = plan_problem(c1, run_shape(c1, 4), o), p2 = plan_problem(c2, run_shape(c2, 4), o);
    ASSERT_EQ(p1.stages.size(), 1u);
    ASSERT_EQ(p2.stages.size(), 1u);
    // The window's q|k|v: B·T rows of (n_head + 2 n_kv_head) x head size fp32 elements; an all-gather
    // or reduce-scatter over 2 ranks sends half of it from each rank.
    const double qkv = 2.0 * 1024 * (4 + 2 * 2) * 64 * 4, g = 0.5 * qkv / (link * 1e9);
    const StageModel &a = p1.stages[0], &b = p2.stages[0];
    EXPECT_NEAR(b.fwd_layer, a.fwd_layer / 2 + g, 1e-12);
    EXPECT_NEAR(b.bwd_layer, a.bwd_layer / 2 + 2 * g, 1e-12);  // gathered again, gradient reduce-scattered
    EXPECT_NEAR(b.recompute, a.recompute / 2, 1e-12);          // its forward's gather replaces the backward's
    EXPECT_NEAR(b.fwd0, a.fwd0 / 2, 1e-12);                    // embedding and head: half the tokens
    EXPECT_NEAR(b.bwd0, a.bwd0 / 2, 1e-12);
    EXPECT_NEAR(b.tail0, a.tail0, 1e-15);  // the same 4-rank all-reduce and AdamW shard
    EXPECT_NEAR(b.tail_layer, a.tail_layer, 1e-15);
    EXPECT_LT(b.mem0, a.mem0);  // activations per rank ∝ T/cp (pp 1: mem0 is the whole rank)
    // The traffic table (model/gpt_cp.cpp, 4 layers): nothing recomputed, 4 forward gathers, 3 backward
    // gathers (the top layer's window is still there from the forward) and 4 reduce-scatters; every
    // layer recomputed, 4 + 4 (the repeated forwards) + 4.
    auto cp_sent = [&](float ratio) {
        Config t2 = c2;
        t2.activation_checkpoint.ratio = ratio;
        for (const GroupTraffic& k : step_traffic(run_shape(t2, 4), 4).groups)
            if (k.kind == GroupKind::cp) return k.per_rank;
        return -1.0;
    };
    EXPECT_NEAR(cp_sent(0), 11 * 0.5 * qkv, 1e-6);
    EXPECT_NEAR(cp_sent(1), 12 * 0.5 * qkv, 1e-6);
}

TEST(PlanCp, SearchCoversCpTimesPpAndHonoursTheFlag) {
    const Config cfg = llama();
    PlanOptions o = options(cfg, 4, 64.0 * 1073741824, 50);
    const PlanResult r = make_plan(cfg, o);
    ASSERT_GE(r.best, 0);
    int with_cp = 0;
    for (const PlanCandidate& c : r.candidates) {
        if (!c.skipped.empty()) continue;
        EXPECT_EQ(c.tp * c.cp * c.pp * c.dp, 4) << c.tp << " " << c.cp << " " << c.pp;
        if (c.cp > 1) {
            ++with_cp;
            ASSERT_TRUE(c.choice.feasible);
            if (c.pp > 1) {
                EXPECT_LE(c.zero_stage, 1);  // ZeRO-2/3 do not combine with a pipeline
            }
            EXPECT_EQ(apply_plan(cfg, c).parallel.cp, c.cp);
            const auto toml = plan_toml(c);
            EXPECT_NE(std::find(toml.begin(), toml.end(), "cp = " + std::to_string(c.cp)), toml.end());
        }
    }
    EXPECT_EQ(with_cp, 4);  // tp 1: cp 2 at pp 1 and 2, cp 4; tp 2: cp 2 (n_kv_head 2 admits no tp 4)
    o.cp = 2;
    const PlanResult only = make_plan(cfg, o);
    ASSERT_FALSE(only.candidates.empty());
    for (const PlanCandidate& c : only.candidates) {
        if (c.skipped.empty()) {
            EXPECT_EQ(c.cp, 2);
        }
    }
}

TEST(PlanCp, CpIsWhatFitsAndThePlanIsTheDryRunsCount) {
    // The least cp 1 can need on 2 ranks (dp 2): every layer recomputed, ZeRO-1, optimizer offloaded;
    // what cp 2 (dp 1) needs with every layer recomputed at ZeRO-0.
    const double need1 = dry_run(" --set parallel.cp=1 --set activation_checkpoint.ratio=1 --set "
                                 "'optimizer.offload=\"cpu\"' --set optimizer.offload_fraction=1.0", 1);
    const double need2 = dry_run(" --set parallel.cp=2 --set activation_checkpoint.ratio=1", 0);
    ASSERT_LT(need2, need1);
    const double cap = 0.5 * (need1 + need2);
    char mem[64];
    std::snprintf(mem, sizeof mem, "%.3fMiB", cap / 0.9);  // the default margin keeps 10% free
    const shell::Result p = shell::sh(std::string(LLMTRAIN_PLAN_BIN) + kLong +
                      " --world-size 2 --tp 1 --pp 1 --device-tflops 1 --device-memory " + mem);
    ASSERT_EQ(p.code, 0) << p.out;
    const auto rows = plan_table(p.out);
    ASSERT_EQ(rows.size(), 2u) << p.out;
    EXPECT_EQ(rows[0], (std::array<int, 5>{1, 1, 1, 2, 0})) << p.out;  // cp 1 fits nowhere
    EXPECT_EQ(rows[1], (std::array<int, 5>{1, 2, 1, 1, 1})) << p.out;
    EXPECT_NE(p.out.find("best: pp 1 x dp 1 x cp 2 x tp 1"), std::string::npos) << p.out;
    // The plan's per-rank row and its TOML, then the dry run of exactly that config.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(\n +0 +4 +([0-9]) +1 +[^|]* ([0-9.]+) \|)"))) << p.out;
    const std::string ckpt = m[1];
    const double predicted = std::stod(m[2]);
    EXPECT_LE(predicted, cap + 0.05) << p.out;
    ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(\n  cp = 2\n  zero_stage = ([0-9])\n)"))) << p.out;
    const int zero = std::stoi(m[1]);
    const bool offload = p.out.find("offload = \"cpu\"") != std::string::npos;
    const double counted = dry_run(" --set parallel.cp=2 --set 'activation_checkpoint.layers_per_stage=[" + ckpt +
                                       "]' --set parallel.zero_stage=" + std::to_string(zero) +
                                       (offload ? " --set 'optimizer.offload=\"cpu\"' --set optimizer.offload_fraction=1.0"
                                                : ""),
                                   zero);
    EXPECT_NEAR(predicted, counted, 0.1) << p.out;
}

TEST(PlanCp, CpTimesPpStagesAreTheDryRunsCount) {
    // 4 ranks at cp 2 x pp 2 (dp 1, 8 micro-batches) under a cap that forces recomputation.
    const shell::Result p = shell::sh(std::string(LLMTRAIN_PLAN_BIN) + kLong + " --set training.grad_accum_steps=2 --world-size 4 "
                      "--tp 1 --cp 2 --pp 2 --device-tflops 1 --device-memory 400MiB");
    ASSERT_EQ(p.code, 0) << p.out;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(\n  layers_per_stage = (\[[0-9, ]+\])\n  \[activation_checkpoint\]\n  layers_per_stage = (\[[0-9, ]+\])\n)")))
        << p.out;
    const std::string layers = m[1], ckpt = m[2];
    ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(\n  zero_stage = ([0-9])\n)"))) << p.out;
    const std::string zero = m[1];
    ASSERT_EQ(p.out.find("offload = \"cpu\""), std::string::npos) << p.out;
    const shell::Result d = shell::sh(std::string(LLMTRAIN_BIN) + kLong + " --dry-run --world-size 4 --set parallel.cp=2 --set parallel.pp=2 "
                      "--set training.grad_accum_steps=8 --set parallel.zero_stage=" + zero + " --set 'pipeline.layers_per_stage=" +
                      layers + "' --set 'activation_checkpoint.layers_per_stage=" + ckpt + "'");
    ASSERT_EQ(d.code, 0) << d.out;
    for (int s = 0; s < 2; ++s) {
        // The plan's stage row "    s  layers ckpt in_flight ... device MiB |", the dry run's
        // "zero s layers ckpt in_flight ... device total | model states".
        const std::regex planned("\n +" + std::to_string(s) + R"( +[0-9]+ +[0-9]+ +[0-9]+ +[^|\n]* ([0-9.]+) \|)");
        const std::regex counted("\n +" + zero + " +" + std::to_string(s) + R"( +[0-9]+ +[0-9]+ +[0-9]+ +[^|\n]* ([0-9.]+) \|)");
        std::smatch a, b;
        ASSERT_TRUE(std::regex_search(p.out, a, planned)) << s << "\n" << p.out;
        ASSERT_TRUE(std::regex_search(d.out, b, counted)) << s << "\n" << d.out;
        EXPECT_NEAR(std::stod(a[1]), std::stod(b[1]), 0.1) << "stage " << s << "\n" << p.out << d.out;
        EXPECT_LE(std::stod(a[1]), 400 * 0.9 + 0.05) << "stage " << s;
    }
}

TEST(PlanCp, FlagAndConfigKey) {
    const std::string plan = std::string(LLMTRAIN_PLAN_BIN) + kLong + " --device-memory 4GiB --device-tflops 1";
    const shell::Result p = shell::sh(plan + " --world-size 4 --cp 2");
    ASSERT_EQ(p.code, 0) << p.out;
    const auto rows = plan_table(p.out);
    ASSERT_EQ(rows.size(), 3u) << p.out;  // tp 1 at pp 1 and 2, tp 2 at pp 1 (n_kv_head 2: no tp 4)
    for (const auto& r : rows) EXPECT_EQ(r[1], 2) << p.out;
    EXPECT_NE(p.out.find("\n  cp = 2\n"), std::string::npos) << p.out;
    // parallel.cp in the config is planned like any other (it no longer stops the planner).
    const shell::Result key = shell::sh(plan + " --world-size 2 --set parallel.cp=2");
    EXPECT_EQ(key.code, 0) << key.out;
    const std::vector<std::pair<std::string, std::string>> bad = {
        {" --world-size 4 --cp 3", "--cp: expected a divisor of --world-size 4, got 3"},
        {" --world-size 8 --cp 8 --set model.seq_len=1000",
         "--cp: expected model.seq_len = 1000 to be a multiple of 2 x cp = 16"},
        {" --world-size 4 --cp 2 --pp 4", "--cp x --pp: expected a divisor of --world-size 4, got 8"},
        {" --world-size 4 --cp 4 --tp 2", "--cp x --tp: expected a divisor of --world-size 4, got 8"},
        {" --world-size 4 --cp 0", "--cp"}};
    for (const auto& [flags, msg] : bad) {
        const shell::Result b = shell::sh(plan + flags);
        EXPECT_EQ(b.code, 2) << flags << "\n" << b.out;
        EXPECT_NE(b.out.find(msg), std::string::npos) << flags << "\n" << b.out;
    }
}
