// model/param_store.cpp — FullParamStore: the whole model in two flat buffers (see param_store.hpp).
#include "model/param_store.hpp"

namespace llmtrain {

FullParamStore::FullParamStore(Allocator& alloc, const ParamLayout& layout)
    : alloc_(alloc), layout_(layout), es_(dtype_size(alloc.ops().act_dtype())) {
    params_ = alloc_.alloc(MemCategory::params, layout_.total_numel() * es_);
    grads_ = alloc_.alloc(MemCategory::grads, layout_.total_numel() * es_);
}

FullParamStore::~FullParamStore() {
    alloc_.release(params_);
    alloc_.release(grads_);
}

void FullParamStore::zero_grads() { alloc_.ops().memset(grads_, 0, layout_.total_numel() * es_); }

const void* FullParamStore::acquire_params(int u, int) {
    return static_cast<char*>(params_) + layout_.units()[u].offset * es_;
}

void* FullParamStore::acquire_grads(int u) { return static_cast<char*>(grads_) + layout_.units()[u].offset * es_; }

void FullParamStore::load_params(const float* host) {
    Ops& o = alloc_.ops();
    const size_t n = layout_.total_numel();
    if (o.act_dtype() == DType::f32) {
        o.memcpy_h2d(params_, host, n * 4);
    } else {  // stage fp32 on the device, then round to the act dtype
        void* staging = alloc_.alloc(MemCategory::workspace, n * 4);
        o.memcpy_h2d(staging, host, n * 4);
        o.cast(params_, o.act_dtype(), staging, DType::f32, n);
        o.synchronize();
        alloc_.release(staging);
    }
    o.synchronize();
}

}  // namespace llmtrain
