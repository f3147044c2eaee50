// tests/parallel/test_partition.cpp — the pipeline's layer split and per-stage checkpoint counts
// (parallel/partition.hpp) against independent references:
//   - stage_costs: summed over the stages of a split, the model's FLOPs per token times B·T
//     (flops_per_token of model/gpt.hpp, 6Ψ + 6·n_layer·T·C, Ψ from ParamLayout: wte's padded rows
//     included, as the LM head GEMM computes them);
//   - balanced_layers_per_stage: a brute-force enumeration of every contiguous split, in
//     lexicographic order, keeping the first with the smallest (largest stage cost, largest
//     (P − s)·layers_s); for n_layer 1..12, pp 1..min(6, n_layer), four shapes; and GPT-2 1.5B at pp 8;
//   - stage_plan: counts computed here with floor(ratio · n) and the documented precedence;
//   - errors: each inconsistent input names its config key.
// One process, no MPI.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "model/gpt.hpp"
#include "parallel/partition.hpp"

namespace llmtrain {
namespace {

struct Shape {
    const char* name;
    GPTConfig cfg;
    int B, T;
};

// tiny (configs/tiny.toml), GPT-2 124M and 1.5B at their configs' micro-batches, and 124M with short
// sequences (attention's share shrinks, the head's grows relative to a layer).
const Shape kShapes[] = {
    {"tiny", {4, 4, 256, 256, 8192}, 4, 256},
    {"gpt2-124m", {12, 12, 768, 1024, 50257}, 16, 1024},
    {"gpt2-124m-T64", {12, 12, 768, 1024, 50257}, 1, 64},
    {"gpt2-1.5b", {48, 25, 1600, 1024, 50257}, 8, 1024},
};

/// What the brute force minimizes, in order.
struct Score {
    double cost;       // the largest stage cost
    long long memory;  // the largest (P − s)·layers_s
};

Score score(const StageCosts& c, const std::vector<int>& layers) {
    const int P = int(layers.size());
    Score sc{0, 0};
    for (int s = 0; s < P; ++s) {
        const double cost = layers[s] * c.layer + (s == 0 ? c.embedding : 0.0) + (s == P - 1 ? c.head : 0.0);
        sc.cost = std::max(sc.cost, cost);
        sc.memory = std::max(sc.memory, static_cast<long long>(P - s) * layers[s]);
    }
    return sc;
}

bool better(const Score& a, const Score& b) { return a.cost < b.cost || (a.cost == b.cost && a.memory < b.memory); }

/// Every split of n layers into P stages of >= 1 layer, in lexicographic order; returns the first
/// with the best score. Branches whose prefix already scores worse than the best found are cut
/// (their completions can only score worse), which keeps n = 48, P = 8 fast.
std::vector<int> brute_force(const StageCosts& c, int n, int P) {
    std::vector<int> cur(P), best;
    Score best_score{INFINITY, 0};
    std::function<void(int, int)> walk = [&](int s, int left) {
        if (!best.empty()) {
            // The prefix's own stages (s of them) bound the final score from below.
            Score prefix{0, 0};
            for (int t = 0; t < s; ++t) {
                const double cost = cur[t] * c.layer + (t == 0 ? c.embedding : 0.0) + (t == P - 1 ? c.head : 0.0);
                prefix.cost = std::max(prefix.cost, cost);
                prefix.memory = std::max(prefix.memory, static_cast<long long>(P - t) * cur[t]);
            }
            if (better(best_score, prefix)) return;
        }
        if (s == P - 1) {
            cur[s] = left;
            const Score sc = score(c, cur);
            if (best.empty() || better(sc, best_score)) best = cur, best_score = sc;
            return;
        }
        for (int k = 1; k <= left - (P - 1 - s); ++k) {
            cur[s] = k;
            walk(s + 1, left - k);
        }
    };
    walk(0, n);
    return best;
}

std::string text(const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

/// The message of the std::invalid_argument `f` throws, or "" when it returns.
std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Partition, StageCostsSumToTheModelFlops) {
    for (const auto& sh : kShapes) {
        const StageCosts c = stage_costs(sh.cfg, sh.B, sh.T);
        const double tokens = double(sh.B) * sh.T;
        const double want = flops_per_token(sh.cfg, ParamLayout(sh.cfg).num_parameters(), sh.T) * tokens;
        const double got = sh.cfg.n_layer * c.layer + c.embedding + c.head;
        EXPECT_EQ(got, want) << sh.name;  // integers below 2^53: exact
        EXPECT_EQ(stage_cost(c, sh.cfg.n_layer, true, true), got) << sh.name;
        EXPECT_EQ(stage_cost(c, 3, false, false), 3 * c.layer) << sh.name;
    }
    EXPECT_NE(error_of([] { stage_costs(GPTConfig{}, 0, 8); }).find("B >= 1"), std::string::npos);
    EXPECT_NE(error_of([] { stage_costs(GPTConfig{}, 1, 0); }).find("T >= 1"), std::string::npos);
}

// A mixture of experts (moe-tiny's shape: 8 experts of width 384, top-2) costs what a stage runs: a
// layer's active parameters, i.e. the dense Llama of MLP width top_k x 384 = 768 plus the router
// (E x C), and the stages sum to the run's active-FLOP count (flops_per_token leaves the idle
// experts out); the balanced split is the dense model's.
TEST(Partition, MoeStagesCostTheirActiveExperts) {
    GPTConfig dense{4, 4, 256, 256, 8192};
    dense.arch = Arch::llama, dense.n_kv_head = 2, dense.intermediate_size = 768;
    GPTConfig moe = dense;
    moe.moe_experts = 8, moe.moe_top_k = 2, moe.moe_expert_ffn = 384;
    const int B = 4, T = 256;
    const StageCosts d = stage_costs(dense, B, T), m = stage_costs(moe, B, T);
    EXPECT_EQ(m.layer, d.layer + 6.0 * 8 * 256 * B * T);  // the router's E x C
    EXPECT_EQ(m.embedding, d.embedding);
    EXPECT_EQ(m.head, d.head);
    const double want = flops_per_token(moe, ParamLayout(moe).num_parameters(), T) * B * T;
    EXPECT_EQ(moe.n_layer * m.layer + m.embedding + m.head, want);
    EXPECT_EQ(balanced_layers_per_stage(moe, B, T, 2), balanced_layers_per_stage(dense, B, T, 2));
}

TEST(Partition, BalancedSplitEqualsBruteForce) {
    int uneven = 0, memory_ties = 0;  // cases where the even split and where rule 2 make a difference
    for (const auto& sh : kShapes)
        for (int n = 1; n <= 12; ++n)
            for (int P = 1; P <= std::min(6, n); ++P) {
                GPTConfig cfg = sh.cfg;
                cfg.n_layer = n;
                const StageCosts c = stage_costs(cfg, sh.B, sh.T);
                const std::vector<int> want = brute_force(c, n, P), got = balanced_layers_per_stage(cfg, sh.B, sh.T, P);
                ASSERT_EQ(got, want) << sh.name << " n_layer " << n << " pp " << P << ": got " << text(got)
                                     << ", brute force " << text(want);
                // Would the cost alone (rule 1, then lexicographic) have chosen another split?
                std::vector<int> lexi;
                double lexi_cost = INFINITY;
                std::function<void(std::vector<int>, int)> walk = [&](std::vector<int> cur, int left) {
                    if (int(cur.size()) == P - 1) {
                        cur.push_back(left);
                        if (const double x = score(c, cur).cost; x < lexi_cost) lexi = cur, lexi_cost = x;
                        return;
                    }
                    for (int k = 1; k <= left - (P - 1 - int(cur.size())); ++k) {
                        auto next = cur;
                        next.push_back(k);
                        walk(next, left - k);
                    }
                };
                walk({}, n);
                memory_ties += lexi != want;
                uneven += (n % P == 0) && want != std::vector<int>(P, n / P);
            }
    // The cases exercise both the balancing and the memory tie rule.
    EXPECT_GT(uneven, 0);
    EXPECT_GT(memory_ties, 0);
}

TEST(Partition, Gpt2XlOverEightStages) {
    // GPT-2 1.5B, B = 8, T = 1024, pp = 8: the LM head costs about 2.49 layers and the embedding 0.05,
    // so the slowest stage runs 7 layers and the last stage at most 4 (4 + 2.49 < 7); among those
    // splits [5, 5, 6, 7, 7, 7, 7, 4] keeps the fewest in-flight layers ((P − s)·layers_s <= 40).
    const Shape& xl = kShapes[3];
    const StageCosts c = stage_costs(xl.cfg, xl.B, xl.T);
    const std::vector<int> got = balanced_layers_per_stage(xl.cfg, xl.B, xl.T, 8);
    EXPECT_EQ(got, brute_force(c, 48, 8)) << text(got);
    EXPECT_EQ(score(c, got).cost, 7 * c.layer) << text(got);
    std::printf("gpt2-1.5b, B 8, T 1024, pp 8: layers per stage %s\n", text(got).c_str());
}

TEST(Partition, StagePlanFloorsEachStagesRatioAndPrefersCounts) {
    GPTConfig cfg;
    cfg.n_layer = 10;
    const std::vector<int> layers = {3, 3, 4};
    // One ratio: floor(0.5 · 3) = 1, floor(0.5 · 4) = 2 (not floor(0.5 · 10) spread over stages).
    auto plan = stage_plan(cfg, 2, 64, 3, layers, 0.5f, {}, {});
    ASSERT_EQ(plan.size(), 3u);
    int l0 = 0;
    for (int s = 0; s < 3; ++s) {
        EXPECT_EQ(plan[s].l0, l0);
        EXPECT_EQ(plan[s].l1, l0 + layers[s]);
        EXPECT_EQ(plan[s].checkpointed, int(std::floor(0.5 * layers[s])));
        l0 += layers[s];
    }
    // Per-stage ratios win over the single ratio: floor(1 · 3), floor(0.34 · 3), floor(0.99 · 4).
    plan = stage_plan(cfg, 2, 64, 3, layers, 0.5f, {1.0f, 0.34f, 0.99f}, {});
    EXPECT_EQ(plan[0].checkpointed, 3);
    EXPECT_EQ(plan[1].checkpointed, 1);
    EXPECT_EQ(plan[2].checkpointed, 3);
    // Counts win over both.
    plan = stage_plan(cfg, 2, 64, 3, layers, 0.5f, {1.0f, 1.0f, 1.0f}, {0, 3, 1});
    EXPECT_EQ(plan[0].checkpointed, 0);
    EXPECT_EQ(plan[1].checkpointed, 3);
    EXPECT_EQ(plan[2].checkpointed, 1);
    // No layers_per_stage: the balanced split, and the ratio applied to its counts.
    const std::vector<int> balanced = balanced_layers_per_stage(cfg, 2, 64, 3);
    plan = stage_plan(cfg, 2, 64, 3, {}, 0.7f, {}, {});
    l0 = 0;
    for (int s = 0; s < 3; ++s) {
        EXPECT_EQ(plan[s], (StageLayers{l0, l0 + balanced[s], int(std::floor(double(0.7f) * balanced[s]))}));
        l0 += balanced[s];
    }
    EXPECT_EQ(l0, 10);
}

TEST(Partition, InconsistentInputsNameTheirKey) {
    GPTConfig cfg;  // n_layer 4
    const auto plan_error = [&](int pp, std::vector<int> layers, float ratio, std::vector<float> ratios,
                                std::vector<int> counts) {
        return error_of([&] { stage_plan(cfg, 2, 64, pp, layers, ratio, ratios, counts); });
    };
    const std::vector<std::pair<std::string, std::string>> cases = {
        {plan_error(0, {}, 0, {}, {}), "parallel.pp: expected an integer in [1, model.n_layer = 4]"},
        {plan_error(5, {}, 0, {}, {}), "parallel.pp: expected an integer in [1, model.n_layer = 4]"},
        {plan_error(2, {1, 1, 2}, 0, {}, {}), "pipeline.layers_per_stage: expected 2 entries"},
        {plan_error(2, {1, 2}, 0, {}, {}), "pipeline.layers_per_stage: expected entries summing to model.n_layer = 4"},
        {plan_error(2, {0, 4}, 0, {}, {}), "pipeline.layers_per_stage[0]: expected an integer >= 1, got 0"},
        {plan_error(2, {5, -1}, 0, {}, {}), "pipeline.layers_per_stage[1]: expected an integer >= 1, got -1"},
        {plan_error(2, {}, 1.5f, {}, {}), "activation_checkpoint.ratio: expected a number in [0, 1], got 1.5"},
        {plan_error(2, {}, 0, {0.5f}, {}), "activation_checkpoint.ratio_per_stage: expected 2 entries"},
        {plan_error(2, {}, 0, {0.5f, -0.5f}, {}), "activation_checkpoint.ratio_per_stage[1]: expected a number in [0, 1]"},
        {plan_error(2, {}, 0, {}, {1, 1, 1}), "activation_checkpoint.layers_per_stage: expected 2 entries"},
        {plan_error(2, {1, 3}, 0, {}, {2, 0}), "activation_checkpoint.layers_per_stage[0]: expected an integer in [0, 1]"},
        {plan_error(2, {1, 3}, 0, {}, {0, -1}), "activation_checkpoint.layers_per_stage[1]: expected an integer in [0, 3]"},
        {plan_error(2, {}, 0, {}, {0, 4}), "activation_checkpoint.layers_per_stage[1]: expected an integer in [0, "},
    };
    for (const auto& [err, want] : cases) EXPECT_EQ(err.rfind(want, 0), 0u) << "'" << want << "' does not start: " << err;
    // A count above a balanced stage's layers names the split it was checked against.
    const std::vector<int> balanced = balanced_layers_per_stage(cfg, 2, 64, 2);
    const std::string err = plan_error(2, {}, 0, {}, {0, balanced[1] + 1});
    EXPECT_NE(err.find("balanced split " + text(balanced)), std::string::npos) << err;
    EXPECT_EQ(error_of([&] { balanced_layers_per_stage(cfg, 2, 64, 5); }).rfind("parallel.pp:", 0), 0u);
}

}  // namespace llmtrain
