// emu/nccl_comm.hpp — what an emulated NCCL communicator is, shared by nccl.cpp
// (creating and destroying communicators) and nccl_coll.cpp (collectives, send/recv, groups).
//
// An ncclComm_t owns a reference to a CommState, which owns an MPI communicator whose ranks are
// the NCCL ranks. Queued collectives hold their own reference, so a communicator destroyed with
// work still queued on a stream stays valid until that work has run. ncclCommAbort raises the
// `aborted` flag, which every wait loop polls: a collective hung on a lost peer is then abandoned
// instead of blocking the synchronizing thread forever.
#pragma once
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // MPI's C API only: OpenMPI's deprecated C++ bindings need libmpi_cxx
#endif
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace emu::nccl {

/// The MPI side of one communicator. MPI calls are made only from the thread that synchronizes
/// the streams (MPI_THREAD_FUNNELED is enough); `aborted` and `async_error` may be touched from
/// any thread.
struct CommState {
    MPI_Comm comm = MPI_COMM_NULL;  ///< rank in comm == NCCL rank
    int rank = 0;
    int size = 1;
    std::vector<int> world;  ///< MPI_COMM_WORLD rank of each NCCL rank
    bool perturb = false;    ///< CUDA_EMU_NCCL_PERTURB names this communicator (nccl_check.cpp)
    uint64_t issued = 0;     ///< calls issued on this communicator (host side), for messages
    std::atomic<bool> aborted{false};
    std::atomic<ncclResult_t> async_error{ncclSuccess};
    /// Sends handed to MPI from a copy of their data (ncclSend is eager, see nccl_coll.cpp), with
    /// that copy; completed ones are dropped by later sends, the rest waited for before the free.
    std::vector<std::pair<MPI_Request, std::vector<char>>> eager_sends;

    CommState(MPI_Comm c);
    /// Frees the MPI communicator, unless MPI is finalized or the communicator was aborted (an
    /// abort may come from a watchdog thread, which must not call MPI; the job is ending anyway).
    ~CommState();
    CommState(const CommState&) = delete;
    CommState& operator=(const CommState&) = delete;
};

/// A queued MPI request and what to do once it completed (e.g. compare what arrived).
struct Pending {
    std::shared_ptr<CommState> state;
    MPI_Request request;
    std::function<void()> then;  ///< may be empty
};

/// Raised by queued work: the communicator was aborted, or MPI failed. The message names the
/// operation; the communicator's async_error says which.
struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Raised by queued work on an aborted communicator. Unlike other errors it is no device error:
/// the operation is abandoned and its stream goes on, as a real NCCL kernel returns once
/// ncclCommAbort raises its abort flag.
struct Aborted : Error {
    using Error::Error;
};

/// Records `why` as the thread's last error (ncclGetLastError), prints "cuda_emu: <fn>: <why>"
/// on stderr and returns `result`.
ncclResult_t fail(ncclResult_t result, const char* fn, const std::string& why);

/// Throws Error (after setting state.async_error = ncclSystemError) when an MPI call failed.
void check_mpi(int mpi_result, CommState& state, const char* what);

/// Waits for all `requests` on communicator `state`, polling its abort flag. Throws Aborted when
/// aborted (the requests are abandoned), Error when MPI reports an error.
void wait_all(CommState& state, std::vector<MPI_Request>& requests, const char* what);

// ---- nccl_check.cpp: the result perturbation and the issue-order check (docs/cuda_emu.md) ----

/// Whether CUDA_EMU_NCCL_PERTURB=<world rank>,<world rank>,... names exactly these world ranks in
/// this order (a communicator's members by NCCL rank).
bool perturbed(const std::vector<int>& world);

/// Moves each of the n floating-point elements at p up by one unit in the last place (adds 1 to
/// its bits); integers are left alone. What a communicator that sums in another order could give.
void perturb_last_bit(ncclDataType_t type, void* p, size_t n);

/// Where a call stands in the issue order of every pair of world ranks it involves: index[r] is
/// the number of calls this process had issued before it, on any communicator, that involve both
/// itself and NCCL rank r of `state` (a collective involves every member pair; a send or receive
/// only its peer; the calls of one ncclGroupStart..End share one position). UINT64_MAX where r
/// is not involved. Counted at issue, on the host thread.
struct Issue {
    std::vector<uint64_t> index;
    uint64_t call = 0;  ///< this call's number on its communicator
};
/// Notes a call at issue time; `peer` is the NCCL rank of a send/receive, -1 for a collective.
Issue note_issue(CommState& state, int peer);
/// The outermost ncclGroupStart and ncclGroupEnd, for the issue order: the pairs a group touched
/// advance by one at its end.
void note_group_start();
void note_group_end();

/// In a queued collective, before its data moves: exchanges every member's positions (one small
/// all-to-all) and, if a member's position in our pair's order differs from ours, prints which
/// calls disagree and ends the job (MPI_Abort): concurrent communicators whose operations two
/// ranks issue in different orders can deadlock NCCL.
void check_collective_order(CommState& state, const Issue& issue, const char* fn);
/// In a queued send: tells the peer this call's position in their pair's order (a small eager
/// message beside the data, tag 1).
void send_order(CommState& state, const Issue& issue, int peer, const char* fn);
/// In a queued receive: posts the receive of the sender's position; once it arrives (Pending::then)
/// it is compared with ours, as check_collective_order does.
void recv_order(const std::shared_ptr<CommState>& state, const Issue& issue, int peer, const char* fn,
                std::vector<Pending>& progress);

/// The NCCL calls whose bytes bytes_sent() counts.
enum class Kind : int { all_reduce, reduce_scatter, all_gather, broadcast, send, count };

/// Bytes this process has handed MPI for other ranks in the data exchanges of completed `kind`
/// calls (all communicators): AllReduce the chunks it sends out in the all-to-all plus its reduced
/// chunk to each peer in the all-gather; ReduceScatter and AllGather the blocks for the other
/// ranks; Broadcast count·size on the root, once (an MPI broadcast's own forwarding is MPI's);
/// Send count·size. What tests compare a Comm's byte counters with.
uint64_t bytes_sent(Kind kind);

}  // namespace emu::nccl

/// The handle type of nccl.h: a reference to the shared state.
struct ncclComm {
    std::shared_ptr<emu::nccl::CommState> state;
};
