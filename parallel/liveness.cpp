// parallel/liveness.cpp — the liveness probe, busy phases and the overdue wait (see parallel/nodes.hpp;
// docs/multinode.md "When a node fails" and "While one rank works alone").
//
// Wire: a ping is the asker's sequence number (int64, tag kPing); the answer (tag kPong) is a Pong,
// sent as raw bytes (every rank runs the same binary). Nothing is pre-posted: the asker polls
// MPI_Improbe / MPI_Mrecv for pongs and keeps only those carrying its current sequence number, so a
// pong that arrives after its probe gave up is drained and dropped by the next probe, and MPI never
// writes into memory the probe no longer owns. Every send (ping or pong) keeps its bytes in g_out
// until MPI_Test says it is done.
#include <mpi.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/nodes.hpp"

namespace llmtrain {

namespace {

using Clock = std::chrono::steady_clock;

MPI_Comm g_live = MPI_COMM_NULL;  // the pings' own communicator (a dup of the world)
constexpr int kPing = 1, kPong = 2;
constexpr size_t kPhaseBytes = 120;  // a phase's text in a pong, at most

/// A liveness ping's answer on the wire.
struct Pong {
    int64_t seq;            // the ping's sequence number
    int32_t busy;           // 1: in a busy phase
    int32_t origin;         // the world rank whose work the phase is
    double seconds_left;    // of the phase's limit
    double limit_s;         // the phase's whole limit
    char phase[kPhaseBytes + 1];  // NUL-terminated
};

/// A busy phase alive on this rank.
struct Phase {
    uint64_t id;
    std::string what;
    Clock::time_point deadline;
    double limit_s;
    int origin;
};

std::mutex g_phases_mu;     // guards g_phases and g_next_id (BusyPhase may be made on any thread)
std::vector<Phase> g_phases;  // oldest first; the newest answers
uint64_t g_next_id = 1;

/// A send in flight with the bytes it sends (MPI thread only).
struct Outgoing {
    std::vector<char> bytes;
    MPI_Request req = MPI_REQUEST_NULL;
};
std::list<Outgoing> g_out;
int64_t g_seq = 0;  // this rank's newest probe
// Messages (pings and pongs) sent to / received from each world rank on g_live, for the drain at
// close_liveness_channel (MPI thread only).
std::vector<int64_t> g_sent, g_received;

void send_bytes(const void* p, size_t n, int dest, int tag) {
    Outgoing& o = g_out.emplace_back();
    o.bytes.assign(static_cast<const char*>(p), static_cast<const char*>(p) + n);
    if (MPI_Isend(o.bytes.data(), int(n), MPI_BYTE, dest, tag, g_live, &o.req) != MPI_SUCCESS) g_out.pop_back();
    else ++g_sent[size_t(dest)];
}

/// Forgets the sends MPI has completed.
void reap_sends() {
    for (auto it = g_out.begin(); it != g_out.end();) {
        int done = 0;
        if (MPI_Test(&it->req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done) it = g_out.erase(it);
        else ++it;
    }
}

/// This rank's answer to ping `seq`: the newest busy phase, if any.
Pong answer(int64_t seq) {
    Pong p{};
    p.seq = seq;
    std::lock_guard lock(g_phases_mu);
    if (g_phases.empty()) return p;
    const Phase& ph = g_phases.back();
    p.busy = 1;
    p.origin = ph.origin;
    p.seconds_left = std::chrono::duration<double>(ph.deadline - Clock::now()).count();
    p.limit_s = ph.limit_s;
    std::strncpy(p.phase, ph.what.c_str(), kPhaseBytes);
    return p;
}

uint64_t push_phase(std::string what, double limit_s, int origin) {
    if (!(limit_s > 0))
        throw std::invalid_argument("BusyPhase \"" + what + "\": the limit must be > 0 s, got " +
                                    std::to_string(limit_s));
    std::lock_guard lock(g_phases_mu);
    const uint64_t id = g_next_id++;
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
    g_phases.push_back({id, std::move(what), deadline, limit_s, origin});
    return id;
}

std::string seconds_text(double s) {
    char b[32];
    std::snprintf(b, sizeof b, s >= 10 ? "%.0f" : "%.1f", s);
    return b;
}

std::string g_text(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", s);
    return b;
}

}  // namespace

void open_liveness_channel() {
    if (MPI_Comm_dup(MPI_COMM_WORLD, &g_live) != MPI_SUCCESS)
        throw CommError("MPI: MPI_Comm_dup failed (the liveness pings' communicator)");
    MPI_Comm_set_errhandler(g_live, MPI_ERRORS_RETURN);
    int n = 0;
    MPI_Comm_size(g_live, &n);
    g_sent.assign(size_t(n), 0);
    g_received.assign(size_t(n), 0);
}

void close_liveness_channel() {
    if (g_live == MPI_COMM_NULL || !mpi_active()) return;
    const size_t n = g_sent.size();
    std::vector<int64_t> to_me(n, 0);  // what each rank sent to this one
    if (MPI_Alltoall(g_sent.data(), 1, MPI_INT64_T, to_me.data(), 1, MPI_INT64_T, g_live) == MPI_SUCCESS) {
        for (size_t src = 0; src < n; ++src)
            for (int64_t k = g_received[src]; k < to_me[src]; ++k) {  // a late pong, an unanswered ping
                MPI_Message msg;
                MPI_Status st;
                if (MPI_Mprobe(int(src), MPI_ANY_TAG, g_live, &msg, &st) != MPI_SUCCESS) break;
                int bytes = 0;
                MPI_Get_count(&st, MPI_BYTE, &bytes);
                std::vector<char> sink(size_t(std::max(bytes, 1)));
                MPI_Mrecv(sink.data(), bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            }
        for (Outgoing& o : g_out) MPI_Wait(&o.req, MPI_STATUS_IGNORE);  // all matched now
    }
    g_out.clear();
    MPI_Comm_free(&g_live);
    g_live = MPI_COMM_NULL;
}

void serve_liveness() {
    if (g_live == MPI_COMM_NULL) return;
    reap_sends();
    for (;;) {
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        if (MPI_Improbe(MPI_ANY_SOURCE, kPing, g_live, &flag, &msg, &st) != MPI_SUCCESS || !flag) return;
        int64_t seq = 0;
        MPI_Mrecv(&seq, int(sizeof seq), MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        ++g_received[size_t(st.MPI_SOURCE)];
        const Pong p = answer(seq);
        send_bytes(&p, sizeof p, st.MPI_SOURCE, kPong);
    }
}

BusyPhase::BusyPhase(std::string what, double limit_s) : BusyPhase(std::move(what), limit_s, world_rank()) {}

BusyPhase::BusyPhase(std::string what, double limit_s, int origin)
    : id_(push_phase(std::move(what), limit_s, origin)) {}

BusyPhase::~BusyPhase() {
    std::lock_guard lock(g_phases_mu);
    g_phases.erase(std::remove_if(g_phases.begin(), g_phases.end(), [&](const Phase& p) { return p.id == id_; }),
                   g_phases.end());
}

void run_busy(const std::string& what, double limit_s, const std::function<void()>& fn) {
    BusyPhase phase(what, limit_s);
    if (g_live == MPI_COMM_NULL || !mpi_active() || world_size() == 1) {
        fn();  // nobody to answer
        return;
    }
    int main_thread = 0;
    MPI_Is_thread_main(&main_thread);
    if (!main_thread)
        throw std::logic_error("run_busy(\"" + what + "\"): called from a thread other than MPI's main one (the "
                               "thread that makes MPI calls must answer the pings)");
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    std::thread worker([&] {
        try {
            fn();
        } catch (...) {
            error = std::current_exception();
        }
        std::lock_guard lock(mu);
        done = true;
        cv.notify_one();
    });
    std::unique_lock lock(mu);
    while (!done) {
        lock.unlock();
        serve_liveness();
        lock.lock();
        cv.wait_for(lock, std::chrono::milliseconds(2), [&] { return done; });
    }
    lock.unlock();
    worker.join();
    if (error) std::rethrow_exception(error);
}

std::vector<PeerAnswer> probe_peers(const std::vector<int>& ranks, double seconds) {
    if (g_live == MPI_COMM_NULL) return {};
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    std::vector<int> peers;
    for (int r : ranks)
        if (r != me) peers.push_back(r);
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    std::vector<PeerAnswer> out(peers.size());
    const int64_t seq = ++g_seq;
    for (size_t i = 0; i < peers.size(); ++i) {
        out[i].rank = peers[i];
        send_bytes(&seq, sizeof seq, peers[i], kPing);
    }
    size_t left = peers.size();
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    for (;;) {
        for (;;) {  // every pong that has come: this probe's, or a late one of an earlier probe (dropped)
            int flag = 0;
            MPI_Message msg;
            MPI_Status st;
            if (MPI_Improbe(MPI_ANY_SOURCE, kPong, g_live, &flag, &msg, &st) != MPI_SUCCESS || !flag) break;
            Pong p{};
            MPI_Mrecv(&p, int(sizeof p), MPI_BYTE, &msg, MPI_STATUS_IGNORE);
            ++g_received[size_t(st.MPI_SOURCE)];
            if (p.seq != seq) continue;
            const auto it = std::lower_bound(peers.begin(), peers.end(), st.MPI_SOURCE);
            if (it == peers.end() || *it != st.MPI_SOURCE) continue;
            PeerAnswer& a = out[size_t(it - peers.begin())];
            if (a.answered) continue;
            a.answered = true;
            a.busy = p.busy != 0;
            if (a.busy) {
                p.phase[kPhaseBytes] = '\0';
                a.phase = p.phase;
                a.seconds_left = p.seconds_left;
                a.limit_s = p.limit_s;
                a.origin = p.origin;
            }
            --left;
        }
        serve_liveness();
        if (left == 0 || Clock::now() >= end) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return out;
}

std::vector<int> unanswered(const std::vector<int>& ranks, double seconds) {
    std::vector<int> silent;
    for (const PeerAnswer& a : probe_peers(ranks, seconds))
        if (!a.answered) silent.push_back(a.rank);
    return silent;
}

double liveness_probe_seconds(double timeout_s) { return std::clamp(timeout_s / 5, 0.5, 3.0); }

namespace {

std::string no_answer_text(const std::vector<int>& silent, double seconds) {
    return "; no answer to a liveness ping within " + g_text(seconds) + " s from " + node_map().where(silent);
}

std::string all_alive_text(double seconds) {
    return "; every other rank of the group answered a liveness ping within " + g_text(seconds) +
           " s (alive, but not in this operation)";
}

}  // namespace

std::string liveness_report(const std::vector<int>& ranks, double seconds) {
    const std::vector<PeerAnswer> answers = probe_peers(ranks, seconds);
    if (answers.empty()) return "";
    std::vector<int> silent;
    for (const PeerAnswer& a : answers)
        if (!a.answered) silent.push_back(a.rank);
    return silent.empty() ? all_alive_text(seconds) : no_answer_text(silent, seconds);
}

OverdueWait::OverdueWait(std::string op, std::vector<int> peers, double timeout_s)
    : op_(std::move(op)), peers_(std::move(peers)), timeout_s_(timeout_s), start_(Clock::now()) {}

OverdueWait::~OverdueWait() = default;

double OverdueWait::next(const std::string& timeout_message) {
    const double probe_s = liveness_probe_seconds(timeout_s_);
    const std::vector<PeerAnswer> answers = probe_peers(peers_, probe_s);
    mine_.reset();
    if (answers.empty()) throw CommError(timeout_message);
    std::vector<int> silent;
    for (const PeerAnswer& a : answers)
        if (!a.answered) silent.push_back(a.rank);
    if (!silent.empty()) throw CommError(timeout_message + no_answer_text(silent, probe_s));
    const int me = world_rank();
    const PeerAnswer *busy = nullptr, *past = nullptr;  // the busy peer with the most time left; one past its limit
    for (const PeerAnswer& a : answers) {
        if (!a.busy || a.origin == me) continue;
        if (a.seconds_left > 0) {
            if (!busy || a.seconds_left > busy->seconds_left) busy = &a;
        } else {
            past = &a;
        }
    }
    if (busy) {
        graced_ = false;  // once the phase ends, a peer gets one more timeout_s to join
        mine_.reset(new BusyPhase("waiting for rank " + std::to_string(busy->rank) + ": " + busy->phase,
                                  busy->seconds_left, busy->origin));
        std::fprintf(stderr, "llmtrain: rank %d: %s waits past parallel.timeout_s = %s for rank %d (alive, busy: %s; up to %s s more)\n",
                     me, op_.c_str(), g_text(timeout_s_).c_str(), busy->rank, busy->phase.c_str(),
                     seconds_text(busy->seconds_left).c_str());
        return std::max(0.05, std::min(timeout_s_, busy->seconds_left));
    }
    if (past) {
        const double waited = std::chrono::duration<double>(Clock::now() - start_).count() + timeout_s_;
        throw CommError(timeout_message + "; " + node_map().where({past->rank}) + " answered a liveness ping still busy (" +
                        past->phase + ") past its limit of " + g_text(past->limit_s) + " s; waited " +
                        seconds_text(waited) + " s in all");
    }
    if (!graced_) {
        graced_ = true;
        return timeout_s_;
    }
    throw CommError(timeout_message + all_alive_text(probe_s));
}

}  // namespace llmtrain
