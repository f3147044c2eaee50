// parallel/hier_comm.hpp — an all-reduce that knows the nodes (parallel.hierarchical_allreduce):
// reduce-scatter inside each node, all-reduce of the node's partial sums across nodes, all-gather
// inside each node, so each byte crosses the slow inter-node link once per node instead of once per
// rank (NCCL's tree/ring algorithms do the same across nodes; docs/multinode.md "Using the link well").
//
// Sums: a rank-order sum within each node, then over nodes in node order: ((r0 + r1) + (r2 + r3))
// for 2 nodes of 2, where the flat MpiComm adds ((r0 + r1) + r2) + r3. So results are deterministic
// and equal on every rank, but not bitwise those of the flat all-reduce (fp32 reassociation).
#pragma once
#include <memory>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/nodes.hpp"

namespace llmtrain {

/// How a group splits by node: `intra` the group's world ranks on this rank's node (group order),
/// `inter` the group's ranks with this rank's index among its node's members, one per node (node
/// order). Empty when the split does not apply: the group on one node, one rank per node, or nodes
/// holding different numbers of the group's ranks.
struct HierSplit {
    std::vector<int> intra, inter;
};

/// The split of `group` (world ranks) for world rank `me` under `nodes`. Errors: std::invalid_argument
/// when `me` is not in the group.
HierSplit hier_split(const std::vector<int>& group, const NodeMap& nodes, int me);

/// A Comm on `flat`'s group whose all_reduce_sum goes intra → inter → intra (host buffers; the sub-
/// comms are MpiComms made on the split's ranks: `intra` and `intra_gather` two on this node's
/// ranks, `inter` one across nodes); every other operation is flat's. all_reduce_sum_async is
/// asynchronous like MpiComm's: the call starts the intra-node reduce-scatter and returns; test()
/// moves the stages on without blocking (the cross-node all-reduce, then the intra-node all-gather
/// into scratch and the copy back into buf) and says true once buf holds the sum; wait() finishes
/// it. Several all-reduces may be in flight; their stages start in the order the calls were made on
/// every rank, and waiting on one finishes the older ones first. Wait them before the Comm goes.
/// Counted bytes (all_reduce): the sub-operations' by the CommStats formulas.
std::unique_ptr<Comm> make_hier_comm(std::unique_ptr<Comm> flat, std::unique_ptr<Comm> intra,
                                     std::unique_ptr<Comm> inter, std::unique_ptr<Comm> intra_gather);

}  // namespace llmtrain
