// parallel/comm.hpp — ranks, groups and collectives (docs/design.md "Ranks and groups").
//
// MPI gives rank and world. A group is an ordered list of world ranks; a Comm runs collectives on
// one group. MpiComm moves host buffers (the CPU backend); NcclComm moves device buffers (the CUDA
// backend) on a stream of its own, ordered against the compute stream by events; MpiCudaComm
// (parallel.comm = "mpi" on CUDA) moves device buffers through pinned host copies and MpiComm.
//
// Units: every count is in ELEMENTS of a DType (u8 for raw bytes); never bytes.
// Ordering: an operation reads its input as produced by the work queued on the caller's current
// stream before the call; its result is visible to work queued on the current stream after
// wait() (after the call, for the blocking forms). On the CPU backend streams run at once, so
// "visible after wait()" is simply "written when wait() returns".
// Sums: MpiComm (and cuda_emu's NCCL) add in rank order, so every rank gets the same bits and a
// sum equals a single-process sum taken in that order. Real NCCL sums are deterministic for a fixed
// communicator and size but not in rank order (docs/reference.md): tests that must hold on a GPU
// compare with a tolerance.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/ops.hpp"

namespace llmtrain {

/// A communication call failed or timed out; what() names the operation, the group and the peer(s).
struct CommError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Initializes MPI once (thread level FUNNELED) if not yet done; safe without mpirun (one rank).
void mpi_init_once(int* argc, char*** argv);
/// MPI is initialized and not yet finalized.
bool mpi_active();
/// Finalizes MPI if we initialized it.
void mpi_finalize();
/// Ends every rank of the job with exit code `code` (MPI_Abort; in an MPICH build 0.3 s after the
/// call: hydra dropped the error line a rank had just written in 4 of 8 cluster_faults runs, 0 of 8
/// with the wait); a plain exit with one rank.
[[noreturn]] void mpi_abort(int code);
int world_rank();
int world_size();
/// This rank's index among the ranks on its node (parallel/nodes.hpp's node map, MPI's shared-memory
/// split: the same under every launcher; launcher variables such as LOCAL_RANK are not read); 0
/// without MPI. Picks the device (CudaBackendOptions::local_rank) and the metrics port.
int local_rank();

/// The kinds of operation a Comm counts bytes for.
enum class CommOp : int { all_reduce, reduce_scatter, all_gather, broadcast, send, recv, all_to_all, count };
/// "all_reduce", "reduce_scatter", ... (the metrics/bench label).
const char* comm_op_name(CommOp op);

/// Bytes this rank put on the wire per kind of operation since the Comm was made (or reset).
/// Counted by the algorithm's data movement, not by the library's internals: for P ranks and n
/// elements of es bytes, reduce_scatter and all_gather send (P-1)/P·n·es (n the full length),
/// all_reduce 2(P-1)/P·n·es, broadcast n·es on the root, send n·es, all_to_all the elements sent
/// to the other ranks · es (the block a rank keeps is not on the wire). One rank sends nothing.
struct CommStats {
    std::array<uint64_t, static_cast<int>(CommOp::count)> bytes{};
    std::array<uint64_t, static_cast<int>(CommOp::count)> calls{};
    uint64_t total_bytes() const {
        uint64_t s = 0;
        for (uint64_t b : bytes) s += b;
        return s;
    }
};

/// An operation in flight. wait() returns when its result is visible to work queued on the
/// current stream afterwards (MpiComm: the host waited; NcclComm: the current stream waits on the
/// comm stream's event, the host does not block). wait() is idempotent. Errors: CommError
/// (including the timeout). Destroying an unwaited handle waits.
class CommWork {
public:
    virtual ~CommWork() = default;
    virtual void wait() = 0;
    /// Moves the operation on without blocking (MpiComm: polls MPI once, starting a sum's second
    /// phase when the first is done) and returns true once wait() would return at once. Call it
    /// between pieces of compute to overlap them with the transfer. Default: false (the transfer
    /// advances by itself, e.g. on NCCL's stream). Errors: as wait(), which then rethrows.
    virtual bool test() { return false; }
};
using CommHandle = std::unique_ptr<CommWork>;

/// Options shared by every Comm of a run.
struct CommOptions {
    /// parallel.timeout_s: a wait longer than this throws CommError naming the operation, the
    /// group's world ranks and, for send/recv, the peer. <= 0 waits forever.
    double timeout_s = 600;
    /// parallel.comm: the Comm make_comm builds for device buffers: "auto" (NCCL on the cuda
    /// backend, MPI on the cpu one), "nccl", or "mpi" (MpiCudaComm on cuda).
    std::string comm = "auto";
    /// parallel.hierarchical_allreduce: make_mpi_comm's all_reduce_sum goes through the nodes
    /// (parallel/hier_comm.hpp) where the group spans several with more than one rank on each.
    bool hierarchical = false;
};

class Comm {
public:
    virtual ~Comm() = default;
    virtual int rank() const = 0;  ///< index in the group
    virtual int size() const = 0;
    /// World ranks of the group, in group order (for messages).
    virtual const std::vector<int>& world_ranks() const = 0;

    // ---- asynchronous forms (every blocking form below is the async one followed by wait()) ----
    /// In-place sum of n elements of t (f32 or bf16; bf16 summed in fp32, rounded once).
    virtual CommHandle all_reduce_sum_async(void* buf, size_t n, DType t) = 0;
    /// send (size()*n elements) is summed over the group; recv (n) receives chunk rank() of the sum
    /// (elements [rank()*n, (rank()+1)*n)). In place when recv == send + rank()*n (NCCL's layout).
    virtual CommHandle reduce_scatter_sum_async(const void* send, void* recv, size_t n, DType t) = 0;
    /// recv (size()*n) = the n-element send buffers of ranks 0..size()-1 in order. In place when
    /// send == recv + rank()*n.
    virtual CommHandle all_gather_async(const void* send, void* recv, size_t n, DType t) = 0;
    /// n elements from `root` (group index) to every rank.
    virtual CommHandle broadcast_async(void* buf, size_t n, DType t, int root) = 0;
    /// Point-to-point to/from group index `peer`. Messages between a pair arrive in the order sent.
    virtual CommHandle send_async(const void* buf, size_t n, DType t, int peer) = 0;
    virtual CommHandle recv_async(void* buf, size_t n, DType t, int peer) = 0;

    // ---- blocking forms ----
    void all_reduce_sum(void* buf, size_t n, DType t) { all_reduce_sum_async(buf, n, t)->wait(); }
    void reduce_scatter_sum(const void* send, void* recv, size_t n, DType t) {
        reduce_scatter_sum_async(send, recv, n, t)->wait();
    }
    void all_gather(const void* send, void* recv, size_t n, DType t) { all_gather_async(send, recv, n, t)->wait(); }
    void broadcast(void* buf, size_t n, DType t, int root) { broadcast_async(buf, n, t, root)->wait(); }
    void send(const void* buf, size_t n, DType t, int peer) { send_async(buf, n, t, peer)->wait(); }
    void recv(void* buf, size_t n, DType t, int peer) { recv_async(buf, n, t, peer)->wait(); }
    /// All-to-all with per-peer counts (MPI_Alltoallv's contract; expert parallelism's token
    /// exchange, docs/parallelism.md "Expert parallelism"). Blocking, collective over the group.
    /// send holds size() blocks back to back, block q (send_counts[q] elements) for group index q;
    /// recv receives size() blocks back to back, block q (recv_counts[q] elements) from group index q.
    /// recv_counts[q] must equal rank q's send_counts[rank()] (exchange the counts first, e.g. by an
    /// all_to_all_v of one element per peer). send and recv must not overlap. Counted as
    /// CommOp::all_to_all: the elements sent to the other ranks. Default (parallel/all_to_all.cpp):
    /// every receive posted, then every send, through recv_async / send_async (the block to oneself
    /// too: MpiComm's Irecv/Isend), so any Comm whose point-to-point takes its buffers and does not
    /// block a receive behind a later send runs it; one that cannot must override it (NcclComm:
    /// one ncclGroupStart..End of every peer's ncclSend/ncclRecv, parallel/nccl_comm.cpp).
    /// Errors: std::invalid_argument for null counts; the Comm's CommError for a failed or hung transfer.
    virtual void all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                              DType t);
    /// In-place max of n fp32 values (exact, order-free). Blocking.
    virtual void all_reduce_max(float* buf, size_t n) = 0;
    /// Every rank of the group has reached the barrier (host-side, blocking).
    virtual void barrier() = 0;

    // ---- host waits (parallel/host_wait.hpp); the defaults suit MpiComm, whose waits time out themselves ----
    /// Non-blocking, from any thread: "" while the communicator is healthy, else what failed
    /// (NCCL's asynchronous error).
    virtual std::string async_error() { return ""; }
    /// Makes the operations in flight fail and every later call throw CommError (ncclCommAbort).
    /// From any thread; idempotent.
    virtual void abort() {}
    /// For messages: "world ranks [0, 1]" (NcclComm adds its newest operation).
    virtual std::string describe() const;
    /// The deadline of a host wait on this comm's device work (CommOptions::timeout_s); <= 0: none.
    virtual double host_timeout_s() const { return 0; }

    const CommStats& stats() const { return stats_; }
    void reset_stats() { stats_ = CommStats{}; }

protected:
    /// Argument check shared by the implementations: throws std::invalid_argument naming `role`
    /// ("broadcast root", "send peer", ...), the value and this group unless 0 <= peer < size().
    void check_peer(int peer, const char* role) const;
    /// Implementations call this once per operation with the bytes the formula in CommStats gives.
    void count(CommOp op, uint64_t bytes) {
        stats_.bytes[static_cast<int>(op)] += bytes;
        stats_.calls[static_cast<int>(op)] += 1;
    }

private:
    CommStats stats_;
};

/// Broadcasts s (any bytes) from rank `root` of comm to every rank of it, resizing s on the others:
/// its length (8 bytes), then its bytes, as two u8 broadcasts of host memory (comm must take host
/// buffers: an MpiComm). Collective over comm. Errors: as Comm::broadcast.
void broadcast_string(Comm& comm, std::string& s, int root = 0);

/// World ranks as logs and errors print them: "[0,2,4]" (sep ",") or "[0, 2, 4]" (sep ", ").
std::string ranks_text(const std::vector<int>& ranks, const char* sep = ",");

/// A Comm over MPI on the given world ranks, in that order (all ranks when empty). Collective over
/// the listed ranks: each of them calls it with the same list; other ranks need not call it. With
/// opt.hierarchical and a group spanning nodes with equal numbers of its ranks (more than one) on
/// each, its all_reduce_sum is parallel/hier_comm.hpp's.
/// Buffers are host memory. Errors: std::invalid_argument if the calling rank is not listed or a
/// rank is out of range or repeated; CommError if MPI fails.
std::unique_ptr<Comm> make_mpi_comm(const std::vector<int>& world_ranks = {}, const CommOptions& opt = {});

/// A Comm over NCCL on the given world ranks (all when empty), for device buffers of `ops` (the CUDA
/// backend): the unique id is made by the first listed rank and broadcast over MPI; collectives run
/// on a stream of its own. Collective over the listed ranks like make_mpi_comm. Returns null when
/// this executable has no CUDA backend linked. Errors: CommError naming the NCCL error.
std::unique_ptr<Comm> make_nccl_comm(Ops& ops, const std::vector<int>& world_ranks = {}, const CommOptions& opt = {});

/// A Comm over MPI for device buffers of the cuda backend `ops` (parallel/mpi_cuda_comm.cpp): each
/// operation is staged through pinned host memory and run by an MpiComm on the same ranks (its
/// rank-order sums), on a stream of its own ordered by events like NcclComm. Allows several ranks
/// per GPU. Collective over the listed ranks like make_mpi_comm. Null-linked (weak) when this
/// executable has no CUDA backend. Errors: std::invalid_argument for another backend or a bad
/// rank list; CommError if MPI or CUDA fails.
std::unique_ptr<Comm> make_mpi_cuda_comm(Ops& ops, const std::vector<int>& world_ranks = {},
                                         const CommOptions& opt = {});

/// The Comm for a backend and opt.comm: on "cpu" MpiComm (whose device memory is host memory); on
/// "cuda" NcclComm ("auto", "nccl") or MpiCudaComm ("mpi"). Errors: as the factories;
/// std::invalid_argument for an unknown opt.comm or "nccl" on the cpu backend; std::runtime_error
/// when the chosen Comm is not linked into this executable.
std::unique_ptr<Comm> make_comm(Ops& ops, const std::vector<int>& world_ranks = {}, const CommOptions& opt = {});

}  // namespace llmtrain

namespace llmtrain {

/// A Comm that only knows its shape: size ranks, this one `rank`, for counting memory in a dry run
/// (model/dry_ops.hpp). Every operation throws std::logic_error.
std::unique_ptr<Comm> make_dry_comm(int size, int rank);

}  // namespace llmtrain
