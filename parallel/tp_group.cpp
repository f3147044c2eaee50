// parallel/tp_group.cpp — TpGroup: TensorParallel over a Comm (see tp_group.hpp).
#include "parallel/tp_group.hpp"

#include <stdexcept>

namespace llmtrain {

TpGroup::TpGroup(std::unique_ptr<Comm> comm) : comm_(std::move(comm)) {
    if (!comm_) throw std::invalid_argument("TpGroup: no Comm");
}

void TpGroup::all_reduce(void* buf, size_t n, DType t) { comm_->all_reduce_sum(buf, n, t); }

void TpGroup::all_gather(void* out, const void* in, size_t n, DType t) { comm_->all_gather(in, out, n, t); }

void TpGroup::reduce_scatter(void* out, const void* in, size_t n, DType t) {
    comm_->reduce_scatter_sum(in, out, n, t);
}

std::unique_ptr<TpPending> TpGroup::all_gather_start(void* out, const void* in, size_t n, DType t) {
    struct Work final : TpPending {
        CommHandle h;
        void wait() override { h->wait(); }
        bool test() override { return h->test(); }
    };
    auto w = std::make_unique<Work>();
    w->h = comm_->all_gather_async(in, out, n, t);
    return w;
}

std::unique_ptr<TpGroup> make_tp_group(Ops& ops, const Topology& topo, const CommOptions& opt) {
    return std::make_unique<TpGroup>(make_comm(ops, topo.tp_group(), opt));
}

}  // namespace llmtrain
