// parallel/ep_group.hpp — the model's expert-parallel group (model/expert_parallel.hpp) over a Comm.
//
// docs/parallelism.md "Expert parallelism": the model owns the narrow ExpertParallel interface (it
// must not include parallel/); this is its implementation on the ranks of Topology::ep_group(),
// whose Comm moves the Ops' device buffers (MpiComm on the CPU backend).
#pragma once
#include <memory>

#include "model/expert_parallel.hpp"
#include "parallel/comm.hpp"

namespace llmtrain {

/// ExpertParallel over a Comm whose group is the ep group (its rank order is the ep index).
class EpGroup final : public ExpertParallel {
public:
    /// Uses `comm` (owned). Errors: std::invalid_argument if comm is null.
    explicit EpGroup(std::unique_ptr<Comm> comm);
    int rank() const override { return comm_->rank(); }
    int size() const override { return comm_->size(); }
    /// Comm::all_to_all_v (blocking; counted as CommOp::all_to_all in the Comm's stats).
    void all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                      DType t) override {
        comm_->all_to_all_v(send, send_counts, recv, recv_counts, t);
    }
    Comm& comm() { return *comm_; }

private:
    std::unique_ptr<Comm> comm_;
};

}  // namespace llmtrain
