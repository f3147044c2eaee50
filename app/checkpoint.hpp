// app/checkpoint.hpp — checkpoints on disk: layout, the crash-safe write protocol, and resume lookup.
//
// ARCHITECTURE.md "Formats". A checkpoint is the directory <run_dir>/checkpoints/step_<N>/ holding
//   model.h5       one fp32 dataset per parameter tensor, by GPT-2 name and global shape
//                  (the fp32 master weights when the backend keeps them);
//   optim_<k>.h5   optimizer shard k: /m/<name> and /v/<name>, 1-D fp32 pieces of each tensor that
//                  lies in the shard, each with an int64 attribute `offset` (first element within
//                  the flattened tensor), so a run with another sharding or padding can load them;
//   state.toml     step, tokens seen, loader position, sampler RNG, Adam step, model shape and
//                  config hash, world layout, backend/precision — written last: it marks completion.
// Protocol (after llm.c's DONE marker and Megatron's `latest` file): everything is written into
// checkpoints/.tmp_step_<N>/, each file and the directory fsynced, the directory renamed to step_<N>,
// checkpoints/ fsynced, then checkpoints/latest ("step_<N>") replaced through a temporary file and
// a rename. Only then are older checkpoints beyond keep_last pruned. A crash at any point leaves
// the previous complete checkpoint untouched; resume ignores .tmp_* and directories without state.toml.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/loader.hpp"
#include "model/param_layout.hpp"

namespace llmtrain {

/// A checkpoint cannot be written, found, read, or does not fit the model; what() names the path.
struct CheckpointError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Everything besides tensors that an exact resume needs (state.toml).
struct TrainState {
    int64_t step = 0;              ///< optimizer steps completed
    uint64_t tokens_seen = 0;      ///< training tokens consumed over all ranks
    LoaderState loader;            ///< train loader position (the same batch index on every rank)
    std::string sampler_rng;       ///< std::mt19937_64 state as written by operator<<
    int adam_t = 0;                ///< AdamW steps taken (bias correction)
    std::string model_config_hash; ///< model_config_hash() of the run that wrote it
    GPTConfig model;               ///< model shape, for error messages
    int dp = 1;                    ///< data-parallel ranks
    int world_size = 1;
    std::string backend, precision;
};

/// One optimizer shard: AdamW m and v for flat-buffer elements [begin, end), host fp32.
struct OptimShardView {
    size_t begin = 0, end = 0;
    const float* m = nullptr;  ///< (end - begin)
    const float* v = nullptr;  ///< (end - begin)
};

/// Writes checkpoint step_<st.step> under run_dir by the protocol above and returns its directory.
/// params: host fp32, layout.total_numel() elements (padding ignored). An existing step_<N> is
/// replaced only after the new one is complete. keep_last > 0 then prunes the oldest complete
/// checkpoints so that keep_last remain. Errors: CheckpointError naming the path and the OS/HDF5 reason.
std::string save_checkpoint(const std::string& run_dir, const TrainState& st, const ParamLayout& layout,
                            const float* params, const std::vector<OptimShardView>& shards, int keep_last);

/// The newest complete checkpoint directory (step_<N> with state.toml) under run_dir/checkpoints,
/// or "" when there is none (also when the run dir does not exist).
std::string find_latest_checkpoint(const std::string& run_dir);

/// Resolves checkpoint.resume: "none" -> "", "auto" -> find_latest_checkpoint(run_dir), anything
/// else is a checkpoint directory that must be complete. Errors: CheckpointError naming the path.
std::string resolve_resume(const std::string& resume, const std::string& run_dir);

/// Reads dir/state.toml. Errors: CheckpointError naming the file and the bad or missing key.
TrainState read_train_state(const std::string& dir);

/// Fills params (host fp32, layout.total_numel(); padding elements set to 0) from dir/model.h5 by
/// tensor name. Errors: CheckpointError naming the file and tensor when one is missing or its shape
/// differs from the layout's.
void read_params(const std::string& dir, const ParamLayout& layout, float* params);

/// Fills m and v (host fp32, end - begin elements each; padding set to 0) for flat elements
/// [begin, end) of `layout` from every optim_<k>.h5 shard in dir. Errors: CheckpointError when a
/// shard is unreadable or some parameter element of the range is in no shard.
void read_optim(const std::string& dir, const ParamLayout& layout, size_t begin, size_t end, float* m,
                float* v);

}  // namespace llmtrain
