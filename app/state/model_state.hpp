// app/state/model_state.hpp — one rank's model, ZeRO engine, optimizer and pipeline stage, built by one
// function for the real run (trainer.cpp) and for the memory estimate of `--dry-run --world-size N`,
// so the estimate is the real run's allocations counted, not a second set of formulas
// (docs/training.md "Memory").
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "app/state/run_shape.hpp"
#include "model/allocator.hpp"
#include "model/cuda/cuda_backend.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "parallel/ep_group.hpp"
#include "parallel/ep_grads.hpp"
#include "parallel/partition.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/topology.hpp"
#include "parallel/tp_group.hpp"
#include "parallel/zero.hpp"

namespace llmtrain {

/// Bytes per MemCategory (model/allocator.hpp), as the Allocator counts them.
using MemBytes = std::array<size_t, static_cast<int>(MemCategory::count)>;

struct ModelState {
    std::unique_ptr<ParamLayout> layout;            // this TP rank's tensors, padded to split over the ZeRO group
    std::unique_ptr<Comm> zero_comm, replica_comm;  // the ZeRO group, the replica group
    // With parallel.tp > 1 (else null): the GPT's TP group (device buffers) and the same ranks over
    // host buffers (the gradient norm's sum over the TP ranks).
    std::unique_ptr<TpGroup> tp_group;
    std::unique_ptr<Comm> tp_host_comm;
    // With parallel.cp > 1 (else null): the GPT's context-parallel group (device buffers).
    std::unique_ptr<TpGroup> cp_group;
    // With parallel.ep > 1 (else null): the GPT's expert-parallel group (device buffers).
    std::unique_ptr<EpGroup> ep_group;
    // With parallel.ep > 1 (else null): the dense gradients' EP sum and the gradient norm; the
    // engine's groups are its ExpertDp's (parallel/ep_grads.hpp).
    std::unique_ptr<EpGrads> ep_grads;
    std::unique_ptr<ZeroEngine> engine;
    std::unique_ptr<GPT> gpt;
    std::unique_ptr<AdamW> adam;
    // With parallel.pp > 1 (else empty / null):
    std::vector<std::unique_ptr<Comm>> links;  // to the neighbour stages (PipelineLinks)
    std::unique_ptr<Comm> embedding_comm;      // first and last stage: the tied wte's gradient
    std::unique_ptr<Comm> stage_comm;          // host: every stage of this pipeline
    std::unique_ptr<PipelineStage> pipe;
};

/// Makes the Comm of a group of world ranks (listed in group order; the calling rank among them):
/// `host` asks for one over host buffers (MPI), else one for the backend's device buffers.
using CommFactory = std::function<std::unique_ptr<Comm>(const std::vector<int>& ranks, bool host)>;

/// The unit padding of a layout sharded over a ZeRO group of n ranks: every shard of a unit
/// 16-byte aligned (8 elements per rank), 1 when n == 1.
inline int zero_shard_multiple(int n) { return n > 1 ? 8 * n : 1; }
/// The units pipeline stage `stage` of `stages` holds for layers [l0, l1): the embeddings on the first
/// and (tied wte) the last stage, the layers, ln_f on the last; empty when stages == 1 (all).
std::vector<int> stage_units(const GPTConfig& g, int stage, int stages, int l0, int l1);

/// Builds this rank's layout (its TP rank's part of every tensor when parallel.tp > 1), ZeRO engine
/// (stage cfg.parallel.zero_stage, over what this TP rank holds), the TP group, GPT (its pipeline stage's
/// layers, micro-batch (micro_batch_size, seq_len), the activation contexts its schedule needs),
/// AdamW, and with pp > 1 the pipeline stage and its Comms, over alloc; the Comms come from
/// `comms`, asked for in the same order on every rank. Parameters are not initialized. Errors: as
/// stage_plan, ZeroEngine, GPT and AdamW (std::invalid_argument, std::runtime_error), CommError.
/// doc_eos: the training data's eos_id, which ends each document for data.document_mask and
/// data.reset_position_ids (GPTOptions::doc_eos); unused when both are off.
ModelState make_model_state(const Config& cfg, const RunShape& shape, Allocator& alloc, const Topology& topo,
                            const CommFactory& comms, int doc_eos = -1);

/// The run's first weights and a fresh optimizer state (t = 0, m = v = 0): GPT-2's random init from
/// cfg's run.seed, or the weights of shape.init_from (model.init_from, app/interop/pretrained.hpp),
/// whose fp32 values are also the master weights. param_shard: the store's shard-local params
/// (ZeroEngine::param_shard()). Errors: InteropError naming the file, tensor or key
/// (app/interop/safetensors.hpp).
void init_weights(const Config& cfg, const RunShape& shape, GPT& gpt, AdamW& adam, const void* param_shard);

/// Whether the run can write checkpoints: checkpoint.interval > 0 or checkpoint.at_end (the end of
/// the run and a stop signal). Off, the trainer allocates no checkpoint snapshot.
bool checkpoints_on(const Config& cfg);

/// Elements of the host snapshot this rank's CheckpointSaver reserves at start (w, m and v of each:
/// 3 x 4 bytes per element, pinned, MemCategory::host) in a run of `shape` (its checkpoints flag,
/// model and ep) seen from `topo`, 0 when checkpoints are off or the rank
/// writes no part: with tp = 1 the ranks of replica 0, adam's shard (adam.numel()); with tp > 1 the
/// ranks of replica 0 too, each its piece of the stage's whole tensors (app/state/tp_state.hpp tp_piece:
/// the units `engine` holds, without the last stage's copy of the tied wte when pp > 1, cut over
/// N x tp writers).
size_t checkpoint_snapshot_elems(const RunShape& shape, const Topology& topo, const ZeroEngine& engine,
                                 const AdamW& adam);

/// Bytes per MemCategory of the first rank (TP index 0) of pipeline stage `pp_stage` of a run of
/// `shape` (its world, groups, ZeRO stage and stages' layers) with cfg's batch, schedule and
/// optimizer, counted by building it over the dry-run backend (model/dry_ops.hpp):
/// nothing is allocated. host includes the checkpoint snapshot (12 bytes x
/// checkpoint_snapshot_elems) when checkpoints are on. The backend's own workspaces (cuBLASLt's 32 MiB, the attention path's:
/// cuDNN's dP of B*NH*T^2*2 bytes, cublas' score tiles; docs/attention.md) are not
/// included. Errors: std::invalid_argument for a world or group size that does not fit.
MemBytes estimate_memory(const Config& cfg, const RunShape& shape, int pp_stage = 0);

/// Device bytes of b: every category but host.
size_t device_bytes(const MemBytes& b);
/// The column heads of a memory table, one " %11s" per category, in MemCategory order.
std::string memory_columns_head();
/// Appends each category of b in MiB (" %11.1f") to row; returns the device total and the model
/// states (params + grads + optimizer) in bytes.
std::pair<double, double> append_memory_columns(std::string& row, const MemBytes& b);

/// The `--dry-run --world-size N` report of a run of `shape` (run_shape of cfg on N ranks): the
/// group layout and, for each ZeRO stage (0 and 1 with a pipeline) and pipeline stage, the per-rank
/// bytes by category, next to the paper's model-state formula (docs/reference.md "ZeRO memory").
std::vector<std::string> memory_report(const Config& cfg, const RunShape& shape);

/// The dry run's FP8 line (shape.fp8, training.fp8 != "off"): the CUDA backend's FP8 workspace for
/// the largest of a block's linear layer calls at this rank's rows and widths
/// (model/cuda/fp8_linear.hpp), in MiB. Never throws.
std::string fp8_workspace_line(const RunShape& shape);

}  // namespace llmtrain
