// parallel/ep_grads.cpp — expert parallelism's groups and gradient sums (see ep_grads.hpp).
#include "parallel/ep_grads.hpp"

#include <stdexcept>
#include <string>

namespace llmtrain {

ExpertDp expert_dp_of(const Topology& topo, int ep) {
    const std::string P = std::to_string(ep);
    if (ep < 2 || topo.dp() % ep != 0)
        throw std::invalid_argument("parallel.ep: expected a divisor > 1 of the data-parallel ranks dp = " +
                                    std::to_string(topo.dp()) + ", got " + P);
    const int zg = topo.zero_group_size();
    if (zg > 1 && zg % ep != 0)
        throw std::invalid_argument("parallel.zero_group_size: with parallel.ep = " + P +
                                    " expected a multiple of ep (the ZeRO group of the ranks that hold the same "
                                    "experts is zero_group_size / ep of them), got " + std::to_string(zg));
    ExpertDp x;
    x.ep = ep;
    const int d = topo.dp_index();
    x.ep_index = d % ep;
    x.zero_size = zg > 1 ? zg / ep : 1;
    const int e2 = d / ep, z = e2 % x.zero_size, r = e2 / x.zero_size, R = topo.dp() / ep / x.zero_size;
    auto rank_of_dp = [&](int dp) {  // this stage's, this TP index's (cp ranks are dp indices)
        return topo.rank_of(topo.stage(), dp / zg, dp % zg, topo.tp_index());
    };
    for (int j = 0; j < x.zero_size; ++j) x.zero_group.push_back(rank_of_dp(ep * (r * x.zero_size + j) + x.ep_index));
    for (int j = 0; j < R; ++j) x.replica_group.push_back(rank_of_dp(ep * (j * x.zero_size + z) + x.ep_index));
    x.writers = ep * x.zero_size * topo.tp();  // the dp indices [0, ep x Ne), each with its TP ranks
    x.writer = d < ep * x.zero_size ? d * topo.tp() + topo.tp_index() : -1;
    return x;
}

EpGrads::EpGrads(ZeroEngine& engine, Comm& ep_comm, std::unique_ptr<Comm> ep_host, ExpertDp groups,
                 bool norm_skips_embeddings)
    : engine_(engine), ep_(ep_comm), ep_host_(std::move(ep_host)), groups_(std::move(groups)) {
    const ParamLayout& L = engine_.layout();
    if (L.ep() != ep_.size() || L.ep_rank() != ep_.rank() || !ep_host_ || ep_host_->size() != ep_.size())
        throw std::invalid_argument("EpGrads: the layout holds the experts of EP rank " + std::to_string(L.ep_rank()) +
                                    " of " + std::to_string(L.ep()) + ", the EP group is rank " +
                                    std::to_string(ep_.rank()) + " of " + std::to_string(ep_.size()));
    dense_ = engine_.shard_pieces_where([](const ParamTensor& t) { return !t.expert; });
    expert_ = engine_.shard_pieces_where([](const ParamTensor& t) { return t.expert; });
    // A TP rank other than index 0 leaves out what every TP rank holds whole (the experts, the
    // router, the norms): TP index 0 counts them, the TP group sums the squares after.
    const bool skip_rep = L.tp_rank() != 0;
    dense_norm_ = engine_.shard_pieces_where([&](const ParamTensor& t) {
        return !t.expert && !(norm_skips_embeddings && t.unit == 0) && !(skip_rep && t.split == TPSplit::replicated);
    });
    if (!skip_rep) expert_norm_ = expert_;
}

void EpGrads::reduce() {
    const DType t = engine_.act_dtype();
    const size_t es = dtype_size(t);
    char* g = static_cast<char*>(engine_.grad_shard());
    for (const FlatRange& r : dense_) ep_.all_reduce_sum(g + r.offset * es, r.numel, t);
}

float EpGrads::norm_squared(float* scratch) {
    const float dense = engine_.pieces_norm_squared(scratch, dense_norm_);  // the same on every EP rank
    float experts = engine_.pieces_norm_squared(scratch, expert_norm_);  // this EP index's experts (TP index 0)
    ep_host_->all_reduce_sum(&experts, 1, DType::f32);
    return dense + experts;
}

}  // namespace llmtrain
