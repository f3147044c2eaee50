// optim/adamw.cpp — AdamW state over ranges of the flat buffer, stepping it run by run.
//
// The layout (model/param_layout.cpp) puts each unit's 2-D weights before its 1-D tensors, so the
// tensors inside a range merge into few runs of equal `decay`; each run is one Ops::adamw_update
// call, and padding between tensors is never touched.
#include "optim/adamw.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace llmtrain {

AdamW::AdamW(Allocator& alloc, const ParamLayout& layout, const AdamWConfig& cfg, bool master_weights,
             std::vector<FlatRange> ranges)
    : alloc_(alloc), layout_(layout), cfg_(cfg), ranges_(std::move(ranges)) {
    if (ranges_.empty()) ranges_.push_back({0, layout.total_numel()});
    if (!master_weights && alloc.ops().act_dtype() != DType::f32)
        throw std::invalid_argument("AdamW: the backend computes in bf16, so fp32 master weights are required");
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
            if (!runs_.empty() && runs_.back().decay == t.decay && runs_.back().offset + runs_.back().numel == local)
                runs_.back().numel += hi - lo;
            else
                runs_.push_back({local, hi - lo, t.decay});
        }
        numel_ += g.numel;
        prev_end = g.offset + g.numel;
    }
    const size_t bytes = numel_ * sizeof(float);
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
    ops.cast(master_, DType::f32, params, ops.act_dtype(), numel_);
}

void AdamW::step(void* params, const void* grads, float lr, float grad_scale) {
    Ops& ops = alloc_.ops();
    const size_t es = dtype_size(ops.act_dtype());
    ++t_;
    for (const Run& r : runs_) {
        const size_t s = r.offset;  // shard-local: index into params, grads, m, v, master
        ops.adamw_update(static_cast<char*>(params) + s * es, master_ ? master_ + s : nullptr,
                         static_cast<const char*>(grads) + s * es, m_ + s, v_ + s, r.numel, lr,
                         cfg_.beta1, cfg_.beta2, cfg_.eps, r.decay ? cfg_.weight_decay : 0.0f, grad_scale, t_);
    }
}

}  // namespace llmtrain
