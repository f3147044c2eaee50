// app/plan/plan_times.hpp — the planner's time inputs: seconds per micro-batch of one GPT layer (forward,
// backward, recompute), of the embedding and of the head, and of AdamW per parameter, either
// measured on a backend at the configured shapes (llmtrain-plan --profile; pipeline.plan = "auto")
// or derived from FLOPs and a stated sustained throughput for a device this machine does not have
// (--device-tflops). docs/distributed.md "Planner" says how each number enters the step time.
#pragma once
#include <string>

#include "app/config/config.hpp"
#include "model/ops.hpp"

namespace llmtrain {

/// Seconds, at micro-batch (micro_batch_size, seq_len) of the config.
struct LayerTimes {
    double layer_fwd = 0, layer_bwd = 0;  ///< one transformer layer, without recomputation
    double layer_recompute = 0;           ///< extra backward seconds of a recomputed layer (its forward again)
    double embed_fwd = 0, embed_bwd = 0;  ///< wte + wpe lookup, and its gradient
    double head_fwd = 0, head_bwd = 0;    ///< ln_f + LM head + softmax cross-entropy, and their backward
    double adam_per_param = 0;            ///< one AdamW step, per parameter of the rank's shard
    std::string source;                   ///< how they were obtained, for the report
};

/// Times one layer range at a time on `ops` (the run's backend and precision): two middle layers
/// ([1, 3) of a 4-layer copy of the model, activations in and out), the same with both recomputed,
/// the first layer with the embedding, the last with the head; each the median of `reps` timed passes
/// after one untimed pass. A layer is half its pair; the embedding and the head are what the
/// one-layer end ranges add to a layer (0 when timing noise makes that negative). AdamW: the median of
/// `reps` updates of one layer's parameters. A mixture of experts' layer is timed whole on this one rank
/// (ep 1): its router, the top_k experts each token runs (the middle ranges' input a fixed pseudo-random
/// activation, so tokens spread over the experts as in training), the shared experts and the balance
/// loss; not the all-to-alls of ep > 1, which the planner adds from their bytes over the link rate
/// (docs/parallelism.md "The planner with a mixture of experts"). Allocates a few activation sets on `ops` (freed before
/// it returns). Errors: std::invalid_argument when reps < 1, as GPT's constructor otherwise.
LayerTimes measure_layer_times(const Config& cfg, Ops& ops, int reps);

/// From FLOPs (parallel/partition.hpp stage_costs: training = forward + 2 x forward for backward; a
/// mixture of experts' layer counts its active parameters only, without the n_experts − top_k routed
/// experts a token skips, as ArchSpec::flops_per_token and the run's MFU do) at
/// `device_tflops` sustained TFLOP/s, recompute = forward; AdamW as 28 bytes of memory traffic per
/// parameter (read grad, read and write params or master, m and v) at `memory_gbps` GB/s.
/// Errors: std::invalid_argument when a rate is not positive.
LayerTimes flops_layer_times(const Config& cfg, double device_tflops, double memory_gbps);

}  // namespace llmtrain
