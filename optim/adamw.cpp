// optim/adamw.cpp — AdamW state over ranges of the flat buffer, stepping it run by run.
//
// The layout (model/param_layout.cpp) puts each unit's 2-D weights before its 1-D tensors, so the
// tensors inside a range merge into few runs of equal `decay`; each device run is one
// Ops::adamw_update call, each host run a segment of the offloaded part, and padding between
// tensors is never touched.
#include "optim/adamw.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "model/adamw_math.hpp"
#include "model/bf16.hpp"

namespace llmtrain {

void round_params_of_step(float* w, size_t n, size_t index0, int t) {
    const uint32_t seed = rounding_seed(t);
    for (size_t i = 0; i < n; ++i) w[i] = bf16_to_f32(bf16_bits_stochastic(w[i], rounding_bits(seed, index0 + i)));
}

AdamW::AdamW(Allocator& alloc, const ParamLayout& layout, const AdamWConfig& cfg, bool master_weights,
             std::vector<FlatRange> ranges, const OffloadConfig& offload)
    : alloc_(alloc), cfg_(cfg), stochastic_(offload.stochastic_rounding), ranges_(std::move(ranges)) {
    if (ranges_.empty()) ranges_.push_back({0, layout.total_numel()});
    if (!master_weights && alloc.ops().act_dtype() != DType::f32)
        throw std::invalid_argument("AdamW: the backend computes in bf16, so fp32 master weights are required");
    if (offload.enabled && !(offload.fraction > 0.0 && offload.fraction <= 1.0))
        throw std::invalid_argument("optimizer.offload_fraction: expected a number in (0, 1], got " +
                                    std::to_string(offload.fraction));
    size_t prev_end = 0;
    for (const FlatRange& g : ranges_) {
        if (g.numel == 0 || g.offset + g.numel > layout.total_numel() || (numel_ > 0 && g.offset < prev_end))
            throw std::invalid_argument("AdamW: element range [" + std::to_string(g.offset) + ", " +
                                        std::to_string(g.offset + g.numel) +
                                        ") must be non-empty, ascending and inside the flat buffer of " +
                                        std::to_string(layout.total_numel()) + " elements");
        for (const ParamTensor& t : layout.tensors()) {
            const size_t lo = std::max(g.offset, t.offset), hi = std::min(g.offset + g.numel, t.offset + t.numel);
            if (lo >= hi) continue;
            const size_t local = numel_ + (lo - g.offset);
            Run* last = runs_.empty() ? nullptr : &runs_.back();
            if (last && last->decay == t.decay && last->local + last->numel == local && last->flat + last->numel == lo)
                last->numel += hi - lo;
            else
                runs_.push_back({local, lo, hi - lo, t.decay});
        }
        numel_ += g.numel;
        prev_end = g.offset + g.numel;
    }
    if (offload.enabled)  // a multiple of 64 elements, so the device part starts aligned
        host_ = offload.fraction >= 1.0 ? numel_
                                        : std::min(numel_, std::max<size_t>(64, size_t(offload.fraction * double(numel_)) / 64 * 64));
    // Split the run that straddles host_, then hand the host runs to the offload engine.
    std::vector<HostOffload::Segment> segs;
    std::vector<Run> device_runs;
    for (const Run& r : runs_) {
        if (r.local < host_ && r.local + r.numel > host_) {
            const size_t a = host_ - r.local;
            device_runs.push_back({host_, r.flat + a, r.numel - a, r.decay});
            segs.push_back({r.local, r.flat, a, r.decay});
        } else if (r.local < host_) {
            segs.push_back({r.local, r.flat, r.numel, r.decay});
        } else {
            device_runs.push_back(r);
        }
    }
    runs_ = std::move(device_runs);
    Ops& ops = alloc.ops();
    const size_t dev = numel_ - host_, bytes = dev * sizeof(float);
    if (dev > 0) {
        m_ = static_cast<float*>(alloc.alloc(MemCategory::optimizer, bytes));
        v_ = static_cast<float*>(alloc.alloc(MemCategory::optimizer, bytes));
        ops.memset(m_, 0, bytes);
        ops.memset(v_, 0, bytes);
        if (master_weights) master_ = static_cast<float*>(alloc.alloc(MemCategory::optimizer, bytes));
    }
    if (host_ > 0) offload_ = std::make_unique<HostOffload>(alloc, host_, std::move(segs), offload);
}

AdamW::~AdamW() {
    offload_.reset();
    alloc_.release(m_);
    alloc_.release(v_);
    alloc_.release(master_);
}

void AdamW::init_state(const void* params) {
    Ops& ops = alloc_.ops();
    const DType t = ops.act_dtype();
    const size_t es = dtype_size(t), dev = numel_ - host_;
    if (dev > 0) {
        ops.memset(m_, 0, dev * sizeof(float));
        ops.memset(v_, 0, dev * sizeof(float));
        if (master_) ops.cast(master_, DType::f32, static_cast<const char*>(params) + host_ * es, t, dev);
    }
    if (offload_) {
        std::vector<uint16_t> bits(t == DType::bf16 ? host_ : 0);
        ops.memcpy_d2h(t == DType::f32 ? static_cast<void*>(offload_->w()) : bits.data(), params, host_ * es);
        ops.synchronize();
        for (size_t i = 0; i < bits.size(); ++i) offload_->w()[i] = bf16_to_f32(bits[i]);
        std::fill(offload_->m(), offload_->m() + host_, 0.0f);
        std::fill(offload_->v(), offload_->v() + host_, 0.0f);
    }
    ops.synchronize();
    t_ = 0;
}

void AdamW::step(void* params, const void* grads, float lr, float grad_scale) {
    Ops& ops = alloc_.ops();
    const size_t es = dtype_size(ops.act_dtype());
    ++t_;
    auto device_part = [&] {
        for (const Run& r : runs_) {
            const size_t s = r.local, d = r.local - host_;  // into params/grads; into the device state
            ops.adamw_update(static_cast<char*>(params) + s * es, master_ ? master_ + d : nullptr,
                             static_cast<const char*>(grads) + s * es, m_ + d, v_ + d, r.numel, lr, cfg_.beta1,
                             cfg_.beta2, cfg_.eps, r.decay ? cfg_.weight_decay : 0.0f, grad_scale, t_, r.flat);
        }
    };
    if (!offload_) {
        device_part();
        return;
    }
    // The offload engine queues the device part after its copy streams' starting point, so the device
    // part runs on the default stream while the copies and the host step run (disjoint elements).
    offload_->step(params, grads,
                   HostAdamWStep{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, grad_scale, t_, stochastic_, 0},
                   runs_.empty() ? std::function<void()>() : std::function<void()>(device_part));
}

void AdamW::state_to_host(const void* params, float* w, float* m, float* v, bool wait) {
    Ops& ops = alloc_.ops();
    const size_t dev = numel_ - host_;
    if (offload_) {
        std::copy(offload_->w(), offload_->w() + host_, w);
        std::copy(offload_->m(), offload_->m() + host_, m);
        std::copy(offload_->v(), offload_->v() + host_, v);
    }
    if (dev > 0) {
        ops.memcpy_d2h(m + host_, m_, dev * sizeof(float));
        ops.memcpy_d2h(v + host_, v_, dev * sizeof(float));
        // Without master weights the act dtype is fp32 (checked at construction): the params are the weights.
        const void* ws = master_ ? static_cast<const void*>(master_)
                                 : static_cast<const void*>(static_cast<const float*>(params) + host_);
        ops.memcpy_d2h(w + host_, ws, dev * sizeof(float));
    }
    if (wait) ops.synchronize();
}

void AdamW::state_from_host(const float* w, const float* m, const float* v) {
    Ops& ops = alloc_.ops();
    const size_t dev = numel_ - host_;
    if (offload_) {
        std::copy(w, w + host_, offload_->w());
        std::copy(m, m + host_, offload_->m());
        std::copy(v, v + host_, offload_->v());
    }
    if (dev > 0) {
        ops.memcpy_h2d(m_, m + host_, dev * sizeof(float));
        ops.memcpy_h2d(v_, v + host_, dev * sizeof(float));
        if (master_) ops.memcpy_h2d(master_, w + host_, dev * sizeof(float));
    }
    ops.synchronize();
}

}  // namespace llmtrain
