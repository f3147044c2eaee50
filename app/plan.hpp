// app/plan.hpp — the pipeline planner as llmtrain-plan and pipeline.plan = "auto" use it: for each
// pipeline depth pp that divides the world, the layers per stage and recomputed layers per stage
// that minimize the 1F1B step while every stage fits the device memory (docs/design.md "Planner").
//
// Memory comes from the --dry-run counting code (app/model_state.hpp estimate_memory: the real run's
// allocations counted over the dry-run backend), time from LayerTimes (app/plan_times.hpp) and a
// link bandwidth; parallel/planner.hpp solves the MIP and parallel/schedule.hpp simulates the
// chosen plan's step, which is what the report predicts.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "app/config.hpp"
#include "app/model_state.hpp"
#include "app/plan_times.hpp"
#include "parallel/planner.hpp"

namespace llmtrain {

struct PlanOptions {
    int world = 1;                ///< ranks: pp x dp
    double device_memory = 0;     ///< bytes per device
    double margin = 0.10;         ///< share of device_memory left free (fragmentation, backend workspaces)
    double link_gbps = 0;         ///< GB/s per rank for pipeline sends and gradient collectives
    int pp = 0;                   ///< 0: every divisor of world up to n_layer; else only this depth
    bool escalate = true;         ///< a depth that does not fit is tried at ZeRO-1, then with offload
    LayerTimes times;
};

/// One stage of a candidate plan, as predicted.
struct StagePrediction {
    int layers = 0, ckpt = 0, in_flight = 0;
    MemBytes memory{};       ///< by category, from estimate_memory for exactly this plan
    size_t device_bytes = 0; ///< the device total of memory (host excluded)
    double fwd = 0, bwd = 0; ///< seconds per micro-batch, backward including recomputation
    double recompute = 0;    ///< of bwd, the seconds spent recomputing
    double tail = 0;         ///< seconds per step after the last backward: gradient sync + AdamW
};

/// The plan for one pipeline depth.
struct PlanCandidate {
    int pp = 1, dp = 1, micro_batches = 1, zero_stage = 0;
    bool offload = false;    ///< optimizer.offload = "cpu" (fraction 1) was needed to fit
    std::string skipped;     ///< non-empty: this depth was not planned, and why
    PlanChoice choice;       ///< the plan (feasible = false: nothing fits): the MIP's, refined on the simulated step
    double mip_objective = 0;///< the MIP's optimum of the closed form, seconds (before the refinement)
    std::vector<StagePrediction> stages;
    double step_seconds = 0; ///< simulated 1F1B makespan + the largest tail
    double tokens_per_second = 0;
};

struct PlanResult {
    std::vector<PlanCandidate> candidates;  ///< one per depth tried, ascending pp
    int best = -1;                          ///< index of the fastest feasible candidate, -1 if none
    std::vector<std::string> alternatives;  ///< when none fits: changes under which one would
};

/// The MIP's input for cfg at its parallel.pp over `world` ranks (cfg's batch resolved for that
/// depth): per stage, memory(n, c) as the device total of estimate_memory, which is affine in the
/// layer count n and the recomputed count c, read off at (1,0), (2,0) and (1,1); times from
/// opt.times plus pipeline sends (B·T·C activation bytes over opt.link_gbps; a stage waits for its
/// sends) and a tail of ring all-reduce (2(dp − 1)/dp of the stage's gradient bytes), the tied wte's
/// sum between the end stages, and AdamW over the rank's shard. Cap: device_memory·(1 − margin).
/// Errors: as estimate_memory.
PlanProblem plan_problem(const Config& cfg, const PlanOptions& opt);

/// Plans every depth (opt.pp or each divisor of opt.world up to n_layer, with the global batch of
/// cfg: global_batch_size, or micro_batch_size x max(1, grad_accum_steps) x world / parallel.pp);
/// a depth whose batch does not divide, or whose ZeRO group does not fit dp, is skipped with the
/// reason. Each depth's MIP optimum is refined by one-layer moves on the simulated step (the 1F1B
/// closed form is exact only for equal stages). With opt.escalate, a depth that does not fit with cfg's ZeRO stage is tried again at
/// ZeRO-1 and then with the optimizer offloaded. When no depth fits, lists what would: ZeRO-1, offload, half the
/// micro-batch, twice and four times the ranks. Errors: std::invalid_argument for opt.world < 1
/// or a non-positive device memory; as plan_problem.
PlanResult make_plan(const Config& cfg, const PlanOptions& opt);

/// The report: the depths side by side, the best plan's per-stage table (layers, recomputed layers,
/// in flight, memory by category, F/B/recompute/tail seconds), its step time and tokens/s, and the
/// TOML lines that select it; or, when nothing fits, the alternatives.
std::vector<std::string> plan_report(const Config& cfg, const PlanOptions& opt, const PlanResult& r);

/// cfg with candidate c's depth, ZeRO stage, offload and per-stage lists (pipeline.layers_per_stage,
/// activation_checkpoint.layers_per_stage) set, and dp and the batch resolved for it.
/// Errors: std::invalid_argument when c is not feasible.
Config apply_plan(const Config& cfg, const PlanCandidate& c);

/// The TOML lines that select candidate c, to paste into a config.
std::vector<std::string> plan_toml(const PlanCandidate& c);

/// A hand-made plan evaluated like the planner's own: memory counted, step simulated.
struct Baseline {
    std::string name;
    PlanCandidate plan;  ///< at the planner's depth, ZeRO stage and offload
    bool fits = false;   ///< every stage's device bytes <= device_memory x (1 - margin)
};

/// The comparisons of docs/design.md "Planner" at candidate `best`'s depth (which must be feasible):
///   full recompute   the default split (FLOP-balanced), every layer recomputed;
///   best ratio       the same split with the fastest single activation_checkpoint.ratio that fits
///                    every stage (each distinct floor(ratio x layers) tried), if any;
///   even split       n_layer / pp layers per stage (the remainder on the last stages), each stage's
///                    fewest recomputed layers that fit;
///   planner          best itself.
std::vector<Baseline> baselines(const Config& cfg, const PlanOptions& opt, const PlanCandidate& best);

/// The baselines side by side: per plan its lists, whether it fits, the largest stage's memory, the
/// step time and its change against full recompute; then each plan's per-stage device MiB.
std::vector<std::string> compare_report(const std::vector<Baseline>& b);

/// What pipeline.plan = "auto" decided: the two per-stage lists and the report to log.
struct AutoPlan {
    std::vector<int> layers, ckpt;
    std::vector<std::string> report;
};

/// pipeline.plan = "auto" for a run of cfg (dp and batch resolved) on `world` ranks: measures layer
/// times on a backend made from cfg (median of 5), plans cfg's parallel.pp only, keeping its ZeRO stage
/// and offload, under pipeline.plan_memory_gib (0: the backend's total memory, Ops::mem_info) with a
/// 10% margin and 10 GB/s links on the CPU backend, 50 GB/s on CUDA. Errors: ConfigError naming
/// pipeline.plan with what would fit when nothing does; as make_backend and make_plan.
AutoPlan auto_plan(const Config& cfg, int world);

}  // namespace llmtrain
