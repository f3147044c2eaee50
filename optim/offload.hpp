// optim/offload.hpp — the host part of the optimizer state and its double-buffered step (ZeRO-Offload,
// Ren et al. 2021; docs/distributed.md "Optimizer offload").
//
// The fp32 master weights, m and v of the offloaded elements live in pinned host memory (12 bytes
// per parameter). A step walks them in chunks; for chunk k the host waits for k's gradients to land
// in a staging buffer, steps it (optim/host_adamw.hpp), writes the params in the compute dtype to a
// second staging buffer and queues their copy back. Two staging buffers each way let three things
// run at once: the device→host copy of chunk k+1, the host AdamW of chunk k and the host→device copy
// of chunk k−1. Copies run on two streams of their own; an event per chunk and direction orders
// them (the host waits for k's gradients; before it overwrites a params buffer, for the copy that
// last read it: the race DeepSpeed #1219 hit).
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "model/allocator.hpp"
#include "optim/host_adamw.hpp"

namespace llmtrain {

/// optimizer.offload* and what the step needs besides.
struct OffloadConfig {
    bool enabled = false;              ///< optimizer.offload = "cpu"
    double fraction = 1.0;             ///< optimizer.offload_fraction: share of this rank's shard on the host
    size_t chunk_bytes = 16u << 20;    ///< optimizer.offload_chunk_mb: fp32 master bytes per chunk
    bool stochastic_rounding = false;  ///< training.stochastic_rounding (bf16 params)
    bool overlap = true;               ///< false: copy, step, copy one chunk at a time (the benchmark's baseline)
    bool test_skip_reuse_wait = false; ///< tests only: drop the wait before a params buffer is reused
};

/// Time of each phase of the last step, seconds. d2h and h2d sum the copies' own durations (device
/// events), host_adam the host AdamW calls; wall is the whole host part of the step; device_adam
/// the on-device part of a partial offload (device events; 0 without one).
struct OffloadTimes {
    double d2h = 0, host_adam = 0, h2d = 0, wall = 0, device_adam = 0;
};

/// One span of the last step for the trace: phase "d2h", "host_adam" or "h2d" with its chunk index,
/// or "device_adam" (chunk 0: the on-device part, one span), start and end in seconds from the step's
/// start (device spans placed by their events on the host clock).
struct OffloadSpan {
    const char* phase;
    int chunk;
    double start, end;
};

class HostOffload {
public:
    /// A piece of the host part: `numel` elements at host-local offset `local`, whose first element is
    /// element `flat` of the flat parameter buffer; decayed or not (ParamTensor::decay). Elements no
    /// segment covers (padding) keep their values.
    struct Segment {
        size_t local, flat, numel;
        bool decay;
    };
    /// Allocates the host state (3 × numel fp32, pinned, MemCategory::host) and the staging buffers
    /// (host), streams and events. segs: ascending, disjoint, inside [0, numel). State is undefined
    /// until written (w(), m(), v()). Errors: std::invalid_argument for chunk_bytes < 4 or bad
    /// segments; std::runtime_error when pinned memory cannot be had.
    HostOffload(Allocator& alloc, size_t numel, std::vector<Segment> segs, const OffloadConfig& cfg);
    ~HostOffload();
    HostOffload(const HostOffload&) = delete;
    HostOffload& operator=(const HostOffload&) = delete;

    /// One AdamW step of the host part. params, grads: device, act dtype, (numel) — the host part's
    /// elements of the shard-local buffers. s.weight_decay applies to decay segments only; s.index0
    /// is ignored (each segment knows its flat index). Queued after the work already on the default
    /// stream; the default stream's later work sees the new params. device_part (may be empty)
    /// queues the rest of the step on the default stream: it is called after the copy streams'
    /// starting point is recorded, so it runs while the host steps, ordered after nothing of this
    /// step (it must touch none of this part's elements). Returns when both parts are done (the
    /// step's timings are then final). Errors: as host_adamw.
    void step(void* params, const void* grads, const HostAdamWStep& s, const std::function<void()>& device_part = {});

    size_t numel() const { return numel_; }
    float* w() { return w_; }  ///< (numel) fp32 master weights, pinned host
    float* m() { return m_; }
    float* v() { return v_; }
    size_t chunk_elems() const { return chunk_; }
    int chunks() const { return int((numel_ + chunk_ - 1) / chunk_); }
    const OffloadTimes& last_times() const { return times_; }
    const std::vector<OffloadSpan>& last_spans() const { return spans_; }

private:
    void copy_grads(int k, const void* grads);
    void step_chunk(int k, const HostAdamWStep& s);
    void copy_params(int k, void* params);

    Allocator& alloc_;
    Ops& ops_;
    OffloadConfig cfg_;
    size_t numel_, chunk_, es_;
    std::vector<Segment> segs_;
    float *w_ = nullptr, *m_ = nullptr, *v_ = nullptr;
    void* gstage_[2] = {nullptr, nullptr};  // (chunk) act dtype, pinned: gradients in
    void* pstage_[2] = {nullptr, nullptr};  // (chunk) act dtype, pinned: params out
    Stream d2h_ = nullptr, h2d_ = nullptr;
    Event ready_ = nullptr, t0_ = nullptr;  // ready: the default stream's work before the step
    Event dev_start_ = nullptr, dev_end_ = nullptr;  // the device part, on the default stream
    std::vector<Event> d2h_start_, d2h_end_, h2d_start_, h2d_end_;  // per chunk
    std::vector<double> host_start_, host_end_;                      // per chunk, seconds from t0
    OffloadTimes times_;
    std::vector<OffloadSpan> spans_;
};

}  // namespace llmtrain
