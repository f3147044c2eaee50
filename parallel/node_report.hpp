// parallel/node_report.hpp — what the start log says about nodes: where the ranks are, which of the
// run's groups cross nodes, and warnings where a group that talks every layer spans them
// (docs/multinode.md "Nodes").
#pragma once
#include <string>
#include <vector>

#include "parallel/nodes.hpp"
#include "parallel/topology.hpp"

namespace llmtrain {

/// A group kind's groups that span more than one node.
struct CrossingGroups {
    std::string kind;                     ///< "TP", "ZeRO", "replica", "data-parallel", "pipeline", "CP"
    int groups = 0;                       ///< groups of this kind in the world (distinct)
    std::vector<std::vector<int>> cross;  ///< those spanning nodes, as world ranks
};

/// Every group kind of `layout` (one Topology of the world; its rank is ignored) with the groups
/// that span nodes under `nodes` (whose node_of must have layout.world_size() entries). Kinds of one
/// rank per group are left out. Errors: std::invalid_argument when the sizes differ.
std::vector<CrossingGroups> crossing_groups(const Topology& layout, const NodeMap& nodes);

/// The start log's lines: "nodes: world 4 on 2 nodes (2 ranks each): node 0 (h0) ranks 0, 1; ...",
/// "across nodes: replica groups 2 of 2, ...; inside nodes: ZeRO groups", then any warnings, each a
/// line starting "warning: ": a TP group across nodes (its all-reduces every layer), a CP group
/// across nodes (its q|k|v all-gathers every layer), a ZeRO-3 group
/// across nodes when zero_stage is 3 (its all-gathers every unit, with the zero_group_size that
/// keeps them inside), ranks not laid out node by node. One line "nodes: world N on 1 node" alone
/// on one node.
std::vector<std::string> node_report(const Topology& layout, const NodeMap& nodes, int zero_stage);

}  // namespace llmtrain
