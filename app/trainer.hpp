// app/trainer.hpp — the training loop: micro-batches with gradient accumulation, data-parallel
// gradient averaging, clipping, AdamW with warmup + decay, periodic eval, samples, logs and
// checkpoints, exact resume, and a clean stop on SIGTERM/SIGINT.
//
// One optimizer step: zero grads; grad_accum_steps times { next train micro-batch, forward_backward
// with dloss = 1/(B*T*grad_accum_steps) per position }; sum the grads over the dp ranks (Comm, rank
// order); norm of the averaged gradient; AdamW with grad_scale = clip_scale(norm) / dp (averaging and clipping folded
// into one scale). global_batch_size = micro_batch_size * grad_accum_steps * dp sequences.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "app/report/metrics.hpp"
#include "app/report/run_log.hpp"
#include "app/state/run_shape.hpp"
#include "parallel/comm.hpp"

namespace llmtrain {

/// Installs SIGTERM and SIGINT handlers that ask the loop to stop after the current step (it then
/// saves a checkpoint and returns). A second signal of the same kind kills at once (SA_RESETHAND).
void install_stop_signal_handlers();

/// Peak FLOP/s per device for MFU: run.peak_flops when > 0, else the backend's default
/// (cpu: threads x max clock x FMA width, model/cpu/peak_flops.cpp; cuda 989e12: H100 bf16 dense,
/// docs/reference.md "Training FLOPs and MFU").
double peak_flops_for(const Config& cfg, const std::string& backend_name);

/// This process's peak resident set size in MiB (VmHWM of /proc/self/status), -1 where there is none.
double peak_rss_mib();
/// Resets the peak RSS to the current one (writes 5 to /proc/self/clear_refs, Linux >= 4.0), so
/// that peak_rss_mib() then measures one phase; false where that is refused.
bool reset_peak_rss();

class Trainer {
public:
    /// Builds the backend, model (initialized from run.seed), AdamW, the train and val loaders (this
    /// rank's share of dp) and, on rank 0, the tokenizer for samples. Writes nothing.
    /// `cfg` must be resolved (resolve_world) and `shape` its run_shape on this world: the trainer
    /// reads the model, layout, groups, batch and precision from `shape` alone. Errors: DataError
    /// (data files), std::runtime_error (backend, memory), std::invalid_argument (model shape).
    Trainer(const Config& cfg, const RunShape& shape, Comm& dp_comm);
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;

    /// Start-up summary: backend, precision, parameters, tokens per step, batch layout, memory by
    /// category, dataset sizes.
    std::vector<std::string> summary() const;

    /// Loads a checkpoint directory (params, optimizer, step, loader position, sampler RNG) on every
    /// rank. Returns a note for the log. Errors: CheckpointError naming the directory, including a
    /// model shape that differs from the config (both shapes in the message).
    std::string resume_from(const std::string& dir);

    /// Runs optimizer steps until run.max_steps or a stop signal; rank 0 logs to `log`, writes
    /// checkpoints and samples. metrics may be null. Errors: CheckpointError, DataError, CommError.
    void run(RunLog& log, Metrics* metrics);

    int64_t step() const;  ///< optimizer steps completed

    /// Writes a checkpoint of the current state now, with every rank (collective; the same protocol
    /// as the periodic ones); returns its directory on rank 0. Used to reshard a checkpoint: resume
    /// it under another world size or ZeRO stage, then save. Errors: CheckpointError, CommError.
    std::string save_checkpoint(RunLog& log);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
