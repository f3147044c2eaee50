// app/state/run_shape.cpp — the run's shape from a checked config (see run_shape.hpp).
#include "app/state/run_shape.hpp"

#include "parallel/comm.hpp"

namespace llmtrain {

DType precision_dtype(const Config& c) { return c.training.precision == "bf16" ? DType::bf16 : DType::f32; }

int zero_group_of(const Config& c) { return c.parallel.zero_stage == 0 ? 1 : c.parallel.zero_group_size; }

CudaBackendOptions cuda_options_of(const Config& c) {
    CudaBackendOptions o;
    o.attention = parse_attention(c.model.attention);
    o.head_size = c.model.n_embd / c.model.n_head;  // validated: n_head divides n_embd
    o.attention_workspace_mb = c.model.attention_workspace_mb;
    o.matmul_autotune = c.model.matmul_autotune;
    o.stochastic_rounding = c.training.stochastic_rounding;
    o.local_rank = local_rank();  // the device: this rank's index on its node (parallel/comm.hpp)
    return o;
}

OffloadConfig offload_config_of(const Config& c) {
    OffloadConfig o;
    o.enabled = c.optimizer.offload == "cpu";
    o.fraction = c.optimizer.offload_fraction;
    o.chunk_bytes = size_t(double(c.optimizer.offload_chunk_mb) * 1048576.0);
    o.stochastic_rounding = c.training.stochastic_rounding;
    return o;
}

std::vector<StageLayers> stage_plan_of(const Config& c) {
    return stage_plan(gpt_config_of(c), c.training.micro_batch_size, c.model.seq_len, c.parallel.pp,
                      c.pipeline.layers_per_stage, c.activation_checkpoint.ratio,
                      c.activation_checkpoint.ratio_per_stage, c.activation_checkpoint.layers_per_stage);
}

RunShape run_shape(const Config& cfg, int world) {
    RunShape r;
    r.model = gpt_config_of(cfg);
    r.stages = stage_plan_of(cfg);
    r.world = world;
    r.pp = cfg.parallel.pp;
    r.tp = cfg.parallel.tp;
    r.cp = cfg.parallel.cp;
    r.ep = cfg.parallel.ep;
    r.zero_stage = cfg.parallel.zero_stage;
    r.zero_group = zero_group_of(cfg);
    r.zero_group_size = cfg.parallel.zero_group_size;
    r.sequence_parallel = cfg.parallel.sequence_parallel;
    r.reduce_dtype = cfg.parallel.grad_reduce_dtype == "bf16" ? DType::bf16 : DType::f32;  // validated by the config
    r.B = cfg.training.micro_batch_size;
    r.T = cfg.model.seq_len;
    r.accum = cfg.training.grad_accum_steps;
    r.global_batch = cfg.training.global_batch_size;
    r.precision = precision_dtype(cfg);
    r.offload = offload_config_of(cfg);
    r.cuda = cuda_options_of(cfg);
    r.checkpoints = cfg.checkpoint.interval > 0 || cfg.checkpoint.at_end;  // checkpoints_on (model_state.hpp)
    r.stochastic_rounding = cfg.training.stochastic_rounding;
    r.fp8 = parse_fp8_recipe(cfg.training.fp8);  // validated by the config
    r.schedule = parse_pipeline_schedule(cfg.pipeline.schedule);
    r.schedule_name = cfg.pipeline.schedule;
    r.recompute_ratio = cfg.activation_checkpoint.ratio;
    r.comm.timeout_s = cfg.parallel.timeout_s;
    r.comm.comm = cfg.parallel.comm;
    r.comm.hierarchical = cfg.parallel.hierarchical_allreduce;
    r.overlap_grad_reduce = cfg.parallel.overlap_grad_reduce;
    r.grad_clip = cfg.training.grad_clip;
    r.max_skipped_steps = cfg.training.max_skipped_steps;
    r.init_from = cfg.model.init_from;
    r.moe_bias_update_rate = cfg.moe.bias_update_rate;
    return r;
}

RunShape at_zero_stage(RunShape shape, int stage, int group_size) {
    shape.zero_stage = stage;
    shape.zero_group = stage == 0 ? 1 : group_size;
    return shape;
}

}  // namespace llmtrain
