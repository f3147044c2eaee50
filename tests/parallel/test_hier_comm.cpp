// tests/parallel/test_hier_comm.cpp — the node-aware all-reduce (parallel/hier_comm.hpp) under
// `mpirun -np 4`, its ranks taken as 2 nodes of 2 ({0,1}, {2,3}) by building the sub-comms by hand
// (on one machine MPI sees one node). Reference: the sum computed here in the order the design
// promises, ((r0 + r1) + (r2 + r3)) in fp32 (bf16: rounded once at the end of each node's sum and
// of the total, as the rank-order MpiComm rounds), which must match bit for bit; lengths that do not
// split evenly over a node's 2 ranks pad. The other operations are the flat Comm's.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "model/bf16.hpp"
#include "parallel/hier_comm.hpp"

using namespace llmtrain;

namespace {

float value(int rank, size_t i) { return 1.0f / float(3 + rank) + 1e-3f * float(i % 97) * float(rank + 1); }

}  // namespace

TEST(HierComm, AllReduceSumsInsideNodesThenAcross) {
    if (world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
    const int me = world_rank();
    const std::vector<int> intra = me < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    const std::vector<int> inter = me % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    auto hier = make_hier_comm(make_mpi_comm(), make_mpi_comm(intra), make_mpi_comm(inter));
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
