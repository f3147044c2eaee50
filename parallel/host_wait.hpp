// parallel/host_wait.hpp — the host's timed waits on device work that collectives feed, and the
// watchdog that ends a hung collective (docs/design.md "Host waits and the watchdog").
//
// NCCL has no timeout of its own: a collective whose peer never posts spins on the GPU forever, and
// a host blocked in cudaEventSynchronize behind it never returns. So the host never blocks in the
// CUDA runtime where collectives may be in flight: it polls the event it needs (Ops::query_event)
// and, between polls, each communicator's asynchronous error, while a watchdog thread armed for
// parallel.timeout_s aborts every abortable communicator of the process (ncclCommAbort) when the
// deadline passes. The wait then throws CommError naming the operation, the groups and their
// newest operations. PyTorch's ProcessGroupNCCL watchdog works alike. The abort comes from the
// watchdog thread, not the polling loop, because under the emulator (emu/) the polling thread itself
// runs the queued MPI exchange (a query runs deferred work), which returns only once aborted.
#pragma once
#include <functional>
#include <initializer_list>
#include <string>

#include "parallel/comm.hpp"

namespace llmtrain {

/// A Comm a host wait depends on and its role in messages ("zero group"). Null comms are skipped.
struct WaitOn {
    Comm* comm;
    const char* role;
};

/// Polls `done` (non-blocking; it may throw) until it returns true, checking the async error of every
/// comm in `on` between polls. A watchdog thread armed for the largest timeout_s() among `on` (none
/// when every one is <= 0) aborts every registered comm when it expires. Errors: CommError
/// "<what>: timed out after T s waiting for the GPU; <each comm, with its role and newest
/// operation>; called ncclCommAbort on ..." on the deadline; "<what>: <role> (...) failed: <error>"
/// on an async error (after aborting every registered comm); whatever `done` threw otherwise.
void poll_with_watchdog(const std::function<bool()>& done, std::initializer_list<WaitOn> on, const std::string& what);

/// The host waits for the work queued so far on ops' current stream (the collectives that stream
/// was made to wait for included), by polling an event of its own with poll_with_watchdog: the one
/// host wait of training code where collectives may be in flight. Only that stream's work is waited
/// for, never the whole device. On the CPU backend (MpiComm, ops run at once) it returns at once.
class HostWait {
public:
    explicit HostWait(Ops& ops);
    ~HostWait();
    HostWait(const HostWait&) = delete;
    HostWait& operator=(const HostWait&) = delete;
    /// Errors: as poll_with_watchdog.
    void operator()(const std::string& what, std::initializer_list<WaitOn> on);

private:
    Ops& ops_;
    Event event_;
};

/// The comms a watchdog aborts: NcclComm registers when made and leaves before it is destroyed. A
/// timeout aborts them all, the ones a wait did not name included (a pipeline link or the tied
/// embeddings' group the stream waits for), so that no hung collective outlives the deadline.
void register_abortable(Comm* c);
void unregister_abortable(Comm* c);

}  // namespace llmtrain
