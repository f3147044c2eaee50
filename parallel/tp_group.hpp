// parallel/tp_group.hpp — the model's tensor-parallel group (model/tensor_parallel.hpp) over a Comm.
//
// docs/distributed.md "Tensor parallelism": the model owns the narrow TensorParallel interface (it must
// not include parallel/); this is its implementation on the ranks of Topology::tp_group(), whose
// Comm moves the Ops' device buffers (MpiComm on the CPU backend, NCCL or MpiCudaComm on CUDA).
#pragma once
#include <memory>

#include "model/tensor_parallel.hpp"
#include "parallel/comm.hpp"
#include "parallel/topology.hpp"

namespace llmtrain {

/// TensorParallel over a Comm whose group is the TP group (its rank order is the TP index).
/// Every call but all_gather_start is the Comm's blocking collective: its result is visible to the
/// work queued after it.
class TpGroup final : public TensorParallel {
public:
    /// Uses `comm` (owned). Errors: std::invalid_argument if comm is null.
    explicit TpGroup(std::unique_ptr<Comm> comm);
    int rank() const override { return comm_->rank(); }
    int size() const override { return comm_->size(); }
    /// buf (n) = the sum over the group in rank order (Comm::all_reduce_sum; bf16 summed in fp32).
    void all_reduce(void* buf, size_t n, DType t) override;
    /// out (size() * n) = every rank's in (n), in rank order (Comm::all_gather).
    void all_gather(void* out, const void* in, size_t n, DType t) override;
    /// out (n) = block rank() of the group's sum of in (size() * n), rank order (Comm::reduce_scatter_sum).
    void reduce_scatter(void* out, const void* in, size_t n, DType t) override;
    /// Comm::all_gather_async; the handle's wait() and test() are the CommHandle's.
    std::unique_ptr<TpPending> all_gather_start(void* out, const void* in, size_t n, DType t) override;
    Comm& comm() { return *comm_; }

private:
    std::unique_ptr<Comm> comm_;
};

/// The TP group of `topo`'s rank: a Comm on topo.tp_group() for device buffers of `ops`
/// (make_comm). Collective over that group's ranks (each calls it). Errors: as make_comm.
std::unique_ptr<TpGroup> make_tp_group(Ops& ops, const Topology& topo, const CommOptions& opt = {});

}  // namespace llmtrain
