// parallel/host_wait.cpp — timed host waits and the watchdog (see host_wait.hpp).
#include "parallel/host_wait.hpp"
#include "parallel/nodes.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

namespace llmtrain {
namespace {

std::mutex g_registry_mu;  // guards g_registry; held while aborting, so no comm dies mid-abort
std::vector<Comm*>& g_registry = *new std::vector<Comm*>;  // never destroyed: comms may outlive statics

/// Aborts every registered comm; returns how many.
size_t abort_all() {
    std::lock_guard lock(g_registry_mu);
    for (Comm* c : g_registry) c->abort();
    return g_registry.size();
}

/// "zero group (world ranks [0, 1], newest ...)", or the description alone for an empty role.
std::string named_comm(const WaitOn& w) {
    return *w.role ? std::string(w.role) + " (" + w.comm->describe() + ")" : w.comm->describe();
}

/// "zero group (world ranks [0, 1], newest ...)" for each comm of `on`, then every other registered one.
std::string involved(std::initializer_list<WaitOn> on) {
    std::string s;
    std::vector<Comm*> named;
    for (const WaitOn& w : on) {
        if (w.comm == nullptr) continue;
        named.push_back(w.comm);
        s += (s.empty() ? "" : "; ") + named_comm(w);
    }
    std::lock_guard lock(g_registry_mu);
    for (Comm* c : g_registry)
        if (std::find(named.begin(), named.end(), c) == named.end())
            s += (s.empty() ? "" : "; ") + std::string("another communicator (") + c->describe() + ")";
    return s.empty() ? "no communicator" : s;
}

/// A thread that aborts every registered comm unless dismissed within `timeout_s` (none if <= 0).
class Watchdog {
public:
    explicit Watchdog(double timeout_s) {
        if (timeout_s <= 0) return;
        thread_ = std::thread([this, timeout_s] {
            std::unique_lock lock(mu_);
            if (cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [this] { return dismissed_; })) return;
            fired_ = true;  // before the abort: a wait that fails because of it must see why
            abort_all();
        });
    }
    ~Watchdog() { dismiss(); }
    /// Stops the thread (joins it); returns whether it fired. Final once called.
    bool dismiss() {
        if (thread_.joinable()) {
            {
                std::lock_guard lock(mu_);
                dismissed_ = true;
            }
            cv_.notify_all();
            thread_.join();
        }
        return fired_;
    }
    bool fired() const { return fired_; }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool dismissed_ = false;
    std::atomic<bool> fired_{false};
    std::thread thread_;
};

std::string seconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", s);
    return buf;
}

}  // namespace

void register_abortable(Comm* c) {
    std::lock_guard lock(g_registry_mu);
    g_registry.push_back(c);
}

void unregister_abortable(Comm* c) {
    std::lock_guard lock(g_registry_mu);
    g_registry.erase(std::remove(g_registry.begin(), g_registry.end(), c), g_registry.end());
}

void poll_with_watchdog(const std::function<bool()>& done, std::initializer_list<WaitOn> on, const std::string& what) {
    double timeout = 0;
    for (const WaitOn& w : on)
        if (w.comm != nullptr) timeout = std::max(timeout, w.comm->host_timeout_s());
    std::string failed;  // "<role> (...) failed: <async error>"
    Watchdog dog(timeout);  // armed before the first poll: under cuda_emu a poll runs the queued work
    try {
        while (!done() && !dog.fired()) {
            for (const WaitOn& w : on) {
                if (w.comm == nullptr) continue;
                const std::string e = w.comm->async_error();
                if (!e.empty()) failed = named_comm(w) + " failed: " + e;
            }
            if (!failed.empty()) break;
            serve_liveness();  // a peer whose own wait timed out may be asking whether we are alive
            std::this_thread::yield();  // peers may share this core
        }
    } catch (const std::exception&) {
        if (!dog.dismiss()) throw;  // not the watchdog's abort: a device fault, say
    }
    if (dog.dismiss()) {
        std::vector<int> ranks;  // every rank the wait depended on, pinged to name the ones gone
        for (const WaitOn& w : on)
            if (w.comm != nullptr) ranks.insert(ranks.end(), w.comm->world_ranks().begin(), w.comm->world_ranks().end());
        std::sort(ranks.begin(), ranks.end());
        ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
        throw CommError(what + ": timed out after " + seconds(timeout) + " s waiting for the GPU; " + involved(on) +
                        "; called ncclCommAbort on every communicator of this process" +
                        liveness_report(ranks, liveness_probe_seconds(timeout)));
    }
    if (!failed.empty()) {
        const size_t n = abort_all();
        throw CommError(what + ": " + failed + "; called ncclCommAbort on every communicator of this process (" +
                        std::to_string(n) + ")");
    }
}

HostWait::HostWait(Ops& ops) : ops_(ops), event_(ops.create_event()) {}

HostWait::~HostWait() { ops_.destroy_event(event_); }

void HostWait::operator()(const std::string& what, std::initializer_list<WaitOn> on) {
    ops_.record_event(event_);
    poll_with_watchdog([this] { return ops_.query_event(event_); }, on, what);
}

}  // namespace llmtrain
