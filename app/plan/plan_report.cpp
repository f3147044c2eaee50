// app/plan/plan_report.cpp — the planner's report: the candidates side by side, the best plan's
// per-stage table and TOML lines, and the baselines' comparison (see plan.hpp).
#include <algorithm>
#include <cstdio>

#include "app/plan/plan.hpp"
#include "app/plan/plan_util.hpp"

namespace llmtrain {

using namespace plan_util;

std::vector<std::string> plan_toml(const PlanCandidate& pc) {
    std::vector<std::string> out = {"[parallel]", "tp = " + std::to_string(pc.tp), "pp = " + std::to_string(pc.pp),
                                    "cp = " + std::to_string(pc.cp), "zero_stage = " + std::to_string(pc.zero_stage)};
    if (pc.offload) out.insert(out.end(), {"[optimizer]", "offload = \"cpu\"", "offload_fraction = 1.0"});
    out.insert(out.end(), {"[pipeline]", "layers_per_stage = " + toml_list(pc.choice.layers), "[activation_checkpoint]",
                           "layers_per_stage = " + toml_list(pc.choice.ckpt)});
    return out;
}

std::vector<std::string> plan_report(const Config& cfg, const PlanOptions& opt, const PlanResult& r) {
    std::vector<std::string> out;
    char buf[400];
    const GPTConfig g = gpt_config_of(cfg);
    const int64_t global = global_batch_of(cfg, opt.world);
    std::snprintf(buf, sizeof buf, "plan: %s %d layers x %d embd (%.4g parameters), world %d, global batch %lld x %d "
                  "tokens, micro_batch_size %d, %s; memory cap %s = %s x (1 - margin %.2f)",
                  g.arch == Arch::llama ? "Llama" : "GPT-2", g.n_layer, g.n_embd, double(ParamLayout(g).num_parameters()), opt.world, (long long)global,
                  cfg.model.seq_len, cfg.training.micro_batch_size, cfg.training.precision.c_str(),
                  size_text(cap_of(opt)).c_str(), size_text(opt.device_memory).c_str(), opt.margin);
    out.push_back(buf);
    const LayerTimes& t = opt.times;
    std::snprintf(buf, sizeof buf, "times %s: layer F %.3f ms, B %.3f ms, recompute %.3f ms; embedding F %.3f / B %.3f "
                  "ms; head F %.3f / B %.3f ms; AdamW %.3f ns/param; link %g GB/s", t.source.c_str(), 1e3 * t.layer_fwd,
                  1e3 * t.layer_bwd, 1e3 * t.layer_recompute, 1e3 * t.embed_fwd, 1e3 * t.embed_bwd, 1e3 * t.head_fwd,
                  1e3 * t.head_bwd, 1e9 * t.adam_per_param, opt.link_gbps);
    out.push_back(buf);
    if (opt.tp_link_gbps > 0) {
        std::snprintf(buf, sizeof buf, "; TP link %g GB/s", opt.tp_link_gbps);
        out.back() += buf;
    }
    if (opt.inter_node_gbps > 0 || opt.world > opt.gpus_per_node) {
        std::snprintf(buf, sizeof buf, "; between nodes of %d ranks %g GB/s%s", opt.gpus_per_node,
                      opt.inter_node_gbps > 0 ? opt.inter_node_gbps : opt.link_gbps,
                      opt.inter_node_gbps > 0 ? "" : " (--link-gbps)");
        out.back() += buf;
    }
    if (cfg.moe.n_experts > 0) {  // docs/parallelism.md "The planner with a mixture of experts"
        std::snprintf(buf, sizeof buf, "mixture of experts: %d experts, top %d, parallel.ep %d: tp and cp 1 only (what "
                      "it runs), layer times %s%s", cfg.moe.n_experts, cfg.moe.top_k, cfg.parallel.ep,
                      opt.times.source.rfind("measured", 0) == 0 ? "profiled at ep 1 (router and the top-k experts "
                      "each token runs)" : "from the active parameters", cfg.parallel.ep > 1 ? " plus 2 + 2 (+ 2 recomputed) all-to-alls per layer" : "");
        out.push_back(buf);
    }
    out.push_back("  tp   cp   pp   dp    m zero offload  fits      step s     tokens/s  cross MiB  layers per stage / recomputed");
    for (const PlanCandidate& c : r.candidates) {
        if (!c.skipped.empty()) {
            if (c.pp == 0) std::snprintf(buf, sizeof buf, "%4d    -    -    -    -    -       -  skip  (%s)", c.tp, c.skipped.c_str());
            else std::snprintf(buf, sizeof buf, "%4d %4d %4d %4d    -    -       -  skip  (%s)", c.tp, c.cp, c.pp, c.dp, c.skipped.c_str());
            out.push_back(buf);
            continue;
        }
        const std::string lists = c.choice.feasible ? toml_list(c.choice.layers) + " / " + toml_list(c.choice.ckpt) : "";
        char cross[32] = "-";
        if (c.choice.feasible) std::snprintf(cross, sizeof cross, "%.1f", c.crossing_bytes / 1048576.0);
        std::snprintf(buf, sizeof buf, "%4d %4d %4d %4d %4d %4d %7s %5s %11.4f %12.0f %10s  %s", c.tp, c.cp, c.pp, c.dp,
                      c.micro_batches, c.zero_stage, c.offload ? "cpu" : "none", c.choice.feasible ? "yes" : "no",
                      c.choice.feasible ? c.step_seconds : 0.0, c.choice.feasible ? c.tokens_per_second : 0.0, cross,
                      lists.c_str());
        out.push_back(buf);
    }
    const bool all_skipped = std::all_of(r.candidates.begin(), r.candidates.end(),
                                         [](const PlanCandidate& c) { return !c.skipped.empty(); });
    if (r.best < 0 && !r.candidates.empty() && all_skipped) {  // no candidate was sized: "fits" would mislead
        out.push_back("nothing planned: every candidate above was skipped, for the reason on its row.");
        return out;
    }
    if (r.best < 0) {
        out.push_back(opt.escalate ? "nothing fits: no tensor-parallel width, context-parallel size and pipeline depth keeps every rank "
                                     "under the cap, also at ZeRO-1, with the optimizer offloaded to the host, and (pp 1) at ZeRO-2, "
                                     "ZeRO-3 and ZeRO-3 offloaded."
                                   : "nothing fits: no tensor-parallel width, context-parallel size and pipeline depth keeps every rank "
                                     "under the cap at the config's ZeRO stage and optimizer offload.");
        if (r.alternatives.empty()) out.push_back("no single change tried (half micro-batch, 2x/4x ranks, 1.5x/2x memory) fits either.");
        for (const auto& a : r.alternatives) out.push_back("would fit: " + a);
        return out;
    }
    const PlanCandidate& b = r.candidates[size_t(r.best)];
    const std::string cp = b.cp > 1 ? " x cp " + std::to_string(b.cp) : std::string();
    std::snprintf(buf, sizeof buf, "best: pp %d x dp %d%s x tp %d, %d micro-batches per step, ZeRO-%d%s: predicted step "
                  "%.4f s (1F1B simulated; the MIP's optimum of the closed form %.4f s), %.0f tokens/s", b.pp, b.dp, cp.c_str(), b.tp,
                  b.micro_batches, b.zero_stage, b.offload ? ", optimizer offloaded" : "", b.step_seconds,
                  b.mip_objective, b.tokens_per_second);
    out.push_back(buf);
    out.push_back("stage layers ckpt in_flight" + memory_columns_head() +
                  " device MiB |   F ms   B ms  (recompute)  tail ms");
    for (size_t s = 0; s < b.stages.size(); ++s) {
        const StagePrediction& sp = b.stages[s];
        std::snprintf(buf, sizeof buf, "%5zu %6d %4d %9d", s, sp.layers, sp.ckpt, sp.in_flight);
        std::string row = buf;
        append_memory_columns(row, sp.memory);
        std::snprintf(buf, sizeof buf, " %10.1f | %6.2f %6.2f  (%7.2f)  %7.2f", double(sp.device_bytes) / 1048576.0,
                      1e3 * sp.fwd, 1e3 * sp.bwd, 1e3 * sp.recompute, 1e3 * sp.tail);
        out.push_back(row + buf);
    }
    out.push_back("TOML (paste into the config, or set pipeline.plan = \"auto\" to plan at start-up):");
    for (const auto& l : plan_toml(b)) out.push_back("  " + l);
    return out;
}

std::vector<std::string> compare_report(const std::vector<Baseline>& bs) {
    std::vector<std::string> out;
    char buf[400];
    out.push_back("compared at the plan's depth (memory counted, 1F1B step simulated):");
    out.push_back("  plan               fits  max stage MiB   step s   vs full recompute  layers / recomputed");
    const double ref = bs.front().plan.step_seconds;
    for (const Baseline& b : bs) {
        size_t peak = 0;
        for (const StagePrediction& sp : b.plan.stages) peak = std::max(peak, sp.device_bytes);
        std::snprintf(buf, sizeof buf, "  %-18s %4s %14.1f %8.4f %+17.1f%%  %s / %s", b.name.c_str(), b.fits ? "yes" : "no",
                      double(peak) / 1048576.0, b.plan.step_seconds, 100.0 * (b.plan.step_seconds / ref - 1.0),
                      toml_list(b.plan.choice.layers).c_str(), toml_list(b.plan.choice.ckpt).c_str());
        out.push_back(buf);
    }
    out.push_back("  device MiB per stage:");
    for (const Baseline& b : bs) {
        std::string row = "  " + b.name + ":";
        for (const StagePrediction& sp : b.plan.stages) {
            std::snprintf(buf, sizeof buf, " %.0f", double(sp.device_bytes) / 1048576.0);
            row += buf;
        }
        out.push_back(row);
    }
    return out;
}

}  // namespace llmtrain
