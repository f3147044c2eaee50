// optim/offload.cpp — the offloaded optimizer state and its double-buffered step (see offload.hpp).
#include "optim/offload.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "model/bf16.hpp"

namespace llmtrain {

namespace {
using Clock = std::chrono::steady_clock;
}

HostOffload::HostOffload(Allocator& alloc, size_t numel, std::vector<Segment> segs, const OffloadConfig& cfg)
    : alloc_(alloc), ops_(alloc.ops()), cfg_(cfg), numel_(numel), es_(dtype_size(alloc.ops().act_dtype())),
      segs_(std::move(segs)) {
    if (cfg_.chunk_bytes < sizeof(float))
        throw std::invalid_argument("optimizer.offload_chunk_mb: a chunk must hold at least one parameter");
    if (numel_ == 0) throw std::invalid_argument("HostOffload: nothing to offload (0 elements)");
    size_t next = 0;
    for (const Segment& g : segs_) {
        if (g.local < next || g.numel == 0 || g.local + g.numel > numel_)
            throw std::invalid_argument("HostOffload: segments must be non-empty, ascending and inside [0, " +
                                        std::to_string(numel_) + "); one is [" + std::to_string(g.local) + ", " +
                                        std::to_string(g.local + g.numel) + ")");
        next = g.local + g.numel;
    }
    chunk_ = std::min(numel_, cfg_.chunk_bytes / sizeof(float));
    w_ = static_cast<float*>(alloc_.alloc_host(numel_ * sizeof(float)));
    m_ = static_cast<float*>(alloc_.alloc_host(numel_ * sizeof(float)));
    v_ = static_cast<float*>(alloc_.alloc_host(numel_ * sizeof(float)));
    for (int b = 0; b < 2; ++b) {
        gstage_[b] = alloc_.alloc_host(chunk_ * es_);
        pstage_[b] = alloc_.alloc_host(chunk_ * es_);
    }
    d2h_ = ops_.create_stream();
    h2d_ = ops_.create_stream();
    ready_ = ops_.create_event();
    t0_ = ops_.create_timed_event();
    dev_start_ = ops_.create_timed_event();
    dev_end_ = ops_.create_timed_event();
    for (int k = 0; k < chunks(); ++k) {
        d2h_start_.push_back(ops_.create_timed_event());
        d2h_end_.push_back(ops_.create_timed_event());
        h2d_start_.push_back(ops_.create_timed_event());
        h2d_end_.push_back(ops_.create_timed_event());
    }
    host_start_.resize(size_t(chunks()));
    host_end_.resize(size_t(chunks()));
}

HostOffload::~HostOffload() {
    ops_.synchronize();  // no copy may still read or write the buffers freed below
    for (auto* list : {&d2h_start_, &d2h_end_, &h2d_start_, &h2d_end_})
        for (Event e : *list) ops_.destroy_event(e);
    for (Event e : {ready_, t0_, dev_start_, dev_end_}) ops_.destroy_event(e);
    ops_.destroy_stream(d2h_);
    ops_.destroy_stream(h2d_);
    for (void* p : {static_cast<void*>(w_), static_cast<void*>(m_), static_cast<void*>(v_), gstage_[0], gstage_[1],
                    pstage_[0], pstage_[1]})
        alloc_.release(p);
}

void HostOffload::copy_grads(int k, const void* grads) {
    const size_t lo = size_t(k) * chunk_, n = std::min(chunk_, numel_ - lo);
    ops_.set_stream(d2h_);
    ops_.record_event(d2h_start_[k]);
    ops_.memcpy_d2h(gstage_[k % 2], static_cast<const char*>(grads) + lo * es_, n * es_);
    ops_.record_event(d2h_end_[k]);
    ops_.set_stream(nullptr);
}

void HostOffload::copy_params(int k, void* params) {
    const size_t lo = size_t(k) * chunk_, n = std::min(chunk_, numel_ - lo);
    ops_.set_stream(h2d_);
    ops_.record_event(h2d_start_[k]);
    ops_.memcpy_h2d(static_cast<char*>(params) + lo * es_, pstage_[k % 2], n * es_);
    ops_.record_event(h2d_end_[k]);
    ops_.set_stream(nullptr);
}

void HostOffload::step_chunk(int k, const HostAdamWStep& s) {
    const size_t lo = size_t(k) * chunk_, hi = std::min(numel_, lo + chunk_);
    const DType t = ops_.act_dtype();
    const char* g = static_cast<const char*>(gstage_[k % 2]);
    char* p = static_cast<char*>(pstage_[k % 2]);
    // Elements between segments (padding) are not stepped, but the chunk's copy writes them back:
    // they get their unchanged values (w holds them exactly: they came from the params).
    auto unchanged = [&](size_t a, size_t b) {
        for (size_t i = a; i < b; ++i) {
            if (t == DType::f32)
                reinterpret_cast<float*>(p)[i - lo] = w_[i];
            else
                reinterpret_cast<uint16_t*>(p)[i - lo] = f32_to_bf16(w_[i]);
        }
    };
    size_t pos = lo;
    for (const Segment& seg : segs_) {  // the pieces of the segments inside [lo, hi)
        const size_t a = std::max(seg.local, lo), b = std::min(seg.local + seg.numel, hi);
        if (a >= b) continue;
        unchanged(pos, a);
        HostAdamWStep st = s;
        st.weight_decay = seg.decay ? s.weight_decay : 0.0f;
        st.index0 = seg.flat + (a - seg.local);
        host_adamw(w_ + a, m_ + a, v_ + a, g + (a - lo) * es_, t, p + (a - lo) * es_, t, b - a, st);
        pos = b;
    }
    unchanged(pos, hi);
}

void HostOffload::step(void* params, const void* grads, const HostAdamWStep& s,
                       const std::function<void()>& device_part) {
    const int K = chunks();
    // Both copy streams start after the default stream's work so far: the gradients are final and no
    // queued op reads the params any more. The device part is queued after this point, so neither
    // copy stream waits for it: it runs on the default stream while the host steps.
    ops_.set_stream(nullptr);
    ops_.record_event(ready_);
    if (device_part) {
        ops_.record_event(dev_start_);
        device_part();
        ops_.record_event(dev_end_);
    }
    ops_.set_stream(h2d_);
    ops_.wait_event(ready_);
    ops_.set_stream(d2h_);
    ops_.wait_event(ready_);
    ops_.record_event(t0_);
    ops_.set_stream(nullptr);
    ops_.synchronize_event(t0_);  // the step's time origin, on both clocks
    const auto host0 = Clock::now();
    auto since = [&] { return std::chrono::duration<double>(Clock::now() - host0).count(); };
    if (cfg_.overlap) copy_grads(0, grads);
    for (int k = 0; k < K; ++k) {
        if (!cfg_.overlap) copy_grads(k, grads);
        // Chunk k+1's gradients go into the other staging buffer, whose chunk k-1 the host finished.
        if (cfg_.overlap && k + 1 < K) copy_grads(k + 1, grads);
        ops_.synchronize_event(d2h_end_[k]);
        // pstage[k % 2] was last read by chunk k-2's copy to the device: it must have run.
        if (k >= 2 && !cfg_.test_skip_reuse_wait) ops_.synchronize_event(h2d_end_[k - 2]);
        host_start_[k] = since();
        step_chunk(k, s);
        host_end_[k] = since();
        copy_params(k, params);
        if (!cfg_.overlap) ops_.synchronize_event(h2d_end_[k]);
    }
    ops_.synchronize_event(h2d_end_[K - 1]);  // one stream, in order: every params copy has landed
    times_ = OffloadTimes{};
    times_.wall = since();
    ops_.wait_event(h2d_end_[K - 1]);  // the default stream's later work reads the new params
    spans_.clear();
    if (device_part) {
        // Its span needs its end event: on a GPU long reached (the device part is the short one);
        // under the emulator's deferred streams this wait is what runs it.
        ops_.synchronize_event(dev_end_);
        times_.device_adam = ops_.elapsed_seconds(dev_start_, dev_end_);
        spans_.push_back({"device_adam", 0, ops_.elapsed_seconds(t0_, dev_start_), ops_.elapsed_seconds(t0_, dev_end_)});
    }
    for (int k = 0; k < K; ++k) {
        const double d0 = ops_.elapsed_seconds(t0_, d2h_start_[k]), d1 = ops_.elapsed_seconds(t0_, d2h_end_[k]);
        const double h0 = ops_.elapsed_seconds(t0_, h2d_start_[k]), h1 = ops_.elapsed_seconds(t0_, h2d_end_[k]);
        times_.d2h += d1 - d0;
        times_.host_adam += host_end_[k] - host_start_[k];
        times_.h2d += h1 - h0;
        spans_.push_back({"d2h", k, d0, d1});
        spans_.push_back({"host_adam", k, host_start_[k], host_end_[k]});
        spans_.push_back({"h2d", k, h0, h1});
    }
}

}  // namespace llmtrain
