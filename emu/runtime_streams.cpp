// emu/runtime_streams.cpp — the CUDA runtime's stream and event API over deferred streams.
//
// Synchronization points run queued work: cudaStreamSynchronize, cudaEventSynchronize,
// cudaDeviceSynchronize (and blocking copies, in runtime_memory.cpp). cudaStreamQuery and
// cudaEventQuery answer cudaErrorNotReady while work is pending but run it, so a polling loop
// finishes on its second query. Events stamp the host clock when their marker runs.
#include <chrono>
#include <mutex>
#include <string>
#include <unordered_set>

#include "emu/emu.hpp"
#include "emu/errors.hpp"
#include "emu/streams.hpp"

namespace {

// Live events; guarded by the streams lock. Never destroyed, like the streams.
std::unordered_set<CUevent_st*>& g_events = *new std::unordered_set<CUevent_st*>;

double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// The call counts of emu::api_calls(), under their own lock (counted before the streams lock).
std::mutex g_calls_lock;
emu::ApiCalls g_calls;

bool valid(cudaEvent_t e) { return e && g_events.count(e); }

bool complete(const CUevent_st* e) { return !e->stream || e->stream->done >= e->seq; }

cudaError_t bad_stream(const char* fn) {
    return emu::record_error(cudaErrorInvalidResourceHandle, std::string(fn) + ": invalid stream handle");
}
cudaError_t bad_event(const char* fn) {
    return emu::record_error(cudaErrorInvalidResourceHandle, std::string(fn) + ": invalid event handle");
}

}  // namespace

namespace emu::streams {

/// Forgets every event's record (cudaDeviceReset); the handles stay valid.
void reset_events() {
    for (CUevent_st* e : g_events) e->stream = nullptr, e->seq = 0, e->pending_markers = 0;
}

}  // namespace emu::streams

namespace emu {

ApiCalls api_calls() {
    std::lock_guard lock(g_calls_lock);
    return g_calls;
}

void count_call(uint64_t ApiCalls::*field) {
    std::lock_guard lock(g_calls_lock);
    ++(g_calls.*field);
}

}  // namespace emu

extern "C" {

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
    EMU_RETURN_IF_STICKY();
    if (flags & ~unsigned{cudaStreamNonBlocking})
        return emu::record_error(cudaErrorInvalidValue, "cudaStreamCreate: unknown flags " + std::to_string(flags));
    std::lock_guard lock(emu::streams::lock());
    *pStream = emu::streams::create(flags, priority);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
    return cudaStreamCreateWithPriority(pStream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return cudaStreamCreateWithPriority(pStream, 0, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(stream);
    if (!s || s->legacy || stream == cudaStreamPerThread) return bad_stream("cudaStreamDestroy");
    emu::streams::destroy(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    emu::count_call(&emu::ApiCalls::stream_synchronize);
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(stream);
    if (!s) return bad_stream("cudaStreamSynchronize");
    emu::streams::run_until(s, s->queued);
    return emu::errors::sticky();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(stream);
    if (!s) return bad_stream("cudaStreamQuery");
    if (s->done >= s->queued) return cudaSuccess;
    emu::streams::run_until(s, s->queued);  // progress, so that polling terminates
    return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(stream);
    if (!s) return bad_stream("cudaStreamWaitEvent");
    if (!valid(event)) return bad_event("cudaStreamWaitEvent");
    if (event->stream && !complete(event))
        emu::streams::push(s, [] {}, "cudaStreamWaitEvent", {{event->stream, event->seq}});
    return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(hStream);
    if (!s) return bad_stream("cudaStreamGetPriority");
    *priority = s->priority;
    return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(hStream);
    if (!s) return bad_stream("cudaStreamGetFlags");
    *flags = s->flags;
    return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(stream);
    if (!s) return bad_stream("cudaLaunchHostFunc");
    emu::streams::push(s, [fn, userData] { fn(userData); }, "cudaLaunchHostFunc");
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    emu::count_call(&emu::ApiCalls::device_synchronize);
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    emu::streams::run_all();
    return emu::errors::sticky();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
    EMU_RETURN_IF_STICKY();
    const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (flags & ~known)
        return emu::record_error(cudaErrorInvalidValue, "cudaEventCreate: unknown flags " + std::to_string(flags));
    std::lock_guard lock(emu::streams::lock());
    auto* e = new CUevent_st;
    e->flags = flags;
    g_events.insert(e);
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    CUstream_st* s = emu::streams::resolve(stream);
    if (!s) return bad_stream("cudaEventRecord");
    if (!valid(event)) return bad_event("cudaEventRecord");
    uint64_t gen = ++event->generation;
    ++event->pending_markers;
    event->stream = s;
    event->seq = emu::streams::push(
        s,
        [event, gen] {
            if (gen == event->generation) event->time_ms = now_ms();
            if (--event->pending_markers == 0 && event->destroyed) delete event;
        },
        "cudaEventRecord");
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    emu::count_call(&emu::ApiCalls::event_synchronize);
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    if (!valid(event)) return bad_event("cudaEventSynchronize");
    if (event->stream) emu::streams::run_until(event->stream, event->seq);
    return emu::errors::sticky();
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    if (!valid(event)) return bad_event("cudaEventQuery");
    if (complete(event)) return cudaSuccess;
    emu::streams::run_until(event->stream, event->seq);  // progress, so that polling terminates
    return cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    if (!valid(start) || !valid(end)) return bad_event("cudaEventElapsedTime");
    if ((start->flags | end->flags) & cudaEventDisableTiming)
        return emu::record_error(cudaErrorInvalidResourceHandle,
                                 "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
    if (!start->stream || !end->stream)
        return emu::record_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
    if (!complete(start) || !complete(end)) return cudaErrorNotReady;
    *ms = static_cast<float>(end->time_ms - start->time_ms);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    EMU_RETURN_IF_STICKY();
    std::lock_guard lock(emu::streams::lock());
    if (!valid(event)) return bad_event("cudaEventDestroy");
    g_events.erase(event);
    if (event->pending_markers == 0) delete event;
    else event->destroyed = true;  // its queued markers still refer to it
    return cudaSuccess;
}

}  // extern "C"
