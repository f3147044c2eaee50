// optim/adamw.cpp — AdamW state over a range of the flat buffer, stepping it run by run.
//
// The layout (model/param_layout.cpp) puts each unit's 2-D weights before its 1-D tensors, so the
// tensors inside [begin, end) merge into few runs of equal `decay`; each run is one
// Ops::adamw_update call, and padding between tensors is never touched.
#include "optim/adamw.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace llmtrain {

AdamW::AdamW(Allocator& alloc, const ParamLayout& layout, const AdamWConfig& cfg, bool master_weights,
             size_t begin, size_t end)
    : alloc_(alloc), layout_(layout), cfg_(cfg), begin_(begin), end_(end == 0 ? layout.total_numel() : end) {
    if (begin_ >= end_ || end_ > layout.total_numel())
        throw std::invalid_argument("AdamW: element range [" + std::to_string(begin_) + ", " +
                                    std::to_string(end_) + ") must be non-empty inside the flat buffer of " +
                                    std::to_string(layout.total_numel()) + " elements");
    if (!master_weights && alloc.ops().act_dtype() != DType::f32)
        throw std::invalid_argument("AdamW: the backend computes in bf16, so fp32 master weights are required");
    for (const ParamTensor& t : layout.tensors()) {
        const size_t lo = std::max(begin_, t.offset), hi = std::min(end_, t.offset + t.numel);
        if (lo >= hi) continue;
        if (!runs_.empty() && runs_.back().decay == t.decay && runs_.back().offset + runs_.back().numel == lo)
            runs_.back().numel += hi - lo;
        else
            runs_.push_back({lo, hi - lo, t.decay});
    }
    const size_t bytes = (end_ - begin_) * sizeof(float);
    Ops& ops = alloc.ops();
    m_ = static_cast<float*>(alloc.alloc(MemCategory::optimizer, bytes));
    v_ = static_cast<float*>(alloc.alloc(MemCategory::optimizer, bytes));
    ops.memset(m_, 0, bytes);
    ops.memset(v_, 0, bytes);
    if (master_weights) {
        master_ = static_cast<float*>(alloc.alloc(MemCategory::optimizer, bytes));
        ops.memset(master_, 0, bytes);
    }
}

AdamW::~AdamW() {
    alloc_.release(m_);
    alloc_.release(v_);
    alloc_.release(master_);
}

void AdamW::init_master(const void* params) {
    if (master_ == nullptr) return;  // the fp32 params are their own master weights
    Ops& ops = alloc_.ops();
    const char* p = static_cast<const char*>(params) + begin_ * dtype_size(ops.act_dtype());
    ops.cast(master_, DType::f32, p, ops.act_dtype(), end_ - begin_);
}

void AdamW::step(void* params, const void* grads, float lr, float grad_scale) {
    Ops& ops = alloc_.ops();
    const size_t es = dtype_size(ops.act_dtype());
    ++t_;
    for (const Run& r : runs_) {
        const size_t s = r.offset - begin_;  // index into m, v, master
        ops.adamw_update(static_cast<char*>(params) + r.offset * es, master_ ? master_ + s : nullptr,
                         static_cast<const char*>(grads) + r.offset * es, m_ + s, v_ + s, r.numel, lr,
                         cfg_.beta1, cfg_.beta2, cfg_.eps, r.decay ? cfg_.weight_decay : 0.0f, grad_scale, t_);
    }
}

}  // namespace llmtrain
