// app/plan/plan.cpp — the planner's problem from the config, its search over tensor-parallel widths,
// context-parallel sizes and pipeline depths (see plan.hpp); the report is app/plan/plan_report.cpp.
#include "app/plan/plan.hpp"
#include "model/arch.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "app/state/model_state.hpp"
#include "app/plan/plan_util.hpp"
#include "app/plan/traffic.hpp"
#include "model/backend.hpp"
#include "parallel/partition.hpp"
#include "parallel/schedule.hpp"

namespace llmtrain {

using namespace plan_util;

namespace {

/// cfg at width tp, context-parallel size cp and depth pp over world ranks with the given ZeRO stage
/// and offload, its dp (data-parallel ranks: world / (pp tp cp)) and batch resolved; empty `why` on
/// success, else the reason the depth cannot run.
Config at_depth(const Config& cfg, int world, int tp, int cp, int pp, int zero, bool offload, int64_t global,
                std::string& why) {
    Config c = cfg;
    why.clear();
    c.parallel.tp = tp;
    if (tp == 1) c.parallel.sequence_parallel = false;  // it shards rows over a TP group: none at tp 1
    c.parallel.pp = pp;
    c.parallel.cp = cp;
    c.parallel.dp = world / (pp * tp * cp);
    c.parallel.zero_stage = zero;
    if (zero == 0) c.parallel.zero_group_size = 0;
    if (offload) {
        c.optimizer.offload = "cpu";
        c.optimizer.offload_fraction = 1.0f;
    }
    c.pipeline.layers_per_stage.clear();
    c.activation_checkpoint.ratio_per_stage.clear();
    c.activation_checkpoint.layers_per_stage.clear();
    const int dp = c.parallel.dp;
    if (c.moe.n_experts > 0 && dp % c.parallel.ep != 0) {  // an expert group is ep consecutive dp ranks
        why = "parallel.ep " + std::to_string(c.parallel.ep) + " does not divide dp " + std::to_string(dp);
        return c;
    }
    if (c.parallel.zero_group_size != 0 && dp * cp % c.parallel.zero_group_size != 0) {  // ZeRO shards over dp x cp
        why = "parallel.zero_group_size " + std::to_string(c.parallel.zero_group_size) + " does not divide " +
              (cp > 1 ? "dp x cp " + std::to_string(dp * cp) : "dp " + std::to_string(dp));
        return c;
    }
    const int64_t per_micro = int64_t(c.training.micro_batch_size) * dp;
    if (global % per_micro != 0) {
        why = "global batch " + std::to_string(global) + " is not a multiple of micro_batch_size x dp = " +
              std::to_string(per_micro);
        return c;
    }
    c.training.global_batch_size = int(global);
    c.training.grad_accum_steps = int(global / per_micro);
    return c;
}

/// Device bytes (host excluded) of stage s of `shape` run with c when it runs n layers with ck
/// recomputed; the other stages take the remaining layers (at least one each: their split does not
/// change stage s's memory).
double stage_bytes(const Config& c, RunShape shape, int s, int n, int ck) {
    const int P = shape.pp, L = shape.model.n_layer;
    std::vector<int> layers(size_t(P), 1), ckpt(size_t(P), 0);
    layers[size_t(s)] = n;
    if (P > 1) layers[size_t(s == 0 ? 1 : 0)] += L - n - (P - 1);
    ckpt[size_t(s)] = ck;
    shape.stages = stage_plan(shape.model, c.training.micro_batch_size, c.model.seq_len, P, layers, 0, {}, ckpt);
    return double(device_bytes(estimate_memory(c, shape, s)));
}

}  // namespace

std::vector<int> tp_widths(int world, int gpus_per_node, int opt_tp) {
    if (opt_tp > 0) return {opt_tp};
    std::vector<int> w;
    for (int tp = 1; tp <= std::min(world, gpus_per_node); ++tp)
        if (world % tp == 0 && gpus_per_node % tp == 0) w.push_back(tp);
    return w;
}

std::vector<int> cp_sizes(const Config& cfg, int world, int tp, int opt_cp) {
    std::vector<int> out;
    if (tp < 1 || world % tp != 0) return out;
    const int ranks = world / tp;
    const int64_t rows = int64_t(cfg.training.micro_batch_size) * cfg.model.seq_len;
    for (int cp = 1; cp <= ranks; ++cp) {
        if (ranks % cp != 0 || (opt_cp > 0 && cp != opt_cp)) continue;
        if (cp > 1 && cfg.model.seq_len % (2 * cp) != 0) continue;  // app/config/config_checks.cpp's parallel.cp check
        if (cp > 1 && tp > 1 && cfg.parallel.sequence_parallel && (rows / cp) % tp != 0) continue;
        out.push_back(cp);
    }
    return out;
}

std::string tp_split_problem(const Config& cfg, int tp) {
    // What the architecture splits over tp (model/arch.hpp): heads, key/value heads, the MLP width, the vocabulary.
    for (const auto& [what, n] : ArchSpec(gpt_config_of(cfg)).tp_divisors())
        if (n % tp != 0)
            return (what == "4 * n_embd" ? std::string("4 x n_embd") : what == "the padded vocabulary Vp" ? std::string("the padded vocabulary") : what) +
                   " " + std::to_string(n) + " is not a multiple of tp " + std::to_string(tp);
    const int64_t rows = int64_t(cfg.training.micro_batch_size) * cfg.model.seq_len;
    if (cfg.parallel.sequence_parallel && tp > 1 && rows % tp != 0)
        return "sequence parallelism: micro_batch_size x seq_len " + std::to_string(rows) + " is not a multiple of tp " +
               std::to_string(tp);
    return "";
}

PlanProblem plan_problem(const Config& c, const RunShape& shape, const PlanOptions& opt) {
    const Topology probe = shape.topology(0);
    const int P = shape.pp, L = shape.model.n_layer, tp = shape.tp;
    const int cp = shape.cp;
    const int nmax = L - P + 1;
    // TP rank 0's part (and EP rank 0's: the dense tensors and E/ep experts): what its gradients and AdamW cover.
    const ParamLayout layout(shape.model, 1, tp, 0, shape.ep, 0);
    const LayerTimes& t = opt.times;
    const double es = shape.precision == DType::bf16 ? 2 : 4;
    const double reduce_bytes = c.parallel.grad_reduce_dtype == "bf16" ? 2 : 4;
    const double link = opt.link_gbps * 1e9;  // bytes/s
    const double rows = double(c.training.micro_batch_size) * c.model.seq_len / cp;  // N = B·T/cp, this rank's
    const double act_bytes = rows * c.model.n_embd * es;                              // one (N, C) activation
    // Across nodes (app/plan/traffic.hpp): a term's seconds at one rate times f(share) = intra·seconds_per_byte
    // (share, intra, inter), share the part of its group's bytes that crosses nodes; exactly 1 when none does.
    const double inter_gbps = opt.inter_node_gbps > 0 ? opt.inter_node_gbps : opt.link_gbps;
    const int zg = probe.zero_group_size();  // 1 at ZeRO-0
    const CrossingShares cross = crossing_shares(shape.world, P, zg, tp, opt.gpus_per_node, cp);
    // The groups the engine reduces over (traffic.hpp grad_groups): the Topology's, or at ep > 1 the
    // ranks with the same experts — ZeRO group Ne = zero_group_size / ep, dp / ep ranks in all.
    const GradGroups gg = grad_groups(shape);
    auto factor = [&](double share, double intra_gbps) {
        return share == 0 || inter_gbps == intra_gbps ? 1.0 : intra_gbps * 1e9 * seconds_per_byte(share, intra_gbps, inter_gbps);
    };
    const double send = act_bytes / link;  // seconds of one send inside a node; boundary b's: times its factor
    // Tensor parallelism (docs/distributed.md "Tensor parallelism", model/gpt.cpp): one all-reduce of an
    // (N, C) activation over the TP group, and the loss's all-gather of (N, 3) fp32 per rank (a ring
    // all-gather moves (tp − 1)/tp of the gathered tp·N·3·4 bytes: half an all-reduce of that size).
    const double tp_link = opt.tp_link_gbps > 0 ? opt.tp_link_gbps : opt.link_gbps;  // inside a node
    const double f_tp = factor(cross.tp, tp_link);
    const double ar = tp > 1 ? ring_allreduce_seconds(act_bytes, tp, tp_link) * f_tp : 0;
    const double gather = tp > 1 ? 0.5 * ring_allreduce_seconds(rows * 3 * 4 * tp, tp, tp_link) * f_tp : 0;
    // Collectives per micro-batch in units of ar (model/gpt.cpp). Without sequence parallelism: a
    // layer 2 in forward, 2 in backward, 1 in recompute; the embedding 1 in forward, the head 1 in
    // backward. With it each all-reduce becomes a reduce-scatter or an all-gather of the same buffer
    // (half an all-reduce each): a layer's forward gathers ln1, ln2 and scatters two sums (2); its
    // backward gathers dres twice and ln1, ln2 again and scatters two input gradients (3); its
    // recompute gathers ln1, ln2 and scatters one sum (1.5); the embedding scatters (forward) and
    // gathers dres (backward), the head gathers ln_f (forward) and scatters its input gradient (backward).
    const bool sp = tp > 1 && c.parallel.sequence_parallel;
    const double n_fwd = 2, n_bwd = sp ? 3 : 2, n_rec = sp ? 1.5 : 1;
    const double emb_f = sp ? 0.5 : 1, emb_b = sp ? 0.5 : 0, head_f = sp ? 0.5 : 0, head_b = sp ? 0.5 : 1;
    // Context parallelism (model/gpt_cp.cpp): per layer the window's q|k|v all-gathered in forward,
    // again in backward with the reduce-scatter of its gradient, and again in a recomputed forward;
    // each a ring over the cp group (consecutive dp indices: inside a node unless tp x cp exceeds it).
    const double cpc = cp > 1 ? cp_collective_bytes(shape) / link * factor(cross.cp, opt.link_gbps) : 0;
    // Expert parallelism (model/gpt_moe_ep.cpp): per MoE layer kEpAllToAlls all-to-alls of
    // ep_all_to_all_bytes, the share of them crossing nodes the traffic table's (peers on other nodes).
    // Its gradients (parallel/ep_grads.hpp): the expert-dp groups' shares crossing nodes, and the dense
    // part's all-reduce over the EP group, each the traffic table's crossing / total of that kind.
    double a2a = 0, sh_zero = cross.zero, sh_rep = cross.replica, sh_dense = 0;
    if (shape.ep > 1)
        for (const GroupTraffic& g : step_traffic(shape, opt.gpus_per_node).groups) {
            const double sh = g.total > 0 ? g.crossing / g.total : 0;
            if (g.kind == GroupKind::ep) a2a = ep_all_to_all_bytes(shape) / link * factor(sh, opt.link_gbps);
            if (g.kind == GroupKind::zero) sh_zero = sh;
            if (g.kind == GroupKind::replica || g.kind == GroupKind::dp) sh_rep = sh;
            if (g.kind == GroupKind::ep_dense) sh_dense = sh;
        }
    const int split = tp * cp;  // a layer's and the head's work per rank: 1/tp of the columns, 1/cp of the tokens
    // Seconds per element of the gradient sync: a ring all-reduce over the D = gg.reduce_ranks ranks
    // (dp, or dp / ep), or when a group crosses nodes, the ZeRO group's share 2(Z − 1)/Z and the
    // replica group's 2(R − 1)/(R·Z) of it (the same sum) each at its group's rate (Z = gg.zero_size;
    // at ZeRO-0, Z = 1: the replica group is the reduce group).
    const int Z = gg.zero_size, D = gg.reduce_ranks, R = D / Z;
    const double f_zero = factor(sh_zero, opt.link_gbps), f_rep = factor(sh_rep, opt.link_gbps);
    const double allreduce = D <= 1 ? 0
                             : f_zero == 1 && f_rep == 1
                                 ? 2.0 * (D - 1) / D * reduce_bytes / link
                                 : (2.0 * (Z - 1) / Z * f_zero + 2.0 * (R - 1) / (double(R) * Z) * f_rep) * reduce_bytes / link;
    // ZeRO-2 reduce-scatters every micro-batch (m − 1 more than ZeRO-1's one), ZeRO-3 also all-gathers
    // the parameters in forward and in backward of every micro-batch (2m − 1 more; the embedding unit
    // once: traffic.hpp's zero row), each (Z − 1)/Z of the bytes over the ZeRO group, counted in full (the
    // engine's prefetch of the next unit, parallel/zero.hpp, is not credited: an upper bound).
    const double mb = std::max(1, shape.accum), zshare = Z > 1 ? double(Z - 1) / Z : 0;
    const double zero2 = gg.stage >= 2 ? (mb - 1) * zshare * reduce_bytes / link * f_zero : 0;
    const double zero3 = gg.stage == 3 ? (2 * mb - 1) * zshare * es / link * f_zero : 0;
    // ep > 1: the dense part of the Z-way grad shard all-reduced over the EP group, in es, once a step.
    const double dense_ar = shape.ep > 1 ? 2.0 * (shape.ep - 1) / shape.ep / Z * es / link * factor(sh_dense, opt.link_gbps) : 0;
    const double layer_numel = double(layout.units()[1].numel), wte_numel = double(layout.units()[0].numel);
    const double lnf_numel = double(layout.units()[size_t(L) + 1].numel);
    double layer_dense = 0;  // layer 0's tensors that are not routed experts (all of them without MoE)
    for (const ParamTensor& pt : layout.tensors())
        if (pt.unit == 1 && !pt.expert) layer_dense += double(pt.numel);
    // The tail of a stage of n layers: the sync of its gradients, AdamW over its shard; `gathered`:
    // ZeRO-3 all-gathers it per micro-batch; `dense`: of numel, the elements that are not experts.
    auto tail_per = [&](double numel, double dense, bool gathered) {
        return numel * (allreduce + t.adam_per_param / Z + zero2 + (gathered ? zero3 : 0)) + dense * dense_ar;
    };
    PlanProblem p;
    p.n_layer = L;
    p.micro_batches = std::max(1, c.training.grad_accum_steps);
    p.memory_cap = cap_of(opt);
    for (int s = 0; s < P; ++s) {
        const bool first = s == 0, last = s == P - 1;
        StageModel st;
        const int na = nmax, nb = nmax - 1;
        const double m0 = stage_bytes(c, shape, s, na, 0), m1 = stage_bytes(c, shape, s, na, 1);
        st.mem_layer = nb >= 1 && P > 1 ? m0 - stage_bytes(c, shape, s, nb, 0) : 0;  // one stage: n is n_layer
        st.mem_ckpt = na >= 2 ? stage_bytes(c, shape, s, na, 2) - m1 : m1 - m0;
        st.mem_recompute = na >= 2 ? m1 - m0 - st.mem_ckpt : 0;
        st.mem0 = m0 - st.mem_layer * na;
        // A layer's matmuls and attention split over tp (heads, columns, rows); its all-reduces: 2 in
        // forward, 2 in backward, 1 when recomputed (only the first is repeated). The embedding's
        // lookup writes the whole (N, C) on every TP rank (kept whole) and is all-reduced; the head's
        // matmul and softmax split by vocabulary, its input gradient all-reduced.
        st.fwd_layer = t.layer_fwd / split + n_fwd * ar + kCpCollectives.forward * cpc + kEpAllToAlls.forward * a2a;
        st.bwd_layer = t.layer_bwd / split + n_bwd * ar + kCpCollectives.backward * cpc + kEpAllToAlls.backward * a2a;
        st.recompute = t.layer_recompute / split + n_rec * ar + kCpCollectives.recompute * cpc +
                       kEpAllToAlls.recompute * a2a;
        st.fwd0 = (first ? t.embed_fwd / cp + emb_f * ar : 0) + (last ? t.head_fwd / split + head_f * ar + gather : 0) +
                  (last ? 0 : send * factor(cross.pipeline[size_t(s)], opt.link_gbps));
        st.bwd0 = (first ? t.embed_bwd / cp + emb_b * ar : 0) + (last ? t.head_bwd / split + head_b * ar : 0) +
                  (first ? 0 : send * factor(cross.pipeline[size_t(s) - 1], opt.link_gbps));
        double units0 = 0;  // parameters of the stage's non-layer units (model/param_layout.hpp)
        if (first) units0 += wte_numel;  // wte + wpe
        if (last && !first) units0 += wte_numel;
        if (last) units0 += lnf_numel;
        const double wte_sum = wte_numel * reduce_bytes / link * factor(cross.embedding, opt.link_gbps);
        const double gathered0 = last ? lnf_numel : 0;  // ZeRO-3 gathers ln_f per micro-batch, the embedding once
        st.tail0 = tail_per(units0 - gathered0, units0 - gathered0, false) + tail_per(gathered0, gathered0, true) +
                   (P > 1 && (first || last) ? wte_sum : 0);
        st.tail_layer = tail_per(layer_numel, layer_dense, true);
        p.stages.push_back(st);
    }
    return p;
}

namespace {

/// Every stage's op list for prob's micro-batches under `sched` (stage_schedule), for simulated_step.
std::vector<std::vector<PipeOp>> schedule_lists(const PlanProblem& prob, PipelineSchedule sched) {
    const int P = int(prob.stages.size());
    std::vector<std::vector<PipeOp>> lists;
    for (int s = 0; s < P; ++s) lists.push_back(stage_schedule(sched, s, P, prob.micro_batches));
    return lists;
}

/// The simulated step of `layers` / `ckpt` under prob's times: the makespan of `lists`
/// (schedule_lists) with the per-stage forward and backward seconds, plus the largest tail. Seconds.
double simulated_step(const PlanProblem& prob, const std::vector<std::vector<PipeOp>>& lists,
                      const std::vector<int>& layers, const std::vector<int>& ckpt) {
    std::vector<double> fwd, bwd;
    double tail = 0;
    for (size_t s = 0; s < prob.stages.size(); ++s) {
        const StageModel& st = prob.stages[s];
        fwd.push_back(st.forward(layers[s]));
        bwd.push_back(st.backward(layers[s], ckpt[s]));
        tail = std::max(tail, st.tail(layers[s]));
    }
    return simulate(lists, fwd, bwd).makespan + tail;
}

/// Local search from the MIP's optimum on the simulated step, which the closed form only
/// approximates for unequal stages: moves of one layer to a neighbouring stage and of one
/// recomputed layer more or fewer on a stage, the best improving move first, while each stage fits.
void refine_by_simulation(const PlanProblem& prob, PipelineSchedule sched, PlanChoice& c) {
    const int P = int(prob.stages.size());
    auto fits = [&](const std::vector<int>& n, const std::vector<int>& k) {
        for (int s = 0; s < P; ++s)
            if (n[size_t(s)] < 1 || k[size_t(s)] < 0 || k[size_t(s)] > n[size_t(s)] ||
                prob.stages[size_t(s)].memory(n[size_t(s)], k[size_t(s)]) > prob.memory_cap)
                return false;
        return true;
    };
    const auto lists = schedule_lists(prob, sched);
    double best = simulated_step(prob, lists, c.layers, c.ckpt);
    for (bool improved = true; improved;) {
        improved = false;
        std::vector<int> bn = c.layers, bk = c.ckpt;
        auto consider = [&](const std::vector<int>& n, const std::vector<int>& k) {
            if (!fits(n, k)) return;
            const double t = simulated_step(prob, lists, n, k);
            if (t < best * (1 - 1e-9)) best = t, bn = n, bk = k, improved = true;
        };
        for (int s = 0; s < P; ++s) {
            for (int d : {-1, 1}) {
                std::vector<int> k = c.ckpt;
                k[size_t(s)] += d;
                consider(c.layers, k);
            }
            if (s + 1 < P)
                for (int d : {-1, 1}) {  // one layer from stage s to s + 1 (d = 1) or back
                    std::vector<int> n = c.layers, k = c.ckpt;
                    n[size_t(s)] -= d;
                    n[size_t(s) + 1] += d;
                    for (int t : {s, s + 1}) k[size_t(t)] = std::min(k[size_t(t)], n[size_t(t)]);
                    consider(n, k);
                }
        }
        c.layers = bn;
        c.ckpt = bk;
    }
    c.objective = plan_objective(prob, c.layers, c.ckpt);
}

/// Fills pc.stages (memory counted by estimate_memory for exactly pc's lists, times from prob), the
/// simulated step and tokens/s for pc.choice's layers and recomputed layers.
void predict(const Config& cfg, const PlanOptions& opt, const PlanProblem& prob, PlanCandidate& pc) {
    const int pp = pc.pp;
    const Config planned = apply_plan(cfg, pc);
    const RunShape shape = run_shape(planned, opt.world);
    const PipelineSchedule sched = parse_pipeline_schedule(planned.pipeline.schedule);
    pc.stages.clear();
    for (int s = 0; s < pp; ++s) {
        const StageModel& st = prob.stages[size_t(s)];
        StagePrediction sp;
        sp.layers = pc.choice.layers[size_t(s)];
        sp.ckpt = pc.choice.ckpt[size_t(s)];
        sp.in_flight = pp > 1 ? max_in_flight(sched, s, pp, pc.micro_batches) : 1;
        sp.memory = estimate_memory(planned, shape, s);
        sp.device_bytes = device_bytes(sp.memory);
        sp.fwd = st.forward(sp.layers);
        sp.bwd = st.backward(sp.layers, sp.ckpt);
        sp.recompute = st.recompute * sp.ckpt;
        sp.tail = st.tail(sp.layers);
        pc.stages.push_back(sp);
    }
    pc.crossing_bytes = step_traffic(shape, opt.gpus_per_node).crossing;
    pc.step_seconds = simulated_step(prob, schedule_lists(prob, sched), pc.choice.layers, pc.choice.ckpt);
    pc.tokens_per_second = double(pc.micro_batches) * cfg.training.micro_batch_size * pc.dp * cfg.model.seq_len /
                           pc.step_seconds;
}

/// Plans cfg at width tp, context-parallel size cp and depth pp: the MIP, then the chosen plan's exact
/// memory and simulated step.
PlanCandidate plan_depth(const Config& cfg, const PlanOptions& opt, int tp, int cp, int pp, int64_t global) {
    PlanCandidate pc;
    pc.tp = tp;
    pc.cp = cp;
    pc.pp = pp;
    pc.dp = opt.world / (pp * tp * cp);
    const int shards = pc.dp * cp;  // the ranks ZeRO shards over
    // ZeRO-2/3 do not combine with a pipeline (docs/parallelism.md): a deeper plan uses ZeRO-1 at most.
    const int zero = pp > 1 ? std::min(cfg.parallel.zero_stage, 1) : cfg.parallel.zero_stage;
    const bool offload = cfg.optimizer.offload == "cpu";
    struct Try {
        int zero;
        bool offload;
    };
    // Escalation, first fit wins: ZeRO-1, the optimizer offloaded, then (pp 1 only) ZeRO-2 and ZeRO-3,
    // which shard the gradients and the parameters too at the cost of more collectives (plan_problem's
    // tail), and ZeRO-3 with offload.
    std::vector<Try> tries = {{zero, offload}};
    if (zero < 1 && shards > 1) tries.push_back({1, offload});
    if (!offload) tries.push_back({std::max(zero, shards > 1 ? 1 : 0), true});
    if (pp == 1 && shards > 1) {
        for (int z : {2, 3})
            if (z > zero) tries.push_back({z, offload});
        if (!offload) tries.push_back({3, true});
    }
    Config c;
    PlanProblem prob;
    for (const Try& tr : tries) {
        if (!opt.escalate && (tr.zero != zero || tr.offload != offload)) break;
        c = at_depth(cfg, opt.world, tp, cp, pp, tr.zero, tr.offload, global, pc.skipped);
        if (!pc.skipped.empty()) return pc;
        pc.zero_stage = tr.zero;
        pc.offload = tr.offload;
        pc.micro_batches = c.training.grad_accum_steps;
        prob = plan_problem(c, run_shape(c, opt.world), opt);
        pc.choice = solve_plan(prob);
        if (pc.choice.feasible) break;
    }
    if (!pc.choice.feasible) return pc;
    pc.mip_objective = pc.choice.objective;
    refine_by_simulation(prob, parse_pipeline_schedule(cfg.pipeline.schedule), pc.choice);
    predict(cfg, opt, prob, pc);
    return pc;
}

/// Depths to try at width tp and context-parallel size cp: opt.pp when it divides world / (tp cp), or
/// every divisor of world / (tp cp) up to n_layer.
std::vector<int> depths(const Config& cfg, const PlanOptions& opt, int tp, int cp) {
    const int ranks = opt.world / (tp * cp);
    if (opt.pp > 0) return ranks % opt.pp == 0 ? std::vector<int>{opt.pp} : std::vector<int>{};
    std::vector<int> d;
    for (int pp = 1; pp <= std::min(ranks, cfg.model.n_layer); ++pp)
        if (ranks % pp == 0) d.push_back(pp);
    return d;
}

/// Every width and depth planned, the fastest feasible marked (make_plan without the alternatives).
PlanResult plan_depths(const Config& cfg, const PlanOptions& opt) {
    PlanResult r;
    const int64_t global = global_batch_of(cfg, opt.world);
    const bool moe = cfg.moe.n_experts > 0;  // runs at tp = cp = 1 only (config_checks.cpp check_moe), any pp
    for (int tp : moe ? std::vector<int>{1} : tp_widths(opt.world, opt.gpus_per_node, opt.tp)) {
        if (opt.world % tp != 0) continue;
        const std::string why = tp_split_problem(cfg, tp);
        if (!why.empty()) {
            PlanCandidate pc;
            pc.tp = tp;
            pc.pp = 0;
            pc.dp = 0;
            pc.skipped = why;
            r.candidates.push_back(pc);
            continue;
        }
        for (int cp : moe ? std::vector<int>{1} : cp_sizes(cfg, opt.world, tp, opt.cp))
            for (int pp : depths(cfg, opt, tp, cp)) {
                r.candidates.push_back(plan_depth(cfg, opt, tp, cp, pp, global));
                const PlanCandidate& c = r.candidates.back();
                if (c.choice.feasible && (r.best < 0 || c.step_seconds < r.candidates[size_t(r.best)].step_seconds))
                    r.best = int(r.candidates.size()) - 1;
            }
    }
    return r;
}

/// How cfg fits under opt with ZeRO-1 and offload allowed ("pp 2, ZeRO-1"), or "" when it does not.
std::string fitting(const Config& cfg, PlanOptions opt) {
    opt.escalate = true;
    const PlanResult r = plan_depths(cfg, opt);
    if (r.best < 0) return "";
    const PlanCandidate& c = r.candidates[size_t(r.best)];
    return (c.tp > 1 ? "tp " + std::to_string(c.tp) + ", " : std::string()) +
           (c.cp > 1 ? "cp " + std::to_string(c.cp) + ", " : std::string()) + "pp " + std::to_string(c.pp) +
           ", ZeRO-" + std::to_string(c.zero_stage) +
           (c.offload ? ", optimizer offloaded" : "");
}

}  // namespace

PlanResult make_plan(const Config& cfg, const PlanOptions& opt) {
    if (opt.world < 1) throw std::invalid_argument("make_plan: expected a world size >= 1, got " + std::to_string(opt.world));
    if (!(opt.device_memory > 0))
        throw std::invalid_argument("make_plan: expected a positive device memory, got " + std::to_string(opt.device_memory));
    if (cfg.moe.n_experts > 0 && std::max(opt.tp, opt.cp) > 1)
        throw std::invalid_argument("make_plan: a mixture of experts (model.moe) runs at tp = cp = 1 only, got tp " +
                                    std::to_string(opt.tp) + ", cp " + std::to_string(opt.cp));
    PlanResult r = plan_depths(cfg, opt);
    if (r.best >= 0) return r;
    // Nothing fits: which single change would, each checked by planning it (with ZeRO-1 and offload
    // allowed, as they are not with opt.escalate = false).
    const int64_t global = global_batch_of(cfg, opt.world);
    if (!opt.escalate) {
        const std::string f = fitting(cfg, opt);
        if (!f.empty()) r.alternatives.push_back("parallel.zero_stage / optimizer.offload as in: " + f);
    }
    if (cfg.training.micro_batch_size > 1) {
        Config c = cfg;
        c.training.micro_batch_size = cfg.training.micro_batch_size / 2;
        c.training.global_batch_size = int(global);
        c.training.grad_accum_steps = 0;
        const std::string f = fitting(c, opt);
        if (!f.empty())
            r.alternatives.push_back("training.micro_batch_size = " + std::to_string(c.training.micro_batch_size) +
                                     " (the same global batch in more micro-batches): " + f);
    }
    for (int k : {2, 4}) {
        PlanOptions o = opt;
        o.world = opt.world * k;
        o.pp = 0;
        Config c = cfg;
        c.training.global_batch_size = int(global);
        c.training.grad_accum_steps = 0;
        const std::string f = fitting(c, o);
        if (!f.empty()) {
            r.alternatives.push_back(std::to_string(o.world) + " ranks (world x " + std::to_string(k) + "): " + f);
            break;
        }
    }
    for (double x : {1.5, 2.0}) {
        PlanOptions o = opt;
        o.device_memory = opt.device_memory * x;
        const std::string f = fitting(cfg, o);
        if (!f.empty()) {
            r.alternatives.push_back("a device with " + size_text(o.device_memory) + ": " + f);
            break;
        }
    }
    return r;
}

Config apply_plan(const Config& cfg, const PlanCandidate& pc) {
    if (!pc.choice.feasible)
        throw std::invalid_argument("apply_plan: the plan at pp " + std::to_string(pc.pp) + " does not fit");
    std::string why;
    const int world = pc.tp * pc.pp * pc.dp * pc.cp;
    Config c = at_depth(cfg, world, pc.tp, pc.cp, pc.pp, pc.zero_stage, pc.offload,
                        int64_t(pc.micro_batches) * cfg.training.micro_batch_size * pc.dp, why);
    c.pipeline.layers_per_stage = pc.choice.layers;
    c.activation_checkpoint.layers_per_stage = pc.choice.ckpt;
    return c;
}

std::vector<Baseline> baselines(const Config& cfg, const PlanOptions& opt, const PlanCandidate& best) {
    if (!best.choice.feasible) throw std::invalid_argument("baselines: the planner's candidate does not fit");
    const int P = best.pp, L = cfg.model.n_layer;
    std::string why;
    const Config c = at_depth(cfg, opt.world, best.tp, best.cp, P, best.zero_stage, best.offload,
                              int64_t(best.micro_batches) * cfg.training.micro_batch_size * best.dp, why);
    const RunShape shape = run_shape(c, opt.world);
    const PlanProblem prob = plan_problem(c, shape, opt);
    auto eval = [&](const std::string& name, const std::vector<int>& layers, const std::vector<int>& ckpt) {
        Baseline b;
        b.name = name;
        b.plan = best;
        b.plan.choice.layers = layers;
        b.plan.choice.ckpt = ckpt;
        b.plan.choice.objective = plan_objective(prob, layers, ckpt);
        predict(cfg, opt, prob, b.plan);
        b.fits = std::all_of(b.plan.stages.begin(), b.plan.stages.end(),
                             [&](const StagePrediction& sp) { return double(sp.device_bytes) <= cap_of(opt); });
        return b;
    };
    std::vector<Baseline> out;
    const std::vector<int> balanced = balanced_layers_per_stage(shape.model, c.training.micro_batch_size,
                                                                c.model.seq_len, P);
    out.push_back(eval("full recompute", balanced, balanced));
    // Every ratio that gives a distinct count on some stage: k / n for k <= n, n a stage's layers.
    std::vector<float> ratios;
    for (int n : balanced)
        for (int k = 0; k <= n; ++k) ratios.push_back(float(k) / float(n));
    std::sort(ratios.begin(), ratios.end());
    ratios.erase(std::unique(ratios.begin(), ratios.end()), ratios.end());
    Baseline best_ratio;
    for (float r : ratios) {
        std::vector<int> ckpt;
        for (const StageLayers& sl : stage_plan(shape.model, c.training.micro_batch_size, c.model.seq_len, P,
                                                balanced, r, {}, {}))
            ckpt.push_back(sl.checkpointed);
        // The memory model picks the candidates; eval() counts the winner exactly.
        bool ok = true;
        for (int s = 0; s < P; ++s) ok = ok && prob.stages[size_t(s)].memory(balanced[size_t(s)], ckpt[size_t(s)]) <= prob.memory_cap;
        if (!ok) continue;
        char name[48];
        std::snprintf(name, sizeof name, "best ratio %.3g", double(r));
        Baseline b = eval(name, balanced, ckpt);
        if (b.fits && (best_ratio.name.empty() || b.plan.step_seconds < best_ratio.plan.step_seconds)) best_ratio = b;
    }
    if (!best_ratio.name.empty()) out.push_back(best_ratio);
    std::vector<int> even(size_t(P), L / P), even_ckpt(size_t(P), 0);
    for (int s = P - L % P; s < P; ++s) ++even[size_t(s)];
    for (int s = 0; s < P; ++s) {
        const StageModel& st = prob.stages[size_t(s)];
        int& k = even_ckpt[size_t(s)];
        while (k < even[size_t(s)] && st.memory(even[size_t(s)], k) > prob.memory_cap) ++k;
    }
    out.push_back(eval("even split", even, even_ckpt));
    out.push_back(eval("planner", best.choice.layers, best.choice.ckpt));
    return out;
}

AutoPlan auto_plan(const Config& cfg, int world) {
    PlanOptions opt;
    opt.world = world;
    opt.pp = cfg.parallel.pp;
    opt.tp = cfg.parallel.tp;  // the run's groups and layout are built for it before the plan
    opt.cp = cfg.parallel.cp;  // so are its CP groups
    opt.escalate = false;
    {
        auto ops = make_backend(cfg.run.backend, cfg.training.precision, cuda_options_of(cfg));
        opt.times = measure_layer_times(cfg, *ops, 5);
        size_t free_bytes = 0, total = 0;
        ops->mem_info(&free_bytes, &total);
        opt.device_memory = cfg.pipeline.plan_memory_gib > 0 ? cfg.pipeline.plan_memory_gib * 1073741824.0 : double(total);
        opt.link_gbps = std::string(ops->name()) == "cuda" ? 50 : 10;
    }
    const PlanResult r = make_plan(cfg, opt);
    AutoPlan out;
    out.report = plan_report(cfg, opt, r);
    out.report.insert(out.report.begin(), "pipeline.plan = \"auto\" keeps the run's parallel.tp = " +
                                              std::to_string(cfg.parallel.tp) + " and parallel.pp = " +
                                              std::to_string(cfg.parallel.pp) +
                                              " (llmtrain-plan searches both) and plans layers and recomputation");
    if (r.best < 0) {
        std::string msg = "pipeline.plan: \"auto\" found no split of " + std::to_string(cfg.model.n_layer) +
                          " layers over parallel.pp = " + std::to_string(cfg.parallel.pp) + " stages that fits ";
        msg += size_text(opt.device_memory * (1 - opt.margin)) + " per device";
        for (const auto& a : r.alternatives) msg += "; would fit: " + a;
        throw ConfigError(msg);
    }
    out.layers = r.candidates[size_t(r.best)].choice.layers;
    out.ckpt = r.candidates[size_t(r.best)].choice.ckpt;
    return out;
}

}  // namespace llmtrain
