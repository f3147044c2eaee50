// app/step_trace.cpp — run.trace's spans and file (see step_trace.hpp).
#include "app/step_trace.hpp"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "optim/offload.hpp"
#include "parallel/pipeline.hpp"

namespace llmtrain {

StepTrace::StepTrace(std::vector<int> steps, int64_t max_steps, std::string run_dir, int rank, int stage)
    : steps_(std::move(steps)), max_steps_(max_steps), run_dir_(std::move(run_dir)), rank_(rank), stage_(stage) {}

void StepTrace::record(int64_t s, std::chrono::steady_clock::time_point t0, const PipelineStage* pipe,
                       const HostOffload* off, bool updated) {
    if (steps_.empty() || s < steps_[0] || s > steps_[1]) return;
    if (s == steps_[0]) origin_ = t0;
    auto at = [&](std::chrono::steady_clock::time_point t) { return std::chrono::duration<double>(t - origin_).count(); };
    const double start = at(t0), end = at(std::chrono::steady_clock::now());
    const std::string step = "step " + std::to_string(s), args = "\"step\": " + std::to_string(s);
    spans_.push_back({step, "step", start, end - start, args});
    double opt_start = start;
    if (pipe) {
        const double base = at(pipe->last_start());
        const std::string track = "stage " + std::to_string(stage_);
        for (const PipeEvent& e : pipe->last_events()) {
            std::string name(1, e.op.kind == PipeOp::forward ? 'F' : 'B');
            name += std::to_string(e.op.micro_batch);
            spans_.push_back({name, track, base + e.start, e.end - e.start,
                              args + ", \"micro_batch\": " + std::to_string(e.op.micro_batch)});
            opt_start = std::max(opt_start, base + e.end);
        }
        spans_.push_back({"reduce + optimizer", track, opt_start, end - opt_start, args});
    }
    if (off && updated) {
        const double ostart = end - off->last_times().wall;  // the host step ended with the step, nearly
        for (const OffloadSpan& o : off->last_spans())
            spans_.push_back({std::string(o.phase) + " " + std::to_string(o.chunk), std::string("offload ") + o.phase,
                              ostart + o.start, o.end - o.start, args + ", \"chunk\": " + std::to_string(o.chunk)});
    }
    if (s != steps_[1] && s != max_steps_) return;
    const std::string dir = run_dir_ + "/trace";
    std::filesystem::create_directories(dir);
    write_chrome_trace(dir + "/rank" + std::to_string(rank_) + ".json",
                       "rank " + std::to_string(rank_) + " (stage " + std::to_string(stage_) + ")", rank_, spans_);
    spans_.clear();
}

}  // namespace llmtrain
