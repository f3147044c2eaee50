// parallel/nodes.hpp — which node each rank runs on, this rank's index on its node, and the liveness
// probe that tells a waiting rank which peers are gone and which are busy on purpose
// (docs/multinode.md "Nodes", "Local rank", "When a node fails" and "While one rank works alone").
//
// A node is what MPI calls a shared-memory domain (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)): the
// ranks that can share memory, one host. Nodes are numbered by their lowest world rank, so with the
// usual by-slot mapping node 0 holds ranks 0..R-1, node 1 the next R, and so on. mpi_init_once finds
// them (a collective over the world, once at start); tests that never call it see one node.
//
// Liveness: a rank whose wait timed out asks every rank it waited for "are you there?" over a
// communicator of its own (a duplicate of the world). Ranks answer from inside their own polled
// waits (serve_liveness), so a rank that is alive but itself blocked in a collective answers; a
// stopped process, a killed one or one behind a cut link does not. An answer (a pong) carries the
// ping's sequence number (so a late answer is never taken for a later probe's), and whether the rank
// is in a busy phase: work it does alone on purpose (rank 0 writing a checkpoint's manifest, say),
// declared with BusyPhase or run_busy, with a text and a limit. A waiting rank keeps waiting past
// parallel.timeout_s while a peer is busy within its limit (OverdueWait); only silence, a limit
// passed, or peers alive but elsewhere end the wait.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
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
    /// World rank `rank`'s index among ranks_on(its node): its local rank. Errors: std::out_of_range
    /// for a rank outside the map.
    int local_index(int rank) const;
};

/// The node map found at start (one node named after this host before mpi_init_once).
const NodeMap& node_map();

/// Finds the node map and makes the liveness communicator. Collective over MPI_COMM_WORLD; called
/// by mpi_init_once right after MPI_Init. Errors: CommError if MPI fails.
void discover_nodes();

/// Answers the liveness pings other ranks have sent this one (each with a pong saying whether this
/// rank is busy, see BusyPhase). Non-blocking (MPI_Improbe); call it from the thread that makes MPI
/// calls, inside every polled wait. A no-op before discover_nodes.
void serve_liveness();

/// Work this rank does alone while others may wait on it, declared for as long as the object lives:
/// meanwhile the rank answers liveness pings "busy: <what>" with the seconds left of `limit_s`
/// (counted from construction), and a peer whose wait on it times out keeps waiting up to that
/// limit instead of failing (OverdueWait). It only changes what the rank answers: the rank answers
/// from where it serves pings (its polled waits, serve_liveness, run_busy's loop), so serial work on
/// the MPI thread must use run_busy. Nestable: the newest phase alive is the one answered (with its
/// own limit); phases may end in any order. Thread-safe (a mutex guards the phases), though meant for
/// the thread that makes MPI calls. `what` is cut to 120 bytes in answers. Errors:
/// std::invalid_argument when limit_s <= 0.
class BusyPhase {
public:
    BusyPhase(std::string what, double limit_s);
    ~BusyPhase();
    BusyPhase(const BusyPhase&) = delete;
    BusyPhase& operator=(const BusyPhase&) = delete;

private:
    friend class OverdueWait;
    BusyPhase(std::string what, double limit_s, int origin);  // a chained wait: origin is the busy rank's
    uint64_t id_;
};

/// Runs fn on a worker thread while the calling thread — the one that makes MPI calls (MPI's main
/// thread; MPI runs at thread level FUNNELED) — answers liveness pings as BusyPhase(what, limit_s),
/// until fn returns; then rethrows what fn threw. fn must make no MPI calls and must not rely on the
/// caller's thread-local state (a CUDA current device included). Does not stop fn at the limit: the
/// limit is what waiting peers allow it. With no MPI or one rank, fn runs on the calling thread.
/// Errors: whatever fn throws; std::invalid_argument when limit_s <= 0; std::logic_error when called
/// from another thread than MPI's main one.
void run_busy(const std::string& what, double limit_s, const std::function<void()>& fn);

/// One peer's answer to a liveness ping.
struct PeerAnswer {
    int rank = -1;          ///< world rank
    bool answered = false;  ///< a pong carrying this probe's sequence number arrived in time
    bool busy = false;      ///< in a BusyPhase (or a wait extended on a busy peer)
    std::string phase;      ///< the busy phase's text ("committing step_5"), at most 120 bytes
    double seconds_left = 0;  ///< of the phase's limit when it answered (<= 0: past it)
    double limit_s = 0;       ///< the phase's whole limit
    int origin = -1;          ///< the world rank whose own work the phase is (itself, or the rank a
                              ///< chained wait waits for); a wait ignores phases that originate with it
};

/// Pings every world rank in `ranks` but this one and waits up to `seconds` for their answers
/// (serving other ranks' pings meanwhile). Answers to earlier probes that arrive late are drained
/// and discarded by sequence number. Returns one PeerAnswer per pinged rank, ascending by rank;
/// none before discover_nodes.
std::vector<PeerAnswer> probe_peers(const std::vector<int>& ranks, double seconds);

/// The ranks of `ranks` (but this one) that did not answer a ping within `seconds`, ascending.
std::vector<int> unanswered(const std::vector<int>& ranks, double seconds);

/// For error messages after a timeout: unanswered(ranks, seconds) as "; no answer to a liveness ping
/// within S s from ranks 2, 3 on node 1 (t1-n1)", or "; every other rank of the group answered a
/// liveness ping (alive, but not in this operation)". "" when `ranks` holds no other rank, or before
/// discover_nodes.
std::string liveness_report(const std::vector<int>& ranks, double seconds);

/// The probe's wait for a timeout of `timeout_s`: a fifth of it, between 0.5 and 3 s.
double liveness_probe_seconds(double timeout_s);

/// What a timed wait does once parallel.timeout_s has passed (MpiComm's wait; docs/multinode.md
/// "While one rank works alone"). Each time its deadline passes the wait calls next(), which probes
/// the peers and either says how long to keep waiting or throws:
///  - a peer did not answer: CommError(what + the unanswered report), as liveness_report says;
///  - a peer is busy with time left: keep waiting until the next probe, min(timeout_s, the longest
///    time left), printing one line to stderr; meanwhile this rank answers pings busy too ("waiting
///    for rank 0: committing step_5", the same deadline), so waits chain through ranks;
///  - a peer is still busy past its limit: CommError naming it, its phase and its limit;
///  - every peer alive and none busy: one more timeout_s (a peer may be about to join, or itself
///    about to find that it waits on a busy rank), then CommError "... (alive, but not in this
///    operation)".
/// Busy answers that originate with this rank (a cycle of waits) count as not busy.
class OverdueWait {
public:
    /// `op` names the operation for the stderr line; `peers` are the world ranks it waits for.
    OverdueWait(std::string op, std::vector<int> peers, double timeout_s);
    ~OverdueWait();
    /// Probes; returns the seconds to wait before calling next() again. `timeout_message` is what
    /// the errors start with ("<op> did not complete within parallel.timeout_s = 3 s; waiting for
    /// world ranks [0,1]"). Errors: CommError as listed above.
    double next(const std::string& timeout_message);

private:
    std::string op_;
    std::vector<int> peers_;
    double timeout_s_;
    std::chrono::steady_clock::time_point start_;
    bool graced_ = false;                 // the one extra timeout_s for peers alive and not busy was used
    std::unique_ptr<BusyPhase> mine_;     // this rank's answer while extended on a busy peer
};

/// Opens the liveness pings' communicator (a duplicate of the world). Called by discover_nodes.
void open_liveness_channel();

/// Closes the liveness pings' communicator before MPI_Finalize (called by mpi_finalize; collective:
/// every rank): the ranks exchange how many pings and pongs each sent to each (MPI_Alltoall), each
/// receives and drops those it has not received yet (a pong that came after its probe gave up, a
/// ping sent as the job ended), waits for its own sends, and frees the communicator. MPI requires
/// every message matched before MPI_Finalize; MPICH over UCX's TCP hung in MPI_Finalize flushing one
/// that was not (tests/cluster/cluster_equivalence.sh under hydra). No-op when the channel is not
/// open or MPI is not active; errors are ignored (the process is ending).
void close_liveness_channel();

}  // namespace llmtrain
