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
}
