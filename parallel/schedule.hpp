// parallel/schedule.hpp — the pipeline schedule: which forward (F) and backward (B) passes each
// stage runs in one optimizer step, in what order, and what that order costs in idle time
// (docs/distributed.md "Pipeline schedule", docs/reference.md "Pipeline: 1F1B").
//
// Pure functions of (schedule, stage s, stages P, micro-batches m): no ranks, no devices. The
// trainer runs stage_schedule()'s list; tests compare the executed order against it; simulate()
// replays every stage's list against the pipeline's data dependencies to give the timeline, the
// makespan and each stage's idle fraction (the bubble).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmtrain {

/// pipeline.schedule, parsed once (parse_pipeline_schedule).
enum class PipelineSchedule { one_f_one_b, gpipe };

/// "1f1b" | "gpipe" -> PipelineSchedule. Errors: std::invalid_argument naming pipeline.schedule.
PipelineSchedule parse_pipeline_schedule(const std::string& name);

/// One pass of one micro-batch (0-based, in [0, m)) through one stage.
struct PipeOp {
    enum Kind : uint8_t { forward, backward } kind;
    int micro_batch;
    bool operator==(const PipeOp&) const = default;
};

/// The ops stage `stage` (0-based, in [0, stages)) runs in one step of `micro_batches` (m ≥ 1)
/// micro-batches: 2m ops, each micro-batch once as forward and once as backward.
///   1F1B (PipeDream-Flush, Narayanan et al. 2021): w = min(P − s − 1, m) warm-up forwards, then
///     one forward and one backward alternately while forwards remain (m − w pairs), then the w
///     remaining backwards.
///   GPipe (Huang et al. 2019): the m forwards, then the m backwards.
/// Both run forwards and backwards in ascending micro-batch order (GPipe's backwards too, unlike the
/// GPipe paper's figure): every stage then adds micro-batch gradients in the order of a one-stage
/// run, and on each link between stages the sends and the receives come in the same order.
/// Errors: std::invalid_argument when stages < 1, stage outside [0, stages) or micro_batches < 1.
std::vector<PipeOp> stage_schedule(PipelineSchedule schedule, int stage, int stages, int micro_batches);

/// The most micro-batches whose activations stage `stage` holds at once under stage_schedule()
/// (forwards run minus backwards run, at its peak): 1F1B min(P − s, m), GPipe m.
/// Errors: as stage_schedule().
int max_in_flight(PipelineSchedule schedule, int stage, int stages, int micro_batches);

/// One op of a simulated timeline; times in seconds from the start of the step.
struct TimedOp {
    PipeOp op;
    double start, end;
};

/// What simulate() returns.
struct Timeline {
    std::vector<std::vector<TimedOp>> stages;  ///< [stage][position in that stage's list]
    double makespan = 0;                       ///< seconds: the last op's end (the first starts at 0)
    std::vector<double> idle_fraction;         ///< [stage]: 1 − (seconds busy) / makespan
};

/// Runs each stage's list in order, an op starting once the stage's previous op has ended and its
/// inputs exist: F(s, i) needs F(s − 1, i) (s > 0); B(s, i) needs F(s, i) and, for s < P − 1,
/// B(s + 1, i). Every forward takes t_forward seconds and every backward t_backward on every stage;
/// transfers take no time and sends never block (non-blocking sends, receives posted in order).
/// per_stage[s] is stage s's list; every list must hold F(i) and B(i) exactly once for each i in
/// [0, m), with m = per_stage[0].size() / 2.
/// With equal stages, 1F1B and GPipe give every stage the idle fraction (P − 1)/(m + P − 1)
/// (Huang et al. 2019; Narayanan et al. 2021).
/// Errors: std::invalid_argument for an empty list of stages, a list that is not such a
/// permutation (naming the stage and position), or a time that is not positive;
/// std::logic_error on a deadlock (no stage can start its next op), naming each stuck op.
Timeline simulate(const std::vector<std::vector<PipeOp>>& per_stage, double t_forward, double t_backward);

/// As above with stage s's forwards taking t_forward[s] seconds and its backwards t_backward[s] (the
/// planner's stages differ: embedding, head, layer and recomputed-layer counts). Errors: as above,
/// and std::invalid_argument when a list of times is not one per stage.
Timeline simulate(const std::vector<std::vector<PipeOp>>& per_stage, const std::vector<double>& t_forward,
                  const std::vector<double>& t_backward);

/// simulate() of stage_schedule(schedule, s, stages, micro_batches) for every stage s.
Timeline simulate(PipelineSchedule schedule, int stages, int micro_batches, double t_forward, double t_backward);

}  // namespace llmtrain
