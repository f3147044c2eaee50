// app/plan/plan_main.cpp — llmtrain-plan: the pipeline planner on the command line (docs/parallelism.md
// "Planning a pipeline"). For a config, a world size and a device memory it prints, per
// tensor-parallel width, context-parallel size and pipeline depth, whether the model fits and the
// predicted step, then the best plan's per-stage table and the TOML lines that select it. Layer times are measured on the config's backend (--profile) or derived
// from FLOPs at a stated throughput (--device-tflops, for a device this machine does not have).
//
// Exit codes as llmtrain's (app/config/cli.hpp): 0 a plan was printed, 1 nothing fits (the report says what
// would) or a runtime failure, 2 bad flags or config.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <regex>

#include "app/config/cli.hpp"
#include "app/config/cli_positive.hpp"
#include "app/config/config.hpp"
#include "app/state/model_state.hpp"
#include "app/plan/plan.hpp"
#include "model/backend.hpp"

using namespace llmtrain;

namespace {

/// "80GiB", "80 GB", "512MiB", "1.5TiB", or a plain number of bytes -> bytes. Errors: ConfigError.
double parse_bytes(const std::string& s) {
    static const std::regex re(R"(\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B|B)?\s*)", std::regex::icase);
    std::smatch m;
    if (!std::regex_match(s, m, re))
        throw ConfigError("--device-memory: expected a size such as 80GiB, 80GB or 512MiB, got \"" + s + "\"");
    double v = std::stod(m[1].str());
    std::string unit = m[2].str();
    for (auto& ch : unit) ch = char(std::toupper(ch));
    const bool binary = unit.size() == 3;
    const double k = binary ? 1024.0 : 1000.0;
    const char p = unit.empty() ? 'B' : unit[0];
    const int e = p == 'K' ? 1 : p == 'M' ? 2 : p == 'G' ? 3 : p == 'T' ? 4 : 0;
    for (int i = 0; i < e; ++i) v *= k;
    if (!(v > 0)) throw ConfigError("--device-memory: expected a positive size, got \"" + s + "\"");
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    std::string config_path, memory;
    std::vector<std::string> overrides;
    PlanOptions opt;
    bool profile = false;
    double tflops = 0, gbps = 3350, link = 0;
    int reps = 5;
    bool compare = false;
    CLI::App app{"llmtrain-plan: layers and recomputed layers per pipeline stage under a memory cap, chosen by a "
                 "MIP (docs/parallelism.md \"Planning a pipeline\")", "llmtrain-plan"};
    app.add_option("--config", config_path, "TOML config file (built-in defaults when omitted)")->option_text("PATH");
    app.add_option("--set", overrides, "override one key, as llmtrain's --set")
        ->option_text("SECTION.KEY=VALUE")
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    app.add_option("--world-size", opt.world, "ranks of the run (tp x pp x dp x cp)")->required()->check(kPositive);
    app.add_option("--device-memory", memory, "memory per device, e.g. 80GiB")->required();
    app.add_option("--memory-margin", opt.margin, "share of the device memory left free (default 0.10)")
        ->check(CLI::Range(0.0, 0.9));
    app.add_option("--pp", opt.pp, "plan this pipeline depth only (default: every divisor of world size / tp)")
        ->check(kPositive);
    app.add_option("--tp", opt.tp, "plan this tensor-parallel width only (default: every divisor of the world size "
                   "that divides --gpus-per-node)")->check(kPositive);
    app.add_option("--cp", opt.cp, "plan this context-parallel size only (default: every divisor of world size / tp "
                   "with model.seq_len a multiple of 2 x cp)")->check(kPositive);
    app.add_option("--tp-link-gbps", opt.tp_link_gbps, "GB/s per rank inside a node for the TP all-reduces "
                   "(default: --link-gbps)")->check(kPositive);
    app.add_option("--gpus-per-node", opt.gpus_per_node, "devices (ranks) per node; a TP group stays inside one, "
                   "and bytes between nodes go at --inter-node-gbps (default 8)")
        ->check(kPositive);
    app.add_option("--inter-node-gbps", opt.inter_node_gbps,
                   "GB/s per rank between nodes: the bytes that cross a node boundary (ring model, "
                   "docs/distributed.md \"Traffic across nodes\") go at this rate, the rest at --link-gbps "
                   "(default: --link-gbps)")->check(kPositive);
    auto* prof = app.add_flag("--profile", profile, "measure layer times on the config's backend (run.backend)");
    auto* tf = app.add_option("--device-tflops", tflops, "derive layer times from FLOPs at this sustained TFLOP/s")
                   ->check(kPositive);
    app.add_option("--device-gbps", gbps, "with --device-tflops: device memory bandwidth for AdamW, GB/s (3350)")
        ->check(kPositive)
        ->needs(tf);
    app.add_option("--link-gbps", link, "GB/s per rank for pipeline sends, gradient and TP collectives "
                   "(default 50 with --device-tflops, 10 with --profile)")->check(kPositive);
    app.add_option("--reps", reps, "with --profile: timed passes per measurement, the median is used (5)")
        ->check(kPositive)
        ->needs(prof);
    app.add_flag("--compare", compare, "also evaluate full recompute, the best single ratio and an even split at "
                 "the plan's depth (tools/bench/plan_compare.py)");
    prof->excludes(tf);
    app.set_version_flag("--version", std::string("llmtrain-plan ") + kVersion);
    try {
        app.parse(argc, argv);
        if (!profile && tflops == 0) throw CLI::ValidationError("--profile or --device-tflops", "one is required");
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? kExitOk : kExitUsage;
    }
    try {
        const Config cfg = load_config(config_path, overrides);
        opt.device_memory = parse_bytes(memory);
        if (cfg.moe.n_experts > 0) {  // docs/parallelism.md "The planner with a mixture of experts"
            const std::pair<const char*, int> forced[] = {{"--tp", opt.tp}, {"--cp", opt.cp}};  // any --pp
            for (const auto& [flag, v] : forced)
                if (v > 1)
                    throw ConfigError(std::string(flag) + ": a mixture of experts (model.moe) runs at tp = cp = 1 "
                                      "only yet, got " + flag + " " + std::to_string(v));
        }
        if (opt.tp > 0 && opt.world % opt.tp != 0)
            throw ConfigError("--tp: expected a divisor of --world-size " + std::to_string(opt.world) + ", got " +
                              std::to_string(opt.tp));
        if (opt.tp > 0 && !tp_split_problem(cfg, opt.tp).empty())
            throw ConfigError("--tp: the model does not split over " + std::to_string(opt.tp) + " ranks: " +
                              tp_split_problem(cfg, opt.tp));
        if (opt.pp > 0 && opt.world % opt.pp != 0)
            throw ConfigError("--pp: expected a divisor of --world-size " + std::to_string(opt.world) + ", got " +
                              std::to_string(opt.pp));
        if (opt.pp > 0 && opt.tp > 0 && opt.world % (opt.pp * opt.tp) != 0)
            throw ConfigError("--pp x --tp: expected a divisor of --world-size " + std::to_string(opt.world) +
                              ", got " + std::to_string(opt.pp * opt.tp));
        if (opt.cp > 0) {  // docs/parallelism.md "Context parallelism": the checks parallel.cp gets
            const std::string cp = std::to_string(opt.cp);
            if (opt.world % opt.cp != 0)
                throw ConfigError("--cp: expected a divisor of --world-size " + std::to_string(opt.world) + ", got " + cp);
            if (opt.cp > 1 && cfg.model.seq_len % (2 * opt.cp) != 0)
                throw ConfigError("--cp: expected model.seq_len = " + std::to_string(cfg.model.seq_len) +
                                  " to be a multiple of 2 x cp = " + std::to_string(2 * opt.cp) +
                                  " (each rank holds two of the 2 x cp chunks of a window), got " + cp);
            const int grid = opt.cp * std::max(1, opt.tp) * std::max(1, opt.pp);
            if (opt.world % grid != 0)
                throw ConfigError(std::string("--cp") + (opt.tp > 0 ? " x --tp" : "") + (opt.pp > 0 ? " x --pp" : "") +
                                  ": expected a divisor of --world-size " + std::to_string(opt.world) + ", got " +
                                  std::to_string(grid));
        }
        if (opt.pp > cfg.model.n_layer)
            throw ConfigError("--pp: expected at most model.n_layer = " + std::to_string(cfg.model.n_layer) +
                              ", got " + std::to_string(opt.pp));
        opt.link_gbps = link > 0 ? link : profile ? 10 : 50;
        if (profile) {
            auto ops = make_backend(cfg.run.backend, cfg.training.precision, cuda_options_of(cfg));
            opt.times = measure_layer_times(cfg, *ops, reps);
        } else {
            opt.times = flops_layer_times(cfg, tflops, gbps);
        }
        const PlanResult r = make_plan(cfg, opt);
        for (const auto& l : plan_report(cfg, opt, r)) std::printf("%s\n", l.c_str());
        if (compare && r.best >= 0)
            for (const auto& l : compare_report(baselines(cfg, opt, r.candidates[size_t(r.best)])))
                std::printf("%s\n", l.c_str());
        return r.best >= 0 ? kExitOk : kExitFailure;
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "llmtrain-plan: %s\n", e.what());
        return kExitUsage;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llmtrain-plan: %s\n", e.what());
        return kExitFailure;
    }
}
