// app/moe_balance.hpp — what the trainer reports of a mixture of experts' routing (model.moe;
// docs/model.md "Mixture of experts", docs/metrics.md): the load-balancing loss apart from the
// cross-entropy, the tokens routed to each expert of each layer, and the load imbalance max_e
// load_e / mean_e load_e (the "max violation" of Wang et al. 2024, "Auxiliary-Loss-Free Load
// Balancing Strategy for Mixture-of-Experts", eq. 6, plus one; DeepSeek-V3 §2.1.2 follows it).
// Pure host code: the trainer feeds it each step's all-reduced counts (app/trainer_moe.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmtrain {

/// max_e counts[e] / (sum_e counts[e] / E) of one layer's E counts: 1 when every expert has the
/// same load, E when one expert has them all; 0 when there are none (no tokens).
double load_imbalance(const int64_t* counts, int E);

/// The running figures of one run's routing: the last step's and the log window's.
struct MoeBalance {
    int n_layer = 0, E = 0;
    double aux = 0.0;                  ///< the last step's balance loss (sum over layers)
    std::vector<int64_t> step_load;    ///< (n_layer, E) the last step's (token, slot) pairs per expert
    std::vector<int64_t> window_load;  ///< (n_layer, E) summed since the last log line
    /// (n_layer, E) fp32 the selection biases of DeepSeek-V3's auxiliary-loss-free balancing (zeros
    /// at the start; update_bias moves them; the checkpoint keeps them, state.toml [moe]).
    std::vector<float> bias;

    MoeBalance(int n_layer_, int E_);
    /// Records a step: aux, and load (n_layer, E) as the last step's and added to the window.
    void add_step(double aux_, const std::vector<int64_t>& load);
    /// The window's line, then clears the window:
    /// `step 25/1000 | moe aux 0.04012 | load max/mean by layer 1.31 1.12 | by expert (all layers) 13.1% 12.0% ...`
    /// (each expert's share of the window's pairs summed over the layers).
    std::string take_window_line(int64_t step, int64_t max_steps);
    /// DeepSeek-V3 §2.1.2 (Wang et al. 2024, Algorithm 1) after a step: for every layer l and expert
    /// e, bias[l,e] -= rate * sign(step_load[l,e] - mean_l), mean_l = the layer's step loads / E
    /// (compared exactly in integers: load * E against the layer's sum; sign(0) = 0). fp32 adds, in
    /// order, so every rank given the same all-reduced loads computes the same bits.
    void update_bias(float rate);
    /// The window's imbalance of layer l (load_imbalance of its row).
    double window_imbalance(int l) const { return load_imbalance(window_load.data() + size_t(l) * size_t(E), E); }
};

}  // namespace llmtrain
