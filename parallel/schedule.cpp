// parallel/schedule.cpp — 1F1B and GPipe op lists per stage, and their replay against the
// pipeline's dependencies (see schedule.hpp).
#include "parallel/schedule.hpp"

#include <algorithm>
#include <stdexcept>

namespace llmtrain {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
    if (name == "1f1b") return PipelineSchedule::one_f_one_b;
    if (name == "gpipe") return PipelineSchedule::gpipe;
    throw std::invalid_argument("pipeline.schedule: expected \"1f1b\" or \"gpipe\", got \"" + name + "\"");
}

static void check_stage(int stage, int stages, int micro_batches) {
    if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1)
        throw std::invalid_argument(
            "pipeline schedule: expected stages >= 1, 0 <= stage < stages and micro-batches >= 1, got stage " +
            std::to_string(stage) + " of " + std::to_string(stages) + " with " + std::to_string(micro_batches) +
            " micro-batches");
}

std::vector<PipeOp> stage_schedule(PipelineSchedule schedule, int stage, int stages, int micro_batches) {
    check_stage(stage, stages, micro_batches);
    const int m = micro_batches;
    std::vector<PipeOp> ops;
    ops.reserve(2 * static_cast<size_t>(m));
    if (schedule == PipelineSchedule::gpipe) {
        for (int i = 0; i < m; ++i) ops.push_back({PipeOp::forward, i});
        for (int i = 0; i < m; ++i) ops.push_back({PipeOp::backward, i});
        return ops;
    }
    const int warmup = std::min(stages - stage - 1, m);
    for (int i = 0; i < warmup; ++i) ops.push_back({PipeOp::forward, i});
    for (int i = 0; i < m - warmup; ++i) {  // steady state: F(warmup + i), then B(i)
        ops.push_back({PipeOp::forward, warmup + i});
        ops.push_back({PipeOp::backward, i});
    }
    for (int i = m - warmup; i < m; ++i) ops.push_back({PipeOp::backward, i});  // cool-down
    return ops;
}

int max_in_flight(PipelineSchedule schedule, int stage, int stages, int micro_batches) {
    check_stage(stage, stages, micro_batches);
    return schedule == PipelineSchedule::gpipe ? micro_batches : std::min(stages - stage, micro_batches);
}

static std::string op_name(int stage, const PipeOp& op) {
    std::string s = op.kind == PipeOp::forward ? "F" : "B";
    s += "(stage " + std::to_string(stage) + ", micro-batch " + std::to_string(op.micro_batch) + ")";
    return s;
}

// Throws unless every list holds F(i) and B(i) exactly once for each i in [0, m).
static int check_lists(const std::vector<std::vector<PipeOp>>& per_stage) {
    if (per_stage.empty()) throw std::invalid_argument("simulate: expected at least one stage, got none");
    const size_t n = per_stage[0].size();
    if (n == 0 || n % 2 != 0)
        throw std::invalid_argument("simulate: stage 0: expected 2m ops for m >= 1 micro-batches, got " +
                                    std::to_string(n));
    const int m = static_cast<int>(n / 2);
    for (size_t s = 0; s < per_stage.size(); ++s) {
        const auto& ops = per_stage[s];
        if (ops.size() != n)
            throw std::invalid_argument("simulate: stage " + std::to_string(s) + ": expected " + std::to_string(n) +
                                        " ops (as stage 0), got " + std::to_string(ops.size()));
        std::vector<char> seen(n, 0);  // [kind * m + micro_batch]
        for (size_t k = 0; k < n; ++k) {
            const PipeOp& op = ops[k];
            const bool kind_ok = op.kind == PipeOp::forward || op.kind == PipeOp::backward;
            if (!kind_ok || op.micro_batch < 0 || op.micro_batch >= m || seen[op.kind * m + op.micro_batch]++)
                throw std::invalid_argument("simulate: stage " + std::to_string(s) + ", position " + std::to_string(k) +
                                            ": expected each of F(0.." + std::to_string(m - 1) + ") and B(0.." +
                                            std::to_string(m - 1) + ") once, got " +
                                            (kind_ok ? op_name(static_cast<int>(s), op) : "an op of unknown kind"));
        }
    }
    return m;
}

Timeline simulate(const std::vector<std::vector<PipeOp>>& per_stage, const std::vector<double>& t_forward,
                  const std::vector<double>& t_backward) {
    const int m = check_lists(per_stage);
    const int P = static_cast<int>(per_stage.size());
    if (t_forward.size() != size_t(P) || t_backward.size() != size_t(P))
        throw std::invalid_argument("simulate: expected " + std::to_string(P) + " forward and backward times, got " +
                                    std::to_string(t_forward.size()) + " and " + std::to_string(t_backward.size()));
    for (int s = 0; s < P; ++s)
        if (!(t_forward[s] > 0) || !(t_backward[s] > 0))
            throw std::invalid_argument("simulate: stage " + std::to_string(s) +
                                        ": expected positive seconds per forward and backward, got " +
                                        std::to_string(t_forward[s]) + " and " + std::to_string(t_backward[s]));
    // end[s][kind * m + i]: when that op ended; negative until it has run.
    std::vector<std::vector<double>> end(P, std::vector<double>(2 * static_cast<size_t>(m), -1.0));
    Timeline tl;
    tl.stages.resize(P);
    std::vector<double> free_at(P, 0.0);  // when the stage's previous op ended
    int remaining = P * 2 * m;
    for (bool progress = true; progress && remaining > 0;) {
        progress = false;
        for (int s = 0; s < P; ++s) {
            auto& done = tl.stages[s];
            while (done.size() < per_stage[s].size()) {
                const PipeOp op = per_stage[s][done.size()];
                const int i = op.micro_batch;
                std::vector<double> inputs;
                if (op.kind == PipeOp::forward) {
                    if (s > 0) inputs.push_back(end[s - 1][i]);
                } else {
                    inputs.push_back(end[s][i]);
                    if (s < P - 1) inputs.push_back(end[s + 1][m + i]);
                }
                if (std::any_of(inputs.begin(), inputs.end(), [](double t) { return t < 0; })) break;
                double start = free_at[s];
                for (double t : inputs) start = std::max(start, t);
                const double stop = start + (op.kind == PipeOp::forward ? t_forward[s] : t_backward[s]);
                end[s][op.kind * m + i] = stop;
                free_at[s] = stop;
                done.push_back({op, start, stop});
                --remaining;
                progress = true;
            }
        }
    }
    if (remaining > 0) {
        std::string stuck;
        for (int s = 0; s < P; ++s)
            if (tl.stages[s].size() < per_stage[s].size())
                stuck.append(" ").append(op_name(s, per_stage[s][tl.stages[s].size()]));
        throw std::logic_error("simulate: deadlock, no stage can start its next op; waiting:" + stuck);
    }
    for (int s = 0; s < P; ++s) tl.makespan = std::max(tl.makespan, free_at[s]);
    for (int s = 0; s < P; ++s) tl.idle_fraction.push_back(1.0 - m * (t_forward[s] + t_backward[s]) / tl.makespan);
    return tl;
}

Timeline simulate(const std::vector<std::vector<PipeOp>>& per_stage, double t_forward, double t_backward) {
    return simulate(per_stage, std::vector<double>(per_stage.size(), t_forward),
                    std::vector<double>(per_stage.size(), t_backward));
}

Timeline simulate(PipelineSchedule schedule, int stages, int micro_batches, double t_forward, double t_backward) {
    check_stage(0, stages, micro_batches);
    std::vector<std::vector<PipeOp>> per_stage;
    for (int s = 0; s < stages; ++s) per_stage.push_back(stage_schedule(schedule, s, stages, micro_batches));
    return simulate(per_stage, t_forward, t_backward);
}

}  // namespace llmtrain
