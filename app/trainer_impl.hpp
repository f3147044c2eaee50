// app/trainer_impl.hpp — Trainer's state (Trainer::Impl) and the declarations of what works on it,
// so that each concept of the trainer reads in its own file: trainer_setup.cpp (building the run),
// trainer_step.cpp (one optimizer step), trainer_eval.cpp (val loss, HellaSwag, samples),
// trainer_resume.cpp (what state.toml records, resuming), trainer.cpp (the loop and its
// reporting) and run_summary.cpp (the start-up summary). Its state is mostly owned pieces built in
// that order: the run's shape and topology (RunShape), the model state (ModelState), the step's
// parallelisms (StepAxes), what the run reads (TrainerData), how far the run has come
// (TrainProgress: the counters state.toml records) and the checkpoint orchestration
// (TrainerCheckpoints: the parts, the saves, the end-of-step stop). Internal to app/: nothing else
// includes it.
#pragma once
#include "app/trainer.hpp"

#include <chrono>
#include <optional>
#include <random>

#include "app/checkpoint/checkpoint.hpp"
#include "app/eval/hellaswag_eval.hpp"
#include "app/moe_balance.hpp"
#include "app/state/model_state.hpp"
#include "app/step_trace.hpp"
#include "app/trainer_checkpoints.hpp"
#include "app/trainer_data.hpp"
#include "app/trainer_progress.hpp"
#include "data/loader.hpp"
#include "data/tokenizer.hpp"
#include "model/arch.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/step_axes.hpp"
#include "parallel/topology.hpp"
#include "parallel/zero.hpp"

namespace llmtrain {

namespace trainer_detail {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// "n_layer=12 n_head=12 n_embd=768 seq_len=1024 vocab_size=50304" (messages and the summary).
inline std::string shape_of(const GPTConfig& m) {
    return "n_layer=" + std::to_string(m.n_layer) + " n_head=" + std::to_string(m.n_head) +
           " n_embd=" + std::to_string(m.n_embd) + " seq_len=" + std::to_string(m.seq_len) +
           " vocab_size=" + std::to_string(m.vocab_size);
}

/// One optimizer step as the loop reports it.
struct StepResult {
    float loss = 0, lr = 0, norm = 0;  // Trainer::Impl::train_step's
    bool updated = false;              // false: the loss or the norm was not finite, nothing updated
    double seconds = 0;                // the step's wall time
};

}  // namespace trainer_detail

struct Trainer::Impl {
    using Clock = trainer_detail::Clock;
    using StepResult = trainer_detail::StepResult;
    Config cfg;
    Comm& comm;  // every rank, MPI, host buffers: losses, flags, barriers
    const RunShape shape;  // the model, the stages' layers, the sizes, offload and CUDA options (run_shape)
    Topology topo;
    const int dp, rank, B, T, accum;
    std::unique_ptr<Ops> ops;
    std::unique_ptr<Allocator> alloc;
    std::unique_ptr<ParamLayout> full_layout;  // tp > 1: the whole model (tp 1), as checkpoints hold it
    // The layout, the groups' Comms, the ZeRO engine, the GPT, AdamW and, with pp > 1, the pipeline
    // stage (make_model_state); after ops and alloc, so destroyed before them.
    ModelState ms;
    // The step's parallelisms over ms (parallel/step_axes.hpp): the dp spine, then ep, tp, pp, cp in
    // protocol order (trainer_setup.cpp step_axes_of); after ms, so destroyed before it.
    std::unique_ptr<StepAxes> axes;
    LRSchedule sched;
    TrainerData data;  // the loaders and the host micro-batch (app/trainer_data.hpp)
    std::optional<Tokenizer> tokenizer;  // rank 0 with samples enabled
    float* norm_scratch = nullptr;       // (1) device fp32
    std::mt19937_64 sampler_rng;
    std::unique_ptr<StepTrace> trace;      // run.trace
    TrainProgress progress;  // the step, tokens seen, run id, restarts, skipped steps (app/trainer_progress.hpp)
    // Which part this rank writes, what it hands the saver, when to save or stop (app/trainer_checkpoints.hpp).
    std::unique_ptr<TrainerCheckpoints> checkpoints;
    std::unique_ptr<HellaSwagInLoop> hellaswag;  // run.eval_hellaswag_interval > 0
    std::vector<std::string> rss_lines;  // "memory: peak RSS ..." at start and resume, logged by run()
    std::optional<MoeBalance> moe;       // model.moe: the routing's figures (app/trainer_moe.cpp)

    // --- app/trainer_setup.cpp: building the run

    /// The data (loaders, HellaSwag, the samples' tokenizer) first, then the backend, the model
    /// state (make_model_state), its initial weights and warm-up, the LR schedule and the checkpoints.
    Impl(const Config& c, const RunShape& s, Comm& cm);

    /// "memory: peak RSS <when> (MiB, VmHWM): rank 0 X, rank 1 Y, ..." (peak_rss_mib of every
    /// rank). Collective: an all-reduce over every rank.
    std::string peak_rss_line(const std::string& when);

    /// The whole model's parameters (with tp > 1 this rank holds about 1/tp of them).
    size_t nparams() const { return (full_layout ? *full_layout : *ms.layout).num_parameters(); }
    uint64_t tokens_per_step() const { return uint64_t(shape.global_batch) * T; }
    bool last_stage() const { return topo.stage() == topo.pp() - 1; }

    // --- app/trainer_step.cpp: one optimizer step

    /// One optimizer step at 0-based index progress.step: (mean loss over micro-batches and ranks, lr, norm).
    /// Returns false when the loss or the gradient norm is not finite: then nothing is updated.
    bool train_step(float* loss, float* lr, float* norm);

    // --- app/trainer_eval.cpp: val loss, HellaSwag and samples between steps

    /// Mean val loss of `loader` (val, or a source's) over eval_steps micro-batches per rank (0:
    /// the whole file), from the file's start.
    float evaluate(DataLoader& loader);

    /// After step `s`, as their intervals ask: the val loss (evaluate, logged), HellaSwag, then the
    /// samples. Collective: every rank calls it after every step.
    void eval_and_sample(int64_t s, RunLog& log, Metrics* metrics);

    /// Whether this rank takes part in sampling. ZeRO-3 gathers the weights for every forward, so
    /// its whole group samples in step (every rank draws the same tokens: same gathered weights,
    /// same RNG); so does rank 0's pipeline, every stage of it, the last stage's logits broadcast to
    /// all; rank 0 prints. With tp > 1 rank 0's whole TP group samples (its logits are gathered
    /// over the group). With cp > 1 every rank samples: a CP group runs each forward together
    /// (GPT::logits_at), and the closure of rank 0's CP, ZeRO-3 and TP groups may span any
    /// replica, so all ranks draw alike (the other CP groups in parallel, no wall time added).
    bool samples_here() const;

    /// After step `s`, on the ranks samples_here() names: run.sample_tokens tokens from the model
    /// (the pipeline's through the last stage's logits), drawn with sampler_rng; rank 0 logs them.
    void sample(int64_t s, RunLog& log);

    // --- app/trainer_resume.cpp: what state.toml records, reading a checkpoint back

    /// What state.toml records of the run after progress.step: its counters (TrainProgress::record), loader position, sampler RNG,
    /// the model's shape and hash, the layout and backend it was written by.
    TrainState train_state() const;

    /// The stream position of a checkpoint written before stream positions ([loader] epoch, batch:
    /// each rank's micro-batch index in epochs of batches_per_epoch()). It converts only in the
    /// layout it was written in: the same dp, and its step count times grad_accum_steps equal to the
    /// micro-batches epoch, batch count at this micro_batch_size. Errors: CheckpointError otherwise.
    LoaderState legacy_loader_state(const TrainState& st, const std::string& dir) const;

    // --- app/trainer.cpp: the loop's reporting

    /// The memory gauges by category and the attention path (after every step: the backend's
    /// workspaces grow in the first one, and "auto" attention may fall back to cublas there).
    void report_memory(Metrics& metrics) const;

    /// Counts a step that updated nothing (logged, and in metrics) or resets the count after one
    /// that did. Past training.max_skipped_steps it completes the checkpoint in flight and throws
    /// std::runtime_error, alike on every rank.
    void count_skipped(int64_t s, const StepResult& r, RunLog& log, Metrics* metrics);

    /// Step `s`'s gauges and counters, seen together by a scrape: loss, lr, norm, tokens, step time,
    /// memory, and the offloaded optimizer's phase times after an update.
    void report_step(int64_t s, const StepResult& r, Metrics& metrics) const;

    /// A mixture's tokens per source after step `s` (its stream positions x seq_len): added to
    /// llmtrain_source_tokens_total, and at a log line logged and written to losses.tsv
    /// (tokens:<source>). Nothing without data.sources.
    void report_sources(int64_t s, bool log_line, RunLog& log, Metrics* metrics);

    /// Every rank's device peak (the Allocator's, host excluded), logged in MiB: what --dry-run and
    /// llmtrain-plan predict; with cp > 1 then rank 0's GPT::cp_prefetches counts. Collective.
    void log_peak_memory(RunLog& log);

    // --- app/trainer_moe.cpp: the mixture of experts' routing (model.moe)

    /// After a step's losses are read: the balance losses' mean (over micro-batches and dp ranks)
    /// and the per-expert loads summed over the dp ranks (one fp32 all-reduce of n_layer * E counts,
    /// exact below 2^24 per entry) into `moe`. Collective over every rank; nothing without MoE.
    void moe_after_step();
    /// Step s's MoE figures: losses.tsv kind moe_aux every step, the gauges (llmtrain_moe_*), and at
    /// a log line the window's line (MoeBalance::take_window_line) and moe_imbalance:<layer> rows.
    void report_moe(int64_t s, bool log_line, RunLog& log, Metrics* metrics);
    /// At a resume with model.moe.bias_update_rate > 0: the checkpoint's selection biases into `moe`
    /// and the model; CheckpointError naming `dir` when they are of another shape (a
    /// checkpoint written without the update starts from zeros, saying nothing: it had none).
    void restore_moe_bias(const TrainState& st, const std::string& dir);
};

}  // namespace llmtrain
