// parallel/mpi_comm.cpp — MpiComm, the host-buffer Comm of the CPU backend (MPI's start-up is in
// parallel/mpi_start.cpp).
//
// Sums in rank order. reduce_scatter_sum moves bytes only (MPI_Ialltoall: every rank receives every
// rank's copy of its own chunk) and then the owning rank adds the P contributions itself, in rank
// order 0..P-1 (fp32 in fp32; bf16 accumulated in fp32 and rounded once, to nearest even).
// all_reduce_sum is that reduce-scatter followed by an all-gather (the bandwidth-optimal
// decomposition of ring all-reduce, Patarasuk & Yuan 2009), with chunks balanced to within one
// element so that any n works in place. MPI_Allreduce would leave the order of the additions to the
// library; this way every rank gets the same bits, equal to a single-process rank-order sum.
//
// Asynchrony. Every operation starts non-blocking MPI calls and returns an MpiWork that owns what
// MPI reads and writes until completion (count arrays, datatypes, and scratch, which it hands back
// to its Comm's pool when done). A sum has a second phase (the local add, then for all_reduce an
// MPI_Iallgatherv) that wait() or test() starts once the first is done. MPI matches collectives on
// a communicator by the order they are started, so the all-gathers run on a second communicator
// and start in the order their all-reduces did (PhaseOrder: test() leaves an early one waiting for
// its turn); ranks must still wait on their reduces in the order started. Several handles may be in
// flight on one Comm; wait them before the Comm goes.
//
// Timeout (CommOptions::timeout_s, config key parallel.timeout_s). wait() polls with MPI_Testall —
// spinning (yielding) for 100 ms, then sleeping 100 us doubling to 1 ms between polls, so a rank
// waiting on a hung peer stays near idle. Past the limit it probes the peers (OverdueWait,
// parallel/nodes.hpp): it waits on while one answers busy within its limit, else throws CommError
// naming the operation and the ranks. MPI cannot cancel a collective, so a timed-out operation is
// abandoned: its scratch lives until exit (MPI may still write it), and the run is expected to end.
//
// Large counts: every call moves at most one segment (2^25 elements per rank, see
// parallel/mpi_comm_testing.hpp) so no MPI count nears INT_MAX. Reduce-scatter and all-gather address
// chunk c of a segment through a datatype whose extent is the chunk length n (c*n is never an int).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include "model/bf16.hpp"
#include "parallel/comm.hpp"
#include "parallel/hier_comm.hpp"
#include "parallel/mpi_comm_testing.hpp"
#include "parallel/nodes.hpp"

namespace llmtrain {

namespace {

size_t g_segment_elements = size_t(1) << 25;
std::vector<int> g_perturbed_group;  // set_mpi_perturbed_group's world ranks (tests only)

/// Throws CommError naming `what` and MPI's message when rc is not MPI_SUCCESS.
void check(int rc, const std::string& what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    throw CommError("MPI: " + what + " failed: " + std::string(msg, len));
}

const char* dtype_label(DType t) { return t == DType::f32 ? "fp32" : t == DType::bf16 ? "bf16" : "u8"; }

/// The MPI type that moves one element of `t` as raw bits (MPI never computes on our sums).
MPI_Datatype mpi_type(DType t) {
    return t == DType::f32 ? MPI_UINT32_T : t == DType::bf16 ? MPI_UINT16_T : MPI_UINT8_T;
}

/// out[i] = in[0][i] + in[1][i] + ... + in[P-1][i] in that order, for in laid out (P, len).
/// fp32 adds in fp32; bf16 accumulates in fp32 and rounds once (nearest even).
void add_in_rank_order(const uint8_t* in, int P, size_t len, DType t, uint8_t* out) {
    if (t == DType::f32) {
        const float* x = reinterpret_cast<const float*>(in);
        float* o = reinterpret_cast<float*>(out);
        for (size_t i = 0; i < len; ++i) {
            float acc = x[i];
            for (int r = 1; r < P; ++r) acc += x[r * len + i];
            o[i] = acc;
        }
    } else {
        const uint16_t* x = reinterpret_cast<const uint16_t*>(in);
        uint16_t* o = reinterpret_cast<uint16_t*>(out);
        for (size_t i = 0; i < len; ++i) {
            float acc = bf16_to_f32(x[i]);
            for (int r = 1; r < P; ++r) acc += bf16_to_f32(x[r * len + i]);
            o[i] = f32_to_bf16(acc);
        }
    }
}

/// Moves each of the len fp32/bf16 values at p up by one unit in the last place (the test seam
/// set_mpi_perturbed_group).
void perturb_last_bit(uint8_t* p, size_t len, DType t) {
    for (size_t i = 0; i < len; ++i) {
        if (t == DType::f32) {
            uint32_t x;
            std::memcpy(&x, p + 4 * i, 4);
            ++x;
            std::memcpy(p + 4 * i, &x, 4);
        } else {
            uint16_t x;
            std::memcpy(&x, p + 2 * i, 2);
            ++x;
            std::memcpy(p + 2 * i, &x, 2);
        }
    }
}

/// Scratch buffers kept for reuse by one Comm: a fresh buffer costs a page fault per page on first
/// touch (about as long as the transfer itself), so finished operations hand theirs back. Holds at
/// most the peak scratch of the operations in flight at once.
class ScratchPool {
public:
    /// A buffer of at least `bytes` (contents undefined): the smallest free one that fits, else the
    /// largest free one grown (or a new one).
    std::vector<uint8_t> take(size_t bytes) {
        auto fits = free_.end(), largest = free_.end();
        for (auto it = free_.begin(); it != free_.end(); ++it) {
            if (it->size() >= bytes && (fits == free_.end() || it->size() < fits->size())) fits = it;
            if (largest == free_.end() || it->size() > largest->size()) largest = it;
        }
        auto pick = fits != free_.end() ? fits : largest;
        std::vector<uint8_t> b;
        if (pick != free_.end()) {
            b = std::move(*pick);
            free_.erase(pick);
        }
        if (b.size() < bytes) b.resize(bytes);
        return b;
    }
    void give(std::vector<uint8_t> b) {
        if (!b.empty()) free_.push_back(std::move(b));
    }

private:
    std::vector<std::vector<uint8_t>> free_;
};

/// What MPI reads or writes until an operation's requests complete.
struct Inflight {
    explicit Inflight(std::shared_ptr<ScratchPool> p) : pool(std::move(p)) {}
    std::shared_ptr<ScratchPool> pool;
    std::vector<MPI_Request> reqs;
    std::vector<uint8_t> scratch;  // from pool (may be longer than asked)
    std::vector<std::vector<int>> arrays;  // counts and displacements of the v-collectives
    std::vector<std::pair<size_t, MPI_Datatype>> blocks;  // (len, type) made by block()

    ~Inflight() {
        pool->give(std::move(scratch));
        if (!mpi_active()) return;
        for (auto& b : blocks) MPI_Type_free(&b.second);
    }

    /// A datatype of `len` elements of `t` whose extent is `stride` elements, so that block c of a
    /// collective sits at c*stride elements (made once per len).
    MPI_Datatype block(DType t, size_t len, size_t stride) {
        for (auto& b : blocks)
            if (b.first == len) return b.second;
        MPI_Datatype run, blk;
        check(MPI_Type_contiguous(int(len), mpi_type(t), &run), "MPI_Type_contiguous");
        check(MPI_Type_create_resized(run, 0, MPI_Aint(stride * dtype_size(t)), &blk), "MPI_Type_create_resized");
        MPI_Type_free(&run);
        check(MPI_Type_commit(&blk), "MPI_Type_commit");
        blocks.emplace_back(len, blk);
        return blk;
    }

    MPI_Request* next_request() { return &reqs.emplace_back(MPI_REQUEST_NULL); }
};

/// Abandoned operations (timed out or failed): MPI may still use their memory, so it lives until
/// the process exits (after MPI_Finalize).
std::vector<std::unique_ptr<Inflight>>& abandoned() {
    static std::vector<std::unique_ptr<Inflight>> list;
    return list;
}

using Clock = std::chrono::steady_clock;
Clock::duration seconds(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

/// The order in which a Comm's all-reduces start their all-gathers (on a communicator of their own):
/// the order the all-reduces were started, on every rank alike, whether wait() or test() starts them.
struct PhaseOrder {
    uint64_t issued = 0, started = 0;  // tickets handed out; all-gathers started (whose turn it is)
};

/// An operation in flight on an MpiComm (see the file comment for the phases and the timeout).
class MpiWork final : public CommWork {
public:
    /// `what` names the operation ("all_reduce_sum of 12 fp32 elements"), `waiting_for` the ranks
    /// it needs ("world ranks [0,1]"), `peers` their world ranks (pinged after a timeout, to name
    /// the ones gone: parallel/nodes.hpp); timeout_s <= 0 waits forever.
    MpiWork(std::string what, std::string waiting_for, std::vector<int> peers, double timeout_s,
            std::shared_ptr<ScratchPool> pool)
        : what_(std::move(what)), waiting_for_(std::move(waiting_for)), peers_(std::move(peers)),
          timeout_s_(timeout_s), st_(std::make_unique<Inflight>(std::move(pool))) {}

    Inflight& st() { return *st_; }
    /// The second phase: runs inside wait() once the first phase's requests complete; it may
    /// start more requests (into st().reqs), which wait() then waits for too.
    void then(std::function<void(Inflight&)> f) { next_ = std::move(f); }
    /// The second phase starts only in `order`'s turn for `ticket` (all-reduce's all-gather).
    void in_order(std::shared_ptr<PhaseOrder> order, uint64_t ticket) {
        order_ = std::move(order);
        ticket_ = ticket;
    }
    const std::string& what() const { return what_; }

    void wait() override {
        if (!st_) {
            if (error_.empty()) return;
            throw CommError(error_);
        }
        try {
            const Clock::time_point start = Clock::now();
            Clock::time_point deadline = start + seconds(timeout_s_);
            std::unique_ptr<OverdueWait> overdue;  // made once the limit passes
            poll(start, deadline, overdue);
            if (next_) {
                if (!my_turn())
                    throw std::logic_error(what_ + ": waited before an all-reduce started earlier on this Comm; wait "
                                                   "them in the order they were started");
                second_phase();
                poll(start, deadline, overdue);
            }
        } catch (const std::exception& e) {
            abandon(e);
            throw;
        }
        st_.reset();
    }

    bool test() override {
        if (!st_) return true;  // done, or failed (wait() rethrows)
        try {
            int done = 0;
            check(MPI_Testall(int(st_->reqs.size()), st_->reqs.data(), &done, MPI_STATUSES_IGNORE),
                  "MPI_Testall (" + what_ + ")");
            if (!done) return false;
            if (next_) {  // the second phase starts now if its turn has come; wait() polls what it adds
                if (my_turn()) second_phase();
                return false;
            }
        } catch (const std::exception& e) {
            abandon(e);
            return true;
        }
        st_.reset();
        return true;
    }

    ~MpiWork() override {
        if (!st_) return;
        if (std::uncaught_exceptions() > 0) {  // unwinding from another error: do not wait on top of it
            abandoned().push_back(std::move(st_));
            return;
        }
        try {
            wait();
        } catch (const std::exception& e) {
            // A destructor cannot throw, and the caller relies on a result that never came.
            std::fprintf(stderr, "llmtrain: %s (in a comm handle destroyed without wait())\n", e.what());
            mpi_abort(1);
        }
    }

private:
    /// A failed operation: its error kept for later waits, its requests and scratch left to the
    /// abandoned list (MPI cannot cancel a collective; the job is ending).
    void abandon(const std::exception& e) {
        error_ = e.what();
        abandoned().push_back(std::move(st_));
    }

    /// Polls st_->reqs until all complete. Each time `deadline` passes (timeout_s_ > 0), `overdue`
    /// (made then) probes the peers and moves the deadline on, or throws CommError.
    void poll(Clock::time_point start, Clock::time_point& deadline, std::unique_ptr<OverdueWait>& overdue) {
        // Nonblocking collectives advance only inside MPI calls, so a large message needs many
        // polls: for the first 100 ms poll continuously, yielding the core (on an oversubscribed
        // machine the peer may need it), then sleep between polls (100 us doubling to 1 ms) so a
        // rank waiting on a hung peer does not burn a core until the timeout. Sleeping after a
        // short spin instead (1 ms) made ZeRO's per-unit collectives ~2x slower than DP's one
        // all-reduce on 2 cores (tools/bench/zero_cpu.sh).
        const auto spin = std::chrono::milliseconds(100);
        auto nap = std::chrono::microseconds(100);
        for (;;) {
            int done = 0;
            check(MPI_Testall(int(st_->reqs.size()), st_->reqs.data(), &done, MPI_STATUSES_IGNORE),
                  "MPI_Testall (" + what_ + ")");
            if (done) return;
            const Clock::time_point now = Clock::now();
            if (timeout_s_ > 0 && now >= deadline) {
                if (!overdue) overdue = std::make_unique<OverdueWait>(what_, peers_, timeout_s_);
                char limit[32];
                std::snprintf(limit, sizeof limit, "%g", timeout_s_);
                deadline = Clock::now() + seconds(overdue->next(what_ + " did not complete within parallel.timeout_s = " +
                                                                limit + " s; waiting for " + waiting_for_));
                continue;
            }
            const auto waited = now - start;
            if (waited < spin) {
                std::this_thread::yield();
                continue;
            }
            serve_liveness();  // a peer whose own wait timed out may be asking whether we are alive
            std::this_thread::sleep_for(nap);
            nap = std::min(nap * 2, std::chrono::microseconds(1000));
        }
    }

    bool my_turn() const { return !order_ || order_->started == ticket_; }
    void second_phase() {
        auto f = std::move(next_);
        next_ = nullptr;
        f(*st_);
        if (order_) ++order_->started;
    }

    std::string what_, waiting_for_;
    std::vector<int> peers_;
    std::shared_ptr<PhaseOrder> order_;  // null: a second phase without MPI calls (reduce-scatter's add)
    uint64_t ticket_ = 0;
    double timeout_s_;
    std::unique_ptr<Inflight> st_;  // null once complete or abandoned
    std::function<void(Inflight&)> next_;
    std::string error_;  // set when the operation failed; wait() throws it again
};

class MpiComm final : public Comm {
public:
    MpiComm(MPI_Comm comm, std::vector<int> world_ranks, const CommOptions& opt)
        : comm_(comm), world_(std::move(world_ranks)), timeout_s_(opt.timeout_s), seg_(g_segment_elements),
          perturb_(!g_perturbed_group.empty() && world_ == g_perturbed_group) {
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
        check(MPI_Comm_dup(comm_, &phase2_), "MPI_Comm_dup");
        MPI_Comm_set_errhandler(phase2_, MPI_ERRORS_RETURN);
    }
    ~MpiComm() override {
        if (!mpi_active()) return;
        MPI_Comm_free(&phase2_);
        MPI_Comm_free(&comm_);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const std::vector<int>& world_ranks() const override { return world_; }

    CommHandle all_reduce_sum_async(void* buf, size_t n, DType t) override {
        auto w = collective("all_reduce_sum of " + elements(n, t));
        require_sum_type(t, w->what());
        const int P = size_, me = rank_;
        const size_t es = dtype_size(t);
        count(CommOp::all_reduce, uint64_t(2) * (P - 1) * n * es / P);
        if (P == 1 || n == 0) return w;
        // Segment [off, off+len) of buf; its chunk c is [first(c), first(c+1)) relative to off,
        // balanced to within one element. st.arrays[arr + 0..3] hold the chunk sizes and starts
        // (sent by the all-to-all, gathered by the all-gather) and where the P copies of our chunk
        // land in the segment's scratch, (P, mine) at scratch_off.
        struct Segment {
            size_t off, scratch_off, arr;
        };
        std::vector<Segment> segs;
        Inflight& st = w->st();
        size_t scratch = 0;
        for (size_t off = 0; off < n; off += seg_) {
            const size_t len = std::min(seg_, n - off);
            auto first = [&](int c) { return int(len / P * c + std::min<size_t>(c, len % P)); };
            const int mine = first(me + 1) - first(me);
            segs.push_back({off, scratch, st.arrays.size()});
            std::vector<int> size(P), start(P), rsize(P, mine), rstart(P);
            for (int c = 0; c < P; ++c) size[c] = first(c + 1) - first(c), start[c] = first(c), rstart[c] = c * mine;
            for (auto* a : {&size, &start, &rsize, &rstart}) st.arrays.push_back(std::move(*a));
            scratch += P * size_t(mine) * es;
        }
        st.scratch = st.pool->take(scratch);
        const MPI_Datatype T = mpi_type(t);
        for (const Segment& s : segs) {
            const auto* a = &st.arrays[s.arr];
            check(MPI_Ialltoallv(static_cast<uint8_t*>(buf) + s.off * es, a[0].data(), a[1].data(), T,
                                 st.scratch.data() + s.scratch_off, a[2].data(), a[3].data(), T, comm_,
                                 st.next_request()),
                  "MPI_Ialltoallv (" + w->what() + ")");
        }
        w->in_order(order_, order_->issued++);
        w->then([segs = std::move(segs), buf, t, es, P, me, T, comm = phase2_, what = w->what(), perturb = perturb_](Inflight& st) {
            for (const Segment& s : segs) {
                const auto* a = &st.arrays[s.arr];
                uint8_t* seg = static_cast<uint8_t*>(buf) + s.off * es;
                add_in_rank_order(st.scratch.data() + s.scratch_off, P, size_t(a[0][me]), t, seg + size_t(a[1][me]) * es);
                if (perturb) perturb_last_bit(seg + size_t(a[1][me]) * es, size_t(a[0][me]), t);  // before it is shared
                check(MPI_Iallgatherv(MPI_IN_PLACE, 0, T, seg, a[0].data(), a[1].data(), T, comm, st.next_request()),
                      "MPI_Iallgatherv (" + what + ")");
            }
        });
        return w;
    }

    CommHandle reduce_scatter_sum_async(const void* send, void* recv, size_t n, DType t) override {
        auto w = collective("reduce_scatter_sum of " + elements(n, t) + " per rank");
        require_sum_type(t, w->what());
        const int P = size_;
        const size_t es = dtype_size(t);
        count(CommOp::reduce_scatter, uint64_t(P - 1) * n * es);
        if (n == 0) return w;
        if (P == 1) {
            std::memmove(recv, send, n * es);
            return w;
        }
        Inflight& st = w->st();
        st.scratch = st.pool->take(P * n * es);  // segment [off, off+len): its (P, len) contributions at P*off
        for (size_t off = 0; off < n; off += seg_) {
            const size_t len = std::min(seg_, n - off);
            check(MPI_Ialltoall(static_cast<const uint8_t*>(send) + off * es, 1, st.block(t, len, n),
                                st.scratch.data() + P * off * es, int(len), mpi_type(t), comm_, st.next_request()),
                  "MPI_Ialltoall (" + w->what() + ")");
        }
        const size_t seg = seg_;
        w->then([recv, n, t, es, P, seg, perturb = perturb_](Inflight& st) {
            for (size_t off = 0; off < n; off += seg)
                add_in_rank_order(st.scratch.data() + P * off * es, P, std::min(seg, n - off), t,
                                  static_cast<uint8_t*>(recv) + off * es);
            if (perturb) perturb_last_bit(static_cast<uint8_t*>(recv), n, t);
        });
        return w;
    }

    CommHandle all_gather_async(const void* send, void* recv, size_t n, DType t) override {
        const int P = size_;
        const size_t es = dtype_size(t);
        count(CommOp::all_gather, uint64_t(P - 1) * n * es);
        auto w = collective("all_gather of " + elements(n, t) + " per rank");
        if (n == 0) return w;
        const uint8_t* s = static_cast<const uint8_t*>(send);
        uint8_t* r = static_cast<uint8_t*>(recv);
        const bool in_place = s == r + rank_ * n * es;
        const auto sa = reinterpret_cast<uintptr_t>(s), ra = reinterpret_cast<uintptr_t>(r);
        if (!in_place && sa < ra + P * n * es && ra < sa + n * es)
            throw std::invalid_argument(w->what() + ": send overlaps recv but is not at recv + rank()*n (in place)");
        if (P == 1) {
            if (!in_place) std::memcpy(r, s, n * es);
            return w;
        }
        Inflight& st = w->st();
        for (size_t off = 0; off < n; off += seg_) {
            const size_t len = std::min(seg_, n - off);
            check(MPI_Iallgather(in_place ? MPI_IN_PLACE : s + off * es, int(len), mpi_type(t), r + off * es, 1,
                                 st.block(t, len, n), comm_, st.next_request()),
                  "MPI_Iallgather (" + w->what() + ")");
        }
        return w;
    }

    CommHandle broadcast_async(void* buf, size_t n, DType t, int root) override {
        check_peer(root, "broadcast root");
        const size_t es = dtype_size(t);
        count(CommOp::broadcast, size_ > 1 && rank_ == root ? n * es : 0);
        auto w = collective("broadcast of " + elements(n, t) + " from world rank " + std::to_string(world_[root]));
        if (size_ == 1) return w;
        for (size_t off = 0; off < n; off += seg_)
            check(MPI_Ibcast(static_cast<uint8_t*>(buf) + off * es, int(std::min(seg_, n - off)), mpi_type(t), root,
                             comm_, w->st().next_request()),
                  "MPI_Ibcast (" + w->what() + ")");
        return w;
    }

    CommHandle send_async(const void* buf, size_t n, DType t, int peer) override {
        check_peer(peer, "send peer");
        const size_t es = dtype_size(t);
        count(CommOp::send, peer == rank_ ? 0 : n * es);  // a message to oneself is not on the wire
        auto w = point_to_point("send of " + elements(n, t) + " to", peer);
        for (size_t off = 0; off < n; off += seg_)
            check(MPI_Isend(static_cast<const uint8_t*>(buf) + off * es, int(std::min(seg_, n - off)), mpi_type(t),
                            peer, kTag, comm_, w->st().next_request()),
                  "MPI_Isend (" + w->what() + ")");
        return w;
    }

    CommHandle recv_async(void* buf, size_t n, DType t, int peer) override {
        check_peer(peer, "recv peer");
        count(CommOp::recv, 0);  // receiving puts nothing on the wire
        const size_t es = dtype_size(t);
        auto w = point_to_point("recv of " + elements(n, t) + " from", peer);
        for (size_t off = 0; off < n; off += seg_)
            check(MPI_Irecv(static_cast<uint8_t*>(buf) + off * es, int(std::min(seg_, n - off)), mpi_type(t), peer,
                            kTag, comm_, w->st().next_request()),
                  "MPI_Irecv (" + w->what() + ")");
        return w;
    }

    void all_reduce_max(float* buf, size_t n) override {
        // max is exact and order-free, so MPI's own reduction is bit-identical on every rank.
        count(CommOp::all_reduce, uint64_t(2) * (size_ - 1) * n * 4 / size_);
        auto w = collective("all_reduce_max of " + elements(n, DType::f32));
        for (size_t off = 0; off < n && size_ > 1; off += seg_)
            check(MPI_Iallreduce(MPI_IN_PLACE, buf + off, int(std::min(seg_, n - off)), MPI_FLOAT, MPI_MAX, comm_,
                                 w->st().next_request()),
                  "MPI_Iallreduce (" + w->what() + ")");
        w->wait();
    }

    void barrier() override {
        auto w = collective("barrier");
        check(MPI_Ibarrier(comm_, w->st().next_request()), "MPI_Ibarrier");
        w->wait();
    }

private:
    static constexpr int kTag = 0;

    static std::string elements(size_t n, DType t) { return std::to_string(n) + " " + dtype_label(t) + " elements"; }

    static void require_sum_type(DType t, const std::string& what) {
        if (t == DType::u8) throw std::invalid_argument(what + ": sums are defined for fp32 and bf16 only");
    }

    std::unique_ptr<MpiWork> collective(const std::string& what) const {
        return std::make_unique<MpiWork>(what + " on world ranks " + ranks_text(world_),
                                         "world ranks " + ranks_text(world_), world_, timeout_s_, pool_);
    }

    /// `what` ends with "to" or "from"; the peer's world rank follows.
    std::unique_ptr<MpiWork> point_to_point(const std::string& what, int peer) const {
        const std::string p = "world rank " + std::to_string(world_[peer]);
        return std::make_unique<MpiWork>(what + " " + p + " (group world ranks " + ranks_text(world_) + ")", p,
                                         std::vector<int>{world_[peer]}, timeout_s_, pool_);
    }

    MPI_Comm comm_;
    MPI_Comm phase2_;  // the all-reduces' all-gathers, started in PhaseOrder
    std::shared_ptr<PhaseOrder> order_ = std::make_shared<PhaseOrder>();
    int rank_ = 0, size_ = 1;
    std::vector<int> world_;  // world rank of each group index
    double timeout_s_;
    size_t seg_;  // most elements one MPI call moves per rank
    bool perturb_;  // set_mpi_perturbed_group named this group
    std::shared_ptr<ScratchPool> pool_ = std::make_shared<ScratchPool>();
};

}  // namespace

void set_mpi_segment_elements(size_t elements) {
    if (elements == 0) throw std::invalid_argument("set_mpi_segment_elements: the segment must hold >= 1 element");
    g_segment_elements = elements;
}

void set_mpi_perturbed_group(const std::vector<int>& world_ranks) { g_perturbed_group = world_ranks; }

namespace {

/// make_mpi_comm without the hierarchical wrapper.
std::unique_ptr<Comm> make_flat_mpi_comm(const std::vector<int>& world_ranks, const CommOptions& opt) {
    const int W = world_size(), me = world_rank();
    MPI_Comm out = MPI_COMM_NULL;
    if (world_ranks.empty()) {
        check(MPI_Comm_dup(MPI_COMM_WORLD, &out), "MPI_Comm_dup");
        std::vector<int> all(W);
        for (int r = 0; r < W; ++r) all[r] = r;
        return std::make_unique<MpiComm>(out, std::move(all), opt);
    }
    std::vector<int> seen(W, 0);
    for (int r : world_ranks) {
        if (r < 0 || r >= W)
            throw std::invalid_argument("make_mpi_comm: rank " + std::to_string(r) + " outside world of " +
                                        std::to_string(W));
        if (seen[r]++) throw std::invalid_argument("make_mpi_comm: rank " + std::to_string(r) + " listed twice");
    }
    if (!seen[me])
        throw std::invalid_argument("make_mpi_comm: calling rank " + std::to_string(me) + " is not in the group");
    MPI_Group world_group, group;
    check(MPI_Comm_group(MPI_COMM_WORLD, &world_group), "MPI_Comm_group");
    check(MPI_Group_incl(world_group, int(world_ranks.size()), world_ranks.data(), &group), "MPI_Group_incl");
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &out);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    check(rc, "MPI_Comm_create_group");
    return std::make_unique<MpiComm>(out, world_ranks, opt);
}

}  // namespace

std::unique_ptr<Comm> make_mpi_comm(const std::vector<int>& world_ranks, const CommOptions& opt) {
    auto flat = make_flat_mpi_comm(world_ranks, opt);
    if (!opt.hierarchical) return flat;
    const HierSplit s = hier_split(flat->world_ranks(), node_map(), world_rank());
    if (s.intra.empty()) return flat;
    CommOptions sub = opt;
    sub.hierarchical = false;
    auto intra = make_flat_mpi_comm(s.intra, sub), gather = make_flat_mpi_comm(s.intra, sub);
    auto inter = make_flat_mpi_comm(s.inter, sub);
    return make_hier_comm(std::move(flat), std::move(intra), std::move(inter), std::move(gather));
}

}  // namespace llmtrain
