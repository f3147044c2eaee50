// app/plan/plan.hpp — the pipeline planner as llmtrain-plan and pipeline.plan = "auto" use it: for each
// tensor-parallel width tp (a divisor of the world inside a node), context-parallel size cp (a divisor
// of world / tp that splits seq_len into 2 cp chunks) and pipeline depth pp that divides world / (tp ·
// cp), the layers per stage and recomputed layers per stage that minimize the 1F1B
// step while every rank fits the device memory (docs/distributed.md "Planner").
//
// Memory comes from the --dry-run counting code (app/state/model_state.hpp estimate_memory: the real run's
// allocations counted over the dry-run backend), time from LayerTimes (app/plan/plan_times.hpp) and a
// link bandwidth; parallel/planner.hpp solves the MIP and parallel/schedule.hpp simulates the
// chosen plan's step, which is what the report predicts.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "app/state/model_state.hpp"
#include "app/plan/plan_times.hpp"
#include "parallel/planner.hpp"

namespace llmtrain {

struct PlanOptions {
    int world = 1;                ///< ranks: tp x pp x dp x cp
    double device_memory = 0;     ///< bytes per device
    double margin = 0.10;         ///< share of device_memory left free (fragmentation, backend workspaces)
    double link_gbps = 0;         ///< GB/s per rank for pipeline sends and gradient collectives (and TP's, by default); with inter_node_gbps, inside a node
    double tp_link_gbps = 0;      ///< GB/s per rank inside a node for the TP all-reduces; 0: link_gbps
    /// GB/s per rank between nodes (gpus_per_node consecutive ranks to a node): the bytes of a
    /// collective or send that cross a node boundary go at this rate, the rest at link_gbps
    /// (tp_link_gbps for TP); 0: link_gbps (one rate everywhere, as without it).
    double inter_node_gbps = 0;
    int pp = 0;                   ///< 0: every divisor of world / tp up to n_layer; else only this depth
    int tp = 0;                   ///< 0: every admissible tp (tp_widths); else only this width
    int cp = 0;                   ///< 0: every admissible cp (cp_sizes); else only this context-parallel size
    int gpus_per_node = 8;        ///< ranks per node: a TP group stays inside one (tp divides this); the node size for inter_node_gbps
    bool escalate = true;         ///< a depth that does not fit is tried at ZeRO-1, with offload, then (pp 1) at ZeRO-2, ZeRO-3, ZeRO-3 with offload
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

/// The plan for one tensor-parallel width, context-parallel size and pipeline depth.
struct PlanCandidate {
    int tp = 1, pp = 1, dp = 1, micro_batches = 1, zero_stage = 0;  ///< dp: data-parallel ranks (world / (tp pp cp))
    int cp = 1;              ///< context-parallel ranks per window (parallel.cp)
    bool offload = false;    ///< optimizer.offload = "cpu" (fraction 1) was needed to fit
    std::string skipped;     ///< non-empty: this tp / depth was not planned, and why
    PlanChoice choice;       ///< the plan (feasible = false: nothing fits): the MIP's, refined on the simulated step
    double mip_objective = 0;///< the MIP's optimum of the closed form, seconds (before the refinement)
    std::vector<StagePrediction> stages;
    double step_seconds = 0; ///< simulated 1F1B makespan + the largest tail
    double crossing_bytes = 0;///< bytes the whole job sends across node boundaries per step (app/plan/traffic.hpp step_traffic of the plan)
    double tokens_per_second = 0;
};

struct PlanResult {
    std::vector<PlanCandidate> candidates;  ///< one per (tp, cp, depth) tried, ascending tp, then cp, then pp
    int best = -1;                          ///< index of the fastest feasible candidate, -1 if none
    std::vector<std::string> alternatives;  ///< when none fits: changes under which one would
};

/// The MIP's input for a run of `shape` (run_shape of cfg: its world, tp, pp, ZeRO group, model,
/// precision) with cfg's batch (resolved for its dp): per stage, memory(n, c) as the device total of
/// estimate_memory (TP rank 0's),
/// which is affine in the layer count n and the recomputed count c, read off at (1,0), (2,0) and
/// (1,1); times from opt.times plus pipeline sends (B·T·C activation bytes over opt.link_gbps; a
/// stage waits for its sends) and a tail of ring all-reduce (2(dp − 1)/dp of the stage's gradient
/// bytes), the tied wte's sum between the end stages, and AdamW over the rank's shard. With tp > 1
/// (Megatron-LM, docs/distributed.md "Planner"): a layer's forward, backward and recompute seconds and
/// the head's divided by tp, plus per layer 2 all-reduces of B·T·C activation elements in forward, 2
/// in backward and 1 in recompute (model/gpt.cpp repeats the first only), 1 after the embedding, 1
/// for the head's input gradient and the loss's all-gather of (B·T, 3) fp32, each at
/// ring_allreduce_seconds over tp ranks at opt.tp_link_gbps (0: opt.link_gbps); with
/// parallel.sequence_parallel the all-reduces become all-gathers and reduce-scatters (half an
/// all-reduce each): 2, 3 and 1.5 all-reduces' worth per layer, 0.5 for each end's collective. Across nodes (app/plan/traffic.hpp
/// crossing_shares over nodes of opt.gpus_per_node ranks): each of these terms costs its bytes times
/// seconds_per_byte(share, intra, inter) instead of bytes / intra, share being the fraction of that
/// group's bytes that cross nodes (k/P for a ring on k > 1 nodes; 1 for a send between stages on two
/// nodes), inter = opt.inter_node_gbps (0: opt.link_gbps); the gradient all-reduce is split into the
/// ZeRO group's 2(N − 1)/N and the replica group's 2(R − 1)/(R·N) of the bytes (their sum is
/// 2(dp − 1)/dp), each at its group's share. With cp > 1 (shape.cp, docs/parallelism.md "Context
/// parallelism"): each rank runs B·T/cp tokens, so a layer's, the embedding's and the head's seconds
/// are divided by cp (attention too: the chunk pairing balances its query-key pairs), the TP
/// collectives and sends carry B·T/cp rows, and per layer one cp collective (cp_collective_bytes,
/// app/plan/traffic.hpp) goes at opt.link_gbps (at the CP groups' crossing share) in forward, two in
/// backward (gather, reduce-scatter) and one more when recomputed; the gradient sync runs over dp =
/// the topology's dp × cp ranks, and memory is estimate_memory at parallel.cp (activations ∝ T/cp,
/// the three window-sized q|k|v workspace buffers, ZeRO over dp × cp). Cap: device_memory·(1 −
/// margin). With parallel.ep > 1 (a mixture of experts, docs/parallelism.md "Expert parallelism"):
/// per layer kEpAllToAlls (2 forward, 2 backward, 2 recomputed) all-to-alls of ep_all_to_all_bytes
/// at opt.link_gbps, the share to peers on other nodes (step_traffic's ep row) at the inter-node rate.
/// Errors: as estimate_memory.
PlanProblem plan_problem(const Config& cfg, const RunShape& shape, const PlanOptions& opt);

/// Plans every tensor-parallel width (opt.tp, or tp_widths), for each every context-parallel size
/// (cp_sizes) and for each every depth (opt.pp or each divisor of opt.world / (tp · cp) up to n_layer),
/// with the global batch of cfg:
/// global_batch_size, or micro_batch_size x max(1, grad_accum_steps) x world / (parallel.pp x
/// parallel.tp x parallel.cp); a width the
/// model does not split over, or a depth whose batch does not divide or whose ZeRO group does not fit
/// dp, is skipped with the reason. Each depth's MIP optimum is refined by one-layer moves on the simulated step (the 1F1B
/// closed form is exact only for equal stages). With opt.escalate, a depth that does not fit with cfg's ZeRO stage is tried again at
/// ZeRO-1, then with the optimizer offloaded, then (pp 1: ZeRO-2/3 do not combine with a pipeline) at
/// ZeRO-2, ZeRO-3 and ZeRO-3 with offload; the first that fits is the row's. A mixture of experts (model.moe) is planned at tp =
/// cp = 1 only, at every depth (what it runs); a dp that parallel.ep does not divide is a skipped row. When no depth fits, lists what would: the ZeRO stage / offload, half the
/// micro-batch, twice and four times the ranks. Errors: std::invalid_argument for opt.world < 1,
/// a non-positive device memory, or a mixture of experts with opt.tp or opt.cp > 1; as plan_problem.
PlanResult make_plan(const Config& cfg, const PlanOptions& opt);

/// The report: the (tp, depth) candidates side by side (with the bytes crossing nodes per step), the best plan's per-stage table (layers, recomputed layers,
/// in flight, memory by category, F/B/recompute/tail seconds), its step time and tokens/s, and the
/// TOML lines that select it; or, when nothing fits, the alternatives.
std::vector<std::string> plan_report(const Config& cfg, const PlanOptions& opt, const PlanResult& r);

/// cfg with candidate c's tp, cp, depth, ZeRO stage, offload and per-stage lists (pipeline.layers_per_stage,
/// activation_checkpoint.layers_per_stage) set, and dp and the batch resolved for it.
/// Errors: std::invalid_argument when c is not feasible.
Config apply_plan(const Config& cfg, const PlanCandidate& c);

/// The TOML lines that select candidate c, to paste into a config: [parallel] tp, pp, cp, zero_stage;
/// the offload; the two per-stage lists.
std::vector<std::string> plan_toml(const PlanCandidate& c);

/// A hand-made plan evaluated like the planner's own: memory counted, step simulated.
struct Baseline {
    std::string name;
    PlanCandidate plan;  ///< at the planner's tp, depth, ZeRO stage and offload
    bool fits = false;   ///< every stage's device bytes <= device_memory x (1 - margin)
};

/// The comparisons of docs/distributed.md "Planner" at candidate `best`'s depth (which must be feasible):
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
/// times on a backend made from cfg (median of 5), plans cfg's parallel.pp and parallel.tp only (tp is
/// the run's: its groups and layout exist before the plan; the report says so), keeping its ZeRO stage
/// and offload (and parallel.cp), under pipeline.plan_memory_gib (0: the backend's total memory, Ops::mem_info) with a
/// 10% margin and 10 GB/s links on the CPU backend, 50 GB/s on CUDA. Errors: ConfigError naming
/// pipeline.plan with what would fit when nothing does; as make_backend and make_plan.
AutoPlan auto_plan(const Config& cfg, int world);

/// The tensor-parallel widths the planner tries for cfg on `world` ranks: opt_tp alone when > 0, else
/// every tp dividing both world and gpus_per_node (rank order puts a TP group on tp consecutive
/// ranks, docs/design.md "Ranks and groups", so it stays inside a node). Errors: none.
std::vector<int> tp_widths(int world, int gpus_per_node, int opt_tp);

/// The context-parallel sizes the planner tries for cfg at width tp on `world` ranks: every cp
/// dividing world / tp (opt_cp alone when > 0) for which model.seq_len is a multiple of 2 cp (as
/// parallel.cp requires: each rank holds two of the 2 cp chunks of a window) and, with
/// parallel.sequence_parallel at tp > 1, the rank's B·T/cp rows a multiple of tp; cp 1 always
/// qualifies. Ascending; empty when opt_cp does not qualify. Errors: none.
std::vector<int> cp_sizes(const Config& cfg, int world, int tp, int opt_cp);

/// Why cfg's model cannot be split over tp ranks ("n_head 12 is not a multiple of tp 8"), or "" when
/// tp divides what the architecture splits (model/arch.hpp tp_divisors: n_head, 4·n_embd and the padded
/// vocabulary for GPT-2; n_head, n_kv_head, intermediate_size and the vocabulary for Llama), as
/// app/config/config.cpp requires.
std::string tp_split_problem(const Config& cfg, int tp);

}  // namespace llmtrain
