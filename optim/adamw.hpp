// optim/adamw.hpp — AdamW state (fp32 master weights and moments) over this rank's part of the flat buffer.
//
// Decoupled weight decay (Loshchilov & Hutter 2019) applies to 2-D weights only (ParamTensor::decay).
// The state covers a list of ranges of the ParamLayout's flat buffer, stored back to back
// ("shard-local"): the whole buffer without ZeRO, this rank's chunk of every unit with it
// (ParamLayout::shard). The update itself is Ops::adamw_update.
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
    /// Allocates m, v (and master weights when `master_weights`) for the elements of `ranges` (empty
    /// means the whole buffer) in MemCategory::optimizer, zeroed. master_weights is required when the
    /// backend's act dtype is bf16. Errors: std::invalid_argument for an empty, overlapping or
    /// out-of-bounds range.
    AdamW(Allocator& alloc, const ParamLayout& layout, const AdamWConfig& cfg, bool master_weights,
          std::vector<FlatRange> ranges = {});
    ~AdamW();
    AdamW(const AdamW&) = delete;
    AdamW& operator=(const AdamW&) = delete;

    /// Copies the shard-local params (numel() elements, act dtype) into the fp32 master weights.
    void init_master(const void* params);
    /// One AdamW step at learning rate lr: grads are multiplied by grad_scale (clipping, averaging)
    /// first; weight decay only on decay tensors; padding elements are left untouched.
    /// params/grads are shard-local buffers (numel() elements, act dtype).
    void step(void* params, const void* grads, float lr, float grad_scale);

    int t() const { return t_; }           ///< steps taken
    void set_t(int t) { t_ = t; }
    float* m() { return m_; }               ///< (numel()) fp32, device, shard-local
    float* v() { return v_; }
    float* master() { return master_; }     ///< null without master weights
    const std::vector<FlatRange>& ranges() const { return ranges_; }
    size_t numel() const { return numel_; }
    const AdamWConfig& config() const { return cfg_; }

private:
    Allocator& alloc_;
    const ParamLayout& layout_;
    AdamWConfig cfg_;
    std::vector<FlatRange> ranges_;
    size_t numel_ = 0;
    float *m_ = nullptr, *v_ = nullptr, *master_ = nullptr;
    int t_ = 0;
    /// Maximal runs of adjacent tensors (clipped to the ranges) with equal `decay`: one update each.
    struct Run {
        size_t offset, numel;  // offset shard-local
        bool decay;
    };
    std::vector<Run> runs_;
};

}  // namespace llmtrain
