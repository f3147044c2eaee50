// emu/streams.cpp — deferred stream queues, their dependencies and execution (see streams.hpp).
#include "emu/streams.hpp"

#include <exception>
#include <mutex>
#include <string>

#include "emu/emu.hpp"
#include "emu/errors.hpp"

namespace emu::streams {
namespace {

CUstream_st g_legacy = [] {
    CUstream_st s;
    s.legacy = true;
    return s;
}();
CUstream_st g_per_thread;  // cudaStreamPerThread: one blocking stream for the process
// Every stream created since the last reset, in order. Never destroyed (work may still be queued
// at exit, and other static destructors may still synchronize).
std::vector<CUstream_st*>& g_created = *new std::vector<CUstream_st*>;

bool blocking(const CUstream_st* s) { return !s->legacy && !(s->flags & cudaStreamNonBlocking); }

}  // namespace

std::recursive_mutex& lock() {
    static std::recursive_mutex mu;
    return mu;
}

CUstream_st* resolve(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy) return &g_legacy;
    if (s == cudaStreamPerThread) return &g_per_thread;
    for (CUstream_st* c : g_created)
        if (c == s) return c->destroyed ? nullptr : c;
    return nullptr;
}

uint64_t push(CUstream_st* s, std::function<void()> run, const char* what, std::vector<CUstream_st::Dep> deps) {
    if (s->legacy) {
        // The legacy stream waits for everything already queued on blocking streams.
        if (g_per_thread.queued > g_per_thread.done) deps.push_back({&g_per_thread, g_per_thread.queued});
        for (CUstream_st* c : g_created)
            if (blocking(c) && c->queued > c->done) deps.push_back({c, c->queued});
    } else if (blocking(s) && g_legacy.queued > g_legacy.done) {
        deps.push_back({&g_legacy, g_legacy.queued});
    }
    uint64_t seq = ++s->queued;
    s->queue.push_back({seq, std::move(run), what, std::move(deps)});
    return seq;
}

void run_until(CUstream_st* s, uint64_t seq) {
    while (s->done < seq && !s->queue.empty()) {
        CUstream_st::Work& w = s->queue.front();
        for (const CUstream_st::Dep& d : w.deps) run_until(d.stream, d.seq);
        CUstream_st::Work item = std::move(s->queue.front());
        s->queue.pop_front();
        if (errors::sticky() == cudaSuccess) {
            try {
                item.run();
            } catch (const std::exception& e) {
                record_error(cudaErrorLaunchFailure, std::string(item.what) + ": " + e.what(), /*sticky=*/true);
            }
        }
        s->done = item.seq;
    }
}

void run_all() {
    // Newest stream first: a missing dependency on an older stream shows as stale data.
    for (auto it = g_created.rbegin(); it != g_created.rend(); ++it) run_until(*it, (*it)->queued);
    run_until(&g_per_thread, g_per_thread.queued);
    run_until(&g_legacy, g_legacy.queued);
}

CUstream_st* create(unsigned flags, int priority) {
    auto* s = new CUstream_st;
    s->flags = flags;
    s->priority = priority;
    g_created.push_back(s);
    return s;
}

void destroy(CUstream_st* s) { s->destroyed = true; }  // kept: queued work and dependencies still refer to it

void reset() {
    for (CUstream_st* c : g_created) delete c;
    g_created.clear();
    for (CUstream_st* s : {&g_legacy, &g_per_thread}) {
        s->queue.clear();
        s->done = s->queued;
    }
}

}  // namespace emu::streams

namespace emu {

void enqueue(cudaStream_t stream, std::function<void()> work, const char* what) {
    std::lock_guard lock(streams::lock());
    CUstream_st* s = streams::resolve(stream);
    if (!s)
        throw Error(std::string(what) + ": invalid stream handle (never created, or destroyed)");
    streams::push(s, std::move(work), what);
}

}  // namespace emu
