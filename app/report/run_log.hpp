// app/report/run_log.hpp — what a run reports: the human log (stdout + <run_dir>/log.txt) and the
// machine-readable per-step file <run_dir>/losses.tsv that tests and plots read.
//
// Only rank 0 writes; other ranks' RunLog is silent. Files are opened in append mode and never
// truncated, so a resumed run continues the same log; after a resume a step may appear twice in
// losses.tsv (it ran again after the last checkpoint), and the later line is the one that counts.
// Kinds in losses.tsv: train, val, val:<source> (a mixture source's own val loss), hellaswag...,
// tokens:<source> (a mixture source's tokens so far, at each log line): docs/training.md "Logs".
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace llmtrain {

/// One training step's numbers for the log line.
struct StepStats {
    int64_t step = 0, max_steps = 0;  ///< step is 1-based (optimizer steps completed)
    float loss = 0, lr = 0, grad_norm = 0;
    double tokens_per_second = 0;
    double mfu = 0;                    ///< ratio 0..1
    double elapsed_seconds = 0, eta_seconds = 0;
};

/// `step 120/2000 | loss 4.5123 | lr 9.00e-04 | norm 0.812 | 3,412 tok/s | MFU 4.1% | 00:05:12 elapsed | ETA 00:40:03`
std::string format_step_line(const StepStats& s);
/// Seconds as HH:MM:SS (hours grow past 99); negative or non-finite values as "--:--:--".
std::string format_duration(double seconds);
/// Rounded to an integer with thousands separators: 3411.6 -> "3,412".
std::string format_thousands(double v);

class RunLog {
public:
    /// enabled = false (ranks other than 0) makes every call a no-op.
    explicit RunLog(bool enabled);
    ~RunLog();
    RunLog(const RunLog&) = delete;
    RunLog& operator=(const RunLog&) = delete;

    /// Starts writing <run_dir>/log.txt and <run_dir>/losses.tsv (appending; the directory must
    /// exist). Lines logged before open() are written to log.txt first. Errors: std::runtime_error
    /// naming the file when it cannot be opened for appending.
    void open(const std::string& run_dir);
    /// A line to stdout and log.txt (flushed at once, so a crash keeps what was said).
    void line(const std::string& text);
    /// A line to stderr and log.txt (warnings).
    void warn(const std::string& text);
    /// "llmtrain: error: <what>" to log.txt only, once the file is open (before open() it is
    /// dropped: no run directory has been written to yet). For the error that ends a run: main
    /// prints the same line to stderr, and log.txt keeps why the run stopped.
    void error(const std::string& what);
    /// Appends "<step>\ttrain\t<loss>\t<lr>\t<grad_norm>" to losses.tsv; floats with %.9g, which
    /// round-trips every fp32 value exactly.
    void train_record(int64_t step, float loss, float lr, float grad_norm);
    /// Appends "<step>\tval\t<loss>\t\t" to losses.tsv.
    void val_record(int64_t step, float loss);
    /// Appends "<step>\t<kind>\t<value>\t\t" to losses.tsv (another evaluation's figure, e.g. kind
    /// "hellaswag" with an accuracy in the loss column).
    void eval_record(int64_t step, const std::string& kind, double value);
    /// Appends "<step>\ttokens:<source>\t<tokens>\t\t": training tokens drawn from a mixture's
    /// source so far (the count in the loss column, an integer).
    void source_tokens_record(int64_t step, const std::string& source, uint64_t tokens);

private:
    void to_file(const std::string& text);
    bool enabled_;
    std::FILE* log_ = nullptr;
    std::FILE* tsv_ = nullptr;
    std::vector<std::string> pending_;  // lines logged before open()
};

}  // namespace llmtrain
