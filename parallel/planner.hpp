// parallel/planner.hpp — the pipeline planner's optimization: how many layers each stage runs and
// how many of them it recomputes, chosen by a mixed-integer program so that every stage fits a
// memory cap and the 1F1B step is shortest (docs/distributed.md "Planner").
//
// Pure: a PlanProblem holds, per stage, memory and time as affine functions of the stage's layer
// count n and recomputed count c (app/plan/plan.cpp derives them from the --dry-run counting code and
// from measured or FLOP-derived layer times). solve_plan() hands the program to GLPK's branch and
// cut; solve_plan_exhaustive() enumerates every split and count, for tests and tiny instances.
#pragma once
#include <vector>

namespace llmtrain {

/// One stage's costs as functions of its layers n and recomputed layers c (0 <= c <= n).
/// Memory in bytes: mem0 + mem_layer·n + mem_ckpt·c + mem_recompute·[c > 0] (mem_ckpt < 0: a
/// recomputed layer keeps only its input; mem_recompute: the one layer's activations that all
/// recomputed layers of a stage share, model/gpt.cpp). Seconds per micro-batch: forward fwd0 + fwd_layer·n; backward bwd0 + bwd_layer·n +
/// recompute·c. Seconds once per step after the stage's last backward (gradient sync, optimizer):
/// tail0 + tail_layer·n.
struct StageModel {
    double mem0 = 0, mem_layer = 0, mem_ckpt = 0, mem_recompute = 0;
    double fwd0 = 0, fwd_layer = 0;
    double bwd0 = 0, bwd_layer = 0, recompute = 0;
    double tail0 = 0, tail_layer = 0;

    double memory(int n, int c) const { return mem0 + mem_layer * n + mem_ckpt * c + (c > 0 ? mem_recompute : 0); }
    double forward(int n) const { return fwd0 + fwd_layer * n; }
    double backward(int n, int c) const { return bwd0 + bwd_layer * n + recompute * c; }
    double tail(int n) const { return tail0 + tail_layer * n; }
};

/// n_layer layers over stages.size() contiguous stages, micro_batches per step, each stage's
/// memory(n, c) <= memory_cap (bytes).
struct PlanProblem {
    int n_layer = 0;
    int micro_batches = 1;
    double memory_cap = 0;
    std::vector<StageModel> stages;
};

/// A choice of layers and recomputed layers per stage, with the MIP's objective (seconds).
struct PlanChoice {
    bool feasible = false;      ///< false: no split fits the cap (layers, ckpt empty)
    std::vector<int> layers;    ///< [stage] layer count, each >= 1, summing to n_layer
    std::vector<int> ckpt;      ///< [stage] recomputed layers, 0 <= ckpt <= layers
    double objective = 0;       ///< plan_objective(problem, layers, ckpt)
};

/// The MIP's objective, a closed form of the 1F1B step (Narayanan et al. 2021): with t_s =
/// forward + backward of stage s, every micro-batch passes each stage once and the slowest stage
/// sets the pace of the other m − 1:
///     Σ_s t_s + (m − 1)·max_s t_s + max_s tail_s       (seconds)
/// It equals simulate()'s makespan (+ tail) for equal stages; app/plan/plan.cpp reports the simulated step.
/// Errors: std::invalid_argument when the lists are not one entry per stage.
double plan_objective(const PlanProblem& p, const std::vector<int>& layers, const std::vector<int>& ckpt);

/// Minimizes plan_objective over integers n_s >= 1, 0 <= c_s <= n_s, Σ n_s = n_layer, subject to
/// memory(n_s, c_s) <= memory_cap for every stage. The max terms are linearized (T >= t_s,
/// U >= tail_s; minimize Σ t_s + (m − 1)·T + U), [c_s > 0] is a binary z_s with c_s <= n_layer·z_s,
/// and the program is solved by GLPK (glp_intopt: branch and cut with MIR and Gomory cuts, to a
/// relative gap of 1e-6, far below the time model's own error); an infeasible program gives
/// feasible = false.
/// Errors: std::invalid_argument for no stages, more stages than layers or micro_batches < 1;
/// std::runtime_error when GLPK fails for another reason than infeasibility.
PlanChoice solve_plan(const PlanProblem& p);

/// The same optimum by enumeration: every composition of n_layer into the stages and every c_s in
/// [0, n_s]. O(C(n_layer − 1, P − 1) · Π(n_s + 1)): for tests and small problems only. Ties keep the
/// first in lexicographic order of (layers, ckpt). Errors: as solve_plan.
PlanChoice solve_plan_exhaustive(const PlanProblem& p);

/// Seconds of a ring all-reduce of a `bytes`-byte buffer over `ranks` ranks whose links carry
/// `link_gbps` GB/s each: a reduce-scatter then an all-gather, each rank sending and receiving
/// 2(ranks − 1)/ranks of the buffer (Patarasuk & Yuan 2009; the cost Megatron-LM's analysis uses for
/// tensor parallelism's per-layer all-reduces, Narayanan et al. 2021, sec. 3.3):
///     2 (ranks − 1) / ranks · bytes / (link_gbps · 1e9)
/// Latency terms are left out (the buffers here are MiB). 0 for one rank. Errors:
/// std::invalid_argument for ranks < 1, negative bytes or a non-positive link_gbps.
double ring_allreduce_seconds(double bytes, int ranks, double link_gbps);

}  // namespace llmtrain
