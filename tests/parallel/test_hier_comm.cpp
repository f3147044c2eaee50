// tests/parallel/test_hier_comm.cpp — the node-aware all-reduce (parallel/hier_comm.hpp) under
// `mpirun -np 4`, its ranks taken as 2 nodes of 2 ({0,1}, {2,3}) by building the sub-comms by hand
// (on one machine MPI sees one node). Reference: the sum computed here in the order the design
// promises, ((r0 + r1) + (r2 + r3)) in fp32 (bf16: rounded once at the end of each node's sum and
// of the total, as the rank-order MpiComm rounds), which must match bit for bit; lengths that do not
// split evenly over a node's 2 ranks pad. The other operations are the flat Comm's.
// Asynchrony: the call returns before a late rank has joined, test() says false until the sum is in
// place and true after, several all-reduces in flight complete whatever order they are waited in.
// The comm contract (tests/comm/comm_contract.hpp) runs on it too: the world's Comm is the
// hierarchical one, sub-groups (which do not split 2 x 2) are flat MpiComms.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "model/bf16.hpp"
#include "parallel/hier_comm.hpp"
#include "tests/comm/comm_contract.hpp"

using namespace llmtrain;

namespace {

float value(int rank, size_t i) { return 1.0f / float(3 + rank) + 1e-3f * float(i % 97) * float(rank + 1); }

/// The world's hierarchical comm on 2 "nodes" {0,1}, {2,3} (collective over the 4 ranks).
std::unique_ptr<Comm> hier_world(const CommOptions& opt = {}) {
    const int me = world_rank();
    const std::vector<int> intra = me < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    const std::vector<int> inter = me % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    auto flat = make_mpi_comm({}, opt), a = make_mpi_comm(intra, opt), gather = make_mpi_comm(intra, opt);
    return make_hier_comm(std::move(flat), std::move(a), make_mpi_comm(inter, opt), std::move(gather));
}

/// The fp32 sum in HierComm's order for element i.
float hier_sum(size_t i, int salt) {
    return (value(0 + salt, i) + value(1 + salt, i)) + (value(2 + salt, i) + value(3 + salt, i));
}

/// The contract's Comm: the hierarchical one for the 4-rank world, a flat MpiComm for a sub-group.
commtest::CommKind hier_comm_kind() {
    return {"HierComm", "cpu", {"fp32"},
            [](Ops&, const std::vector<int>& ranks, const CommOptions& opt) -> std::unique_ptr<Comm> {
                if (ranks.empty() && world_size() == 4) return hier_world(opt);
                return make_mpi_comm(ranks, opt);
            },
            {.rank_order_sums = false, .serial_p2p = false, .describe_prefix = "", .host_timeout = false,
             .aborts = false, .test_completes = true, .flat_all_reduce_bytes = false},
            {}};
}

}  // namespace

namespace llmtrain::commtest {
INSTANTIATE_TEST_SUITE_P(HierComm, CommContract, ::testing::Values(hier_comm_kind()), kind_suffix);
}  // namespace llmtrain::commtest

TEST(HierComm, AllReduceSumsInsideNodesThenAcross) {
    if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
    const int me = world_rank();
    auto hier = hier_world();
    for (size_t n : {size_t(1), size_t(7), size_t(1000)}) {
        std::vector<float> x(n), want(n);
        for (size_t i = 0; i < n; ++i) {
            x[i] = value(me, i);
            want[i] = (value(0, i) + value(1, i)) + (value(2, i) + value(3, i));
        }
        hier->all_reduce_sum(x.data(), n, DType::f32);
        EXPECT_EQ(std::memcmp(x.data(), want.data(), n * 4), 0) << "fp32, n = " << n;
        std::vector<uint16_t> b(n), bw(n);
        for (size_t i = 0; i < n; ++i) {
            b[i] = f32_to_bf16(value(me, i));
            const float node0 = bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(value(0, i))) +
                                                        bf16_to_f32(f32_to_bf16(value(1, i)))));
            const float node1 = bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(value(2, i))) +
                                                        bf16_to_f32(f32_to_bf16(value(3, i)))));
            bw[i] = f32_to_bf16(node0 + node1);
        }
        hier->all_reduce_sum(b.data(), n, DType::bf16);
        EXPECT_EQ(b, bw) << "bf16, n = " << n;
    }
    // Everything else is the flat comm's: an all-gather in rank order.
    float mine = float(me), all[4] = {};
    hier->all_gather(&mine, all, 1, DType::f32);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(all[r], float(r));
    EXPECT_GT(hier->stats().total_bytes(), 0u);
}

// Rank 3 joins 0.5 s late: everyone else's call returns at once with test() false; polling test()
// (no wait()) completes the sum, which is then in place. Three all-reduces in flight at once, waited
// newest first, all come out right.
TEST(HierComm, AllReduceIsAsynchronous) {
    if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
    using Clock = std::chrono::steady_clock;
    const int me = world_rank();
    auto hier = hier_world();
    const size_t n = 1001;
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = value(me, i);
    if (me == 3) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const auto t0 = Clock::now();
    CommHandle h = hier->all_reduce_sum_async(x.data(), n, DType::f32);
    const double call_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (me != 3) {
        EXPECT_LT(call_s, 0.2) << "the call waited for the late rank";
        EXPECT_FALSE(h->test()) << "done before rank 3 joined";
    }
    while (!h->test()) {
        ASSERT_LT(Clock::now() - t0, std::chrono::seconds(30));
        std::this_thread::yield();
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], hier_sum(i, 0)) << "element " << i << " after test() said true";
    h->wait();

    std::vector<std::vector<float>> bufs(3, std::vector<float>(n));
    std::vector<CommHandle> hs;
    for (int k = 0; k < 3; ++k) {
        for (size_t i = 0; i < n; ++i) bufs[k][i] = value(me + 10 * k, i);
        hs.push_back(hier->all_reduce_sum_async(bufs[k].data(), n, DType::f32));
        hs.back()->test();  // moves every one in flight on
    }
    for (int k = 2; k >= 0; --k) hs[k]->wait();
    for (int k = 0; k < 3; ++k)
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(bufs[k][i], hier_sum(i, 10 * k)) << "all-reduce " << k << ", element " << i;
}

TEST(HierSplit, ByNode) {
    NodeMap m;
    m.node_of = {0, 0, 1, 1, 2, 2};
    m.host = {"a", "b", "c"};
    const HierSplit s = hier_split({0, 1, 2, 3, 4, 5}, m, 3);
    EXPECT_EQ(s.intra, (std::vector<int>{2, 3}));
    EXPECT_EQ(s.inter, (std::vector<int>{1, 3, 5}));
    EXPECT_TRUE(hier_split({0, 1}, m, 0).intra.empty()) << "one node";
    EXPECT_TRUE(hier_split({0, 2, 4}, m, 2).intra.empty()) << "one rank per node";
    EXPECT_TRUE(hier_split({0, 1, 2}, m, 0).intra.empty()) << "2 ranks on node 0, 1 on node 1";
    EXPECT_THROW(hier_split({0, 1}, m, 4), std::invalid_argument);
}
