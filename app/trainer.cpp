// app/trainer.cpp — the training loop (see trainer.hpp): Trainer::run, one screen that reads as
// the order of a step (train, report, eval and sample, checkpoint or stop), and the reporting it
// calls; the stop signals and the MFU peak. What the loop runs lives by concept beside it:
// trainer_setup.cpp, trainer_step.cpp, trainer_eval.cpp, trainer_resume.cpp and the pieces
// trainer_impl.hpp names.
#include "app/trainer_impl.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "model/cpu/peak_flops.hpp"

namespace llmtrain {

using trainer_detail::Clock;
using trainer_detail::seconds_since;
using trainer_detail::StepResult;

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;  // the signal number that asked us to stop, or 0

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

/// The step lines' rates and times: tokens/s and MFU over the window of steps since the last line,
/// the elapsed time since the loop began, the ETA from the train time since then. Only time
/// inside train steps is counted: eval, samples and checkpoints are excluded.
class StepWindow {
public:
    StepWindow(int64_t start_step, int64_t max_steps, uint64_t tokens_per_step, double flops_per_token,
               double peak_flops, int world)
        : start_step_(start_step), max_steps_(max_steps), tokens_per_step_(tokens_per_step),
          fpt_(flops_per_token), peak_(peak_flops), world_(world) {}

    void add(double step_s) {
        train_seconds_ += step_s;
        window_train_s_ += step_s;
        ++window_steps_;
    }

    /// Step s's line, and a new window.
    StepStats close(int64_t s, const StepResult& r) {
        StepStats st;
        st.step = s;
        st.max_steps = max_steps_;
        st.loss = r.loss;
        st.lr = r.lr;
        st.grad_norm = r.norm;
        st.tokens_per_second = double(window_steps_ * tokens_per_step_) / window_train_s_;
        st.mfu = fpt_ * st.tokens_per_second / (peak_ * world_);  // every rank: pp x dp
        st.elapsed_seconds = seconds_since(start_);
        st.eta_seconds = train_seconds_ / double(s - start_step_) * double(max_steps_ - s);
        window_steps_ = 0;
        window_train_s_ = 0;
        return st;
    }

private:
    const int64_t start_step_, max_steps_;
    const uint64_t tokens_per_step_;
    const double fpt_, peak_;
    const int world_;
    const Clock::time_point start_ = Clock::now();
    int64_t window_steps_ = 0;
    double window_train_s_ = 0;  // time inside train steps in the window
    double train_seconds_ = 0;   // time inside train steps since the start (for the ETA)
};

/// The log-interval line, and its rates as gauges.
void log_step_line(const StepStats& st, RunLog& log, Metrics* metrics) {
    log.line(format_step_line(st));
    if (metrics) {
        metrics->set_tokens_per_second(st.tokens_per_second);
        metrics->set_mfu(st.mfu);
    }
}

}  // namespace

int trainer_detail::stop_signal() { return g_stop_signal; }

double peak_rss_mib() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // "VmHWM:  1234 kB"
    return -1.0;
}

bool reset_peak_rss() {
    std::ofstream f("/proc/self/clear_refs");
    f << "5";  // Linux >= 4.0: VmHWM = the current RSS
    f.flush();
    return bool(f);
}

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

Trainer::Trainer(const Config& cfg, const RunShape& shape, Comm& dp_comm)
    : impl_(std::make_unique<Impl>(cfg, shape, dp_comm)) {}
Trainer::~Trainer() = default;
int64_t Trainer::step() const { return impl_->progress.step; }

void Trainer::run(RunLog& log, Metrics* metrics) {
    Impl& I = *impl_;
    const int64_t max_steps = I.cfg.run.max_steps;
    const double fpt = flops_per_token(I.shape.model, I.nparams(), I.T);
    const double peak = peak_flops_for(I.cfg, I.ops->name());
    if (metrics) {
        I.report_memory(*metrics);
        metrics->add_restarts(I.progress.restarts);
    }
    for (const std::string& l : I.rss_lines) log.line(l);
    if (I.progress.step >= max_steps) {
        log.line("nothing to do: step " + std::to_string(I.progress.step) + " >= run.max_steps " + std::to_string(max_steps));
        return;
    }
    StepWindow window(I.progress.start_step, max_steps, I.tokens_per_step(), fpt, peak, I.topo.world_size());
    for (const SourceState& src : I.data.train->state().sources) I.data.source_reported.push_back(src.position);  // from here
    while (I.progress.step < max_steps) {
        const auto t0 = Clock::now();
        StepResult r;
        r.updated = I.train_step(&r.loss, &r.lr, &r.norm);
        r.seconds = seconds_since(t0);
        I.trace->record(I.progress.step, t0, I.ms.pipe.get(), I.ms.adam->offload(), r.updated);
        window.add(r.seconds);
        const int64_t s = I.progress.step;
        log.train_record(s, r.loss, r.lr, r.norm);
        I.count_skipped(s, r, log, metrics);  // throws past training.max_skipped_steps
        if (metrics) I.report_step(s, r, *metrics);
        const bool log_line = s % I.cfg.run.log_interval == 0 || s == I.progress.start_step + 1 || s == max_steps;
        if (log_line) log_step_line(window.close(s, r), log, metrics);
        I.report_moe(s, log_line, log, metrics);
        I.report_sources(s, log_line, log, metrics);
        I.eval_and_sample(s, log, metrics);
        if (I.checkpoints->end_of_step(s, log, metrics)) return;
    }
    I.log_peak_memory(log);
}

void Trainer::Impl::report_sources(int64_t s, bool log_line, RunLog& log, Metrics* metrics) {
    if (cfg.data.sources.empty()) return;
    const LoaderState st = data.train->state();  // every source's position: the same on every rank
    uint64_t total = 0;
    for (const SourceState& src : st.sources) total += src.position;
    std::string line = "step " + std::to_string(s) + "/" + std::to_string(cfg.run.max_steps) + " | tokens by source:";
    for (size_t k = 0; k < st.sources.size(); ++k) {
        const SourceState& src = st.sources[k];
        uint64_t& reported = data.source_reported[k];
        if (metrics) metrics->add_source_tokens(src.name, double((src.position - reported) * uint64_t(T)));
        reported = src.position;
        if (!log_line) continue;
        char share[32];
        std::snprintf(share, sizeof share, " (%.2f%%)", 100.0 * double(src.position) / double(total));
        line += std::string(k ? "," : "") + " " + src.name + " " + format_thousands(double(src.position * uint64_t(T))) + share;
        log.source_tokens_record(s, src.name, src.position * uint64_t(T));
    }
    if (log_line) log.line(line);
}

void Trainer::Impl::report_memory(Metrics& metrics) const {
    for (int k = 0; k < int(MemCategory::count); ++k)
        metrics.set_memory_bytes(mem_category_name(MemCategory(k)), double(alloc->current(MemCategory(k))));
    metrics.set_attention(ops->attention_name());
}

void Trainer::Impl::count_skipped(int64_t s, const StepResult& r, RunLog& log, Metrics* metrics) {
    const int skipped_in_a_row = progress.count_skip(r.updated);
    if (r.updated) return;
    if (metrics) metrics->add_skipped_step();
    char buf[160];
    std::snprintf(buf, sizeof buf, "step %lld: loss %g, grad norm %g: not finite, no update (%d in a row, limit "
                  "training.max_skipped_steps = %d)", (long long)s, r.loss, r.norm, skipped_in_a_row,
                  shape.max_skipped_steps);
    log.line(buf);
    if (skipped_in_a_row >= shape.max_skipped_steps) {
        checkpoints->complete(log, metrics);  // every rank stops here alike: the checkpoint in flight is kept
        throw std::runtime_error("stopping at step " + std::to_string(s) + ": " + std::to_string(skipped_in_a_row) +
                                 " steps in a row had a non-finite loss or gradient norm "
                                 "(training.max_skipped_steps); the last checkpoint is kept as it was");
    }
}

void Trainer::Impl::report_step(int64_t s, const StepResult& r, Metrics& metrics) const {
    auto one_step = metrics.hold_scrapes();  // a scrape sees this step's values together
    metrics.set_step(s);
    metrics.set_loss(r.loss);
    metrics.set_learning_rate(r.lr);
    metrics.set_grad_norm(r.norm);
    metrics.add_tokens(double(tokens_per_step()));
    metrics.observe_step_seconds(r.seconds);
    report_memory(metrics);
    if (const HostOffload* off = ms.adam->offload(); off && r.updated) {
        const OffloadTimes& t = off->last_times();
        metrics.set_offload_seconds("d2h", t.d2h);
        metrics.set_offload_seconds("host_adam", t.host_adam);
        metrics.set_offload_seconds("h2d", t.h2d);
        metrics.set_offload_seconds("wall", t.wall);
    }
}

std::string Trainer::Impl::peak_rss_line(const std::string& when) {
    const int world = topo.world_size();
    std::vector<float> peaks(size_t(world), 0.0f);  // MiB
    peaks[size_t(rank)] = float(peak_rss_mib());
    if (world > 1) comm.all_reduce_max(peaks.data(), peaks.size());
    std::string line = "memory: peak RSS " + when + " (MiB, VmHWM):";
    char buf[64];
    for (int r = 0; r < world; ++r) {
        std::snprintf(buf, sizeof buf, "%s rank %d %.1f", r ? "," : "", r, double(peaks[size_t(r)]));
        line += buf;
    }
    return line;
}

void Trainer::Impl::log_peak_memory(RunLog& log) {
    const int world = topo.world_size();
    std::vector<float> peaks(size_t(world), 0.0f);  // MiB
    peaks[size_t(rank)] = float(double(alloc->peak_total()) / 1048576.0);
    if (world > 1) comm.all_reduce_max(peaks.data(), peaks.size());
    std::string line = "peak device memory (MiB):";
    char buf[64];
    for (int r = 0; r < world; ++r) {
        std::snprintf(buf, sizeof buf, "%s rank %d (stage %d) %.2f", r ? "," : "", r, r / (dp * topo.tp()),
                      double(peaks[size_t(r)]));
        line += buf;
    }
    log.line(line);
    if (topo.cp() > 1) {  // the backward's prefetch of the next layer's q|k|v (model/gpt_cp.cpp), rank 0's
        const std::array<uint64_t, 4> p = ms.gpt->cp_prefetches();
        log.line("context parallel backward: " + std::to_string(p[0]) + " layers, q|k|v windows gathered a layer ahead " +
                 std::to_string(p[1]) + " (" + std::to_string(p[2]) + " complete when needed), still there from the "
                 "forward " + std::to_string(p[3]) + ", gathered when needed " + std::to_string(p[0] - p[1] - p[3]));
    }
    if (ms.ep_group) {  // the MoE layers' exchanges (model/gpt_moe_ep.cpp) over rank 0's ep group, all steps and evaluations
        const CommStats& st = ms.ep_group->comm().stats();
        log.line("expert parallel: " + std::to_string(st.calls[int(CommOp::all_to_all)]) + " all-to-alls, " +
                 std::to_string(st.bytes[int(CommOp::all_to_all)]) + " bytes sent to the other ranks of the ep group");
    }
}

}  // namespace llmtrain
