// tests/parallel/test_mpi_comm.cpp — MpiComm (parallel/mpi_comm.cpp), run as a plain single process
// and under `mpirun -np 3` and `-np 4` (tests/parallel/CMakeLists.txt).
//
// The contract every Comm keeps is one suite, CommContract (tests/comm/comm_contract.hpp), which this
// file instantiates for MpiComm on the cpu backend (its buffers are host memory): fp32 sums equal the
// rank-order float sum bit for bit, bf16 sums its nearest-even rounding, moves deliver the source
// bytes, byte counters follow the CommStats formulas, and the segmented code paths run with a
// segment of 3 elements. Here only what is not about a Comm: the local rank (from the node map, not
// the environment) and the operations' names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/nodes.hpp"
#include "tests/comm/comm_contract.hpp"

using namespace llmtrain;

namespace {

/// Host buffers of the cpu backend (fp32 only); Comm::describe(); its own waits time out, abort() does nothing.
commtest::CommKind mpi_comm_kind() {
    return {"MpiComm", "cpu", {"fp32"},
            [](Ops&, const std::vector<int>& ranks, const CommOptions& opt) { return make_mpi_comm(ranks, opt); },
            {.rank_order_sums = true, .serial_p2p = false, .describe_prefix = "", .host_timeout = false, .aborts = false,
             .test_completes = true},
            {}};
}

}  // namespace

namespace llmtrain::commtest {
INSTANTIATE_TEST_SUITE_P(MpiComm, CommContract, ::testing::Values(mpi_comm_kind()), kind_suffix);
}  // namespace llmtrain::commtest

// The local rank is the rank's index among the ranks of its node in MPI's node map, whatever the
// launcher's variables say (set here to nonsense: torchrun's, Slurm's, MPICH's). References: the
// node map's own rank list, and where OpenMPI's mpirun runs us, its count (OMPI_COMM_WORLD_LOCAL_RANK).
TEST(MpiComm, LocalRankIsTheIndexAmongTheRanksOfItsNode) {
    const char* vars[] = {"LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"};
    for (const char* v : vars) setenv(v, "7", 1);
    const NodeMap& m = node_map();
    const std::vector<int> mine = m.ranks_on(m.node_of.at(world_rank()));
    const auto at = std::find(mine.begin(), mine.end(), world_rank());
    ASSERT_NE(at, mine.end());
    EXPECT_EQ(local_rank(), int(at - mine.begin()));
    if (const char* ompi = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) EXPECT_EQ(local_rank(), std::atoi(ompi));
    if (m.nodes() == 1) EXPECT_EQ(local_rank(), world_rank()) << "one machine: one node";
    for (const char* v : vars) unsetenv(v);
}

TEST(MpiComm, OperationNames) {
    EXPECT_STREQ(comm_op_name(CommOp::all_reduce), "all_reduce");
    EXPECT_STREQ(comm_op_name(CommOp::reduce_scatter), "reduce_scatter");
    EXPECT_STREQ(comm_op_name(CommOp::all_gather), "all_gather");
    EXPECT_STREQ(comm_op_name(CommOp::broadcast), "broadcast");
    EXPECT_STREQ(comm_op_name(CommOp::send), "send");
    EXPECT_STREQ(comm_op_name(CommOp::recv), "recv");
    EXPECT_STREQ(comm_op_name(CommOp::all_to_all), "all_to_all");
}

// Comm::all_to_all_v (parallel/all_to_all.cpp) against a plain reference: rank r sends rank q
// (r + 2q) mod 5 elements (some blocks empty, its own block too) holding r·1000 + q·100 + i, so rank
// q must receive from each r exactly those values, back to back in rank order; over the world and
// over the world in reverse order (group indices are not world ranks). The stats count the bytes
// sent to the other ranks once, as all_to_all, and nothing as send or recv. Exact (integers in fp32).
TEST(MpiComm, AllToAllVDeliversEveryBlockInRankOrder) {
    for (bool reversed : {false, true}) {
        std::vector<int> ranks(static_cast<size_t>(world_size()));
        for (int r = 0; r < world_size(); ++r) ranks[size_t(r)] = reversed ? world_size() - 1 - r : r;
        auto comm = make_mpi_comm(ranks);
        const int P = comm->size(), me = comm->rank();
        std::vector<size_t> sc(static_cast<size_t>(P)), rc(static_cast<size_t>(P));
        std::vector<float> send, want;
        uint64_t wire = 0;
        for (int q = 0; q < P; ++q) {
            sc[size_t(q)] = size_t((me + 2 * q) % 5);
            rc[size_t(q)] = size_t((q + 2 * me) % 5);
            for (size_t i = 0; i < sc[size_t(q)]; ++i) send.push_back(float(me * 1000 + q * 100 + int(i)));
            for (size_t i = 0; i < rc[size_t(q)]; ++i) want.push_back(float(q * 1000 + me * 100 + int(i)));
            if (q != me) wire += sc[size_t(q)] * 4;
        }
        std::vector<float> got(want.size() + 1, -1.0f);  // one more: nothing written past the blocks
        comm->all_to_all_v(send.data(), sc.data(), got.data(), rc.data(), DType::f32);
        EXPECT_EQ(got.back(), -1.0f);
        got.pop_back();
        EXPECT_EQ(got, want) << (reversed ? "reversed group" : "world");
        const CommStats& st = comm->stats();
        EXPECT_EQ(st.bytes[int(CommOp::all_to_all)], wire);
        EXPECT_EQ(st.calls[int(CommOp::all_to_all)], 1u);
        EXPECT_EQ(st.calls[int(CommOp::send)] + st.calls[int(CommOp::recv)], 0u);
    }
}
