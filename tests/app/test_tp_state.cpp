// tests/app/test_tp_state.cpp — gather_tp_stage (app/tp_state.hpp): a tensor-parallel stage's
// shards made into whole tensors on the stage's first rank, in one process.
//
// The other TP rank's shard comes through a Comm stand-in that hands out prepared messages. The
// reference is independent of the gather: whole random tensors (a tp = 1 layout), cut into each TP
// rank's local layout by ParamLayout::cut_local_flat; the gathered views must give those tensors
// back bit for bit. The scratch is measured by counting this binary's heap (operator new/delete
// replaced here): its peak during the call must stay within the stage's share, which the old
// whole-model scratch (3 x a TP rank's local elements of every stage) exceeds several times over.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <new>
#include <random>

#include "app/tp_state.hpp"

using namespace llmtrain;

namespace {

std::atomic<long long> g_live{0}, g_peak{0};

}  // namespace

// GCC cannot see that these two are the pair: its mismatched new/delete warning does not apply.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
    void* p = std::malloc(n ? n : 1);
    if (!p) throw std::bad_alloc();
    const long long now = g_live += (long long)malloc_usable_size(p);
    for (long long peak = g_peak; now > peak && !g_peak.compare_exchange_weak(peak, now);) {
    }
    return p;
}
void operator delete(void* p) noexcept {
    if (!p) return;
    g_live -= (long long)malloc_usable_size(p);
    std::free(p);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }

namespace {

struct Done : CommWork {
    void wait() override {}
};

/// The stage head's side of the world: recv() hands out what was queued for that peer, in order.
class InboxComm : public Comm {
public:
    InboxComm(int rank, int size) : rank_(rank), size_(size) {
        for (int r = 0; r < size; ++r) ranks_.push_back(r);
    }
    std::map<int, std::deque<std::vector<float>>> inbox;
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const std::vector<int>& world_ranks() const override { return ranks_; }
    CommHandle all_reduce_sum_async(void*, size_t, DType) override { throw std::logic_error("unused"); }
    CommHandle reduce_scatter_sum_async(const void*, void*, size_t, DType) override { throw std::logic_error("unused"); }
    CommHandle all_gather_async(const void*, void*, size_t, DType) override { throw std::logic_error("unused"); }
    CommHandle broadcast_async(void*, size_t, DType, int) override { throw std::logic_error("unused"); }
    CommHandle send_async(const void*, size_t, DType, int) override { throw std::logic_error("unused"); }
    CommHandle recv_async(void* buf, size_t n, DType t, int peer) override {
        auto& q = inbox[peer];
        if (t != DType::f32 || q.empty() || q.front().size() != n)
            throw std::logic_error("recv from " + std::to_string(peer) + ": no message of " + std::to_string(n) + " floats");
        std::memcpy(buf, q.front().data(), n * sizeof(float));
        q.pop_front();
        return std::make_unique<Done>();
    }
    void all_reduce_max(float*, size_t) override { throw std::logic_error("unused"); }
    void barrier() override { throw std::logic_error("unused"); }

private:
    int rank_, size_;
    std::vector<int> ranks_;
};

GPTConfig six_layers() {
    GPTConfig c;
    c.n_layer = 6;
    c.n_head = 2;
    c.n_embd = 32;
    c.seq_len = 16;
    c.vocab_size = 128;
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

/// TP rank t's shard-local state of `units` (w | m | v, each the units' local elements back to
/// back), cut from the whole tensors; ns gets the element count of one of the three.
std::vector<float> shard_of(const ParamLayout& full, const ParamLayout& lay, const std::vector<int>& units,
                            const std::vector<std::vector<float>>& wmv, size_t& ns) {
    ns = 0;
    for (int u : units) ns += lay.units()[size_t(u)].numel;
    std::vector<float> out;
    for (const auto& whole : wmv) {
        std::vector<float> local(lay.total_numel(), 0.0f);
        lay.cut_local_flat(full, whole.data(), local.data());
        for (int u : units) {
            const ParamUnit& un = lay.units()[size_t(u)];
            out.insert(out.end(), local.begin() + long(un.offset), local.begin() + long(un.offset + un.numel));
        }
    }
    return out;
}

}  // namespace

// pp 2 x tp 2 (world 4, dp 1): stage 0 holds units 0 (embeddings) and 1 (layer 0) of six layers;
// its head, world rank 0, gathers TP rank 1's shard (world rank 1) and writes whole tensors.
TEST(TpState, GatherIsExactAndItsScratchIsTheStages) {
    const GPTConfig cfg = six_layers();
    const ParamLayout full(cfg);
    const int TP = 2;
    const Topology topo(4, 0, 2, 1, TP);
    ASSERT_EQ(topo.rank_of(0, 0, 0, 1), 1);
    const std::vector<int> units = {0, 1};
    const std::vector<std::vector<float>> wmv = {random_full(full, 1), random_full(full, 2), random_full(full, 3)};
    const ParamLayout lay0(cfg, 1, TP, 0), lay1(cfg, 1, TP, 1);
    size_t ns = 0, ns1 = 0;
    const std::vector<float> mine = shard_of(full, lay0, units, wmv, ns);
    const std::vector<float> theirs = shard_of(full, lay1, units, wmv, ns1);
    ASSERT_EQ(ns, ns1);
    size_t nf = 0, whole_local = lay0.total_numel();
    for (int u : units) nf += full.units()[size_t(u)].numel;
    std::vector<float> snap(3 * nf, std::nanf(""));
    auto snapshot = [&](size_t n) {
        EXPECT_EQ(n, nf);
        return snap.data();
    };

    InboxComm world(0, 4);
    world.inbox[1].push_back(theirs);
    std::vector<OptimShardView> views;
    views.reserve(units.size());
    const long long before = g_live.load();
    g_peak = before;
    const std::string err = gather_tp_stage(world, topo, full, 1, units, units, mine.data(), ns, snapshot, views);
    const long long scratch = g_peak.load() - before;
    EXPECT_EQ(err, "");

    // Every tensor of the stage's units, whole, bit for bit; nothing of another unit.
    ASSERT_EQ(views.size(), units.size());
    for (size_t i = 0; i < units.size(); ++i) {
        const ParamUnit& un = full.units()[size_t(units[i])];
        EXPECT_EQ(views[i].begin, un.offset);
        EXPECT_EQ(views[i].end, un.offset + un.numel);
        for (const auto& t : full.tensors()) {
            if (t.unit != units[i]) continue;
            const size_t at = t.offset - un.offset;
            EXPECT_EQ(std::memcmp(views[i].w + at, wmv[0].data() + t.offset, t.numel * 4), 0) << t.name;
            EXPECT_EQ(std::memcmp(views[i].m + at, wmv[1].data() + t.offset, t.numel * 4), 0) << t.name;
            EXPECT_EQ(std::memcmp(views[i].v + at, wmv[2].data() + t.offset, t.numel * 4), 0) << t.name;
        }
    }
    // The heap's peak during the call: one received shard (3 ns floats) and one TP rank's local
    // state of the stage (3 ns floats here: dp 1, so the shard is the stage), plus 64 KiB for the
    // layouts and views. The whole-model scratch would add 3 x (whole_local - ns) floats more.
    const long long bound = 4LL * (3 * ns + 3 * ns) + 65536;
    EXPECT_LT(scratch, bound) << "stage " << ns << " of " << whole_local << " local elements";
    ASSERT_GT(4LL * 3 * (whole_local - ns), 65536 * 2) << "the model is too small to tell the scratch apart";

    // A replicated tensor whose copy on TP rank 1 differs in one bit is named.
    std::vector<float> bad = theirs;
    const ParamTensor& wpe = lay1.find("wpe");  // replicated, in unit 0 (the first of the shard)
    ASSERT_EQ(wpe.unit, 0);
    uint32_t bits;
    std::memcpy(&bits, &bad[wpe.offset + 5], 4);
    bits ^= 1u;
    std::memcpy(&bad[wpe.offset + 5], &bits, 4);
    world.inbox[1].push_back(bad);
    views.clear();
    const std::string e2 = gather_tp_stage(world, topo, full, 1, units, units, mine.data(), ns, snapshot, views);
    EXPECT_NE(e2.find("replicated tensor wpe of TP rank 1 (world rank 1) differs"), std::string::npos) << e2;
}
