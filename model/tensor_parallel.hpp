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

#include "model/ops.hpp"

namespace llmtrain {

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
};

}  // namespace llmtrain
