// parallel/partition.hpp — which layers each pipeline stage runs, and how many of them it recomputes
// (docs/configuration.md "[pipeline]" and "[activation_checkpoint]").
//
// Pure functions of the model shape, the micro-batch (B,T), the stage count and the config's lists:
// no ranks, no devices. The config loader calls stage_plan() to refuse inconsistent lists before
// anything starts; the pipeline trainer calls it to build each stage's GPT (GPTOptions l0, l1,
// checkpoint_layers). The default split balances the FLOPs of docs/reference.md "Training FLOPs and
// MFU" with the embedding on the first stage and ln_f + LM head + loss on the last, rather than
// n_layer / P layers each (GPT-2 1.5B's LM head costs about 2.5 layers).
#pragma once
#include <vector>

#include "model/param_layout.hpp"

namespace llmtrain {

/// One stage's share: layers [l0, l1), of which the first `checkpointed` keep only their input and
/// are recomputed in backward (GPTOptions::checkpoint_layers).
struct StageLayers {
    int l0 = 0, l1 = 0;
    int checkpointed = 0;
    bool operator==(const StageLayers&) const = default;
};

/// Training FLOPs (forward + backward, no recomputation) of one micro-batch of B sequences of T
/// tokens, split by where the work runs. Per token, following the count of docs/reference.md
/// "Training FLOPs and MFU" (6 per parameter + 6·T·C of attention per layer), the parameter counts
/// asked of the architecture description (model/arch.hpp):
///   layer     6·layer_params + 6·T·C  (GPT-2: 12C² + 13C; Llama: (2 NH + 2 NKV)·HS·C + 3 F·C + 2C;
///                                     and attention's score and value products; a mixture of
///                                     experts counts its active parameters: the (E − top_k)·3·Fe·C
///                                     of the routed experts a token skips left out)
///   embedding 6·embedding_flop_params (GPT-2: wpe's seq_len·C share of 6Ψ, wte's is the LM head's;
///                                     Llama: 0, its table is a lookup)
///   head      6·head_params           (the LM head GEMM over the padded vocabulary, Vp·C, and the
///                                     final norm: 2C for GPT-2's ln_f, C for Llama's)
/// each times B·T. Every value is an integer held exactly in a double below 2^53 (GPT-2 1.5B at
/// B = 8, T = 1024: 1.6e12 per layer), so sums of them compare exactly.
/// Errors: std::invalid_argument when B < 1 or T < 1.
struct StageCosts {
    double layer = 0, embedding = 0, head = 0;
};
StageCosts stage_costs(const GPTConfig& cfg, int B, int T);

/// FLOPs of a stage of `layers` layers: layers·layer, plus the embedding on the first stage and the
/// head on the last (a single stage is both).
double stage_cost(const StageCosts& costs, int layers, bool first, bool last);

/// The default split of cfg.n_layer layers over pp contiguous stages (layer counts, stage order),
/// every stage >= 1 layer. It minimizes, in this order:
///   1. the largest stage_cost (the pipeline's step time is set by its slowest stage);
///   2. among those splits, the largest (pp − s)·layers_s: the layers whose activations stage s keeps
///      under 1F1B with m >= pp micro-batches (stage s holds min(pp − s, m), docs/reference.md
///      "Pipeline: 1F1B"), so earlier stages get fewer layers where time allows;
///   3. then the lexicographically smallest list of counts (fewest layers on the earliest stages).
/// Exact: with identical layers a stage's cost and memory depend only on its position and count, so
/// the splits within given bounds are those whose counts lie in per-stage intervals [1, cap_s]; each
/// bound is tried among the values it can take. O((pp · n_layer)²) stage costs.
/// Errors: std::invalid_argument naming parallel.pp when pp < 1 or pp > n_layer; as stage_costs.
std::vector<int> balanced_layers_per_stage(const GPTConfig& cfg, int B, int T, int pp);

/// The per-stage plan from the config's lists (docs/configuration.md):
///   layers: layers_per_stage (pipeline.layers_per_stage), or balanced_layers_per_stage when empty;
///   checkpointed layers: ckpt_layers_per_stage[s] (activation_checkpoint.layers_per_stage) when that
///     list is non-empty, else floor(ratio_per_stage[s] · layers of s) when that list is non-empty,
///     else floor(ratio · layers of s) (activation_checkpoint.ratio, as GPTOptions::checkpoint_ratio).
/// Errors: std::invalid_argument whose message starts with the config key at fault, e.g.
/// "pipeline.layers_per_stage: expected ..., got ...": pp outside [1, n_layer] (parallel.pp); a list
/// that is non-empty but not pp long; a layer count < 1 or counts not summing to n_layer; a ratio
/// outside [0, 1]; a checkpointed count < 0 or above its stage's layers ("...layers_per_stage[s]").
std::vector<StageLayers> stage_plan(const GPTConfig& cfg, int B, int T, int pp,
                                    const std::vector<int>& layers_per_stage, float ratio,
                                    const std::vector<float>& ratio_per_stage,
                                    const std::vector<int>& ckpt_layers_per_stage);

}  // namespace llmtrain
