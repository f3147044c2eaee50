// parallel/hier_comm.cpp — the node-aware all-reduce (see hier_comm.hpp).
//
// An all-reduce is three stages, each a nonblocking operation of a sub-comm: (1) reduce-scatter
// inside the node (started in the call), (2) all-reduce across nodes, (3) all-gather inside the node
// into scratch, then the copy back into the caller's buffer. test() and wait() move every
// all-reduce in flight on the comm on, oldest first. MPI matches collectives on a communicator by the
// order they start, so every rank must start each kind of stage in the same order: stage 2 and 3 of
// an all-reduce start only after the previous all-reduce started its own (and stage 3 runs on an
// intra-node communicator of its own, so stage 1 of a newer all-reduce, started by the call, cannot
// cut in). Waiting on one all-reduce finishes the older ones first.
#include "parallel/hier_comm.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <deque>
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

/// One all-reduce in flight: its stage (0..2 running, 3 done), the stage's handle, its scratch.
struct HierOp {
    void* buf;
    size_t n, m;  // elements; each node member's chunk (the last ones padded with zeros)
    DType t;
    std::vector<uint8_t> scratch;  // (L, m) chunks
    int stage = 0;
    CommHandle h;
    std::string error;  // set when a stage failed; wait() throws it
};

/// The all-reduces in flight on one HierComm, oldest first, and the sub-comms that run them.
struct HierQueue {
    Comm *intra, *inter, *gather;
    std::deque<std::shared_ptr<HierOp>> ops;

    /// Moves the ops on, oldest first, until `until` is done (blocking) or as far as they go without
    /// blocking (until == nullptr). A failed stage fails its op and every newer one (their stages
    /// could no longer start in order).
    void advance(const HierOp* until) {
        int allowed = 3;  // the highest stage a newer op may start: never past an older op's
        while (!ops.empty()) {
            HierOp& op = *ops.front();
            const bool block = until != nullptr;
            try {
                while (op.stage < 3) {
                    if (block) op.h->wait();
                    else if (!op.h->test()) break;
                    start_stage(op, op.stage + 1);
                }
            } catch (const std::exception& e) {
                fail_all(e.what());
                return;
            }
            if (op.stage < 3) {
                allowed = op.stage;
                break;
            }
            const bool was_until = &op == until;
            ops.pop_front();
            if (was_until) return;
        }
        for (size_t i = 1; i < ops.size(); ++i) {  // newer ops behind an unfinished oldest one
            HierOp& op = *ops[i];
            try {
                while (op.stage < allowed && op.h->test()) start_stage(op, op.stage + 1);
            } catch (const std::exception& e) {
                fail_all(e.what());
                return;
            }
            allowed = op.stage;
        }
    }

    /// Starts stage s (1: inter all-reduce, 2: intra all-gather, 3: copy out) after stage s-1 finished.
    void start_stage(HierOp& op, int s) {
        const size_t es = dtype_size(op.t);
        uint8_t* mine = op.scratch.data() + size_t(intra->rank()) * op.m * es;
        op.h.reset();
        if (s == 1) op.h = inter->all_reduce_sum_async(mine, op.m, op.t);  // every node's sum, in node order
        if (s == 2) op.h = gather->all_gather_async(mine, op.scratch.data(), op.m, op.t);
        if (s == 3) {
            std::memcpy(op.buf, op.scratch.data(), op.n * es);
            op.scratch = {};
        }
        op.stage = s;
    }

    void fail_all(const std::string& why) {
        // Handles of stages in flight are kept for good, never destroyed: destroying one would wait.
        static std::vector<CommHandle>& abandoned = *new std::vector<CommHandle>;
        for (auto& op : ops) {
            op->error = op.get() == ops.front().get() ? why : "an earlier all-reduce on this comm failed: " + why;
            op->stage = 3;
            if (op->h) abandoned.push_back(std::move(op->h));
        }
        ops.clear();
    }
};

class HierWork final : public CommWork {
public:
    HierWork(std::shared_ptr<HierQueue> q, std::shared_ptr<HierOp> op) : q_(std::move(q)), op_(std::move(op)) {}
    ~HierWork() override {
        if (op_->stage == 3 || std::uncaught_exceptions() > 0) return;  // done, or unwinding from another error
        try {
            wait();
        } catch (const std::exception& e) {
            // A destructor cannot throw, and the caller relies on a result that never came.
            std::fprintf(stderr, "llmtrain: %s (in a comm handle destroyed without wait())\n", e.what());
            mpi_abort(1);
        }
    }
    void wait() override {
        if (op_->stage < 3) q_->advance(op_.get());
        if (!op_->error.empty()) throw CommError(op_->error);
    }
    bool test() override {
        if (op_->stage < 3) q_->advance(nullptr);
        return op_->stage == 3;
    }

private:
    std::shared_ptr<HierQueue> q_;
    std::shared_ptr<HierOp> op_;
};

class HierComm final : public Comm {
public:
    HierComm(std::unique_ptr<Comm> flat, std::unique_ptr<Comm> intra, std::unique_ptr<Comm> inter,
             std::unique_ptr<Comm> intra_gather)
        : flat_(std::move(flat)), intra_(std::move(intra)), inter_(std::move(inter)), gather_(std::move(intra_gather)) {
        q_ = std::make_shared<HierQueue>(HierQueue{intra_.get(), inter_.get(), gather_.get(), {}});
    }
    int rank() const override { return flat_->rank(); }
    int size() const override { return flat_->size(); }
    const std::vector<int>& world_ranks() const override { return flat_->world_ranks(); }

    CommHandle all_reduce_sum_async(void* buf, size_t n, DType t) override {
        if (t == DType::u8) throw std::invalid_argument("all_reduce_sum (hierarchical): sums are defined for fp32 and bf16 only");
        const size_t es = dtype_size(t), L = size_t(intra_->size()), N = size_t(inter_->size());
        auto op = std::make_shared<HierOp>();
        op->buf = buf;
        op->n = n;
        op->t = t;
        op->m = (n + L - 1) / L;
        // The sub-operations' bytes by the CommStats formulas: reduce-scatter and all-gather of m per
        // rank inside the node, all-reduce of m across nodes.
        count(CommOp::all_reduce, 2 * uint64_t(L - 1) * op->m * es + uint64_t(2) * (N - 1) * op->m * es / N);
        op->scratch.assign(L * op->m * es, 0);
        if (n > 0) std::memcpy(op->scratch.data(), buf, n * es);
        uint8_t* mine = op->scratch.data() + size_t(intra_->rank()) * op->m * es;
        op->h = intra_->reduce_scatter_sum_async(op->scratch.data(), mine, op->m, t);  // this node's sum of my chunk
        q_->ops.push_back(op);
        return std::make_unique<HierWork>(q_, std::move(op));
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

    std::unique_ptr<Comm> flat_, intra_, inter_, gather_;
    std::shared_ptr<HierQueue> q_;  // the all-reduces in flight (their handles share it)
};

}  // namespace

std::unique_ptr<Comm> make_hier_comm(std::unique_ptr<Comm> flat, std::unique_ptr<Comm> intra,
                                     std::unique_ptr<Comm> inter, std::unique_ptr<Comm> intra_gather) {
    return std::make_unique<HierComm>(std::move(flat), std::move(intra), std::move(inter), std::move(intra_gather));
}

}  // namespace llmtrain
