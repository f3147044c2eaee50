// model/tensor_parallel.hpp — the model's window onto its tensor-parallel group.
//
// docs/distributed.md "Tensor parallelism": with parallel.tp = T, each layer's c_attn (by heads) and
// c_fc are split by output rows ("column-parallel" in Megatron-LM's words, Shoeybi et al. 2019),
// attn.c_proj and mlp.c_proj by input columns ("row-parallel"), and the tied wte / LM head by
// vocabulary rows. The model needs only a few collectives over the T ranks that share a layer, and
// it must not include parallel/ (calls go down: app -> parallel -> model -> backend). So the model
// owns this small interface and parallel/ implements it over a Comm (as ParamStore is owned by
// model/ and implemented by parallel/ZeroEngine). Sequence parallelism (GPTOptions::
// sequence_parallel) replaces the all-reduces by reduce-scatter / all-gather pairs.
#pragma once
#include <cstddef>
#include <memory>

#include "model/ops.hpp"

namespace llmtrain {

/// A collective in flight (TensorParallel::all_gather_start). Destroying one that was not waited
/// for waits.
class TpPending {
public:
    virtual ~TpPending() = default;
    /// Returns when the result is visible to the work queued on the Ops' stream afterwards
    /// (idempotent). Errors: the Comm's.
    virtual void wait() = 0;
    /// Moves the operation on without blocking and returns true once wait() would return at once;
    /// false where the implementation cannot tell (the transfer then advances by itself).
    virtual bool test() { return false; }
};

/// The tensor-parallel group of one rank. Every call is collective over the group: each rank calls
/// it in the same order with the same n and dtype. Buffers are device buffers of the model's Ops;
/// the work is ordered after what is queued on the Ops' current stream, and what is queued after the
/// call sees its result (an implementation may use a stream of its own, ordered by events).
/// Errors: the Comm's (std::runtime_error naming the op and group for a failed or hung collective).
class TensorParallel {
public:
    virtual ~TensorParallel() = default;
    virtual int rank() const = 0;  ///< index in the group, [0, size())
    virtual int size() const = 0;  ///< T, the number of ranks that share each layer
    /// buf (n) of dtype t = the sum over the group, in rank order (so the same on every rank).
    virtual void all_reduce(void* buf, size_t n, DType t) = 0;
    /// out (size() * n) = every rank's in (n), concatenated in rank order.
    virtual void all_gather(void* out, const void* in, size_t n, DType t) = 0;
    /// out (n) = block rank() (elements [rank() * n, (rank() + 1) * n)) of the sum over the group of
    /// every rank's in (size() * n), summed in rank order (so every rank's block has the bits an
    /// all_reduce would give it). out must not overlap in. Sequence parallelism's reduce-scatter
    /// after a row-parallel matmul (Korthikanti et al. 2022).
    virtual void reduce_scatter(void* out, const void* in, size_t n, DType t) = 0;
    /// all_gather, started without waiting for it: `in` must stay unchanged and `out` unread until
    /// the handle's wait(); the group's other calls may run meanwhile (every rank starts and waits
    /// in the same order). Context parallelism's backward gathers a layer ahead with it
    /// (model/gpt_cp.cpp). Default: the blocking all_gather and a finished handle.
    virtual std::unique_ptr<TpPending> all_gather_start(void* out, const void* in, size_t n, DType t) {
        all_gather(out, in, n, t);
        struct Done final : TpPending {
            void wait() override {}
            bool test() override { return true; }
        };
        return std::make_unique<Done>();
    }
};

}  // namespace llmtrain
