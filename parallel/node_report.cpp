// parallel/node_report.cpp — the start log's node lines and warnings (see node_report.hpp).
#include "parallel/node_report.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "parallel/comm.hpp"  // ranks_text

namespace llmtrain {

namespace {

std::string join(const std::vector<std::string>& parts) {
    std::string s;
    for (const auto& p : parts) s += (s.empty() ? "" : ", ") + p;
    return s;
}

}  // namespace

std::vector<CrossingGroups> crossing_groups(const Topology& layout, const NodeMap& nodes) {
    const int W = layout.world_size();
    if (int(nodes.node_of.size()) != W)
        throw std::invalid_argument("crossing_groups: the node map has " + std::to_string(nodes.node_of.size()) +
                                    " ranks, the layout " + std::to_string(W));
    using Pick = std::vector<int> (Topology::*)() const;
    const std::pair<const char*, Pick> kinds[] = {{"TP", &Topology::tp_group},
                                                  {"ZeRO", &Topology::zero_group},
                                                  {"replica", &Topology::replica_group},
                                                  {"data-parallel", &Topology::dp_group},
                                                  {"pipeline", &Topology::stage_group},
                                                  {"CP", &Topology::cp_group}};
    std::vector<CrossingGroups> out;
    for (const auto& [kind, pick] : kinds) {
        std::set<std::vector<int>> groups;
        for (int r = 0; r < W; ++r) {
            // The whole layout, cp included: the CP groups are cp consecutive dp indices.
            const Topology t(W, r, layout.pp(), layout.zero_group_size(), layout.tp(), layout.cp());
            groups.insert((t.*pick)());
        }
        if (groups.begin()->size() <= 1) continue;  // one rank per group: nothing to cross
        // The data-parallel group is the ZeRO group or the replica group when the other is trivial.
        if (std::string(kind) == "data-parallel" && (layout.zero_group_size() == 1 || layout.replicas() == 1)) continue;
        CrossingGroups c{kind, int(groups.size()), {}};
        for (const auto& g : groups)
            if (nodes.nodes_of(g).size() > 1) c.cross.push_back(g);
        out.push_back(std::move(c));
    }
    return out;
}

std::vector<std::string> node_report(const Topology& layout, const NodeMap& nodes, int zero_stage) {
    std::vector<std::string> lines;
    std::string where;
    for (int n = 0; n < nodes.nodes(); ++n) {
        const auto r = nodes.ranks_on(n);
        where += (n ? "; " : ": ") + nodes.node_name(n) + (r.size() == 1 ? " rank " : " ranks ");
        for (size_t i = 0; i < r.size(); ++i) {  // piece by piece: a literal + to_string trips GCC 12's -Wrestrict
            if (i) where += ',';
            where += std::to_string(r[i]);
        }
    }
    if (nodes.nodes() <= 1) return {"nodes: " + nodes.describe()};
    lines.push_back("nodes: " + nodes.describe() + where);
    std::vector<std::string> across, inside;
    const auto groups = crossing_groups(layout, nodes);
    for (const auto& g : groups) {
        const std::string name = g.kind + " groups";
        if (g.cross.empty())
            inside.push_back(name);
        else
            across.push_back(name + " " + std::to_string(g.cross.size()) + " of " + std::to_string(g.groups));
    }
    lines.push_back("nodes: across nodes: " + (across.empty() ? std::string("none") : join(across)) +
                    "; inside nodes: " + (inside.empty() ? std::string("none") : join(inside)));
    const int per_node = int(nodes.ranks_on(0).size());
    for (const auto& g : groups) {
        if (g.cross.empty()) continue;
        const auto& first = g.cross.front();
        std::string spans;
        for (int n : nodes.nodes_of(first)) spans += (spans.empty() ? "" : ", ") + std::to_string(n);
        if (g.kind == "TP")
            lines.push_back("warning: TP group " + ranks_text(first) + " spans nodes " + spans +
                            ": its all-reduces (two per layer forward, two backward) cross the inter-node link; keep "
                            "parallel.tp <= the ranks per node (" + std::to_string(per_node) + ")");
        if (g.kind == "CP")
            lines.push_back("warning: CP group " + ranks_text(first) + " spans nodes " + spans +
                            ": its q|k|v all-gathers (every layer, forward and backward) and the backward's "
                            "reduce-scatters cross the inter-node link; keep parallel.tp x parallel.cp <= the ranks per node (" + std::to_string(per_node) +
                            ")");
        if (g.kind == "ZeRO" && zero_stage == 3) {
            std::string fix;
            if (per_node > 0 && layout.dp() % per_node == 0 && per_node % layout.tp() == 0 && nodes.uniform_blocks())
                fix = "; parallel.zero_group_size = " + std::to_string(per_node / layout.tp()) +
                      " keeps them inside a node and sends only the shard all-reduce across";
            lines.push_back("warning: ZeRO-3 group " + ranks_text(first) + " spans nodes " + spans +
                            ": every unit's parameter all-gathers (forward and backward) and gradient "
                            "reduce-scatter cross the inter-node link" + fix);
        }
    }
    if (!nodes.uniform_blocks())
        lines.push_back("warning: ranks are not laid out node by node (equal blocks of consecutive ranks): TP groups "
                        "and node-local ZeRO groups assume it; launch with mpirun --map-by slot (srun: "
                        "--distribution=block)");
    return lines;
}

}  // namespace llmtrain
