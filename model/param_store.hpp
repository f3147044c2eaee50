// model/param_store.hpp — where the model gets each unit's parameters and puts their gradients.
//
// docs/design.md "Parameter store". The model never assumes one flat buffer of the whole model: before
// it uses unit u (0 embeddings, 1+l layer l, n_layer+1 final LayerNorm; ParamLayout) it asks the store
// for u's full parameters and releases them after; its gradients go into a buffer the store hands
// out, and the model says when they are complete for this micro-batch. FullParamStore (below) holds
// everything in two flat buffers; the ZeRO engine (parallel/zero.hpp) holds shards, gathers units into
// working buffers and starts the gradient reduction from grads_done().
#pragma once
#include <vector>

#include "model/allocator.hpp"
#include "model/param_layout.hpp"

namespace llmtrain {

class ParamStore {
public:
    virtual ~ParamStore() = default;
    /// Full parameters of unit u: layout.units()[u].numel elements of the act dtype, device, element 0
    /// at the unit's first element. Valid until release_params(u). May wait for a gather. `next` is
    /// the unit the model will acquire after u (-1: none known): the store may start fetching it.
    virtual const void* acquire_params(int u, int next) = 0;
    virtual void release_params(int u) = 0;
    /// The buffer (same shape as acquire_params) that unit u's gradients are ACCUMULATED into by this
    /// micro-batch's backward. Valid until grads_done(u).
    virtual void* acquire_grads(int u) = 0;
    /// The backward of this micro-batch will not touch unit u's gradients again.
    virtual void grads_done(int u) = 0;
    /// Sets every parameter this store holds from full host fp32 values (layout.total_numel(),
    /// padding 0), cast to the act dtype. Synchronizes.
    virtual void load_params(const float* host) = 0;
    /// The flat ranges this store keeps as its own, ascending, in the order load_shard() takes them
    /// (ZeroEngine: its shard; FullParamStore: the whole buffer).
    virtual std::vector<FlatRange> own_ranges() const = 0;
    /// Sets every parameter this store holds from host fp32 values of own_ranges() only, back to
    /// back (their total numel), cast to the act dtype: a ZeRO store all-gathers the full params it
    /// keeps (stages 1, 2: collective over its ZeRO group), so no rank needs a host copy of more
    /// than its own ranges (docs/checkpoints.md "By shard"). Synchronizes.
    virtual void load_shard(const float* values) = 0;
    /// The host waits for event e, recorded on the current stream, where the model needs a value
    /// (its loss); `what` names the wait. A store whose collectives the stream may wait for (the
    /// ZeRO engine: its reduce-scatters and gathers) makes it a timed wait that ends a hung
    /// collective in CommError (parallel/host_wait.hpp). Default: ops.synchronize_event(e).
    virtual void host_wait(Ops& ops, Event e, const char* /*what*/) { ops.synchronize_event(e); }
};

/// The whole model in two flat buffers (params, grads: layout.total_numel() elements of the act
/// dtype each, MemCategory params/grads): a single process, plain data parallelism and ZeRO-1.
class FullParamStore final : public ParamStore {
public:
    FullParamStore(Allocator& alloc, const ParamLayout& layout);
    ~FullParamStore() override;
    FullParamStore(const FullParamStore&) = delete;
    FullParamStore& operator=(const FullParamStore&) = delete;

    void* params() { return params_; }
    void* grads() { return grads_; }
    /// grads() = 0.
    void zero_grads();

    const void* acquire_params(int u, int next) override;
    void release_params(int) override {}
    void* acquire_grads(int u) override;
    void grads_done(int) override {}
    void load_params(const float* host) override;
    std::vector<FlatRange> own_ranges() const override { return {{0, layout_.total_numel()}}; }
    void load_shard(const float* values) override { load_params(values); }

private:
    Allocator& alloc_;
    const ParamLayout& layout_;
    size_t es_;
    void* params_ = nullptr;
    void* grads_ = nullptr;
};

}  // namespace llmtrain
