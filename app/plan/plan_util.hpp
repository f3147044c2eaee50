// app/plan/plan_util.hpp — small helpers the planner (app/plan/plan.cpp) and its report (app/plan/plan_report.cpp)
// share: the global batch kept across depths, the memory cap, and two text forms. Internal to app/.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "app/config/config.hpp"
#include "app/plan/plan.hpp"

namespace llmtrain::plan_util {

/// The global batch in sequences that cfg asks for on `world` ranks (kept across depths):
/// training.global_batch_size, else micro_batch_size x max(1, grad_accum_steps) x world / (pp x tp x cp).
inline int64_t global_batch_of(const Config& cfg, int world) {
    if (cfg.training.global_batch_size > 0) return cfg.training.global_batch_size;
    const int grid = cfg.parallel.pp * cfg.parallel.tp * cfg.parallel.cp;
    const int dp = world % grid == 0 ? world / grid : world;
    return int64_t(cfg.training.micro_batch_size) * std::max(1, cfg.training.grad_accum_steps) * dp;
}

/// The bytes a rank may use: device_memory x (1 - margin).
inline double cap_of(const PlanOptions& opt) { return opt.device_memory * (1.0 - opt.margin); }

/// [1, 2, 3] as TOML writes it.
inline std::string toml_list(const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

/// Bytes as "1.5 GiB" or "96 MiB".
inline std::string size_text(double bytes) {
    char buf[48];
    if (bytes >= 1073741824.0) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / 1073741824.0);
    else std::snprintf(buf, sizeof buf, "%.0f MiB", bytes / 1048576.0);
    return buf;
}

}  // namespace llmtrain::plan_util
