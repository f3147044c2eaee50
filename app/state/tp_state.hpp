// app/state/tp_state.hpp — a tensor-parallel run's fp32 training state (weights, AdamW m and v) moved
// from its TP ranks' local parts to whole tensors for a checkpoint, so that its checkpoints are
// those of a tp = 1 run and any tp resumes any other (docs/parallelism.md "Tensor parallelism",
// docs/checkpoints.md "By shard").
//
// Each TP rank holds its part of every split tensor in its own local layout (model/param_layout.hpp
// TPSplit; ParamLayout::local_runs), sharded over its ZeRO group. Writing: the stage's saved units,
// one contiguous flat range of the whole-model (tp = 1) layout, are cut into one piece per rank of
// the stage's replica 0 (N x TP writers); every such rank sends each writer the elements of its
// shard that land in that writer's piece, and writes its own piece as its own part. So each rank's
// snapshot is 1 / (N x TP) of its stage, never the whole stage or model. Reading needs nothing from
// here: every rank reads its local elements straight from the checkpoint (read_params_ranges).
//
// Expert parallelism (exchange_ep_state) is the same exchange over other holders: each EP rank's
// layout holds the dense tensors whole and its E/ep experts, sharded over its ZeRO group of ranks
// with the same experts; the writers are ExpertDp's (dp indices [0, ep x Ne)), together one copy.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"
#include "model/param_layout.hpp"
#include "parallel/comm.hpp"
#include "parallel/ep_grads.hpp"
#include "parallel/topology.hpp"

namespace llmtrain {

/// The flat range of `full` (a tp = 1 layout) that writer w of `writers` writes: the units in
/// `held` (ascending, contiguous in the flat buffer) cut into pieces of ceil(n / writers)
/// elements, piece w (empty past the end). Errors: std::invalid_argument when held is empty or
/// not contiguous.
FlatRange tp_piece(const ParamLayout& full, const std::vector<int>& held, int writers, int w);

/// Collective over replica 0 of this rank's pipeline stage (every TP and ZeRO index; call it on
/// those ranks only). mine: this rank's shard-local state, w | m | v of ns elements each (host fp32,
/// AdamW::state_to_host's order; ns is the same on every one of them), holding chunk (ZeRO index)
/// of each unit in shard_units (ascending: the units of the stage, ZeroEngine::holds). The writers
/// are these ranks, writer t x N + z for TP index t, ZeRO index z; in writer order, every rank sends
/// the writer the elements of its shard inside the writer's piece (tp_piece of the units in `held`, a
/// subset of shard_units: the last stage leaves out its copy of wte) over `world` (the world Comm,
/// host buffers), and the writer places them into snapshot(n) — w | m | v of its piece's n elements,
/// padding 0 — and appends one view (flat ranges of `full`, a tp = 1 layout of the same config) to
/// views (none for an empty piece). A replicated tensor is taken from TP rank 0; the return value
/// is a message naming the first one whose copy on another TP rank differs in any bit (weights, m or
/// v), else "". zero_shard_multiple: the unit padding the local layouts were built with. Besides
/// the snapshot, a rank's scratch is one message (at most 3 x n floats of TP rank 0's, or 3 x a
/// replicated tensor's elements more). Errors: CommError from the Comm.
std::string exchange_tp_stage(Comm& world, const Topology& topo, const ParamLayout& full, int zero_shard_multiple,
                              const std::vector<int>& shard_units, const std::vector<int>& held, const float* mine,
                              size_t ns, const std::function<float*(size_t)>& snapshot,
                              std::vector<OptimShardView>& views);

/// The same for parallel.ep > 1 (call it on x's writers only, x.writer >= 0; with a pipeline, x's
/// groups and writers are this rank's stage's): every writer's piece of the stage's saved units
/// `held` (tp_piece over x.writers), gathered from the writers' shards of the units the stage holds
/// (`shard_units`; all of them, both lists, at pp 1) — each holds the layout of EP index
/// x.ep_index and its TP index (dense tensors whole or their TP part, its experts) sharded over
/// x.zero_size ranks (zero_shard_multiple: the unit padding the layouts were built with). A
/// replicated dense tensor is taken from EP rank 0's TP rank 0, the others' copies checked bitwise
/// (the message names the first that differs, else ""). Errors: CommError from the Comm.
std::string exchange_ep_state(Comm& world, const Topology& topo, const ExpertDp& x, const ParamLayout& full,
                              int zero_shard_multiple, const std::vector<int>& shard_units, const std::vector<int>& held,
                              const float* mine, size_t ns, const std::function<float*(size_t)>& snapshot,
                              std::vector<OptimShardView>& views);

}  // namespace llmtrain
