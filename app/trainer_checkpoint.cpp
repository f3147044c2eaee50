// app/trainer_checkpoint.cpp — the trainer's side of checkpoints (the format and the saver are
// app/checkpoint/'s): what each rank hands the saver (save, save_tp with tp > 1, the tied wte's
// check), what state.toml records (train_state), the end-of-step decision to save or stop, and
// reading a checkpoint back (Trainer::resume_from: each rank reads only its own shard). Collective
// throughout: every rank makes the same calls in the same order.
#include "app/trainer_impl.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "app/state/tp_state.hpp"
#include "parallel/nodes.hpp"

namespace llmtrain {


void Trainer::Impl::save(RunLog& log, Metrics* metrics) {
    const auto t0 = Clock::now();
    const double waited = saver->begin(progress.step, log, metrics);  // for the previous checkpoint
    if (full_layout) return save_tp(log, metrics, t0, waited);
    std::string err;
    int k = -1;
    std::vector<OptimShardView> views;
    if (topo.replica() == 0) {
        // Shard-local: the weights (master weights when kept), m, v — read from the device and,
        // with offload, straight from the host state.
        const size_t ns = ms.adam->numel();
        float* w = saver->snapshot(ns);
        float *m = w + ns, *v = m + ns;
        saver->begin_copy();  // on the saver's stream, after this step's work (an event)
        ms.adam->state_to_host(ms.engine->param_shard(), w, m, v, /*wait=*/false);
        saver->end_copy();  // the next update waits for it (train_step: before_update)
        if (ms.pipe && (topo.stage() == 0 || last_stage())) {
            saver->wait_copy();  // read here, on the host
            err = tied_wte_problem(w);
        }
        size_t local = 0;
        for (const FlatRange& r : ms.engine->shard()) {
            // The last stage's copy of the tied wte (unit 0) is the first stage's: saved once, there.
            const bool copy = !axes->saves_unit(0) && r.offset < ms.layout->units()[1].offset;
            if (!copy)
                views.push_back({r.offset, r.offset + r.numel, m + local, v + local, w + local});
            local += r.numel;
        }
        k = topo.stage() * topo.zero_group_size() + topo.zero_index();
    }
    saver->submit(k, std::move(views), train_state(), err, trainer_detail::seconds_since(t0) - waited, log, metrics);
}

void Trainer::Impl::save_tp(RunLog& log, Metrics* metrics, Clock::time_point t0, double waited) {
    std::vector<OptimShardView> views;
    std::string err;
    int k = -1;
    if (ms.ep_grads && ms.ep_grads->groups().writer >= 0) {  // expert parallelism: ExpertDp's writers
        const size_t ns = ms.adam->numel();
        std::vector<float> mine(3 * ns);
        ms.adam->state_to_host(ms.engine->param_shard(), mine.data(), mine.data() + ns, mine.data() + 2 * ns);
        const ExpertDp& x = ms.ep_grads->groups();
        err = exchange_ep_state(comm, topo, x, *full_layout, zero_shard_multiple(x.zero_size), tp_units(false),
                                tp_units(true), mine.data(), ns, [&](size_t n) { return saver->snapshot(n); }, views);
        k = topo.stage() * x.writers + x.writer;  // each stage's writers, stage-major
    } else if (topo.replica() == 0 && !ms.ep_grads) {
        const size_t ns = ms.adam->numel();
        std::vector<float> mine(3 * ns);  // this rank's shard: w | m | v
        ms.adam->state_to_host(ms.engine->param_shard(), mine.data(), mine.data() + ns, mine.data() + 2 * ns);
        err = tied_wte_problem(mine.data());
        const std::string e = exchange_tp_stage(comm, topo, *full_layout, zero_shard_multiple(topo.zero_group_size()),
                                                tp_units(false), tp_units(true), mine.data(), ns,
                                                [&](size_t n) { return saver->snapshot(n); }, views);
        if (err.empty()) err = e;
        const int writers = topo.zero_group_size() * topo.tp();  // every rank of the stage's replica 0
        k = topo.stage() * writers + topo.tp_index() * topo.zero_group_size() + topo.zero_index();
    }
    saver->submit(k, std::move(views), train_state(), err, trainer_detail::seconds_since(t0) - waited, log, metrics);
}

std::string Trainer::Impl::tied_wte_problem(const float* w) {
    if (!ms.pipe || !ms.embedding_comm) return "";  // no pipeline, a middle stage, or an untied head: one copy
    const size_t n0 = ms.engine->shard().front().numel;  // unit 0 comes first
    if (topo.stage() != 0) {
        ms.stage_comm->send(w, n0, DType::f32, 0);
        return "";
    }
    std::vector<float> other(n0);
    ms.stage_comm->recv(other.data(), n0, DType::f32, topo.pp() - 1);
    return std::memcmp(other.data(), w, n0 * sizeof(float)) == 0
               ? ""
               : "checkpoint: the first and last pipeline stage's copies of the tied wte differ";
}

std::vector<int> Trainer::Impl::tp_units(bool saved) const {
    std::vector<int> out;
    for (int u = 0; u < int(ms.layout->units().size()); ++u)
        if (ms.engine->holds(u) && !(saved && !axes->saves_unit(u))) out.push_back(u);
    return out;
}

TrainState Trainer::Impl::train_state() const {
    TrainState st;
    progress.record(st);  // step, tokens_seen, run_id, restarts
    st.loader = data.train->state();
    std::ostringstream rng;
    rng << sampler_rng;
    st.sampler_rng = rng.str();
    st.adam_t = ms.adam->t();
    st.model_config_hash = model_config_hash(cfg);
    st.model_identity = model_identity(shape.model);  // what resume_from compares (shape.model = gpt_config_of(cfg))
    st.model = shape.model;
    st.dp = topo.data_parallel();  // the data stream's ranks (dp / cp)
    st.world_size = world_size();
    st.backend = ops->name();
    st.precision = cfg.training.precision;
    if (moe && cfg.moe.bias_update_rate > 0.0f) st.moe_bias = moe->bias, st.moe_experts = moe->E;
    return st;
}

LoaderState Trainer::Impl::legacy_loader_state(const TrainState& st, const std::string& dir) const {
    const auto [epoch, batch] = *st.legacy_loader;
    const uint64_t bpe = data.train->batches_per_epoch();
    if (st.dp != topo.data_parallel() || batch >= bpe || epoch * bpe + batch != uint64_t(st.step) * uint64_t(accum))
        throw CheckpointError(
            dir + "/state.toml: [loader] epoch " + std::to_string(epoch) + ", batch " + std::to_string(batch) +
            " (an older llmtrain's micro-batch index per rank, at dp " + std::to_string(st.dp) + ", step " +
            std::to_string(st.step) + ") does not fit dp " + std::to_string(topo.data_parallel()) + ", micro_batch_size " +
            std::to_string(B) + ", grad_accum_steps " + std::to_string(accum) +
            "; resume it once with the dp, micro_batch_size and grad_accum_steps it was written with (its "
            "next checkpoint then resumes in any layout)");
    return data.train->legacy_position(epoch, batch);
}

bool Trainer::Impl::checkpoint_and_maybe_stop(int64_t s, RunLog& log, Metrics* metrics) {
    const int64_t max_steps = cfg.run.max_steps;
    // Every rank must agree to stop at the same step, and on the state of the checkpoint
    // writers (CheckpointSaver::poll): the max of the flags over the ranks.
    float flags[2] = {trainer_detail::stop_signal() != 0 ? 1.0f : 0.0f, saver->status()};
    if (topo.world_size() > 1) comm.all_reduce_max(flags, 2);
    saver->poll(flags[1], log, metrics);
    const float stop = flags[0];
    const int interval = cfg.checkpoint.interval;
    const bool at_end = cfg.checkpoint.at_end && (s == max_steps || stop > 0);
    if ((interval > 0 && s % interval == 0) || at_end) save(log, metrics);
    if (stop > 0 || s == max_steps) saver->complete(log, metrics);  // the last one is written before the end
    if (stop > 0) {
        const int sig = trainer_detail::stop_signal();
        log.line(std::string("stopping after step ") + std::to_string(s) + " on " +
                 (sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a peer's signal"));
        return true;
    }
    return false;
}

std::string Trainer::save_checkpoint(RunLog& log) {
    impl_->save(log, nullptr);
    return impl_->saver->complete(log, nullptr);
}

std::string Trainer::resume_from(const std::string& dir) {
    Impl& I = *impl_;
    TrainState st = read_train_state(dir);
    // One check of the model's identity (app/config/config.hpp), naming the first key that differs.
    if (const std::string why = model_identity_mismatch(st.model_identity, st.model, st.model_config_hash, I.cfg);
        !why.empty())
        throw CheckpointError("checkpoint '" + dir + "' holds another model than the config asks for: " + why);
    // This rank's own elements only (its ZeRO shard of its stage's units; with tp > 1 its TP part,
    // read from the whole tensors): hyperslabs of model.h5 and of the optimizer parts, whatever
    // layout wrote them (docs/checkpoints.md "By shard").
    const bool peak_reset = reset_peak_rss();  // the resume's own peak, from the state built at start
    const std::vector<FlatRange>& ranges = I.ms.adam->ranges();
    const size_t ns = I.ms.adam->numel();
    std::vector<float> w(ns), m(ns), v(ns);
    // File work only: meanwhile this rank answers liveness pings "busy: reading ..." (a rank that
    // read faster waits for it in the next collective past parallel.timeout_s, docs/checkpoints.md
    // "Who does what at a commit").
    run_busy("reading checkpoint " + std::filesystem::path(dir).filename().string(),
             I.cfg.checkpoint.timeout_s > 0 ? I.cfg.checkpoint.timeout_s : 1e9, [&] {
                 read_params_ranges(dir, *I.ms.layout, ranges, w.data());
                 read_optim_ranges(dir, *I.ms.layout, ranges, m.data(), v.data());
             });
    I.ms.adam->state_from_host(w.data(), m.data(), v.data());  // device and host parts alike
    m = {}, v = {};
    // The checkpoint holds fp32 master weights. Rounded to nearest they would not be the bf16 params
    // the last step wrote stochastically; its rounding, keyed by (t, flat index), rebuilds them
    // exactly, for every copy of every element (docs/checkpoints.md "Resume").
    if (I.cfg.training.stochastic_rounding && st.adam_t > 0) {
        size_t local = 0;
        for (const FlatRange& r : ranges) {
            round_params_of_step(w.data() + local, r.numel, r.offset, st.adam_t);
            local += r.numel;
        }
    }
    I.ms.engine->load_shard(w.data());  // stages 1, 2 gather the full params from the shards
    w = {};
    I.rss_lines.push_back(I.peak_rss_line(peak_reset ? "at resume (its own peak: reset before reading)"
                                                     : "at resume (the process's peak: no reset on this system)"));
    I.progress.resume(st);  // step (and start_step), tokens_seen, run_id, restarts
    I.restore_moe_bias(st, dir);  // trainer_moe.cpp
    I.ms.adam->set_t(st.adam_t);
    I.data.train->restore(st.legacy_loader ? I.legacy_loader_state(st, dir) : st.loader);
    std::istringstream rng(st.sampler_rng);
    rng >> I.sampler_rng;
    if (!rng) throw CheckpointError(dir + "/state.toml: sampler_rng: not a std::mt19937_64 state");
    std::string note = "resume: from " + dir + " at step " + std::to_string(st.step) + " (" +
                       format_thousands(double(st.tokens_seen)) + " tokens seen), restart " +
                       std::to_string(I.progress.restarts) + " of this run";
    if (st.dp != I.topo.data_parallel())  // the data stream goes on unchanged (data/loader.hpp)
        note += "; dp changed from " + std::to_string(st.dp) + " to " + std::to_string(I.topo.data_parallel());
    if (I.data.train->state().seed != I.cfg.run.seed)
        note += "; the data order keeps the checkpoint's seed " + std::to_string(I.data.train->state().seed);
    if (st.backend != I.ops->name() || st.precision != I.cfg.training.precision)
        note += "; written by backend " + st.backend + "/" + st.precision;
    return note;
}

}  // namespace llmtrain
