// app/trainer.cpp — the training loop (see trainer.hpp).
#include "app/trainer_impl.hpp"

namespace llmtrain {

using trainer_detail::Clock;
using trainer_detail::seconds_since;
using trainer_detail::shape_of;

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;  // the signal number that asked us to stop, or 0

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

void install_stop_signal_handlers() {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
}

double peak_flops_for(const Config& cfg, const std::string& backend_name) {
    if (cfg.run.peak_flops > 0) return cfg.run.peak_flops;
    return backend_name == "cuda" ? 989e12 : cpu::peak_flops();
}


Trainer::Trainer(const Config& cfg, Comm& dp_comm) : impl_(std::make_unique<Impl>(cfg, dp_comm)) {}
Trainer::~Trainer() = default;
int64_t Trainer::step() const { return impl_->step; }

std::string Trainer::save_checkpoint(RunLog& log) {
    impl_->save(log, nullptr);
    return impl_->saver->complete(log, nullptr);
}


std::string Trainer::resume_from(const std::string& dir) {
    Impl& I = *impl_;
    TrainState st = read_train_state(dir);
    if (st.model_config_hash != model_config_hash(I.cfg))
        throw CheckpointError("checkpoint '" + dir + "' holds a model with " + shape_of(st.model) +
                              " but the config asks for " + shape_of(I.shape.model));
    const ParamLayout& layout = *I.layout;
    std::vector<float> host(layout.total_numel());
    const size_t ns = I.adam->numel();
    std::vector<float> m(ns), v(ns), w;
    size_t local = 0;
    if (!I.full_layout) {
        read_params(dir, layout, host.data());
        for (const FlatRange& r : I.adam->ranges()) {  // the optimizer shard, by flat offset: any old sharding
            read_optim(dir, layout, r.offset, r.offset + r.numel, m.data() + local, v.data() + local);
            w.insert(w.end(), host.begin() + r.offset, host.begin() + r.offset + r.numel);
            local += r.numel;
        }
    } else {
        // tp > 1: the checkpoint holds whole tensors (written at any tp); this TP rank cuts its part.
        std::vector<float> lm(layout.total_numel()), lv(layout.total_numel());
        read_tp_local(dir, *I.full_layout, layout, host.data(), lm.data(), lv.data());
        for (const FlatRange& r : I.adam->ranges()) {
            std::copy(lm.begin() + r.offset, lm.begin() + r.offset + r.numel, m.begin() + local);
            std::copy(lv.begin() + r.offset, lv.begin() + r.offset + r.numel, v.begin() + local);
            w.insert(w.end(), host.begin() + r.offset, host.begin() + r.offset + r.numel);
            local += r.numel;
        }
    }
    I.adam->state_from_host(w.data(), m.data(), v.data());  // device and host parts alike
    // The checkpoint holds fp32 master weights. Rounded to nearest they would not be the bf16 params
    // the last step wrote stochastically; its rounding, keyed by (t, flat index), rebuilds them
    // exactly, for every copy of every element (docs/training.md "Resume").
    if (I.cfg.training.stochastic_rounding && st.adam_t > 0) round_params_of_step(host.data(), host.size(), 0, st.adam_t);
    I.engine->load_params(host.data());  // every rank takes the part it holds
    I.run_id = st.run_id.empty() ? I.run_id : st.run_id;
    I.adam->set_t(st.adam_t);
    I.step = I.start_step = st.step;
    I.tokens_seen = st.tokens_seen;
    I.train->restore(st.legacy_loader ? I.legacy_loader_state(st, dir) : st.loader);
    std::istringstream rng(st.sampler_rng);
    rng >> I.sampler_rng;
    if (!rng) throw CheckpointError(dir + "/state.toml: sampler_rng: not a std::mt19937_64 state");
    std::string note = "resume: from " + dir + " at step " + std::to_string(st.step) + " (" +
                       format_thousands(double(st.tokens_seen)) + " tokens seen)";
    if (st.dp != I.dp)  // the data stream goes on unchanged (data/loader.hpp)
        note += "; dp changed from " + std::to_string(st.dp) + " to " + std::to_string(I.dp);
    if (I.train->state().seed != I.cfg.run.seed)
        note += "; the data order keeps the checkpoint's seed " + std::to_string(I.train->state().seed);
    if (st.backend != I.ops->name() || st.precision != I.cfg.training.precision)
        note += "; written by backend " + st.backend + "/" + st.precision;
    return note;
}

void Trainer::run(RunLog& log, Metrics* metrics) {
    Impl& I = *impl_;
    const auto& rc = I.cfg.run;
    const int64_t max_steps = rc.max_steps;
    const double fpt = flops_per_token(I.shape.model, I.nparams(), I.T);
    const double peak = peak_flops_for(I.cfg, I.ops->name());
    // Memory gauges: at start, and after every step (the backend's workspaces grow in the first one);
    // the attention path with them (with "auto" it may fall back to cublas at the first step).
    auto report_memory = [&] {
        for (int k = 0; k < int(MemCategory::count); ++k)
            metrics->set_memory_bytes(mem_category_name(MemCategory(k)), double(I.alloc->current(MemCategory(k))));
        metrics->set_attention(I.ops->attention_name());
    };
    if (metrics) report_memory();
    if (I.step >= max_steps) {
        log.line("nothing to do: step " + std::to_string(I.step) + " >= run.max_steps " + std::to_string(max_steps));
        return;
    }
    const auto t_start = Clock::now();
    int64_t window_steps = 0;
    double window_train_s = 0;  // time inside train steps in the window: eval, samples, checkpoints excluded
    double train_seconds = 0;   // wall time inside train steps since start (for the ETA)
    while (I.step < max_steps) {
        const auto t0 = Clock::now();
        float loss, lr, norm;
        const bool updated = I.train_step(&loss, &lr, &norm);
        const double step_s = seconds_since(t0);
        I.trace->record(I.step, t0, I.pipe.get(), I.adam->offload(), updated);
        train_seconds += step_s;
        window_train_s += step_s;
        ++window_steps;
        const int64_t s = I.step;
        log.train_record(s, loss, lr, norm);
        if (updated) {
            I.skipped_in_a_row = 0;
        } else {
            ++I.skipped_in_a_row;
            if (metrics) metrics->add_skipped_step();
            char buf[160];
            std::snprintf(buf, sizeof buf, "step %lld: loss %g, grad norm %g: not finite, no update (%d in a row, limit "
                          "training.max_skipped_steps = %d)", (long long)s, loss, norm, I.skipped_in_a_row,
                          I.cfg.training.max_skipped_steps);
            log.line(buf);
            if (I.skipped_in_a_row >= I.cfg.training.max_skipped_steps) {
                I.saver->complete(log, metrics);  // every rank stops here alike: the checkpoint in flight is kept
                throw std::runtime_error("stopping at step " + std::to_string(s) + ": " +
                                         std::to_string(I.skipped_in_a_row) +
                                         " steps in a row had a non-finite loss or gradient norm "
                                         "(training.max_skipped_steps); the last checkpoint is kept as it was");
            }
        }
        if (metrics) {
            auto one_step = metrics->hold_scrapes();  // a scrape sees this step's values together
            metrics->set_step(s);
            metrics->set_loss(loss);
            metrics->set_learning_rate(lr);
            metrics->set_grad_norm(norm);
            metrics->add_tokens(double(I.tokens_per_step()));
            metrics->observe_step_seconds(step_s);
            report_memory();
            if (const HostOffload* off = I.adam->offload(); off && updated) {
                const OffloadTimes& t = off->last_times();
                metrics->set_offload_seconds("d2h", t.d2h);
                metrics->set_offload_seconds("host_adam", t.host_adam);
                metrics->set_offload_seconds("h2d", t.h2d);
                metrics->set_offload_seconds("wall", t.wall);
            }
        }
        if (s % rc.log_interval == 0 || s == I.start_step + 1 || s == max_steps) {
            StepStats st;
            st.step = s;
            st.max_steps = max_steps;
            st.loss = loss;
            st.lr = lr;
            st.grad_norm = norm;
            st.tokens_per_second = double(window_steps * I.tokens_per_step()) / window_train_s;
            st.mfu = fpt * st.tokens_per_second / (peak * I.topo.world_size());  // every rank: pp x dp
            st.elapsed_seconds = seconds_since(t_start);
            st.eta_seconds = train_seconds / double(s - I.start_step) * double(max_steps - s);
            log.line(format_step_line(st));
            if (metrics) {
                metrics->set_tokens_per_second(st.tokens_per_second);
                metrics->set_mfu(st.mfu);
            }
            window_steps = 0;
            window_train_s = 0;
        }
        if (rc.eval_interval > 0 && (s % rc.eval_interval == 0 || s == max_steps)) {
            const float vl = I.evaluate();
            log.val_record(s, vl);
            char buf[64];
            std::snprintf(buf, sizeof buf, "val loss %.4f", vl);
            log.line("step " + std::to_string(s) + "/" + std::to_string(max_steps) + " | " + buf);
            if (metrics) metrics->set_val_loss(vl);
        }
        if (I.hellaswag && (s % rc.eval_hellaswag_interval == 0 || s == max_steps))  // app/eval/hellaswag_eval.hpp
            HellaSwagInLoop::report(s, max_steps, I.hellaswag->evaluate(*I.gpt, I.pipe.get(), I.last_stage(),
                                                                        I.topo.tp_index() == 0, I.comm), log, metrics);
        // ZeRO-3 gathers the weights for every forward, so its whole group samples in step (every
        // rank draws the same tokens: same gathered weights, same RNG); so does rank 0's pipeline,
        // every stage of it, the last stage's logits broadcast to all; rank 0 prints.
        // With tp > 1 rank 0's whole TP group samples (its logits are gathered over the group).
        const bool samples_here = I.rank == 0 || (I.cfg.parallel.zero_stage == 3 && I.topo.replica() == 0) ||
                                  ((I.pipe || I.topo.tp() > 1) && I.topo.replica() == 0 && I.topo.zero_index() == 0);
        if (rc.sample_interval > 0 && s % rc.sample_interval == 0 && samples_here) {
            const int eos = I.train->info().eos_id;
            std::vector<int32_t> ids;
            if (I.pipe) {
                const LogitsAt logits = [&](const int* in, int pos) {
                    std::vector<float> l = I.pipe->logits_at(in, pos);
                    l.resize(size_t(I.shape.model.vocab_size));
                    I.stage_comm->broadcast(l.data(), l.size(), DType::f32, I.topo.pp() - 1);
                    return l;
                };
                ids = generate(logits, I.B, I.T, eos, rc.sample_tokens, rc.sample_top_k, rc.sample_temperature,
                               I.sampler_rng);
            } else {
                ids = generate(*I.gpt, eos, rc.sample_tokens, rc.sample_top_k, rc.sample_temperature, I.sampler_rng);
            }
            if (I.rank == 0) log.line("sample at step " + std::to_string(s) + ": " + I.tokenizer->decode(ids));
        }
        // Every rank must agree to stop at the same step, and on the state of the checkpoint
        // writers (CheckpointSaver::poll): the max of the flags over the ranks.
        float flags[2] = {g_stop_signal != 0 ? 1.0f : 0.0f, I.saver->status()};
        if (I.topo.world_size() > 1) I.comm.all_reduce_max(flags, 2);
        I.saver->poll(flags[1], log, metrics);
        const float stop = flags[0];
        const int interval = I.cfg.checkpoint.interval;
        const bool at_end = I.cfg.checkpoint.at_end && (s == max_steps || stop > 0);
        if ((interval > 0 && s % interval == 0) || at_end) I.save(log, metrics);
        if (stop > 0 || s == max_steps) I.saver->complete(log, metrics);  // the last one is written before the end
        if (stop > 0) {
            log.line(std::string("stopping after step ") + std::to_string(s) + " on " +
                     (g_stop_signal == SIGINT ? "SIGINT" : g_stop_signal == SIGTERM ? "SIGTERM" : "a peer's signal"));
            return;
        }
    }
    // Every rank's device peak (the Allocator's, host excluded): what --dry-run and llmtrain-plan predict.
    const int world = I.topo.world_size(), dp = I.topo.dp();
    std::vector<float> peaks(size_t(world), 0.0f);  // MiB
    peaks[size_t(I.rank)] = float(double(I.alloc->peak_total()) / 1048576.0);
    if (world > 1) I.comm.all_reduce_max(peaks.data(), peaks.size());
    std::string line = "peak device memory (MiB):";
    char buf[64];
    for (int r = 0; r < world; ++r) {
        std::snprintf(buf, sizeof buf, "%s rank %d (stage %d) %.2f", r ? "," : "", r, r / (dp * I.topo.tp()), double(peaks[size_t(r)]));
        line += buf;
    }
    log.line(line);
}

}  // namespace llmtrain
