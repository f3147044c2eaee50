// parallel/mpi_cuda_comm.cpp — MpiCudaComm, a Comm for CUDA device buffers over MPI
// (parallel.comm = "mpi" on the cuda backend): every operation is staged through pinned host
// memory and run by an MpiComm (parallel/mpi_comm.cpp) on the same ranks, so its sums are
// MpiComm's rank-order sums and its results bitwise equal to the CPU path's wherever the order of
// the sums is the same. NCCL refuses two ranks on one GPU; this Comm does not, so `mpirun -np 4`
// on one GPU runs every layout (ZeRO, sub-DP groups, the pipeline, offload) on real hardware. On
// one GPU it is a correctness vehicle, not a speed path; on many GPUs without NCCL, a fallback.
//
// Ordering, as NcclComm (comm.hpp): an operation records `ready_` on the caller's current stream
// and makes the comm stream (non-blocking, its own) wait on it; the device→host copy of the input
// is queued there, and the host waits for it (polling, under the watchdog of host_wait.hpp). Then
// the MpiComm operation starts on the pinned copy. The handle's wait() completes it (MpiComm's
// timed wait), queues the host→device copy of the result on the comm stream and makes the caller's
// current stream wait for it: the device never waits on a peer, only the host does, in MPI's polls.
// Hence no device work can hang on a dead peer, and every peer wait is MpiComm's timed one.
//
// Staging. A pinned buffer belongs to one operation from its start until its wait() queues the
// copy back; it is then pending until the host has seen the comm stream pass that copy, and only
// then free for another operation's copy-in or MPI (cuda_emu fills a device→host destination with
// NaN when the copy is queued, so even a stream-ordered reuse must wait). An operation that finds
// no free buffer large enough first waits for the pending ones. Steady state allocates nothing.
//
// Plain C++ over <cuda_runtime.h>: built with the real runtime into the nvcc executables and
// against emu/ into the emulated ones (parallel/CMakeLists.txt).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/host_wait.hpp"

namespace llmtrain {
namespace {

/// A page-locked host buffer of the staging pool.
struct Pinned {
    uint8_t* p = nullptr;
    size_t bytes = 0;
};

class MpiCudaComm;

/// An operation in flight: the MpiComm handle on the pinned copy, and where its result goes.
class MpiCudaWork final : public CommWork {
public:
    /// `result` bytes at pinned.p + offset go to `dst` (device) once `host` completes (none if dst is null).
    MpiCudaWork(MpiCudaComm& comm, CommHandle host, Pinned pinned, size_t offset, void* dst, size_t result)
        : comm_(comm), host_(std::move(host)), pinned_(pinned), offset_(offset), dst_(dst), result_(result) {}
    ~MpiCudaWork() override;
    void wait() override;

private:
    MpiCudaComm& comm_;
    CommHandle host_;  ///< null once waited
    Pinned pinned_;
    size_t offset_;
    void* dst_;
    size_t result_;
};

class MpiCudaComm final : public Comm {
public:
    MpiCudaComm(Ops& ops, std::unique_ptr<Comm> host, const CommOptions& opt)
        : ops_(ops), host_(std::move(host)), opt_(opt) {
        check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        ready_ = ops_.create_event();
        staged_ = ops_.create_event();
        done_ = ops_.create_event();
        register_abortable(this);
    }

    ~MpiCudaComm() override {
        unregister_abortable(this);
        // Raw calls that ignore errors: the device may hold a sticky error. The comm stream holds
        // local copies only, so this wait cannot hang on a peer.
        cudaStreamSynchronize(stream_);
        for (auto* list : {&free_, &pending_})
            for (Pinned& b : *list) cudaFreeHost(b.p);
        for (Event e : {ready_, staged_, done_}) cudaEventDestroy(static_cast<cudaEvent_t>(e));
        cudaStreamDestroy(stream_);
    }

    int rank() const override { return host_->rank(); }
    int size() const override { return host_->size(); }
    const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }

    CommHandle all_reduce_sum_async(void* buf, size_t n, DType t) override {
        const size_t bytes = n * dtype_size(t);
        Pinned b = stage("all_reduce", buf, 0, bytes, bytes);
        return counted(CommOp::all_reduce, b, 0, buf, bytes, [&] { return host_->all_reduce_sum_async(b.p, n, t); });
    }
    /// Host layout in place: the P·n contributions at b.p, this rank's chunk of the sum at rank()·n.
    CommHandle reduce_scatter_sum_async(const void* send, void* recv, size_t n, DType t) override {
        const size_t chunk = n * dtype_size(t), off = rank() * chunk;
        Pinned b = stage("reduce_scatter", send, 0, size() * chunk, size() * chunk);
        return counted(CommOp::reduce_scatter, b, off, recv, chunk,
                       [&] { return host_->reduce_scatter_sum_async(b.p, b.p + off, n, t); });
    }
    /// Host layout in place: this rank's n elements at rank()·n of the gathered P·n.
    CommHandle all_gather_async(const void* send, void* recv, size_t n, DType t) override {
        const size_t chunk = n * dtype_size(t), off = rank() * chunk;
        Pinned b = stage("all_gather", send, off, chunk, size() * chunk);
        return counted(CommOp::all_gather, b, 0, recv, size() * chunk,
                       [&] { return host_->all_gather_async(b.p + off, b.p, n, t); });
    }
    CommHandle broadcast_async(void* buf, size_t n, DType t, int root) override {
        check_peer(root, "broadcast root");
        const size_t bytes = n * dtype_size(t);
        const bool me = rank() == root;
        Pinned b = stage("broadcast", me ? buf : nullptr, 0, me ? bytes : 0, bytes);
        return counted(CommOp::broadcast, b, 0, me ? nullptr : buf, bytes,
                       [&] { return host_->broadcast_async(b.p, n, t, root); });
    }
    CommHandle send_async(const void* buf, size_t n, DType t, int peer) override {
        check_peer(peer, "send peer");
        const size_t bytes = n * dtype_size(t);
        Pinned b = stage("send", buf, 0, bytes, bytes);
        return counted(CommOp::send, b, 0, nullptr, 0, [&] { return host_->send_async(b.p, n, t, peer); });
    }
    CommHandle recv_async(void* buf, size_t n, DType t, int peer) override {
        check_peer(peer, "recv peer");
        const size_t bytes = n * dtype_size(t);
        Pinned b = stage("recv", nullptr, 0, 0, bytes);
        return counted(CommOp::recv, b, 0, buf, bytes, [&] { return host_->recv_async(b.p, n, t, peer); });
    }
    /// buf is HOST memory, as for MpiComm: MpiComm's own max, after every operation started before it.
    void all_reduce_max(float* buf, size_t n) override {
        check_alive("all_reduce_max");
        mirror(CommOp::all_reduce, [&] { host_->all_reduce_max(buf, n); });  // counted as MpiComm counts it
    }
    void barrier() override {
        check_alive("barrier");
        host_->barrier();
    }

    // ---- host waits (parallel/host_wait.hpp) ----
    /// Never set: MPI failures and timeouts surface as CommError from the operation's own wait.
    std::string async_error() override { return ""; }
    /// Makes every later call throw CommError. MPI cannot cancel what is in flight; MpiComm's
    /// timed waits end it (the device holds no collective that could hang).
    void abort() override { aborted_ = true; }
    /// "MpiCudaComm on world ranks [0, 1], newest operation all_reduce (3 issued)".
    std::string describe() const override {
        return "MpiCudaComm on " + Comm::describe() + ", newest operation " + last_op_ + " (" +
               std::to_string(issued_) + " issued)";
    }
    double host_timeout_s() const override { return opt_.timeout_s; }

    // ---- used by MpiCudaWork ----
    /// Queues the result's copy to the device and makes the current stream wait for it; the buffer
    /// goes back to the pool (see "Staging").
    void finish(Pinned b, size_t offset, void* dst, size_t bytes) {
        if (dst != nullptr && bytes > 0) {
            check_cuda(cudaMemcpyAsync(dst, b.p + offset, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
            check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(done_), stream_), "cudaEventRecord");
            ops_.wait_event(done_);  // a wait binds the record it saw: done_ may be re-recorded next
        }
        pending_.push_back(b);
    }

private:
    CommError error(const std::string& what) const {
        return CommError("MpiCudaComm on " + Comm::describe() + ": " + what);
    }
    void check_cuda(cudaError_t r, const char* call) const {
        if (r != cudaSuccess) throw error(std::string(call) + " failed: " + cudaGetErrorString(r));
    }
    void check_alive(const char* op) const {
        if (aborted_)
            throw error(std::string(op) + ": the communicator was aborted (a timeout or an error) after " + last_op_);
    }

    /// Starts operation `op`: takes a pinned buffer of `total` bytes, copies `in_bytes` of device
    /// `in` to it at `in_offset` on the comm stream after the work queued so far on the current
    /// stream, and waits (host, under the watchdog) until that copy and every earlier one on the
    /// comm stream have run. in may be null (nothing to send).
    Pinned stage(const char* op, const void* in, size_t in_offset, size_t in_bytes, size_t total) {
        check_alive(op);
        last_op_ = op;
        ++issued_;
        Pinned b = take(total, op);
        ops_.record_event(ready_);
        check_cuda(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(ready_), 0), "cudaStreamWaitEvent");
        if (in != nullptr && in_bytes > 0)
            check_cuda(cudaMemcpyAsync(b.p + in_offset, in, in_bytes, cudaMemcpyDeviceToHost, stream_),
                       "cudaMemcpyAsync");
        try {
            wait_stream(std::string("MpiCudaComm ") + op + " (copying the input to the host)");
        } catch (...) {
            free_.push_back(b);
            throw;
        }
        return b;
    }
    /// The host waits (polling, under the watchdog) for the work queued so far on the comm stream.
    void wait_stream(const std::string& what) {
        check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(staged_), stream_), "cudaEventRecord");
        poll_with_watchdog(
            [&] {
                const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(staged_));
                if (q == cudaErrorNotReady) return false;
                check_cuda(q, "cudaEventQuery");
                return true;
            },
            {{this, ""}}, what);
    }

    /// Runs the MpiComm call `start` on staged buffer b, counts its bytes under `op` as MpiComm
    /// counted them (the formulas of CommStats), and wraps its handle.
    template <class Start>
    CommHandle counted(CommOp op, Pinned b, size_t offset, void* dst, size_t bytes, Start start) {
        CommHandle h;
        try {
            mirror(op, [&] { h = start(); });
        } catch (...) {
            free_.push_back(b);  // nothing started on it
            throw;
        }
        return std::make_unique<MpiCudaWork>(*this, std::move(h), b, offset, dst, bytes);
    }
    /// Runs f and counts, under `op`, the bytes the host Comm counted meanwhile.
    template <class F>
    void mirror(CommOp op, F f) {
        const uint64_t before = host_->stats().bytes[static_cast<int>(op)];
        f();
        count(op, host_->stats().bytes[static_cast<int>(op)] - before);
    }

    /// The smallest free pinned buffer of >= bytes; else, when buffers are pending, the same after
    /// waiting for their copies back (see "Staging"); else a new one (page-locked: cudaMallocHost).
    Pinned take(size_t bytes, const char* op) {
        for (int round = 0; round < 2; ++round) {
            auto pick = free_.end();
            for (auto it = free_.begin(); it != free_.end(); ++it)
                if (it->bytes >= bytes && (pick == free_.end() || it->bytes < pick->bytes)) pick = it;
            if (pick != free_.end()) {
                Pinned b = *pick;
                free_.erase(pick);
                return b;
            }
            if (pending_.empty()) break;
            wait_stream(std::string("MpiCudaComm ") + op + " (waiting for a staging buffer)");
            free_.insert(free_.end(), pending_.begin(), pending_.end());
            pending_.clear();
        }
        Pinned b;
        b.bytes = std::max<size_t>(bytes, 256);
        check_cuda(cudaMallocHost(reinterpret_cast<void**>(&b.p), b.bytes), "cudaMallocHost");
        return b;
    }

    Ops& ops_;
    std::unique_ptr<Comm> host_;  ///< the MpiComm that moves and sums the pinned copies
    CommOptions opt_;
    cudaStream_t stream_ = nullptr;
    Event ready_ = nullptr, staged_ = nullptr, done_ = nullptr;  ///< re-recorded per operation
    std::vector<Pinned> free_;         ///< staging buffers ready for any operation
    std::vector<Pinned> pending_;      ///< staging buffers whose copy back may not have run yet
    std::string last_op_ = "nothing";  ///< the newest operation (for messages)
    uint64_t issued_ = 0;
    std::atomic<bool> aborted_{false};
};

MpiCudaWork::~MpiCudaWork() {
    try {
        wait();
    } catch (const std::exception&) {  // the caller relies on nothing more; the run is ending
    }
}

void MpiCudaWork::wait() {
    if (!host_) return;
    CommHandle h = std::move(host_);
    h->wait();  // on failure the buffer is abandoned: MPI may still write it
    comm_.finish(pinned_, offset_, dst_, result_);
}

}  // namespace

/// A Comm over MPI for device buffers of the cuda backend `ops` (see the file comment), on the
/// given world ranks (all when empty). Collective over the listed ranks like make_mpi_comm.
/// Errors: std::invalid_argument for another backend or a bad rank list; CommError if MPI or CUDA fails.
std::unique_ptr<Comm> make_mpi_cuda_comm(Ops& ops, const std::vector<int>& world_ranks, const CommOptions& opt) {
    if (std::string(ops.name()) != "cuda")
        throw std::invalid_argument(std::string("make_mpi_cuda_comm: needs the cuda backend, got \"") + ops.name() + "\"");
    return std::make_unique<MpiCudaComm>(ops, make_mpi_comm(world_ranks, opt), opt);
}

}  // namespace llmtrain
