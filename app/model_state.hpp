// app/model_state.hpp — one rank's model, ZeRO engine and optimizer, built by one function for the
// real run (trainer.cpp) and for the memory estimate of `--dry-run --world-size N`, so the estimate
// is the real run's allocations counted, not a second set of formulas (docs/training.md "Memory").
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "app/config.hpp"
#include "model/allocator.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "parallel/topology.hpp"
#include "parallel/zero.hpp"

namespace llmtrain {

struct ModelState {
    std::unique_ptr<ParamLayout> layout;            // padded to split over the ZeRO group
    std::unique_ptr<Comm> zero_comm, replica_comm;  // the ZeRO group, the replica group
    std::unique_ptr<ZeroEngine> engine;
    std::unique_ptr<GPT> gpt;
    std::unique_ptr<AdamW> adam;
};

/// The model configuration of cfg.model.
GPTConfig gpt_config_of(const Config& cfg);
/// training.precision as the device compute dtype (the config has validated it: "fp32" or "bf16").
DType precision_dtype(const Config& cfg);
/// The ZeRO group size a topology is built with: 1 at stage 0 (plain DP), else parallel.zero_group_size.
int zero_group_of(const Config& cfg);
/// optimizer.offload* (and training.stochastic_rounding) as the optimizer's OffloadConfig.
OffloadConfig offload_config_of(const Config& cfg);

/// Builds the layout, ZeRO engine (stage cfg.parallel.zero_stage over the two Comms), GPT (layers
/// [0, n_layer), micro-batch (micro_batch_size, seq_len)) and AdamW over alloc. Parameters are not
/// initialized. Errors: as ZeroEngine, GPT and AdamW (std::invalid_argument, std::runtime_error).
ModelState make_model_state(const Config& cfg, Allocator& alloc, const Topology& topo, std::unique_ptr<Comm> zero,
                            std::unique_ptr<Comm> replicas);

/// Bytes per MemCategory of world rank 0 of a `world`-rank run of cfg at zero stage `stage`, counted
/// by building it over the dry-run backend (model/dry_ops.hpp): nothing is allocated. The backend's
/// own workspaces (cuBLASLt, cuDNN: ~35 MB on CUDA) are not included. Errors: std::invalid_argument
/// for a world or group size that does not fit.
std::array<size_t, static_cast<int>(MemCategory::count)> estimate_memory(const Config& cfg, int world, int stage);

/// The `--dry-run --world-size N` report: the group layout and, for each ZeRO stage, the per-rank
/// bytes by category, next to the paper's model-state formula (docs/reference.md "ZeRO memory").
std::vector<std::string> memory_report(const Config& cfg, int world);

}  // namespace llmtrain
