// emu/streams.hpp — deferred streams and events: work waits in per-stream queues and runs
// only at a synchronization point, so host code that forgets a sync reads stale (poisoned) data
// every time instead of once in a thousand runs.
//
// Ordering model (CUDA Programming Guide, "Streams" and "Default stream"): work in one stream runs
// in order; the legacy default stream (0, cudaStreamLegacy) waits for all earlier work of every
// blocking stream, and work queued on a blocking stream after it waits for it; non-blocking
// streams (cudaStreamNonBlocking) order only through events. cudaStreamWaitEvent adds a
// dependency: when the waiting stream runs, the recorded stream first runs up to the event.
// Everything here is guarded by one recursive lock; queued work runs on the synchronizing thread.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

/// The object behind cudaStream_t.
struct CUstream_st {
    struct Dep {
        CUstream_st* stream;
        uint64_t seq;  ///< `stream` must have run through this item first
    };
    struct Work {
        uint64_t seq;
        std::function<void()> run;
        const char* what;
        std::vector<Dep> deps;
    };
    std::deque<Work> queue;
    uint64_t queued = 0;  ///< seq of the last queued item (items are numbered 1, 2, ...)
    uint64_t done = 0;    ///< seq of the last item run
    unsigned flags = cudaStreamDefault;
    int priority = 0;
    bool legacy = false;     ///< the legacy default stream
    bool destroyed = false;  ///< cudaStreamDestroy'd: no new work; queued work still runs
};

/// The object behind cudaEvent_t: the last record (stream and the marker's seq) and its time.
struct CUevent_st {
    unsigned flags = cudaEventDefault;
    CUstream_st* stream = nullptr;  ///< null until recorded
    uint64_t seq = 0;
    uint64_t generation = 0;  ///< bumped per record; only the newest marker stamps the time
    double time_ms = 0;       ///< host time when the newest marker ran
    int pending_markers = 0;  ///< markers queued but not run (the event is freed after the last)
    bool destroyed = false;
};

namespace emu::streams {

/// The stream behind a handle (0 and cudaStreamLegacy: legacy; cudaStreamPerThread), or nullptr
/// for a handle that was never created or is destroyed. Call with the lock held.
CUstream_st* resolve(cudaStream_t s);

/// Queues work on s (resolved, not destroyed), adding the legacy-stream dependencies; returns its seq.
uint64_t push(CUstream_st* s, std::function<void()> run, const char* what, std::vector<CUstream_st::Dep> deps = {});

/// Runs s's queued work (and what it depends on) through `seq`. Work that throws makes its
/// message the sticky error; after a sticky error, remaining work is dropped unrun.
void run_until(CUstream_st* s, uint64_t seq);

/// Runs every stream to its end (cudaDeviceSynchronize).
void run_all();

/// A new stream (cudaStreamCreate*), a stream destroyed, and all streams dropped (cudaDeviceReset).
CUstream_st* create(unsigned flags, int priority);
void destroy(CUstream_st* s);
void reset();
/// Forgets every event's record after reset() (runtime_streams.cpp owns the events).
void reset_events();

/// The lock guarding every stream and event; recursive so host functions may call the runtime.
std::recursive_mutex& lock();

}  // namespace emu::streams
