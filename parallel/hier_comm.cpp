// parallel/hier_comm.cpp — the node-aware all-reduce (see hier_comm.hpp).
#include "parallel/hier_comm.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

namespace llmtrain {

HierSplit hier_split(const std::vector<int>& group, const NodeMap& nodes, int me) {
    if (std::find(group.begin(), group.end(), me) == group.end())
        throw std::invalid_argument("hier_split: rank " + std::to_string(me) + " is not in the group");
    std::map<int, std::vector<int>> by_node;  // node -> the group's ranks there, in group order
    for (int r : group) by_node[r < int(nodes.node_of.size()) ? nodes.node_of[r] : 0].push_back(r);
    const size_t L = by_node.begin()->second.size();
    if (by_node.size() < 2 || L < 2) return {};
    for (const auto& [node, ranks] : by_node)
        if (ranks.size() != L) return {};
    HierSplit s;
    s.intra = by_node[nodes.node_of[me]];
    const size_t idx = size_t(std::find(s.intra.begin(), s.intra.end(), me) - s.intra.begin());
    for (const auto& [node, ranks] : by_node) s.inter.push_back(ranks[idx]);
    return s;
}

namespace {

class Done final : public CommWork {
public:
    void wait() override {}
};

class HierComm final : public Comm {
public:
    HierComm(std::unique_ptr<Comm> flat, std::unique_ptr<Comm> intra, std::unique_ptr<Comm> inter)
        : flat_(std::move(flat)), intra_(std::move(intra)), inter_(std::move(inter)) {}
    int rank() const override { return flat_->rank(); }
    int size() const override { return flat_->size(); }
    const std::vector<int>& world_ranks() const override { return flat_->world_ranks(); }

    CommHandle all_reduce_sum_async(void* buf, size_t n, DType t) override {
        const size_t es = dtype_size(t), L = size_t(intra_->size());
        const size_t m = (n + L - 1) / L;  // each node member's chunk; the last ones padded with zeros
        const uint64_t before = intra_->stats().total_bytes() + inter_->stats().total_bytes();
        scratch_.assign(L * m * es, 0);
        std::memcpy(scratch_.data(), buf, n * es);
        uint8_t* mine = scratch_.data() + size_t(intra_->rank()) * m * es;
        intra_->reduce_scatter_sum(scratch_.data(), mine, m, t);  // this node's sum of my chunk
        inter_->all_reduce_sum(mine, m, t);                       // every node's, in node order
        intra_->all_gather(mine, scratch_.data(), m, t);
        std::memcpy(buf, scratch_.data(), n * es);
        count(CommOp::all_reduce, intra_->stats().total_bytes() + inter_->stats().total_bytes() - before);
        return std::make_unique<Done>();
    }
    CommHandle reduce_scatter_sum_async(const void* send, void* recv, size_t n, DType t) override {
        return counted(CommOp::reduce_scatter, [&] { return flat_->reduce_scatter_sum_async(send, recv, n, t); });
    }
    CommHandle all_gather_async(const void* send, void* recv, size_t n, DType t) override {
        return counted(CommOp::all_gather, [&] { return flat_->all_gather_async(send, recv, n, t); });
    }
    CommHandle broadcast_async(void* buf, size_t n, DType t, int root) override {
        return counted(CommOp::broadcast, [&] { return flat_->broadcast_async(buf, n, t, root); });
    }
    CommHandle send_async(const void* buf, size_t n, DType t, int peer) override {
        return counted(CommOp::send, [&] { return flat_->send_async(buf, n, t, peer); });
    }
    CommHandle recv_async(void* buf, size_t n, DType t, int peer) override {
        return counted(CommOp::recv, [&] { return flat_->recv_async(buf, n, t, peer); });
    }
    void all_reduce_max(float* buf, size_t n) override {
        counted(CommOp::all_reduce, [&] {
            flat_->all_reduce_max(buf, n);
            return CommHandle{};
        });
    }
    void barrier() override { flat_->barrier(); }
    std::string describe() const override { return flat_->describe() + " (hierarchical all-reduce)"; }

private:
    /// Runs f on flat_ and counts what flat_ counted for it under `op`.
    template <class F>
    CommHandle counted(CommOp op, F&& f) {
        const uint64_t before = flat_->stats().total_bytes();
        CommHandle h = f();
        count(op, flat_->stats().total_bytes() - before);
        return h;
    }

    std::unique_ptr<Comm> flat_, intra_, inter_;
    std::vector<uint8_t> scratch_;  // (L, m) chunks of the all-reduce in flight
};

}  // namespace

std::unique_ptr<Comm> make_hier_comm(std::unique_ptr<Comm> flat, std::unique_ptr<Comm> intra,
                                     std::unique_ptr<Comm> inter) {
    return std::make_unique<HierComm>(std::move(flat), std::move(intra), std::move(inter));
}

}  // namespace llmtrain
