// tests/cuda_emu/nccl_comm.hpp — what an emulated NCCL communicator is, shared by nccl.cpp
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
