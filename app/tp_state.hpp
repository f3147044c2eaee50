// app/tp_state.hpp — a tensor-parallel run's fp32 training state (weights, AdamW m and v) moved
// between its TP ranks' local parts and whole tensors, so that its checkpoints are those of a tp = 1
// run and any tp resumes any other (docs/parallelism.md "Tensor parallelism").
//
// Each TP rank holds its part of every split tensor in its own local layout (model/param_layout.hpp
// TPSplit; ParamLayout::cut_local / place_local), sharded over its ZeRO group. Writing: the ranks of
// one pipeline stage's replica 0 send their shards to the stage's first rank, which places every TP
// rank's parts into whole tensors. Reading: every rank reads the whole model and cuts its part.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"
#include "model/param_layout.hpp"
#include "parallel/comm.hpp"
#include "parallel/topology.hpp"

namespace llmtrain {

/// Collective over replica 0 of this rank's pipeline stage (every TP and ZeRO index; call it on
/// those ranks only). mine: this rank's shard-local state, w | m | v of ns elements each (host fp32,
/// AdamW::state_to_host's order; ns is the same on every one of them), holding chunk (ZeRO index)
/// of each unit in shard_units (ascending: the units of the stage, ZeroEngine::holds). Ranks other than the stage's
/// first, topo.rank_of(stage, 0, 0, 0), send it there over `world` (the world Comm, host buffers) and
/// return "". The first rank receives them in (TP index, ZeRO index) order and writes the whole
/// tensors of the units in `held` (a subset of shard_units: the last stage leaves out its copy of wte) into snapshot(nf) — w | m | v
/// of nf = their padded element count, padding 0 — and appends one view per unit (flat ranges of
/// `full`, a tp = 1 layout of the same config) to views. A replicated tensor is taken from TP rank 0;
/// the return value is a message naming the first one whose copy on another TP rank differs in any
/// bit (weights, m or v), else "". zero_shard_multiple: the unit padding the local layouts were built
/// with. Besides the snapshot, the first rank's scratch is 3 x ns floats (one received shard) and
/// 3 x one TP rank's local elements of shard_units (this stage's, never the whole model's).
/// Errors: CommError from the Comm.
std::string gather_tp_stage(Comm& world, const Topology& topo, const ParamLayout& full, int zero_shard_multiple,
                            const std::vector<int>& shard_units, const std::vector<int>& held, const float* mine,
                            size_t ns, const std::function<float*(size_t)>& snapshot,
                            std::vector<OptimShardView>& views);

/// This TP rank's part of a checkpoint: the whole model's weights (model.h5) and AdamW moments
/// (every optim_*.h5, unit by unit) read by tensor name as laid out by `full` (tp = 1), then cut
/// into `local`'s layout (ParamLayout::cut_local): w, m, v get local.total_numel() elements each,
/// padding 0. Needs 4 bytes of host memory per parameter of the whole model (the weights) plus
/// one unit's m and v. Errors: CheckpointError (read_params, read_optim).
void read_tp_local(const std::string& dir, const ParamLayout& full, const ParamLayout& local, float* w, float* m,
                   float* v);

}  // namespace llmtrain
