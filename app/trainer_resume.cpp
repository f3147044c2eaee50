// app/trainer_resume.cpp — the trainer's side of a checkpoint's contents and of resuming (the
// format and the saver are app/checkpoint/'s, which part each rank writes and when is
// TrainerCheckpoints', app/trainer_checkpoints.hpp): what state.toml records (train_state), an older
// checkpoint's loader position, and reading a checkpoint back (Trainer::resume_from: each rank reads
// only its own shard). Collective throughout: every rank makes the same calls in the same order.
#include "app/trainer_impl.hpp"

#include <filesystem>
#include <sstream>

#include "parallel/nodes.hpp"

namespace llmtrain {

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
    st.precision = precision_name(shape.precision);
    if (moe && shape.moe_bias_update_rate > 0.0f) st.moe_bias = moe->bias, st.moe_experts = moe->E;
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

std::string Trainer::save_checkpoint(RunLog& log) {
    impl_->checkpoints->save(impl_->progress.step, log, nullptr);
    return impl_->checkpoints->complete(log, nullptr);
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
    if (I.shape.stochastic_rounding && st.adam_t > 0) {
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
    if (st.backend != I.ops->name() || st.precision != precision_name(I.shape.precision))
        note += "; written by backend " + st.backend + "/" + st.precision;
    return note;
}

}  // namespace llmtrain
