// app/state/run_shape.hpp — the run's shape (RunShape): everything a config and a world size fix
// before anything is built, computed once by run_shape() from a config that config/ has checked
// (load_config, then resolve_world at start-up), and the one thing main, the trainer, the dry run
// and the planner read about the run's model, layout, batch and precision afterwards
// (docs/design.md "One door").
#pragma once
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "model/cuda/cuda_backend.hpp"
#include "model/fp8.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "parallel/comm.hpp"
#include "parallel/partition.hpp"
#include "parallel/schedule.hpp"
#include "parallel/topology.hpp"

namespace llmtrain {

/// training.precision as the device compute dtype (the config has validated it: "fp32" or "bf16").
DType precision_dtype(const Config& cfg);
/// A precision or gradient-reduction dtype by its config name: "bf16" for DType::bf16, else "fp32"
/// (the names training.precision and parallel.grad_reduce_dtype take; state.toml records them).
inline const char* precision_name(DType d) { return d == DType::bf16 ? "bf16" : "fp32"; }
/// The ZeRO group size a topology is built with: 1 at stage 0 (plain DP), else parallel.zero_group_size.
int zero_group_of(const Config& cfg);
/// model.attention*, training.stochastic_rounding as the CUDA backend's options (the CPU ignores them).
CudaBackendOptions cuda_options_of(const Config& cfg);
/// optimizer.offload* (and training.stochastic_rounding) as the optimizer's OffloadConfig.
OffloadConfig offload_config_of(const Config& cfg);
/// The per-stage plan of cfg (parallel/partition.hpp stage_plan over the config's lists).
std::vector<StageLayers> stage_plan_of(const Config& cfg);

/// The run's shape: what a config and a world size fix before anything is built, computed once
/// (run_shape) and handed down to the trainer, the dry run (estimate_memory, step_traffic) and the
/// planner's memory count, instead of each calling back to the config for the pieces.
struct RunShape {
    GPTConfig model;                  ///< cfg.model as the model's configuration
    std::vector<StageLayers> stages;  ///< every pipeline stage's layers and recomputed layers
    int world = 1, pp = 1, tp = 1;    ///< ranks, pipeline stages, tensor-parallel width
    int cp = 1;                       ///< context-parallel ranks per window (parallel.cp)
    int ep = 1;                       ///< expert-parallel ranks per MoE layer (parallel.ep, carved out of dp)
    int zero_stage = 0;               ///< parallel.zero_stage
    int zero_group = 1;               ///< ZeRO group size (1 at ZeRO stage 0: plain DP; 0: all of dp)
    int zero_group_size = 0;          ///< parallel.zero_group_size as configured (at_zero_stage's rows)
    bool sequence_parallel = false;   ///< parallel.sequence_parallel (with tp > 1)
    DType reduce_dtype = DType::f32;  ///< parallel.grad_reduce_dtype
    int B = 1;                        ///< training.micro_batch_size: sequences per micro-batch and rank
    int T = 1;                        ///< model.seq_len: tokens per sequence
    int accum = 1;                    ///< training.grad_accum_steps (resolved): micro-batches per step
    int global_batch = 1;             ///< training.global_batch_size (resolved): sequences per step
    DType precision = DType::f32;     ///< the device compute dtype
    OffloadConfig offload;            ///< the optimizer's offload
    CudaBackendOptions cuda;          ///< the CUDA backend's options (the CPU ignores them)
    bool checkpoints = false;         ///< checkpoints on: checkpoint.interval > 0 or checkpoint.at_end
    // The rest of the model, training and parallel keys, read once here so that nothing after the
    // door reads them from the config (docs/design.md "How we checked the config enters each room once").
    bool stochastic_rounding = false;  ///< training.stochastic_rounding (bf16 params from fp32 masters)
    Fp8Recipe fp8 = Fp8Recipe::off;    ///< training.fp8
    PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  ///< pipeline.schedule
    std::string schedule_name = "1f1b";  ///< pipeline.schedule as configured (the summary's and the dry run's)
    double recompute_ratio = 0;        ///< activation_checkpoint.ratio as configured (the dry run's line)
    CommOptions comm;                  ///< parallel.timeout_s, parallel.comm, parallel.hierarchical_allreduce
    bool overlap_grad_reduce = true;   ///< parallel.overlap_grad_reduce
    float grad_clip = 1.0f;            ///< training.grad_clip: the global norm's bound (0: none)
    int max_skipped_steps = 10;        ///< training.max_skipped_steps: non-finite steps in a row before a stop
    std::string init_from;             ///< model.init_from: "" random weights from run.seed, else the file
    float moe_bias_update_rate = 0;    ///< model.moe.bias_update_rate (0: no selection-bias update)
    /// The topology of this shape seen from world rank `rank`: the one Topology of a run (main's
    /// node report and the trainer's groups are this one). Errors: as Topology.
    Topology topology(int rank) const { return Topology(world, rank, pp, zero_group, tp, cp); }
};

/// cfg's shape on `world` ranks (cfg resolved: resolve_world or resolve_batch). Errors:
/// std::invalid_argument naming the key, as stage_plan.
RunShape run_shape(const Config& cfg, int world);
/// `shape` at ZeRO stage `stage`, its group 1 at stage 0 and else `group_size` (0: all of dp), the
/// rest alike: the dry run's and the planner's rows per ZeRO stage.
RunShape at_zero_stage(RunShape shape, int stage, int group_size);

}  // namespace llmtrain
