// app/trainer_checkpoints.cpp — the trainer's checkpoint orchestration (see trainer_checkpoints.hpp):
// the saver's construction, save (a rank's shard), save_whole (tp > 1 or ep > 1: pieces of the whole
// tensors), the tied wte's check and the end-of-step decision.
#include "app/trainer_checkpoints.hpp"

#include <csignal>
#include <cstring>

#include "app/state/tp_state.hpp"

namespace llmtrain {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

TrainerCheckpoints::TrainerCheckpoints(const Config& cfg, const RunShape& shape, Comm& world, const Topology& topo,
                                       ModelState& ms, const StepAxes& axes, Allocator& alloc,
                                       const ParamLayout* whole, StateFn state)
    : world_(world), topo_(topo), ms_(ms), axes_(axes), whole_(whole), state_(std::move(state)),
      max_steps_(cfg.run.max_steps), interval_(cfg.checkpoint.interval), at_end_(cfg.checkpoint.at_end) {
    // With tp > 1 a checkpoint holds the whole model like a tp = 1 one (so any tp resumes it), each
    // rank of replica 0 writing one piece of its stage's whole tensors (save_whole): one part per
    // rank of replica 0 at any tp; with ep, one per ExpertDp writer of each stage.
    saver_ = std::make_unique<CheckpointSaver>(
        world, alloc, whole ? *whole : *ms.layout, cfg.run.run_dir,
        ms.ep_grads ? topo.pp() * ms.ep_grads->groups().writers
                    : checkpoint_parts(topo.pp(), topo.zero_group_size(), topo.tp()),
        cfg.checkpoint.keep_last, cfg.checkpoint.async, cfg.checkpoint.timeout_s);
    // The snapshot's host memory, mapped now rather than inside the first checkpoint's copy; none
    // when checkpoints are off (checkpoint.interval = 0, checkpoint.at_end = false).
    if (const size_t n = checkpoint_snapshot_elems(shape, topo, *ms.engine, *ms.adam)) saver_->reserve(n);
}

void TrainerCheckpoints::save(int64_t step, RunLog& log, Metrics* metrics) {
    const auto t0 = Clock::now();
    const double waited = saver_->begin(step, log, metrics);  // for the previous checkpoint
    if (whole_) return save_whole(log, metrics, t0, waited);
    std::string err;
    int k = -1;
    std::vector<OptimShardView> views;
    if (topo_.replica() == 0) {
        // Shard-local: the weights (master weights when kept), m, v — read from the device and,
        // with offload, straight from the host state.
        const size_t ns = ms_.adam->numel();
        float* w = saver_->snapshot(ns);
        float *m = w + ns, *v = m + ns;
        saver_->begin_copy();  // on the saver's stream, after this step's work (an event)
        ms_.adam->state_to_host(ms_.engine->param_shard(), w, m, v, /*wait=*/false);
        saver_->end_copy();  // the next update waits for it (train_step: before_update)
        if (ms_.pipe && (topo_.stage() == 0 || topo_.stage() == topo_.pp() - 1)) {
            saver_->wait_copy();  // read here, on the host
            err = tied_wte_problem(w);
        }
        size_t local = 0;
        for (const FlatRange& r : ms_.engine->shard()) {
            // The last stage's copy of the tied wte (unit 0) is the first stage's: saved once, there.
            const bool copy = !axes_.saves_unit(0) && r.offset < ms_.layout->units()[1].offset;
            if (!copy) views.push_back({r.offset, r.offset + r.numel, m + local, v + local, w + local});
            local += r.numel;
        }
        k = checkpoint_part(topo_.stage(), 0, topo_.zero_index(), topo_.zero_group_size(), 1);
    }
    saver_->submit(k, std::move(views), state_(), err, seconds_since(t0) - waited, log, metrics);
}

void TrainerCheckpoints::save_whole(RunLog& log, Metrics* metrics, Clock::time_point t0, double waited) {
    std::vector<OptimShardView> views;
    std::string err;
    int k = -1;
    const auto snapshot = [&](size_t n) { return saver_->snapshot(n); };
    if (ms_.ep_grads && ms_.ep_grads->groups().writer >= 0) {  // expert parallelism: ExpertDp's writers
        const size_t ns = ms_.adam->numel();
        std::vector<float> mine(3 * ns);
        ms_.adam->state_to_host(ms_.engine->param_shard(), mine.data(), mine.data() + ns, mine.data() + 2 * ns);
        const ExpertDp& x = ms_.ep_grads->groups();
        err = exchange_ep_state(world_, topo_, x, *whole_, zero_shard_multiple(x.zero_size), stage_units(false),
                                stage_units(true), mine.data(), ns, snapshot, views);
        k = topo_.stage() * x.writers + x.writer;  // each stage's writers, stage-major
    } else if (topo_.replica() == 0 && !ms_.ep_grads) {
        const size_t ns = ms_.adam->numel();
        std::vector<float> mine(3 * ns);  // this rank's shard: w | m | v
        ms_.adam->state_to_host(ms_.engine->param_shard(), mine.data(), mine.data() + ns, mine.data() + 2 * ns);
        err = tied_wte_problem(mine.data());
        const std::string e = exchange_tp_stage(world_, topo_, *whole_, zero_shard_multiple(topo_.zero_group_size()),
                                                stage_units(false), stage_units(true), mine.data(), ns, snapshot, views);
        if (err.empty()) err = e;
        k = checkpoint_part(topo_.stage(), topo_.tp_index(), topo_.zero_index(), topo_.zero_group_size(), topo_.tp());
    }
    saver_->submit(k, std::move(views), state_(), err, seconds_since(t0) - waited, log, metrics);
}

std::string TrainerCheckpoints::tied_wte_problem(const float* w) {
    if (!ms_.pipe || !ms_.embedding_comm) return "";  // no pipeline, a middle stage, or an untied head: one copy
    const size_t n0 = ms_.engine->shard().front().numel;  // unit 0 comes first
    if (topo_.stage() != 0) {
        ms_.stage_comm->send(w, n0, DType::f32, 0);
        return "";
    }
    std::vector<float> other(n0);
    ms_.stage_comm->recv(other.data(), n0, DType::f32, topo_.pp() - 1);
    return std::memcmp(other.data(), w, n0 * sizeof(float)) == 0
               ? ""
               : "checkpoint: the first and last pipeline stage's copies of the tied wte differ";
}

std::vector<int> TrainerCheckpoints::stage_units(bool saved) const {
    std::vector<int> out;
    for (int u = 0; u < int(ms_.layout->units().size()); ++u)
        if (ms_.engine->holds(u) && !(saved && !axes_.saves_unit(u))) out.push_back(u);
    return out;
}

bool TrainerCheckpoints::end_of_step(int64_t s, RunLog& log, Metrics* metrics) {
    // Every rank must agree to stop at the same step, and on the state of the checkpoint
    // writers (CheckpointSaver::poll): the max of the flags over the ranks.
    float flags[2] = {trainer_detail::stop_signal() != 0 ? 1.0f : 0.0f, saver_->status()};
    if (topo_.world_size() > 1) world_.all_reduce_max(flags, 2);
    saver_->poll(flags[1], log, metrics);
    const float stop = flags[0];
    const bool at_end = at_end_ && (s == max_steps_ || stop > 0);
    if ((interval_ > 0 && s % interval_ == 0) || at_end) save(s, log, metrics);
    if (stop > 0 || s == max_steps_) saver_->complete(log, metrics);  // the last one is written before the end
    if (stop > 0) {
        const int sig = trainer_detail::stop_signal();
        log.line(std::string("stopping after step ") + std::to_string(s) + " on " +
                 (sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a peer's signal"));
        return true;
    }
    return false;
}

}  // namespace llmtrain
