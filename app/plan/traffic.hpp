// app/plan/traffic.hpp — step traffic: the bytes one optimizer step of a run moves per group kind (TP,
// data-parallel, ZeRO group, replica group, pipeline, tied-embedding pair) and how many of them cross
// node boundaries, for `llmtrain --dry-run --world-size N --ranks-per-node R` and the planner's
// inter-node term (docs/distributed.md "Traffic across nodes").
//
// Nodes: ranks are laid out node by node, ranks_per_node consecutive world ranks per node (rank r on
// node r / ranks_per_node; mpirun's and Slurm's default block mapping). Groups are those of
// parallel/topology.hpp; every group lists its world ranks in ascending order.
//
// Bytes: what each rank SENDS, by parallel/comm.hpp's CommStats formulas (P ranks, n elements of es
// bytes: reduce-scatter and all-gather (P−1)/P·n·es, all-reduce 2(P−1)/P·n·es, send n·es).
//
// Crossing model (ring): a collective over a group runs as a ring in group order, each rank sending
// everything it sends to its successor (the last rank's successor is the first). A group whose ranks
// fall on k > 1 nodes, each node's members contiguous in the ring (true here: ascending world ranks,
// nodes are blocks of consecutive ranks), has exactly k of its P hops crossing a node boundary, so
//     crossing bytes of the group = k · V = (k / P) · (P · V)       V: bytes one member sends
// and 0 when k = 1. Pipeline sends are point to point: the activation (forward) and its gradient
// (backward) of each micro-batch cross the boundary between stages s and s + 1 when those two ranks
// are on different nodes. Left out (scalars or under 0.1%): the loss and gradient-norm sums, the
// clip scale's broadcast, the TP group's broadcast of replicated gradients, sequence parallelism's
// LayerNorm-gradient all-reduces; eval and checkpoints. Context parallelism (model/gpt_cp.cpp): per
// layer and micro-batch an all-gather of the window's q|k|v (B·T, Qt) forward, again in backward
// (or in a recomputed forward instead), and a reduce-scatter of its gradient (kCpCollectives).
// Expert parallelism (model/gpt_moe_ep.cpp): per MoE layer and micro-batch four all-to-alls of the
// N·k grouped rows (B·T·top_k, C) — rows out, outputs back, their gradients out and back, one more
// of each in a recomputed layer's forward — of which, with balanced routing, (P−1)/P leave a rank,
// spread evenly over its P−1 peers; its crossing bytes are the share sent to peers on other nodes
// (an all-to-all is not a ring). Skewed routing sends up to all N·k rows. Its gradients
// (parallel/ep_grads.hpp): each rank holds the dense tensors and E/ep experts; the ZeRO engine's
// groups are the expert-dp groups — Ne = zero_group_size/ep ranks of one EP index (1 at ZeRO-0, and
// then the engine runs at stage 0), replicas the dp/(ep·Ne) of them — and the dense part of the grad
// shard is all-reduced once per step over the EP group (the "ep-dense" row).
#pragma once
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "app/state/model_state.hpp"

namespace llmtrain {

/// The kinds of group a training step communicates over.
enum class GroupKind : int { tp, dp, zero, replica, pipeline, embedding, cp, ep, ep_dense, count };
/// "tp", "dp", "zero", "replica", "pipeline", "embedding", "cp", "ep", "ep-dense".
const char* group_kind_name(GroupKind k);

/// One group kind's traffic per optimizer step. Bytes.
struct GroupTraffic {
    GroupKind kind = GroupKind::dp;
    int size = 0;            ///< ranks per group (P)
    int groups = 0;          ///< groups of this kind in the world
    int spanning = 0;        ///< of them, groups whose ranks fall on more than one node
    int max_nodes = 1;       ///< the most nodes one group's ranks fall on
    std::vector<int> example;///< the world ranks of the first spanning group (empty: none spans)
    double per_rank = 0;     ///< the most bytes one rank sends in one group of this kind per step
    double total = 0;        ///< bytes all ranks send in groups of this kind per step
    double crossing = 0;     ///< of total, the bytes that cross a node boundary (the model above)
    std::string ops;         ///< what moves, e.g. "reduce-scatter (per micro-batch) + all-gather of the parameters"
};

/// A run's traffic per optimizer step.
struct StepTraffic {
    int world = 1, ranks_per_node = 1, nodes = 1;
    int tp = 1, pp = 1, dp = 1, zero_stage = 0, micro_batches = 1;  ///< the run's grid, ZeRO stage, micro-batches per step
    int cp = 1;                        ///< context-parallel ranks (dp counts the data-parallel ones)
    std::vector<GroupTraffic> groups;  ///< the kinds with traffic (groups of more than one rank), GroupKind order
    double total = 0;                  ///< bytes every rank sends per step, summed over the job
    double crossing = 0;               ///< of total, bytes crossing node boundaries per step
};

/// The traffic of one optimizer step of a run of `shape` (run_shape of a config: its world, tp, pp,
/// ZeRO stage and group, stage plan, precision, sequence parallelism, grad_reduce_dtype, batch and
/// accum = m micro-batches, 0 counting as 1), ranks_per_node to a node.
/// Per rank (es: training precision's bytes, rb: grad_reduce_dtype's; Ψ the padded parameters of
/// the rank's stage as its TP rank holds them, Ψ₀ the embedding unit; N zero group, R replicas):
///   dp (zero_stage 0)  all-reduce of the gradients in rb: 2(dp−1)/dp·Ψ·rb
///   zero               reduce-scatter in rb, all-gather in es, (N−1)/N of: ZeRO-1 Ψ·rb + Ψ·es;
///                      ZeRO-2 m·Ψ·rb + Ψ·es; ZeRO-3 m·Ψ·rb + (2m(Ψ−Ψ₀) + Ψ₀)·es
///   replica            all-reduce of the Ψ/N shard in rb: 2(R−1)/R·Ψ/N·rb
///   pipeline           per micro-batch the activation A = B·T·C·es (÷ tp with sequence
///                      parallelism) to the next stage and its gradient to the previous one
///   embedding          (pp > 1) all-reduce of Ψ₀ in es between the first and last stage: Ψ₀·es
///   tp                 per micro-batch, 2(tp−1)/tp·B·T·C·es per all-reduce: 2 per layer forward, 2
///                      backward, 1 per recomputed layer, 1 after the embedding, 1 for the head's
///                      input gradient (sequence parallelism: 2, 3, 1.5 per layer, 0.5 + 0.5 at
///                      each end), plus the loss's all-gather (tp−1)·B·T·3·4 on the last stage.
/// With parallel.ep = P > 1 (tp = cp = 1; per pipeline stage): Ψ is EP rank 0's (dense + E/P experts, padded for
/// Ne), N = Ne and R = dp/(P·Ne) over the expert-dp groups (ExpertDp), the stage the engine runs
/// (0 when Ne = 1: the dp row is then the all-reduce over the dp/P ranks with the same experts), and
///   ep         the all-to-alls (ep_all_to_all_bytes, kEpAllToAlls) per layer and micro-batch
///   ep-dense   all-reduce over the EP group of the dense part D_z of the rank's grad shard (chunk z
///              of Ne of every unit; all of the dense part at Ne = 1) in es: 2(P−1)/P·D_z·es
/// Errors: std::invalid_argument for world or ranks_per_node < 1, or a grid that does not fit the
/// world (Topology's message, naming parallel.pp, parallel.tp or parallel.zero_group_size).
StepTraffic step_traffic(const RunShape& shape, int ranks_per_node);

/// The `--dry-run --world-size N --ranks-per-node R` table of t: per group kind its size, how many
/// groups and how many span nodes (over how many, one spanning group's ranks), MiB per rank, job
/// total and crossing MiB per step; then the job's totals and the crossing bytes out of each node.
std::vector<std::string> traffic_report(const StepTraffic& t);

/// For the planner's time model: the share of a collective's bytes that crosses node boundaries,
/// per group kind, the largest over the groups of that kind (the slowest group sets the pace), for a
/// world of pp × dp × tp ranks (dp counting cp: its CP groups are cp consecutive dp indices) with
/// ZeRO groups of zero_group_size (1: plain data parallelism, whose dp group is then the replica
/// group) and ranks_per_node to a node. Ring kinds: k/P for a group on k > 1 nodes, else 0;
/// pipeline[s] (s < pp − 1): 1 when some pipeline's stages s and s + 1 are on different nodes,
/// else 0. Errors: as Topology (cp must divide dp).
struct CrossingShares {
    double tp = 0, zero = 0, replica = 0, embedding = 0;
    double cp = 0;                 ///< the CP groups' (0 at cp 1)
    std::vector<double> pipeline;  ///< per stage boundary s -> s + 1
};
CrossingShares crossing_shares(int world, int pp, int zero_group_size, int tp, int ranks_per_node, int cp = 1);

/// Bytes one rank sends in one of context parallelism's collectives per layer and micro-batch
/// (model/gpt_cp.cpp): the all-gather of the window's q|k|v, B·T·Qt elements of the training
/// precision (Qt = ArchSpec::qkv_width(tp), the TP rank's heads), or the reduce-scatter of its
/// gradient, each rank sending (cp − 1)/cp of it; 0 at cp 1. How many a layer issues:
/// kCpCollectives. The traffic table and the planner's time both use the two. Errors: none.
double cp_collective_bytes(const RunShape& shape);

/// Bytes one rank sends in one of expert parallelism's all-to-alls per MoE layer and micro-batch
/// (model/gpt_moe_ep.cpp) with balanced routing: (ep − 1)/ep of its B·T/cp · top_k grouped rows of
/// n_embd elements of the training precision; 0 at parallel.ep 1. A layer issues 2 in forward (rows
/// out, outputs back), 2 in backward and 2 more when recomputed (kEpAllToAlls). The traffic table and
/// the planner's time both use the two. Errors: none.
double ep_all_to_all_bytes(const RunShape& shape);

/// Expert parallelism's all-to-alls of ep_all_to_all_bytes per MoE layer and micro-batch, by phase.
struct EpAllToAlls {
    double forward = 2, backward = 2, recompute = 2;
};
inline constexpr EpAllToAlls kEpAllToAlls{};

/// Context parallelism's collectives of cp_collective_bytes per layer and micro-batch, by phase
/// (model/gpt_cp.cpp GPT::Impl::cp_attention_backward): the forward's all-gather of q|k|v; in
/// backward the gather again (started a layer ahead, beside the layer above's backward: counted in
/// full, its overlap is not modeled) and the reduce-scatter of d q|k|v; a recomputed layer's
/// repeated forward gathers into the window its backward then uses, so it adds none. Not affine, so
/// only the traffic table counts it: at pp 1 the top layer, when not recomputed, finds its window
/// still there from the forward (one gather fewer per micro-batch; the planner counts it). One
/// place for the count, for step_traffic and plan_problem alike.
struct CpCollectives {
    double forward = 1, backward = 2, recompute = 0;
    double top_kept = 1;  ///< fewer per micro-batch at pp 1 when the top layer is not recomputed
};
inline constexpr CpCollectives kCpCollectives{};

/// Seconds per byte of a rank's traffic of which `share` crosses nodes: (1 − share)/intra_gbps +
/// share/inter_gbps, both in GB/s (1e9 bytes/s) per rank. Errors: none (rates must be positive).
inline double seconds_per_byte(double share, double intra_gbps, double inter_gbps) {
    return ((1.0 - share) / intra_gbps + share / inter_gbps) / 1e9;
}

/// The groups the gradients of `shape` are reduced over, for the planner's time (parallel/ep_grads.hpp
/// at parallel.ep > 1, else the Topology's): the ZeRO group size the engine shards over (1: none),
/// the ranks one gradient is summed over by the engine (dp, or dp / ep), and the stage the engine
/// runs (0 when its ZeRO group is one rank). Errors: as Topology and expert_dp_of.
struct GradGroups {
    int zero_size = 1, reduce_ranks = 1, stage = 0;
};
GradGroups grad_groups(const RunShape& shape);

/// Distinct nodes among world `ranks` with ranks_per_node consecutive ranks per node.
int nodes_spanned(const std::vector<int>& ranks, int ranks_per_node);

}  // namespace llmtrain
