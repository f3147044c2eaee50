// app/step_trace.hpp — run.trace: the spans of the traced steps of one rank, written as Chrome
// trace-event JSON (model/trace.hpp) to <run_dir>/trace/rank<k>.json after the last traced step, so
// a user sees the step, the pipeline's schedule and bubble, and the offloaded optimizer's copies
// against its host step in Perfetto (docs/training.md "Traces").
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "model/trace.hpp"

namespace llmtrain {

class PipelineStage;
class HostOffload;

class StepTrace {
public:
    /// Steps [steps[0], steps[1]] are traced (run.trace; empty: none), the last at the latest at
    /// max_steps; rank and stage name this rank's process in the trace; files go to run_dir/trace.
    StepTrace(std::vector<int> steps, int64_t max_steps, std::string run_dir, int rank, int stage);
    /// Records step s, started at t0 and ended now: the whole step, with a pipeline (pipe non-null)
    /// its forwards and backwards by micro-batch and the reduce + optimizer after them, with an
    /// offloaded optimizer that updated (off non-null, updated) its copies and host AdamW by chunk.
    /// After the last traced step writes the file. Errors: std::runtime_error naming the file.
    void record(int64_t s, std::chrono::steady_clock::time_point t0, const PipelineStage* pipe,
                const HostOffload* off, bool updated);

private:
    std::vector<int> steps_;
    int64_t max_steps_;
    std::string run_dir_;
    int rank_, stage_;
    std::vector<TraceSpan> spans_;  // of the traced steps so far
    std::chrono::steady_clock::time_point origin_{};
};

}  // namespace llmtrain
