// parallel/nccl_comm.cpp — NcclComm, the Comm of the CUDA backend: NCCL collectives on device
// buffers, on a stream of its own, ordered against the caller's stream by events (comm.hpp).
//
// Plain C++ over <cuda_runtime.h> and <nccl.h>: built with the real CUDA runtime and libnccl into
// the nvcc executables, and against emu/ (NCCL over MPI, deferred streams) into the
// emulated ones (parallel/CMakeLists.txt).
//
// Ordering. Every operation records `ready_` on the caller's current stream (Ops::record_event),
// makes the comm stream wait on it, issues the NCCL call on the comm stream and records a "done"
// event there. The handle's wait() makes the caller's *current* stream wait on "done"
// (Ops::wait_event): the host never blocks. The comm stream is non-blocking, so nothing but these
// events orders it against the compute streams. Done events come from a pool (returned by wait()),
// so steady state creates none.
//
// Sums. Real NCCL adds bf16 in bf16: its FuncSum<__nv_bfloat16> is __hadd/__hadd2 on sm_80+ (fp32
// add rounded back to bf16 below sm_80), applied at every step of its ring/tree algorithms, so a
// sum over P ranks is rounded P-1 times, in an order set by the algorithm (NVIDIA/nccl,
// src/device/reduce_kernel.h). cuda_emu sums in fp32 in rank order and rounds once. fp32 sums are
// deterministic for a fixed communicator and size but not in rank order (docs/reference.md).
//
// Host waits and the hung-collective watchdog (parallel/host_wait.hpp). Training's host waits go
// through HostWait, which polls the compute stream's event and this comm's async_error() under a
// watchdog that calls abort() (ncclCommAbort) on every registered comm once timeout_s passes.
// all_reduce_max and barrier, the two blocking calls of NcclComm itself, first wait (drain) for
// everything this comm has issued the same way. After an abort every call throws CommError.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/host_wait.hpp"

namespace llmtrain {
namespace {

/// Tag of MPI_Comm_create_group for NcclComm's groups (below MPI's guaranteed 32767).
constexpr int kGroupTag = 31001;

ncclDataType_t nccl_type(DType t) {
    switch (t) {
        case DType::f32: return ncclFloat32;
        case DType::bf16: return ncclBfloat16;
        case DType::u8: return ncclUint8;
    }
    throw std::invalid_argument("NcclComm: unknown DType " + std::to_string(static_cast<int>(t)));
}

/// The listed world ranks, or all of them when empty. Errors: std::invalid_argument for a rank
/// out of range or repeated, or when the calling rank is not listed.
std::vector<int> checked_group(const std::vector<int>& listed, int me, int world) {
    std::vector<int> ranks = listed;
    if (ranks.empty())
        for (int r = 0; r < world; ++r) ranks.push_back(r);
    std::vector<char> seen(world, 0);
    for (int r : ranks) {
        if (r < 0 || r >= world)
            throw std::invalid_argument("make_nccl_comm: rank " + std::to_string(r) + " outside world of " +
                                        std::to_string(world));
        if (seen[r]++) throw std::invalid_argument("make_nccl_comm: rank " + std::to_string(r) + " listed twice");
    }
    if (!seen[me])
        throw std::invalid_argument("make_nccl_comm: calling rank " + std::to_string(me) + " is not in the group " +
                                    ranks_text(ranks, ", "));
    return ranks;
}

class NcclComm;

/// An NCCL operation in flight: wait() makes the current stream wait for its done event.
class NcclWork final : public CommWork {
public:
    NcclWork(NcclComm& comm, Event done) : comm_(comm), done_(done) {}
    ~NcclWork() override;
    void wait() override;

private:
    NcclComm& comm_;
    Event done_;  ///< null once waited
};

class NcclComm final : public Comm {
public:
    NcclComm(Ops& ops, std::vector<int> ranks, int me, const CommOptions& opt)
        : ops_(ops), ranks_(std::move(ranks)), opt_(opt) {
        for (size_t i = 0; i < ranks_.size(); ++i)
            if (ranks_[i] == me) rank_ = static_cast<int>(i);
        MPI_Group world_group, group;
        MPI_Comm_group(MPI_COMM_WORLD, &world_group);
        MPI_Group_incl(world_group, size(), ranks_.data(), &group);
        const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, kGroupTag, &mpi_);
        MPI_Group_free(&group);
        MPI_Group_free(&world_group);
        if (rc != MPI_SUCCESS || mpi_ == MPI_COMM_NULL) throw error("MPI_Comm_create_group failed");
        MPI_Comm_set_errhandler(mpi_, MPI_ERRORS_RETURN);

        ncclUniqueId id;
        std::memset(&id, 0, sizeof(id));
        if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
        if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi_) != MPI_SUCCESS) throw error("MPI_Bcast of the unique id failed");
        check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        check_nccl(ncclCommInitRank(&nccl_, size(), id, rank_), "ncclCommInitRank");
        ready_ = ops_.create_event();
        register_abortable(this);
    }

    ~NcclComm() override {
        if (!aborted_) {
            try {
                drain("destroy");  // still registered: its own watchdog may abort us
            } catch (const std::exception&) {  // aborted (or the device failed): nothing left to wait for
            }
        }
        unregister_abortable(this);  // no watchdog aborts us from here on
        // Raw CUDA calls that ignore errors: after an abort the device may hold a sticky error.
        if (!aborted_) ncclCommDestroy(nccl_);
        for (Event e : free_events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
        cudaEventDestroy(static_cast<cudaEvent_t>(ready_));
        cudaStreamDestroy(stream_);
        cudaFree(max_dev_);
        cudaFreeHost(max_host_);
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Comm_free(&mpi_);
    }

    int rank() const override { return rank_; }
    int size() const override { return static_cast<int>(ranks_.size()); }
    const std::vector<int>& world_ranks() const override { return ranks_; }

    CommHandle all_reduce_sum_async(void* buf, size_t n, DType t) override {
        require_float(t, "all_reduce_sum");
        begin("all_reduce");
        check_nccl(ncclAllReduce(buf, buf, n, nccl_type(t), ncclSum, nccl_, stream_), "ncclAllReduce");
        count(CommOp::all_reduce, 2 * wire(n, t) / size());
        return finish();
    }
    CommHandle reduce_scatter_sum_async(const void* send, void* recv, size_t n, DType t) override {
        require_float(t, "reduce_scatter_sum");
        begin("reduce_scatter");
        check_nccl(ncclReduceScatter(send, recv, n, nccl_type(t), ncclSum, nccl_, stream_), "ncclReduceScatter");
        count(CommOp::reduce_scatter, wire(n, t));
        return finish();
    }
    CommHandle all_gather_async(const void* send, void* recv, size_t n, DType t) override {
        begin("all_gather");
        check_nccl(ncclAllGather(send, recv, n, nccl_type(t), nccl_, stream_), "ncclAllGather");
        count(CommOp::all_gather, wire(n, t));
        return finish();
    }
    CommHandle broadcast_async(void* buf, size_t n, DType t, int root) override {
        check_peer(root, "broadcast root");
        begin("broadcast");
        check_nccl(ncclBroadcast(buf, buf, n, nccl_type(t), root, nccl_, stream_), "ncclBroadcast");
        count(CommOp::broadcast, rank_ == root && size() > 1 ? n * dtype_size(t) : 0);
        return finish();
    }
    CommHandle send_async(const void* buf, size_t n, DType t, int peer) override {
        check_peer(peer, "send peer");
        begin("send");
        check_nccl(ncclSend(buf, n, nccl_type(t), peer, nccl_, stream_), "ncclSend");
        count(CommOp::send, n * dtype_size(t));
        return finish();
    }
    CommHandle recv_async(void* buf, size_t n, DType t, int peer) override {
        check_peer(peer, "recv peer");
        begin("recv");
        check_nccl(ncclRecv(buf, n, nccl_type(t), peer, nccl_, stream_), "ncclRecv");
        count(CommOp::recv, 0);
        return finish();
    }

    /// All-to-all with per-peer counts (Comm::all_to_all_v's contract, parallel/comm.hpp): send
    /// and recv are DEVICE buffers of dtype t, each size() blocks back to back; block q of send
    /// (send_counts[q] elements, counts in elements, not bytes) goes to group index q, block q of
    /// recv (recv_counts[q] elements) comes from q; the count arrays are host memory of size()
    /// entries. Every peer's ncclSend/ncclRecv is issued inside one ncclGroupStart/ncclGroupEnd
    /// (NCCL's rule for send/recv pairs that depend on each other: issued one by one on a stream,
    /// a receive would wait for a send queued behind it), zero counts issue nothing, and the block
    /// to oneself is a device-to-device cudaMemcpyAsync on the comm stream (no self send/recv).
    /// Stream semantics as the other operations: the comm stream waits for the work queued so far
    /// on the caller's current stream, and on return the current stream waits for the exchange
    /// (the host does not block). Counted as CommOp::all_to_all: the bytes sent to other ranks.
    /// Errors: std::invalid_argument for null counts; CommError when a CUDA or NCCL call fails
    /// (the group is still closed) or the communicator was aborted.
    void all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                      DType t) override {
        if (!send_counts || !recv_counts) throw std::invalid_argument("all_to_all_v: null counts on " + describe());
        const int P = size(), me = rank_;
        const size_t es = dtype_size(t);
        const ncclDataType_t nt = nccl_type(t);
        std::vector<size_t> send_off(P + 1, 0), recv_off(P + 1, 0);
        for (int q = 0; q < P; ++q) {
            send_off[q + 1] = send_off[q] + send_counts[q];
            recv_off[q + 1] = recv_off[q] + recv_counts[q];
        }
        if (send_counts[me] != recv_counts[me])
            throw std::invalid_argument("all_to_all_v: the block to oneself has " + std::to_string(send_counts[me]) +
                                        " elements to send but " + std::to_string(recv_counts[me]) +
                                        " to receive on " + describe());
        begin("all_to_all");
        if (send_counts[me] > 0)
            check_cuda(cudaMemcpyAsync(static_cast<char*>(recv) + recv_off[me] * es,
                                       static_cast<const char*>(send) + send_off[me] * es, send_counts[me] * es,
                                       cudaMemcpyDeviceToDevice, stream_),
                       "cudaMemcpyAsync (all_to_all_v's own block)");
        uint64_t wire = 0;
        ncclResult_t first = ncclSuccess;
        const char* failed = "";
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        for (int q = 0; q < P; ++q) {
            if (q == me) continue;
            if (recv_counts[q] > 0 && first == ncclSuccess) {
                first = ncclRecv(static_cast<char*>(recv) + recv_off[q] * es, recv_counts[q], nt, q, nccl_, stream_);
                if (first != ncclSuccess) failed = "ncclRecv";
            }
            if (send_counts[q] > 0 && first == ncclSuccess) {
                first = ncclSend(static_cast<const char*>(send) + send_off[q] * es, send_counts[q], nt, q, nccl_,
                                 stream_);
                if (first != ncclSuccess) failed = "ncclSend";
            }
            wire += uint64_t(send_counts[q]) * es;
        }
        const ncclResult_t end = ncclGroupEnd();  // closed even after a failed call
        check_nccl(first, failed);
        check_nccl(end, "ncclGroupEnd");
        count(CommOp::all_to_all, wire);
        finish()->wait();
    }

    /// buf is HOST memory (as for MpiComm): staged through pinned and device scratch on the comm
    /// stream, after every operation issued before it; the host waits under the watchdog. The
    /// pinned scratch has separate halves for the upload and the download (a queued upload must not
    /// share its source with a later download's destination).
    void all_reduce_max(float* buf, size_t n) override {
        if (n == 0) return;
        check_alive("all_reduce_max");
        const size_t bytes = n * sizeof(float);
        if (bytes > max_bytes_) {
            drain("all_reduce_max");  // the old scratch may still be in use on the comm stream
            check_cuda(cudaFree(max_dev_), "cudaFree");
            check_cuda(cudaFreeHost(max_host_), "cudaFreeHost");
            max_dev_ = nullptr, max_host_ = nullptr, max_bytes_ = 0;
            check_cuda(cudaMalloc(&max_dev_, bytes), "cudaMalloc");
            check_cuda(cudaMallocHost(&max_host_, 2 * bytes), "cudaMallocHost");
            max_bytes_ = bytes;
        }
        std::memcpy(max_host_, buf, bytes);
        last_op_ = "all_reduce_max";
        ++issued_;
        check_cuda(cudaMemcpyAsync(max_dev_, max_host_, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
        check_nccl(ncclAllReduce(max_dev_, max_dev_, n, ncclFloat32, ncclMax, nccl_, stream_), "ncclAllReduce(max)");
        check_cuda(cudaMemcpyAsync(max_host_ + n, max_dev_, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
        drain("all_reduce_max");
        std::memcpy(buf, max_host_ + n, bytes);
    }

    /// Waits (host) for every operation issued so far, under the watchdog, then meets the group
    /// in an MPI barrier polled against the same deadline.
    void barrier() override {
        const auto start = std::chrono::steady_clock::now();
        drain("barrier");
        MPI_Request req;
        if (MPI_Ibarrier(mpi_, &req) != MPI_SUCCESS) throw error("MPI_Ibarrier failed");
        for (int done = 0; !done;) {
            if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) throw error("MPI_Test (barrier) failed");
            if (!done && past(start))
                throw error("barrier: not every rank arrived within " + std::to_string(opt_.timeout_s) + " s");
            std::this_thread::yield();  // peers may share this core
        }
    }

    // ---- host waits (parallel/host_wait.hpp) ----
    std::string async_error() override {
        std::lock_guard lock(abort_mu_);
        ncclResult_t async = ncclSuccess;
        if (aborted_ || ncclCommGetAsyncError(nccl_, &async) != ncclSuccess) return "";
        return async == ncclSuccess || async == ncclInProgress ? "" : ncclGetErrorString(async);
    }
    /// Calls ncclCommAbort once (from a watchdog thread or after an async error).
    void abort() override {
        std::lock_guard lock(abort_mu_);
        if (aborted_) return;
        aborted_ = true;
        ncclCommAbort(nccl_);
    }
    /// "NcclComm on world ranks [0, 1], newest operation all_reduce (3 issued)". last_op_ and
    /// issued_ change on the calling thread only, which is the one that describes.
    std::string describe() const override {
        return "NcclComm on " + Comm::describe() + ", newest operation " + last_op_ + " (" + std::to_string(issued_) +
               " issued)";
    }
    double host_timeout_s() const override { return opt_.timeout_s; }

    // ---- used by NcclWork ----
    Ops& ops() { return ops_; }
    void release(Event e) { free_events_.push_back(e); }

private:
    /// CommError "NcclComm on world ranks [..]: <what>".
    CommError error(const std::string& what) const {
        return CommError("NcclComm on world ranks " + ranks_text(ranks_, ", ") + ": " + what);
    }
    void check_nccl(ncclResult_t r, const char* call) {
        if (r == ncclSuccess) return;
        const char* detail = nccl_ != nullptr ? ncclGetLastError(nccl_) : "";
        throw error(std::string(call) + " failed: " + ncclGetErrorString(r) + (*detail ? std::string(" (") + detail + ")" : ""));
    }
    void check_cuda(cudaError_t r, const char* call) {
        if (r != cudaSuccess) throw error(std::string(call) + " failed: " + cudaGetErrorString(r));
    }
    void check_alive(const char* op) const {
        if (aborted_)
            throw error(std::string(op) + ": the communicator was aborted (a timeout or an error) after " + last_op_);
    }
    static void require_float(DType t, const char* op) {
        if (t == DType::u8) throw std::invalid_argument(std::string("NcclComm: ") + op + " of u8 (sums take f32 or bf16)");
    }
    /// (P-1)/P of the full length n*P: (P-1)*n*es bytes (0 on one rank).
    uint64_t wire(size_t n, DType t) const { return uint64_t(size() - 1) * n * dtype_size(t); }
    bool past(std::chrono::steady_clock::time_point start) const {
        return opt_.timeout_s > 0 &&
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > opt_.timeout_s;
    }

    /// The comm stream waits for the work queued so far on the caller's current stream.
    void begin(const char* op) {
        check_alive(op);
        last_op_ = op;
        ++issued_;
        ops_.record_event(ready_);
        check_cuda(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(ready_), 0), "cudaStreamWaitEvent");
    }
    /// Records a pooled done event after the NCCL call and hands it to the handle.
    CommHandle finish() {
        Event done = acquire();
        check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(done), stream_), "cudaEventRecord");
        return std::make_unique<NcclWork>(*this, done);
    }
    Event acquire() {
        if (free_events_.empty()) return ops_.create_event();
        Event e = free_events_.back();
        free_events_.pop_back();
        return e;
    }

    /// Host wait for everything issued on the comm stream, under the watchdog (host_wait.hpp).
    void drain(const char* op) {
        check_alive(op);
        Event e = acquire();
        try {
            check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(e), stream_), "cudaEventRecord");
            poll_with_watchdog(
                [&] {
                    const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(e));
                    if (q == cudaErrorNotReady) return false;
                    check_cuda(q, "cudaEventQuery");
                    return true;
                },
                {{this, ""}}, op);
        } catch (...) {
            release(e);
            throw;
        }
        release(e);
    }

    Ops& ops_;
    std::vector<int> ranks_;
    CommOptions opt_;
    int rank_ = 0;
    MPI_Comm mpi_ = MPI_COMM_NULL;
    ncclComm_t nccl_ = nullptr;
    cudaStream_t stream_ = nullptr;
    Event ready_ = nullptr;            ///< re-recorded per call: a wait binds the record it saw
    std::vector<Event> free_events_;   ///< the done-event pool
    std::string last_op_ = "nothing";  ///< the newest operation issued (for timeout messages)
    uint64_t issued_ = 0;              ///< operations issued so far
    std::mutex abort_mu_;              ///< orders ncclCommAbort against ncclCommGetAsyncError
    std::atomic<bool> aborted_{false};
    float* max_dev_ = nullptr;         ///< all_reduce_max scratch (device, pinned host)
    float* max_host_ = nullptr;        ///< 2 x max_bytes_: upload half, download half
    size_t max_bytes_ = 0;
};

NcclWork::~NcclWork() {
    try {
        wait();
    } catch (const std::exception&) {  // a failed wait surfaces at the comm's next host wait
    }
}

void NcclWork::wait() {
    if (done_ == nullptr) return;
    comm_.ops().wait_event(done_);
    comm_.release(done_);
    done_ = nullptr;
}

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(Ops& ops, const std::vector<int>& world_ranks, const CommOptions& opt) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized) throw CommError("make_nccl_comm: MPI is not initialized (call mpi_init_once first)");
    if (std::string(ops.name()) != "cuda")
        throw std::invalid_argument(std::string("make_nccl_comm: needs the cuda backend, got \"") + ops.name() + "\"");
    int me = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    std::vector<int> ranks = checked_group(world_ranks, me, world);
    return std::make_unique<NcclComm>(ops, std::move(ranks), me, opt);
}

}  // namespace llmtrain
