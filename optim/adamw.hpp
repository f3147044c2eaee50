// optim/adamw.hpp — AdamW state (fp32 master weights and moments) over a range of the flat buffer.
//
// Decoupled weight decay (Loshchilov & Hutter 2019) applies to 2-D weights only (ParamTensor::decay).
// The state covers elements [begin, end) of the ParamLayout's flat buffer: the whole buffer without
// ZeRO, one shard with it. The update itself is Ops::adamw_update.
#pragma once
#include <cstddef>
#include <vector>

#include "model/allocator.hpp"
#include "model/param_layout.hpp"

namespace llmtrain {

struct AdamWConfig {
    float lr = 6e-4f;  ///< peak learning rate (the schedule scales it)
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;
};

class AdamW {
public:
    /// Allocates m, v (and master weights when `master_weights`) for elements [begin, end) of the
    /// layout (end = 0 means the whole buffer) in MemCategory::optimizer, zeroed. master_weights is
    /// required when the backend's act dtype is bf16.
    AdamW(Allocator& alloc, const ParamLayout& layout, const AdamWConfig& cfg, bool master_weights,
          size_t begin = 0, size_t end = 0);
    ~AdamW();
    AdamW(const AdamW&) = delete;
    AdamW& operator=(const AdamW&) = delete;

    /// Copies params[begin,end) (act dtype) into the fp32 master weights; call after init or load.
    void init_master(const void* params);
    /// One AdamW step at learning rate lr: grads are multiplied by grad_scale (clipping, averaging)
    /// first; weight decay only on decay tensors; padding elements are left untouched.
    /// params/grads point at the whole flat buffer (element 0), act dtype.
    void step(void* params, const void* grads, float lr, float grad_scale);

    int t() const { return t_; }           ///< steps taken
    void set_t(int t) { t_ = t; }
    float* m() { return m_; }               ///< (end-begin) fp32, device
    float* v() { return v_; }
    float* master() { return master_; }     ///< null without master weights
    size_t begin() const { return begin_; }
    size_t end() const { return end_; }
    const AdamWConfig& config() const { return cfg_; }

private:
    Allocator& alloc_;
    const ParamLayout& layout_;
    AdamWConfig cfg_;
    size_t begin_, end_;
    float *m_ = nullptr, *v_ = nullptr, *master_ = nullptr;
    int t_ = 0;
    /// Maximal runs of adjacent tensors (clipped to [begin,end)) with equal `decay`: one update each.
    struct Run {
        size_t offset, numel;
        bool decay;
    };
    std::vector<Run> runs_;
};

}  // namespace llmtrain
