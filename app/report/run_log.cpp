// app/report/run_log.cpp — log.txt / losses.tsv writing and the log line format (see run_log.hpp).
#include "app/report/run_log.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace llmtrain {

std::string format_duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
    const long long s = std::llround(seconds);
    char buf[48];
    std::snprintf(buf, sizeof buf, "%02lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    return buf;
}

std::string format_thousands(double v) {
    long long n = std::llround(v);
    std::string digits = std::to_string(n < 0 ? -n : n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return (n < 0 ? "-" : "") + out;
}

std::string format_step_line(const StepStats& s) {
    char head[160];
    std::snprintf(head, sizeof head, "step %lld/%lld | loss %.4f | lr %.2e | norm %.3f | ", (long long)s.step,
                  (long long)s.max_steps, s.loss, s.lr, s.grad_norm);
    char mfu[32];
    std::snprintf(mfu, sizeof mfu, " tok/s | MFU %.1f%% | ", 100.0 * s.mfu);
    return head + format_thousands(s.tokens_per_second) + mfu + format_duration(s.elapsed_seconds) +
           " elapsed | ETA " + format_duration(s.eta_seconds);
}

RunLog::RunLog(bool enabled) : enabled_(enabled) {}

RunLog::~RunLog() {
    if (log_) std::fclose(log_);
    if (tsv_) std::fclose(tsv_);
}

void RunLog::open(const std::string& run_dir) {
    if (!enabled_) return;
    const std::filesystem::path dir(run_dir);
    auto open_append = [](const std::filesystem::path& p) {
        std::FILE* f = std::fopen(p.c_str(), "a");
        if (!f) throw std::runtime_error("cannot append to '" + p.string() + "': " + std::strerror(errno));
        return f;
    };
    log_ = open_append(dir / "log.txt");
    const bool new_tsv = !std::filesystem::exists(dir / "losses.tsv");
    tsv_ = open_append(dir / "losses.tsv");
    if (new_tsv) std::fputs("step\tkind\tloss\tlr\tgrad_norm\n", tsv_);
    for (const auto& l : pending_) to_file(l);
    pending_.clear();
    std::fflush(tsv_);
}

void RunLog::to_file(const std::string& text) {
    if (!log_) {
        pending_.push_back(text);
        return;
    }
    std::fputs(text.c_str(), log_);
    std::fputc('\n', log_);
    std::fflush(log_);
}

void RunLog::line(const std::string& text) {
    if (!enabled_) return;
    std::fputs(text.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    to_file(text);
}

void RunLog::warn(const std::string& text) {
    if (!enabled_) return;
    std::fprintf(stderr, "%s\n", text.c_str());
    to_file(text);
}

void RunLog::error(const std::string& what) {
    if (enabled_ && log_) to_file("llmtrain: error: " + what);
}

void RunLog::train_record(int64_t step, float loss, float lr, float grad_norm) {
    if (!enabled_ || !tsv_) return;
    std::fprintf(tsv_, "%lld\ttrain\t%.9g\t%.9g\t%.9g\n", (long long)step, loss, lr, grad_norm);
    std::fflush(tsv_);
}

void RunLog::val_record(int64_t step, float loss) {
    if (!enabled_ || !tsv_) return;
    std::fprintf(tsv_, "%lld\tval\t%.9g\t\t\n", (long long)step, loss);
    std::fflush(tsv_);
}

void RunLog::eval_record(int64_t step, const std::string& kind, double value) {
    if (!enabled_ || !tsv_) return;
    std::fprintf(tsv_, "%lld\t%s\t%.9g\t\t\n", (long long)step, kind.c_str(), value);
    std::fflush(tsv_);
}

void RunLog::source_tokens_record(int64_t step, const std::string& source, uint64_t tokens) {
    if (!enabled_ || !tsv_) return;
    std::fprintf(tsv_, "%lld\ttokens:%s\t%llu\t\t\n", (long long)step, source.c_str(), (unsigned long long)tokens);
    std::fflush(tsv_);
}

}  // namespace llmtrain
