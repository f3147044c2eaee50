// model/expert_parallel.hpp — the model's window onto its expert-parallel group.
//
// docs/parallelism.md "Expert parallelism": with parallel.ep = P, the P consecutive dp ranks of an
// ep group share the work of every MoE layer's E experts: rank r runs experts [r·E/P, (r+1)·E/P)
// on the rows every rank of the group routes to them (Lepikhin et al. 2020, GShard; Fedus et al.
// 2021, Switch Transformer, "expert parallelism"), the rows moved there and back by all-to-all.
// The model must not include parallel/ (calls go down), so it owns this small interface and
// parallel/ep_group.hpp implements it over a Comm, as TensorParallel (model/tensor_parallel.hpp).
#pragma once
#include <cstddef>

#include "model/ops.hpp"

namespace llmtrain {

/// The expert-parallel group of one rank. Every call is collective over the group: each rank calls
/// it in the same order (every rank of the group runs the same layers, recomputations and
/// evaluations). Buffers are device buffers of the model's Ops; the call is blocking: its result
/// is visible to the work queued after it. Errors: the Comm's (std::runtime_error naming the op
/// and group for a failed or hung exchange).
class ExpertParallel {
public:
    virtual ~ExpertParallel() = default;
    virtual int rank() const = 0;  ///< index in the group, [0, size())
    virtual int size() const = 0;  ///< P, the number of ranks that split each layer's experts
    /// All-to-all with per-peer counts (in elements of t): send holds size() blocks back to back,
    /// block q (send_counts[q] elements) for rank q; recv receives block q (recv_counts[q]) from
    /// rank q, back to back in rank order. recv_counts[q] must be rank q's send_counts[rank()].
    virtual void all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                              DType t) = 0;
};

}  // namespace llmtrain
