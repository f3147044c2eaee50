// parallel/partition.cpp — the pipeline's layer split and per-stage checkpoint counts
// (parallel/partition.hpp). The balanced split is exact: it tries every bound a stage's cost or
// memory can set.
#include "parallel/partition.hpp"

#include "model/arch.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>

namespace llmtrain {
namespace {

std::string list_text(const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

std::string number_text(float v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

[[noreturn]] void bad(const std::string& key, const std::string& what) {
    throw std::invalid_argument(key + ": " + what);
}

void check_stages(const GPTConfig& cfg, int pp) {
    if (pp < 1 || pp > cfg.n_layer)
        bad("parallel.pp", "expected an integer in [1, model.n_layer = " + std::to_string(cfg.n_layer) +
                               "] (every stage runs at least one layer), got " + std::to_string(pp));
}

/// A non-empty per-stage list must have one entry per stage.
void check_length(const std::string& key, size_t size, int pp) {
    if (size != 0 && size != static_cast<size_t>(pp))
        bad(key, "expected " + std::to_string(pp) + " entries (one per stage, parallel.pp = " + std::to_string(pp) +
                     ") or none, got " + std::to_string(size));
}

}  // namespace

StageCosts stage_costs(const GPTConfig& cfg, int B, int T) {
    if (B < 1 || T < 1)
        throw std::invalid_argument("stage_costs: expected B >= 1 and T >= 1, got B = " + std::to_string(B) +
                                    ", T = " + std::to_string(T));
    const ArchSpec spec(cfg);
    const double C = double(spec.NH) * spec.HS, tokens = static_cast<double>(B) * T;
    StageCosts c;
    // A mixture of experts: a token runs top_k of the routed experts, so a layer costs its active
    // parameters (model/arch.hpp idle_expert_params, n_layer (E - k) 3 Fe C: a multiple of n_layer).
    const double active = static_cast<double>(spec.layer_params() - spec.idle_expert_params() / cfg.n_layer);
    c.layer = 6.0 * (active + static_cast<double>(T) * C) * tokens;
    c.embedding = 6.0 * static_cast<double>(spec.embedding_flop_params()) * tokens;
    c.head = 6.0 * static_cast<double>(spec.head_params()) * tokens;
    return c;
}

double stage_cost(const StageCosts& costs, int layers, bool first, bool last) {
    double c = layers * costs.layer;
    if (first) c += costs.embedding;
    if (last) c += costs.head;
    return c;
}

std::vector<int> balanced_layers_per_stage(const GPTConfig& cfg, int B, int T, int pp) {
    check_stages(cfg, pp);
    const StageCosts costs = stage_costs(cfg, B, T);
    const int n = cfg.n_layer, P = pp;
    // Every layer costs the same, so a stage's cost depends only on its position and its count k,
    // and grows with k. A split keeps every stage's cost <= X and its in-flight layers (P − s)·k <= M
    // exactly when each k_s lies in [1, cap_s], cap_s the largest such k, and the caps sum to >= n.
    const auto caps = [&](double X, long long M) {
        std::vector<int> cap(P);
        for (int s = 0; s < P; ++s)
            while (cap[s] < n && stage_cost(costs, cap[s] + 1, s == 0, s == P - 1) <= X &&
                   static_cast<long long>(P - s) * (cap[s] + 1) <= M)
                ++cap[s];
        return cap;
    };
    const auto fits = [&](const std::vector<int>& cap) {
        long long sum = 0;
        for (int c : cap) {
            if (c < 1) return false;
            sum += c;
        }
        return sum >= n;
    };
    // The optimum X is one of the stage costs, and the optimum M one of the (P − s)·k: try each.
    constexpr long long no_limit = std::numeric_limits<long long>::max();
    double best_cost = std::numeric_limits<double>::infinity();
    long long best_mem = no_limit;
    for (int s = 0; s < P; ++s)
        for (int k = 1; k <= n; ++k) {
            const double X = stage_cost(costs, k, s == 0, s == P - 1);
            if (X < best_cost && fits(caps(X, no_limit))) best_cost = X;
        }
    for (int s = 0; s < P; ++s)
        for (int k = 1; k <= n; ++k) {
            const long long M = static_cast<long long>(P - s) * k;
            if (M < best_mem && fits(caps(best_cost, M))) best_mem = M;
        }
    // The lexicographically smallest counts within the caps: each stage takes the fewest layers
    // that the later stages' caps still leave room for.
    const std::vector<int> cap = caps(best_cost, best_mem);
    std::vector<int> layers(P);
    long long later = 0;  // sum of the caps of stages after s
    for (int s = 0; s < P; ++s) later += cap[s];
    int left = n;
    for (int s = 0; s < P; ++s) {
        later -= cap[s];
        layers[s] = static_cast<int>(std::max<long long>(1, left - later));
        left -= layers[s];
    }
    return layers;
}

std::vector<StageLayers> stage_plan(const GPTConfig& cfg, int B, int T, int pp,
                                    const std::vector<int>& layers_per_stage, float ratio,
                                    const std::vector<float>& ratio_per_stage,
                                    const std::vector<int>& ckpt_layers_per_stage) {
    check_stages(cfg, pp);
    check_length("pipeline.layers_per_stage", layers_per_stage.size(), pp);
    check_length("activation_checkpoint.ratio_per_stage", ratio_per_stage.size(), pp);
    check_length("activation_checkpoint.layers_per_stage", ckpt_layers_per_stage.size(), pp);

    std::vector<int> layers = layers_per_stage;
    std::string whose = "stage's layers";  // how a count-above-layers error names the stage's share
    if (layers.empty()) {
        layers = balanced_layers_per_stage(cfg, B, T, pp);
        whose = "stage's layers in the balanced split " + list_text(layers);
    } else {
        long long sum = 0;
        for (int s = 0; s < pp; ++s) {
            if (layers[s] < 1)
                bad("pipeline.layers_per_stage[" + std::to_string(s) + "]",
                    "expected an integer >= 1, got " + std::to_string(layers[s]));
            sum += layers[s];
        }
        if (sum != cfg.n_layer)
            bad("pipeline.layers_per_stage", "expected entries summing to model.n_layer = " +
                                                 std::to_string(cfg.n_layer) + ", got " + list_text(layers) +
                                                 " (sum " + std::to_string(sum) + ")");
    }
    if (!(ratio >= 0.0f && ratio <= 1.0f))
        bad("activation_checkpoint.ratio", "expected a number in [0, 1], got " + number_text(ratio));
    for (size_t s = 0; s < ratio_per_stage.size(); ++s)
        if (!(ratio_per_stage[s] >= 0.0f && ratio_per_stage[s] <= 1.0f))
            bad("activation_checkpoint.ratio_per_stage[" + std::to_string(s) + "]",
                "expected a number in [0, 1], got " + number_text(ratio_per_stage[s]));

    std::vector<StageLayers> plan(pp);
    int l0 = 0;
    for (int s = 0; s < pp; ++s) {
        const int n = layers[s];
        int ckpt;
        if (!ckpt_layers_per_stage.empty()) {
            ckpt = ckpt_layers_per_stage[s];
            if (ckpt < 0 || ckpt > n)
                bad("activation_checkpoint.layers_per_stage[" + std::to_string(s) + "]",
                    "expected an integer in [0, " + std::to_string(n) + "] (the " + whose + "), got " +
                        std::to_string(ckpt));
        } else {
            const float r = ratio_per_stage.empty() ? ratio : ratio_per_stage[s];
            ckpt = static_cast<int>(std::floor(static_cast<double>(r) * n));
        }
        plan[s] = {l0, l0 + n, ckpt};
        l0 += n;
    }
    return plan;
}

}  // namespace llmtrain
