// model/trace.hpp — Chrome trace-event JSON (the format chrome://tracing and Perfetto open): spans on
// named tracks, so a user can see what ran when — the offloaded optimizer's copies against its host
// step, and a pipeline's schedule and bubble (docs/distributed.md "Optimizer offload").
//
// Format: {"traceEvents": [...]} with one complete event ("ph": "X", microseconds) per span and a
// metadata event naming each track (a "thread" of one "process" per rank).
#pragma once
#include <string>
#include <vector>

namespace llmtrain {

/// One span: `name` on track `track`, from `start` for `duration` seconds; `args` is a JSON object's
/// body ("\"chunk\": 3") or empty.
struct TraceSpan {
    std::string name, track;
    double start, duration;
    std::string args;
};

/// Writes `spans` to `path` as a trace of one process `process` (pid `pid`), one track per distinct
/// track name in order of first appearance. Errors: std::runtime_error naming the path when it
/// cannot be written.
void write_chrome_trace(const std::string& path, const std::string& process, int pid,
                        const std::vector<TraceSpan>& spans);

}  // namespace llmtrain
