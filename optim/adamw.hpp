// optim/adamw.hpp — AdamW state (fp32 master weights and moments) over this rank's part of the flat
// buffer, on the device or, in part or whole, offloaded to pinned host memory.
//
// Decoupled weight decay (Loshchilov & Hutter 2019) applies to 2-D weights only (ParamTensor::decay).
// The state covers a list of ranges of the ParamLayout's flat buffer, stored back to back
// ("shard-local"): the whole buffer without ZeRO, this rank's chunk of every unit with it
// (ParamLayout::shard). With optimizer.offload = "cpu" the first offload_fraction of the shard-local
// elements keep their state on the host and are stepped there (optim/offload.hpp); the rest stay on
// the device and are stepped by Ops::adamw_update on the default stream at the same time (the copy
// streams wait for the gradients, not for the device part). Both apply one arithmetic
// (model/adamw_math.hpp), so where the state lives does not change a bit of the result.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "model/allocator.hpp"
#include "model/param_layout.hpp"
#include "optim/offload.hpp"

namespace llmtrain {

struct AdamWConfig {
    float lr = 6e-4f;  ///< peak learning rate (the schedule scales it)
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;
};

/// The bf16 params that AdamW step t >= 1 wrote with stochastic rounding from fp32 master weights w,
/// in place, as fp32 values: w[i] becomes bf16 rounded with step t's random bits for flat index
/// index0 + i (model/adamw_math.hpp). A checkpoint holds the master weights and t, not the bf16
/// params; a resume with training.stochastic_rounding rebuilds the params from them with this, bit
/// for bit the last step's, whatever the world size, ZeRO stage, pipeline split or offload fraction
/// (the bits depend on the flat index only). A bf16-exact value (a fresh run's) is left as it is.
void round_params_of_step(float* w, size_t n, size_t index0, int t);

class AdamW {
public:
    /// Allocates the state for the elements of `ranges` (empty means the whole buffer): m, v (and
    /// master weights when `master_weights`) in MemCategory::optimizer, the offloaded part's (always
    /// with master weights) in MemCategory::host. master_weights is required when the backend's act
    /// dtype is bf16. The state is undefined until init_state() or state_from_host(). Errors:
    /// std::invalid_argument for an empty, overlapping or out-of-bounds range or an offload fraction
    /// outside (0, 1]; std::runtime_error when memory (pinned, for offload) cannot be had.
    AdamW(Allocator& alloc, const ParamLayout& layout, const AdamWConfig& cfg, bool master_weights,
          std::vector<FlatRange> ranges = {}, const OffloadConfig& offload = {});
    ~AdamW();
    AdamW(const AdamW&) = delete;
    AdamW& operator=(const AdamW&) = delete;

    /// Fresh state for the shard-local params (numel() elements, act dtype, device): master weights
    /// from them, m = v = 0, t = 0.
    void init_state(const void* params);
    /// One AdamW step at learning rate lr: grads are multiplied by grad_scale (clipping, averaging)
    /// first; weight decay only on decay tensors; padding elements are left untouched.
    /// params/grads are shard-local device buffers (numel() elements, act dtype).
    void step(void* params, const void* grads, float lr, float grad_scale);

    /// The fp32 state into host arrays of numel() elements each (shard-local order): the weights
    /// (master weights, or `params` — the shard-local device params — when there are none), m, v.
    /// The device part is copied on the current stream; wait = false leaves those copies queued
    /// (the caller orders them with events before reading the arrays or stepping again: the
    /// checkpoint snapshot, app/checkpoint/saver.hpp); the offloaded part is copied at once.
    void state_to_host(const void* params, float* w, float* m, float* v, bool wait = true);
    /// Sets the state from host arrays as state_to_host() writes them. Without master weights the
    /// device part's weights are the params (loaded by the parameter store) and w is read only for
    /// the host part, which always keeps its own fp32 copy.
    void state_from_host(const float* w, const float* m, const float* v);

    int t() const { return t_; }  ///< steps taken
    void set_t(int t) { t_ = t; }
    const std::vector<FlatRange>& ranges() const { return ranges_; }
    size_t numel() const { return numel_; }
    /// Elements whose state is on the host: the shard-local prefix [0, host_numel()).
    size_t host_numel() const { return offload_ ? offload_->numel() : 0; }
    /// The offloaded part (null without offload): its last step's phase times and spans.
    const HostOffload* offload() const { return offload_.get(); }
    const AdamWConfig& config() const { return cfg_; }

private:
    Allocator& alloc_;
    AdamWConfig cfg_;
    bool stochastic_;
    std::vector<FlatRange> ranges_;
    size_t numel_ = 0, host_ = 0;  // host_: elements [0, host_) offloaded
    float *m_ = nullptr, *v_ = nullptr, *master_ = nullptr;  // device, (numel_ - host_), from element host_
    std::unique_ptr<HostOffload> offload_;
    int t_ = 0;
    /// Maximal runs of elements adjacent both shard-locally and in the flat buffer, inside one tensor
    /// group of equal `decay`, and on one side of host_: one update (or host segment) each.
    struct Run {
        size_t local, flat, numel;
        bool decay;
    };
    std::vector<Run> runs_;
};

}  // namespace llmtrain
