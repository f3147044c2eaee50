// tests/app/test_tp_state.cpp — exchange_tp_stage (app/state/tp_state.hpp): a tensor-parallel stage's
// shards made into pieces of whole tensors, one piece per rank of replica 0, in one process.
//
// Every rank of a tp 2 x ZeRO 2 world runs on its own thread over a mailbox Comm (a send queues a
// copy for its peer, a recv waits for it: MPI's matching by source and order). The reference is
// independent of the exchange: whole random tensors (a tp = 1 layout), cut into each TP rank's local
// layout by ParamLayout::cut_local_flat and chunked by ParamLayout::shard; the writers' views must
// tile the model and give those tensors back bit for bit, and each writer's snapshot must be its
// quarter of the model (the old gather put the whole stage on one rank).
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "app/state/model_state.hpp"
#include "app/state/tp_state.hpp"

using namespace llmtrain;

namespace {

struct Done : CommWork {
    void wait() override {}
};

/// Messages between the threads' ranks, by (from, to), in order.
struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::pair<int, int>, std::deque<std::vector<float>>> q;
};

/// One rank's end of the mailbox: send() and recv() of f32 host buffers; nothing else is used.
class MailComm : public Comm {
public:
    MailComm(Mailbox& box, int rank, int size) : box_(box), rank_(rank), size_(size) {
        for (int r = 0; r < size; ++r) ranks_.push_back(r);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const std::vector<int>& world_ranks() const override { return ranks_; }
    CommHandle all_reduce_sum_async(void*, size_t, DType) override { throw std::logic_error("unused"); }
    CommHandle reduce_scatter_sum_async(const void*, void*, size_t, DType) override { throw std::logic_error("unused"); }
    CommHandle all_gather_async(const void*, void*, size_t, DType) override { throw std::logic_error("unused"); }
    CommHandle broadcast_async(void*, size_t, DType, int) override { throw std::logic_error("unused"); }
    CommHandle send_async(const void* buf, size_t n, DType, int peer) override {
        const float* p = static_cast<const float*>(buf);
        {
            std::lock_guard<std::mutex> l(box_.mu);
            box_.q[{rank_, peer}].emplace_back(p, p + n);
        }
        box_.cv.notify_all();
        return std::make_unique<Done>();
    }
    CommHandle recv_async(void* buf, size_t n, DType, int peer) override {
        std::unique_lock<std::mutex> l(box_.mu);
        auto& q = box_.q[{peer, rank_}];
        box_.cv.wait(l, [&] { return !q.empty(); });
        if (q.front().size() != n)
            throw std::logic_error("recv from " + std::to_string(peer) + ": " + std::to_string(q.front().size()) +
                                   " floats, expected " + std::to_string(n));
        std::memcpy(buf, q.front().data(), n * sizeof(float));
        q.pop_front();
        return std::make_unique<Done>();
    }
    void all_reduce_max(float*, size_t) override { throw std::logic_error("unused"); }
    void barrier() override { throw std::logic_error("unused"); }

private:
    Mailbox& box_;
    int rank_, size_;
    std::vector<int> ranks_;
};

GPTConfig four_layers() {
    GPTConfig c;
    c.n_layer = 4;
    c.n_head = 2;
    c.n_embd = 32;
    c.seq_len = 16;
    c.vocab_size = 250;  // padded to 256: the vocab split's padded rows are padding
    return c;
}

/// Whole tensors of `full` with random values (padding 0).
std::vector<float> random_full(const ParamLayout& full, uint64_t seed) {
    std::vector<float> x(full.total_numel(), 0.0f);
    std::mt19937_64 g(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    for (const auto& t : full.tensors())
        for (size_t i = 0; i < t.numel; ++i) x[t.offset + i] = n(g);
    return x;
}

/// The shard-local state (w | m | v) of ZeRO index z of N in TP layout lay, cut from whole tensors.
std::vector<float> shard_of(const ParamLayout& full, const ParamLayout& lay, int z, int N,
                            const std::vector<std::vector<float>>& wmv, size_t& ns) {
    std::vector<float> out;
    for (const auto& whole : wmv) {
        std::vector<float> local(lay.total_numel(), 0.0f);
        lay.cut_local_flat(full, whole.data(), local.data());
        for (const FlatRange& r : lay.shard(z, N))
            out.insert(out.end(), local.begin() + long(r.offset), local.begin() + long(r.offset + r.numel));
    }
    ns = out.size() / 3;
    return out;
}

struct Result {
    std::vector<float> snap;
    std::vector<OptimShardView> views;
    std::string err;
    size_t asked = 0;
};

/// Runs exchange_tp_stage on every rank of a pp 1, ZeRO N, tp TP world at once; `tweak` may change
/// a rank's shard first.
std::vector<Result> run_all(const GPTConfig& cfg, int N, int TP, const std::vector<std::vector<float>>& wmv,
                            const std::function<void(int, const ParamLayout&, std::vector<float>&)>& tweak = {}) {
    const int world = N * TP, zsm = zero_shard_multiple(N);
    const ParamLayout full(cfg);
    std::vector<int> units;
    for (int u = 0; u < int(full.units().size()); ++u) units.push_back(u);
    Mailbox box;
    std::vector<Result> res(static_cast<size_t>(world));
    std::vector<std::thread> th;
    for (int r = 0; r < world; ++r)
        th.emplace_back([&, r] {
            const Topology topo(world, r, 1, N, TP);
            const ParamLayout lay(cfg, zsm, TP, topo.tp_index());
            size_t ns = 0;
            std::vector<float> mine = shard_of(full, lay, topo.zero_index(), N, wmv, ns);
            if (tweak) tweak(r, lay, mine);
            MailComm comm(box, r, world);
            Result& out = res[size_t(r)];
            auto snapshot = [&](size_t n) {
                out.asked = n;
                out.snap.assign(3 * n, std::nanf(""));
                return out.snap.data();
            };
            out.err = exchange_tp_stage(comm, topo, full, zsm, units, units, mine.data(), ns, snapshot, out.views);
        });
    for (auto& t : th) t.join();
    return res;
}

}  // namespace

// tp 2 x ZeRO 2: the four writers' pieces tile the model, each a quarter, and hold the whole
// tensors bit for bit (weights, m and v).
TEST(TpState, PiecesTileTheModelExactly) {
    const GPTConfig cfg = four_layers();
    const ParamLayout full(cfg);
    const std::vector<std::vector<float>> wmv = {random_full(full, 1), random_full(full, 2), random_full(full, 3)};
    const std::vector<Result> res = run_all(cfg, 2, 2, wmv);
    const size_t quarter = (full.total_numel() + 3) / 4;
    std::vector<int> seen(full.total_numel(), 0);
    for (size_t r = 0; r < res.size(); ++r) {
        EXPECT_EQ(res[r].err, "") << "rank " << r;
        EXPECT_LE(res[r].asked, quarter) << "rank " << r << ": its snapshot is more than its share";
        for (const OptimShardView& v : res[r].views)
            for (size_t i = v.begin; i < v.end; ++i) {
                ++seen[i];
                const size_t at = i - v.begin;
                ASSERT_EQ(std::memcmp(v.w + at, &wmv[0][i], 4), 0) << "w at flat " << i << ", rank " << r;
                ASSERT_EQ(std::memcmp(v.m + at, &wmv[1][i], 4), 0) << "m at flat " << i << ", rank " << r;
                ASSERT_EQ(std::memcmp(v.v + at, &wmv[2][i], 4), 0) << "v at flat " << i << ", rank " << r;
            }
    }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "flat element " << i;
}

// A replicated tensor whose copy on TP rank 1 differs in one bit is named by the writer of that element.
TEST(TpState, ADifferingReplicatedCopyIsNamed) {
    const GPTConfig cfg = four_layers();
    const ParamLayout full(cfg);
    const std::vector<std::vector<float>> wmv = {random_full(full, 4), random_full(full, 5), random_full(full, 6)};
    const Topology t3(4, 3, 1, 2, 2);  // world rank 3: ZeRO index 1, TP index 1
    ASSERT_EQ(t3.tp_index(), 1);
    const std::vector<Result> res = run_all(cfg, 2, 2, wmv, [&](int r, const ParamLayout& lay, std::vector<float>& mine) {
        if (r != 3) return;
        const ParamTensor& ln = lay.find("h.0.ln_1.weight");  // replicated, in unit 1
        const FlatRange c = lay.shard(1, 2)[size_t(ln.unit)];
        ASSERT_TRUE(ln.offset >= c.offset && ln.offset < c.offset + c.numel) << "not in ZeRO index 1's chunk";
        size_t local = 0;
        for (int u = 0; u < ln.unit; ++u) local += lay.shard(1, 2)[size_t(u)].numel;
        uint32_t bits;
        float* x = &mine[local + (ln.offset - c.offset)];
        std::memcpy(&bits, x, 4);
        bits ^= 1u;
        std::memcpy(x, &bits, 4);
    });
    std::string errs;
    for (const Result& r : res) errs += r.err + "\n";
    EXPECT_NE(errs.find("replicated tensor h.0.ln_1.weight of TP rank 1 (world rank 3) differs"), std::string::npos)
        << errs;
}

// tp_piece: contiguous pieces of ceil(n / writers), empty past the end; a gap in the units is refused.
TEST(TpState, PiecesOfTheSavedUnits) {
    const ParamLayout full(four_layers());
    const size_t lo = full.units()[1].offset, hi = full.units()[3].offset + full.units()[3].numel;
    size_t at = lo;
    for (int w = 0; w < 5; ++w) {
        const FlatRange p = tp_piece(full, {1, 2, 3}, 5, w);
        EXPECT_EQ(p.offset, std::min(at, hi));
        at = p.offset + p.numel;
    }
    EXPECT_EQ(at, hi);
    EXPECT_THROW(tp_piece(full, {1, 3}, 2, 0), std::invalid_argument);
}
