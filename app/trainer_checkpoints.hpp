// app/trainer_checkpoints.hpp — the trainer's checkpoint orchestration, one of Trainer::Impl's owned
// pieces (app/trainer_impl.hpp): which part each rank writes (checkpoint_part), what it hands the
// saver at a save (its shard, or with tp > 1 or ep > 1 its piece of the whole tensors), the tied
// wte's check, and the end-of-step decision to save or stop. The format, the writer thread and the
// commit are app/checkpoint/'s (CheckpointSaver); what state.toml records is asked of the trainer
// (a callback) and reading a checkpoint back is Trainer::resume_from (app/trainer_resume.cpp).
// Collective throughout: every rank makes the same calls in the same order.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"
#include "app/checkpoint/saver.hpp"
#include "app/config/config.hpp"
#include "app/report/metrics.hpp"
#include "app/report/run_log.hpp"
#include "app/state/model_state.hpp"
#include "parallel/step_axes.hpp"
#include "parallel/topology.hpp"

namespace llmtrain {

namespace trainer_detail {
/// The signal number that asked the loop to stop (install_stop_signal_handlers), or 0; read anew
/// at every call. Defined in app/trainer.cpp beside the handler.
int stop_signal();
}  // namespace trainer_detail

/// The optimizer part (optim_<k>.h5) a rank of replica 0 writes: k = stage x (N x tp) + tp_index x
/// N + zero_index, N the ZeRO group size (1 at ZeRO stage 0), tp the TP width (1 without tensor
/// parallelism: then k = stage x N + zero_index). Every rank of replica 0 writes one part, so a
/// checkpoint has checkpoint_parts(pp, N, tp) of them (docs/checkpoints.md "By shard"). Expert
/// parallelism numbers its writers itself (ExpertDp::writer, parallel/ep_grads.hpp).
inline int checkpoint_part(int stage, int tp_index, int zero_index, int zero_group_size, int tp) {
    return stage * (zero_group_size * tp) + tp_index * zero_group_size + zero_index;
}
/// The parts of a checkpoint without expert parallelism: one per rank of replica 0, pp x N x tp.
inline int checkpoint_parts(int pp, int zero_group_size, int tp) { return pp * zero_group_size * tp; }

class TrainerCheckpoints {
public:
    /// What state.toml records of the run now (Trainer::Impl::train_state), asked once per save.
    using StateFn = std::function<TrainState()>;

    /// The saver over `whole` (tp > 1 or ep > 1: the whole model, as a tp = 1 run's files hold it;
    /// else null and this rank's stage layout ms.layout) in cfg's run.run_dir with checkpoint.keep_last,
    /// async and timeout_s; its snapshot reserved now when checkpoints are on
    /// (checkpoint_snapshot_elems). The schedule: checkpoint.interval, checkpoint.at_end and
    /// run.max_steps. world: every rank (host buffers); ms, axes, topo, alloc, whole: outlive this.
    /// Errors: std::runtime_error when the snapshot's memory cannot be had.
    TrainerCheckpoints(const Config& cfg, const RunShape& shape, Comm& world, const Topology& topo, ModelState& ms,
                       const StepAxes& axes, Allocator& alloc, const ParamLayout* whole, StateFn state);

    /// Starts a checkpoint of the state after `step` steps (docs/checkpoints.md "Checkpoints"),
    /// collective: waits for the one in flight, then each rank of replica 0 (together they hold
    /// every shard once) copies its fp32 shard (weights, m, v) into the saver's host snapshot on
    /// the saver's own stream, and the saver's writer thread writes it as optim_<k>.h5 (k:
    /// checkpoint_part) and its slices of model.h5 (model.h5 whole when it is the only part) while
    /// training goes on; the commit follows at a later step boundary (end_of_step) or at
    /// complete(). Errors: CheckpointError.
    void save(int64_t step, RunLog& log, Metrics* metrics);

    /// The end of step `s`: every rank agrees on a stop signal and on the saver's state, starts the
    /// periodic or final checkpoint, and completes the one in flight at the end (s = run.max_steps)
    /// or at a stop. Returns true when a signal stops the loop here (logged). Collective: every rank
    /// calls it after every step. Errors: CheckpointError, CommError.
    bool end_of_step(int64_t s, RunLog& log, Metrics* metrics);

    /// Waits for the checkpoint in flight and commits it; returns its directory on rank 0 ("" when
    /// none). Collective. Errors: CheckpointError.
    std::string complete(RunLog& log, Metrics* metrics) { return saver_->complete(log, metrics); }

    /// Before the optimizer changes the state: the snapshot's copies finish first.
    void before_update() { saver_->before_update(); }

    /// Elements of the host snapshot reserved on this rank (its w, m, v each): the summary's figure.
    size_t reserved() const { return saver_->reserved(); }

private:
    /// save() with tp > 1 or ep > 1: the stage's whole tensors (`whole_`: the files of a tp = 1 run)
    /// are cut into one contiguous piece per rank of the stage's replica 0 (with ep, per ExpertDp
    /// writer); the ranks exchange their fp32 shards' elements over the world Comm so that each
    /// holds its piece, which it writes as its own part (app/state/tp_state.hpp). Costs each of them
    /// 12 bytes of host memory per parameter of its stage / (N x tp) (docs/parallelism.md "Tensor
    /// parallelism", docs/checkpoints.md "By shard").
    /// t0: when save() began; waited: the seconds it waited for the previous checkpoint.
    void save_whole(RunLog& log, Metrics* metrics, std::chrono::steady_clock::time_point t0, double waited);

    /// With a pipeline, on replica 0 at its first and last stage: the two copies of the tied wte
    /// must be equal, bit for bit; the last stage sends its chunk of unit 0 (same ZeRO and TP index,
    /// same chunk) to the first, which compares. w: this rank's shard-local weights (unit 0 first).
    /// Returns the problem on the first stage, else "".
    std::string tied_wte_problem(const float* w);

    /// The units of this rank's stage (ascending, as its ZeRO shard holds them), or with `saved`
    /// those its checkpoint writes: the last stage's copy of the tied wte is the first stage's.
    std::vector<int> stage_units(bool saved) const;

    Comm& world_;
    const Topology& topo_;
    ModelState& ms_;
    const StepAxes& axes_;
    const ParamLayout* whole_;
    StateFn state_;
    int64_t max_steps_;
    int interval_;
    bool at_end_;
    std::unique_ptr<CheckpointSaver> saver_;  // the writer (background thread when checkpoint.async)
};

}  // namespace llmtrain
