// app/plan/traffic.cpp — the bytes of one step per group kind and those crossing nodes (see traffic.hpp).
#include "app/plan/traffic.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <stdexcept>

#include "model/arch.hpp"
#include "parallel/ep_grads.hpp"
#include "parallel/topology.hpp"

namespace llmtrain {

const char* group_kind_name(GroupKind k) {
    switch (k) {
        case GroupKind::tp: return "tp";
        case GroupKind::dp: return "dp";
        case GroupKind::zero: return "zero";
        case GroupKind::replica: return "replica";
        case GroupKind::pipeline: return "pipeline";
        case GroupKind::embedding: return "embedding";
        case GroupKind::cp: return "cp";
        case GroupKind::ep: return "ep";
        case GroupKind::ep_dense: return "ep-dense";
        default: return "?";
    }
}

int nodes_spanned(const std::vector<int>& ranks, int ranks_per_node) {
    std::vector<int> nodes;
    for (int r : ranks) nodes.push_back(r / ranks_per_node);
    std::sort(nodes.begin(), nodes.end());
    return int(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
}

namespace {

void check_layout(int world, int ranks_per_node) {
    if (world < 1) throw std::invalid_argument("step traffic: expected a world size >= 1, got " + std::to_string(world));
    if (ranks_per_node < 1)
        throw std::invalid_argument("step traffic: expected ranks per node >= 1, got " + std::to_string(ranks_per_node));
}

/// Adds one group of kind g: its members each send v bytes per step over a ring in group order.
void add_ring(GroupTraffic& g, const std::vector<int>& ranks, double v, int ranks_per_node) {
    const int k = nodes_spanned(ranks, ranks_per_node);
    g.size = int(ranks.size());
    ++g.groups;
    g.max_nodes = std::max(g.max_nodes, k);
    g.per_rank = std::max(g.per_rank, v);
    g.total += double(ranks.size()) * v;
    if (k > 1) {
        if (g.spanning++ == 0) g.example = ranks;
        g.crossing += double(k) * v;
    }
}

/// Adds one all-to-all group of kind g: each member sends v bytes per step, evenly to its P−1 peers;
/// what goes to a peer on another node crosses.
void add_all_to_all(GroupTraffic& g, const std::vector<int>& ranks, double v, int ranks_per_node) {
    const int k = nodes_spanned(ranks, ranks_per_node), P = int(ranks.size());
    g.size = P;
    ++g.groups;
    g.max_nodes = std::max(g.max_nodes, k);
    g.per_rank = std::max(g.per_rank, v);
    g.total += double(P) * v;
    if (k > 1 && g.spanning++ == 0) g.example = ranks;
    for (int a : ranks) {
        int away = 0;
        for (int b : ranks) away += a / ranks_per_node != b / ranks_per_node;
        g.crossing += v * away / (P - 1);
    }
}

/// "0-7", "0,8", "0,2,4,...,14": ranks as runs of consecutive numbers, at most about 24 characters.
std::string rank_runs(const std::vector<int>& r) {
    std::string s;
    for (size_t i = 0; i < r.size();) {
        size_t j = i;
        while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
        const std::string part = j > i ? std::to_string(r[i]) + "-" + std::to_string(r[j]) : std::to_string(r[i]);
        if (!s.empty() && s.size() + part.size() > 20) return s + ",...," + std::to_string(r.back());
        s += (s.empty() ? "" : ",") + part;
        i = j + 1;
    }
    return s;
}

/// Elements of tensors that are not routed experts in chunk z of n of every unit of `lay` in
/// `units` (all when empty; a pipeline stage's, stage_units) (ParamLayout::shard): the dense part of
/// ZeRO index z's grad shard.
double dense_in_shard(const ParamLayout& lay, int z, int n, const std::vector<int>& units) {
    const std::vector<FlatRange> chunks = lay.shard(z, n);  // one per unit, in unit order
    std::vector<bool> in(chunks.size(), units.empty());
    for (int u : units) in[size_t(u)] = true;
    double d = 0;
    for (size_t u = 0; u < chunks.size(); ++u)
        for (const ParamTensor& t : lay.tensors())
            if (in[u] && !t.expert) {
                const FlatRange& r = chunks[u];
                const size_t a = std::max(r.offset, t.offset), b = std::min(r.offset + r.numel, t.offset + t.numel);
                if (b > a) d += double(b - a);
            }
    return d;
}

}  // namespace

GradGroups grad_groups(const RunShape& shape) {
    const Topology probe = shape.topology(0);
    GradGroups g;
    g.stage = shape.zero_stage;
    g.zero_size = probe.zero_group_size();
    g.reduce_ranks = probe.dp();
    if (shape.ep > 1) {
        g.zero_size = expert_dp_of(probe, shape.ep).zero_size;
        g.reduce_ranks = probe.dp() / shape.ep;
        if (g.zero_size == 1) g.stage = 0;  // model_state.cpp: a one-rank expert ZeRO group runs at stage 0
    }
    return g;
}

StepTraffic step_traffic(const RunShape& shape, int ranks_per_node) {
    const int world = shape.world;
    check_layout(world, ranks_per_node);
    const int pp = shape.pp, tp = shape.tp, ep = shape.ep;
    const Topology probe = shape.topology(0);
    // The engine's groups: the Topology's, or at ep > 1 the expert-dp groups (parallel/ep_grads.hpp).
    const GradGroups gg = grad_groups(shape);
    const int zs = gg.stage, N = gg.zero_size, R = gg.reduce_ranks / N;
    const double m = std::max(1, shape.accum);
    const double es = shape.precision == DType::bf16 ? 2 : 4;
    const double rb = shape.reduce_dtype == DType::bf16 ? 2 : 4;
    const GPTConfig& g = shape.model;
    const bool tied = ArchSpec(g).tied;  // an untied head: the last stage holds no token table
    const ParamLayout layout(g, zero_shard_multiple(N), tp, 0, ep, 0);  // every TP (EP) rank's units are as large
    const std::vector<StageLayers>& plan = shape.stages;
    const bool sp = tp > 1 && shape.sequence_parallel;
    const int cp = shape.cp;
    const double rows = double(shape.B) * shape.T / cp;  // B·T/cp, this rank's
    const double act = rows * g.n_embd * es;             // one (B·T, C) activation
    const double psi0 = double(layout.units()[0].numel);

    // Per pipeline stage s: the bytes one rank sends per step in each kind of group.
    const size_t stages = size_t(pp);
    std::vector<double> v_tp(stages), v_zero(stages), v_rep(stages), v_pipe(stages), v_cp(stages), v_ep(stages);
    // ep > 1: the dense part's all-reduce over the EP group, per stage s and engine ZeRO index z
    // (v_epd[s * N + z]; a stage's own units).
    std::vector<double> v_epd(size_t(ep > 1 ? pp * N : 0));
    for (int s = 0; s < pp && ep > 1; ++s) {
        const StageLayers& st = plan[size_t(s)];
        const std::vector<int> units = stage_units(g, s, pp, st.l0, st.l1);
        for (int z = 0; z < N; ++z)
            v_epd[size_t(s * N + z)] = 2.0 * (ep - 1) / ep * dense_in_shard(layout, z, N, units) * es;
    }
    for (int s = 0; s < pp; ++s) {
        const StageLayers& st = plan[size_t(s)];
        const bool first = s == 0, last = s == pp - 1;
        double psi = 0, held0 = 0;  // the stage's padded parameters; its embedding unit's
        if (pp == 1) {
            psi = double(layout.total_numel());
            held0 = psi0;
        } else {
            for (int u : stage_units(g, s, pp, st.l0, st.l1)) psi += double(layout.units()[size_t(u)].numel);
            held0 = first || (last && tied) ? psi0 : 0;
        }
        if (tp > 1) {
            const double layers = st.l1 - st.l0, ck = st.checkpointed;
            const double n_ar = sp ? 2 * layers + 3 * layers + 1.5 * ck : 4 * layers + ck;
            const double ends = (first ? 1 : 0) + (last ? 1 : 0);  // embedding's and head's (SP: 0.5 + 0.5 each)
            v_tp[size_t(s)] = m * ((n_ar + ends) * 2.0 * (tp - 1) / tp * act + (last ? (tp - 1) * rows * 12 : 0));
        }
        if (cp > 1) {  // the window's q|k|v collectives: per layer forward + backward, per recomputed layer more
            const int layers = st.l1 - st.l0;
            const double kept = pp == 1 && st.checkpointed < layers ? kCpCollectives.top_kept : 0;
            v_cp[size_t(s)] = m *
                              ((kCpCollectives.forward + kCpCollectives.backward) * layers +
                               kCpCollectives.recompute * st.checkpointed - kept) *
                              cp_collective_bytes(shape);
        }
        if (ep > 1)  // MoE's row exchanges (all layers are MoE layers; balanced routing)
            v_ep[size_t(s)] = m *
                              ((kEpAllToAlls.forward + kEpAllToAlls.backward) * (st.l1 - st.l0) +
                               kEpAllToAlls.recompute * st.checkpointed) *
                              ep_all_to_all_bytes(shape);
        if (zs >= 1 && N > 1) {
            const double rs = (zs >= 2 ? m : 1) * psi * rb;
            const double ag = (zs == 3 ? 2 * m * (psi - held0) + held0 : psi) * es;
            v_zero[size_t(s)] = double(N - 1) / N * (rs + ag);
        }
        if (R > 1) v_rep[size_t(s)] = 2.0 * (R - 1) / R * psi / N * rb;
        v_pipe[size_t(s)] = m * act / (sp ? tp : 1) * ((last ? 0 : 1) + (first ? 0 : 1));
    }

    std::array<GroupTraffic, size_t(GroupKind::count)> by;
    for (int k = 0; k < int(GroupKind::count); ++k) by[size_t(k)].kind = GroupKind(k);
    GroupTraffic& gt = by[size_t(GroupKind::tp)];
    GroupTraffic& gr = by[size_t(zs == 0 ? GroupKind::dp : GroupKind::replica)];
    GroupTraffic& gz = by[size_t(GroupKind::zero)];
    GroupTraffic& gp = by[size_t(GroupKind::pipeline)];
    GroupTraffic& ge = by[size_t(GroupKind::embedding)];
    GroupTraffic& gc = by[size_t(GroupKind::cp)];
    for (int r = 0; r < world; ++r) {  // each group once, at its first member
        const Topology t = shape.topology(r);
        const size_t s = size_t(t.stage());
        if (tp > 1 && t.tp_index() == 0) add_ring(gt, t.tp_group(), v_tp[s], ranks_per_node);
        if (cp > 1 && t.cp_index() == 0) add_ring(gc, t.cp_group(), v_cp[s], ranks_per_node);
        if (ep > 1) {  // the expert-dp groups (ExpertDp) instead of the Topology's ZeRO and replica groups
            const ExpertDp x = expert_dp_of(t, ep);
            if (t.dp_index() % ep == 0) {
                add_all_to_all(by[size_t(GroupKind::ep)], t.ep_group(ep), v_ep[s], ranks_per_node);
                add_ring(by[size_t(GroupKind::ep_dense)], t.ep_group(ep),
                         v_epd[s * size_t(N) + size_t(t.dp_index() / ep % N)], ranks_per_node);
            }
            if (zs >= 1 && N > 1 && x.zero_group.front() == r) add_ring(gz, x.zero_group, v_zero[s], ranks_per_node);
            if (R > 1 && x.replica_group.front() == r) add_ring(gr, x.replica_group, v_rep[s], ranks_per_node);
        } else {
            if (zs >= 1 && N > 1 && t.zero_index() == 0) add_ring(gz, t.zero_group(), v_zero[s], ranks_per_node);
            if (R > 1 && t.replica() == 0) add_ring(gr, t.replica_group(), v_rep[s], ranks_per_node);
        }
        if (pp > 1 && s == 0) {
            const std::vector<int> pipe = t.stage_group();
            const int k = nodes_spanned(pipe, ranks_per_node);
            gp.size = pp;
            ++gp.groups;
            gp.max_nodes = std::max(gp.max_nodes, k);
            if (k > 1 && gp.spanning++ == 0) gp.example = pipe;
            for (int b = 0; b + 1 < pp; ++b) {  // boundary b: stage b's activation out, stage b + 1's gradient back
                gp.total += 2 * m * act / (sp ? tp : 1);
                if (pipe[size_t(b)] / ranks_per_node != pipe[size_t(b) + 1] / ranks_per_node)
                    gp.crossing += 2 * m * act / (sp ? tp : 1);
            }
            for (int q = 0; q < pp; ++q) gp.per_rank = std::max(gp.per_rank, v_pipe[size_t(q)]);
            if (tied) add_ring(ge, {pipe.front(), pipe.back()}, psi0 * es, ranks_per_node);
        }
    }
    gt.ops = sp ? "sequence parallel: all-gathers and reduce-scatters of (B*T, C) per layer, loss all-gather"
                : "all-reduces of (B*T, C): 2 per layer forward, 2 backward, 1 recompute; ends; loss all-gather";
    by[size_t(GroupKind::dp)].ops = ep > 1 ? "all-reduce of the gradients over the dp / ep ranks with the same experts"
                                           : "all-reduce of the gradients";
    gz.ops = zs == 1   ? "reduce-scatter of the gradients + all-gather of the parameters"
             : zs == 2 ? "reduce-scatter per micro-batch + all-gather of the parameters"
                       : "reduce-scatter per micro-batch + all-gathers forward and backward per micro-batch";
    by[size_t(GroupKind::replica)].ops = "all-reduce of the gradient shard";
    gp.ops = "activations forward, their gradients back, per micro-batch";
    ge.ops = "all-reduce of the tied wte's gradient (first and last stage)";
    by[size_t(GroupKind::ep)].ops = "all-to-alls of the MoE rows (B*T*top_k, C): 2 per layer forward, 2 backward, 2 recompute";
    by[size_t(GroupKind::ep_dense)].ops = "all-reduce of the dense part of the gradient shard (the experts' sum is the "
                                          "zero/replica rows', over the ranks with the same experts)";
    gc.ops = "all-gathers of the window's q|k|v per layer: forward, backward (or recompute); reduce-scatter of its gradient";

    StepTraffic out;
    out.world = world;
    out.ranks_per_node = ranks_per_node;
    out.nodes = (world + ranks_per_node - 1) / ranks_per_node;
    out.tp = tp;
    out.pp = pp;
    out.dp = probe.data_parallel();
    out.cp = cp;
    out.zero_stage = shape.zero_stage;  // the config's (zs: the stage the engine runs)
    out.micro_batches = int(m);
    for (const GroupTraffic& k : by)
        if (k.groups > 0 && k.size > 1) {
            out.groups.push_back(k);
            out.total += k.total;
            out.crossing += k.crossing;
        }
    return out;
}

std::vector<std::string> traffic_report(const StepTraffic& t) {
    std::vector<std::string> out;
    char buf[400];
    const std::string cp = t.cp > 1 ? " x cp " + std::to_string(t.cp) : std::string();
    std::snprintf(buf, sizeof buf, "traffic per step at zero_stage %d, pp %d x dp %d%s x tp %d, %d micro-batch%s: world %d "
                  "on %d node%s of %d ranks (node n: ranks [%d n, %d n + %d)); MiB each rank sends (ring collectives: "
                  "a group on k > 1 nodes has k of its P hops crossing):", t.zero_stage, t.pp, t.dp, cp.c_str(), t.tp,
                  t.micro_batches, t.micro_batches == 1 ? "" : "es", t.world, t.nodes, t.nodes == 1 ? "" : "s",
                  t.ranks_per_node, t.ranks_per_node, t.ranks_per_node, t.ranks_per_node);
    out.push_back(buf);
    out.push_back("group      size groups spanning nodes   per rank    job total     crossing  share  spanning group e.g.");
    for (const GroupTraffic& g : t.groups) {
        std::snprintf(buf, sizeof buf, "%-9s %5d %6d %8d %5d %10.1f %12.1f %12.1f %5.1f%%  %s", group_kind_name(g.kind),
                      g.size, g.groups, g.spanning, g.max_nodes, g.per_rank / 1048576.0, g.total / 1048576.0,
                      g.crossing / 1048576.0, g.total > 0 ? 100.0 * g.crossing / g.total : 0.0,
                      g.example.empty() ? "-" : ("ranks " + rank_runs(g.example)).c_str());
        out.push_back(buf);
    }
    if (t.groups.empty()) out.push_back("(no group of more than one rank: nothing moves)");
    std::snprintf(buf, sizeof buf, "job: %.1f MiB per step, %.1f MiB of it across nodes (%.1f MiB out of each node on "
                  "average)", t.total / 1048576.0, t.crossing / 1048576.0, t.crossing / t.nodes / 1048576.0);
    out.push_back(buf);
    std::string spans;
    for (const GroupTraffic& g : t.groups)
        if (g.spanning > 0) spans += std::string(spans.empty() ? "" : ", ") + group_kind_name(g.kind);
    out.push_back(spans.empty() ? "no group spans nodes" : "groups spanning nodes: " + spans);
    for (const GroupTraffic& g : t.groups) out.push_back("  " + std::string(group_kind_name(g.kind)) + ": " + g.ops);
    return out;
}

double ep_all_to_all_bytes(const RunShape& shape) {
    const int ep = shape.ep;
    if (ep <= 1) return 0;
    const double es = shape.precision == DType::bf16 ? 2 : 4;
    const double rows_k = double(shape.B) * shape.T / shape.cp *
                          std::max(1, shape.model.moe_top_k);  // the rank's N·k grouped rows
    return double(ep - 1) / ep * rows_k * shape.model.n_embd * es;
}

double cp_collective_bytes(const RunShape& shape) {
    const int cp = shape.cp;
    if (cp <= 1) return 0;
    const double es = shape.precision == DType::bf16 ? 2 : 4;
    const double window_qkv = double(shape.B) * shape.T *
                              ArchSpec(shape.model).qkv_width(shape.tp) * es;  // the whole window's (B·T, Qt)
    return double(cp - 1) / cp * window_qkv;
}

CrossingShares crossing_shares(int world, int pp, int zero_group_size, int tp, int ranks_per_node, int cp) {
    check_layout(world, ranks_per_node);
    CrossingShares c;
    c.pipeline.assign(size_t(std::max(0, pp - 1)), 0.0);
    auto share = [&](const std::vector<int>& g) {
        const int k = nodes_spanned(g, ranks_per_node);
        return k > 1 ? double(k) / double(g.size()) : 0.0;
    };
    for (int r = 0; r < world; ++r) {
        const Topology t(world, r, pp, zero_group_size, tp, cp);
        if (t.tp_index() == 0) c.tp = std::max(c.tp, share(t.tp_group()));
        if (cp > 1 && t.cp_index() == 0) c.cp = std::max(c.cp, share(t.cp_group()));
        if (t.zero_index() == 0) c.zero = std::max(c.zero, share(t.zero_group()));
        if (t.replica() == 0) c.replica = std::max(c.replica, share(t.replica_group()));
        if (t.stage() == 0 && pp > 1) {
            const std::vector<int> pipe = t.stage_group();
            c.embedding = std::max(c.embedding, share({pipe.front(), pipe.back()}));
            for (int b = 0; b + 1 < pp; ++b)
                if (pipe[size_t(b)] / ranks_per_node != pipe[size_t(b) + 1] / ranks_per_node) c.pipeline[size_t(b)] = 1;
        }
    }
    return c;
}

}  // namespace llmtrain
