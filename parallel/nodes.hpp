// parallel/nodes.hpp — which node each rank runs on, and a liveness probe that tells a rank which
// peers are gone (docs/multinode.md "Nodes" and "When a node fails").
//
// A node is what MPI calls a shared-memory domain (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)): the
// ranks that can share memory, one host. Nodes are numbered by their lowest world rank, so with the
// usual by-slot mapping node 0 holds ranks 0..R-1, node 1 the next R, and so on. mpi_init_once finds
// them (a collective over the world, once at start); tests that never call it see one node.
//
// Liveness: a rank whose wait timed out asks every rank it waited for "are you there?" over a
// communicator of its own (a duplicate of the world) and names the ones that did not answer. Ranks
// answer from inside their own polled waits (serve_liveness), so a rank that is alive but itself
// blocked in a collective answers; a stopped process, a killed one or one behind a cut link does not.
#pragma once
#include <string>
#include <vector>

namespace llmtrain {

/// The world's ranks by node.
struct NodeMap {
    std::vector<int> node_of;        ///< world rank -> node index (nodes numbered by lowest rank)
    std::vector<std::string> host;   ///< node index -> hostname (MPI_Get_processor_name)

    int nodes() const { return int(host.size()); }
    /// Ranks on `node`, in rank order.
    std::vector<int> ranks_on(int node) const;
    /// True when every node holds the same number of ranks, in consecutive world ranks (by-slot
    /// mapping): the layout Topology's groups assume (a TP group on consecutive ranks stays in a node).
    bool uniform_blocks() const;
    /// The distinct nodes the world ranks `ranks` sit on, ascending.
    std::vector<int> nodes_of(const std::vector<int>& ranks) const;
    /// "world 4 on 2 nodes (2 ranks each)", or "(2, 3 ranks)" when they differ; "world 1 on 1 node".
    std::string describe() const;
    /// "node 1 (t1-n1)".
    std::string node_name(int node) const;
    /// "ranks 2, 3 on node 1 (t1-n1); rank 5 on node 2 (t1-n2)": `ranks` grouped by node.
    std::string where(const std::vector<int>& ranks) const;
};

/// The node map found at start (one node named after this host before mpi_init_once).
const NodeMap& node_map();

/// Finds the node map and makes the liveness communicator. Collective over MPI_COMM_WORLD; called
/// by mpi_init_once right after MPI_Init. Errors: CommError if MPI fails.
void discover_nodes();

/// Answers the liveness pings other ranks have sent this one. Non-blocking (MPI_Iprobe); call it
/// from the thread that makes MPI calls, inside every polled wait. A no-op before discover_nodes.
void serve_liveness();

/// Pings every world rank in `ranks` but this one and waits up to `seconds` for their answers
/// (serving other ranks' pings meanwhile). Returns the ranks that did not answer, ascending.
std::vector<int> unanswered(const std::vector<int>& ranks, double seconds);

/// For error messages after a timeout: unanswered(ranks, seconds) as "; no answer to a liveness ping
/// within S s from ranks 2, 3 on node 1 (t1-n1)", or "; every other rank of the group answered a
/// liveness ping (alive, but not in this operation)". "" when `ranks` holds no other rank, or before
/// discover_nodes.
std::string liveness_report(const std::vector<int>& ranks, double seconds);

/// The probe's wait for a timeout of `timeout_s`: a fifth of it, between 0.5 and 3 s.
double liveness_probe_seconds(double timeout_s);

}  // namespace llmtrain
