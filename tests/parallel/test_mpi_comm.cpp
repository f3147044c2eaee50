// tests/parallel/test_mpi_comm.cpp — MpiComm (parallel/mpi_comm.cpp), run as a plain single process
// and under `mpirun -np 3` and `-np 4` (tests/parallel/CMakeLists.txt).
//
// The contract every Comm keeps is one suite, CommContract (tests/comm/comm_contract.hpp), which this
// file instantiates for MpiComm on the cpu backend (its buffers are host memory): fp32 sums equal the
// rank-order float sum bit for bit, bf16 sums its nearest-even rounding, moves deliver the source
// bytes, byte counters follow the CommStats formulas, and the segmented code paths run with a
// segment of 3 elements. Here only what is not about a Comm: the local rank's environment rules and
// the operations' names.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "parallel/comm.hpp"
#include "tests/comm/comm_contract.hpp"

using namespace llmtrain;

namespace {

/// Host buffers of the cpu backend (fp32 only); Comm::describe(); its own waits time out, abort() does nothing.
commtest::CommKind mpi_comm_kind() {
    return {"MpiComm", "cpu", {"fp32"},
            [](Ops&, const std::vector<int>& ranks, const CommOptions& opt) { return make_mpi_comm(ranks, opt); },
            {.rank_order_sums = true, .serial_p2p = false, .describe_prefix = "", .host_timeout = false, .aborts = false},
            {}};
}

}  // namespace

namespace llmtrain::commtest {
INSTANTIATE_TEST_SUITE_P(MpiComm, CommContract, ::testing::Values(mpi_comm_kind()), kind_suffix);
}  // namespace llmtrain::commtest

TEST(MpiComm, LocalRankPrefersTorchrunThenOpenMpiThenSlurm) {
    const char* vars[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
    std::vector<std::string> saved;
    std::vector<bool> had;
    for (const char* v : vars) {
        const char* s = std::getenv(v);
        had.push_back(s != nullptr);
        saved.push_back(s ? s : "");
    }
    setenv("LOCAL_RANK", "5", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    setenv("SLURM_LOCALID", "2", 1);
    EXPECT_EQ(local_rank(), 5);
    unsetenv("LOCAL_RANK");
    EXPECT_EQ(local_rank(), 3);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    EXPECT_EQ(local_rank(), 2);
    setenv("SLURM_LOCALID", "x1", 1);
    EXPECT_THROW(local_rank(), std::runtime_error);
    unsetenv("SLURM_LOCALID");
    EXPECT_EQ(local_rank(), 0);
    for (int i = 0; i < 3; ++i)
        if (had[i]) setenv(vars[i], saved[i].c_str(), 1);
}

TEST(MpiComm, OperationNames) {
    EXPECT_STREQ(comm_op_name(CommOp::all_reduce), "all_reduce");
    EXPECT_STREQ(comm_op_name(CommOp::reduce_scatter), "reduce_scatter");
    EXPECT_STREQ(comm_op_name(CommOp::all_gather), "all_gather");
    EXPECT_STREQ(comm_op_name(CommOp::broadcast), "broadcast");
    EXPECT_STREQ(comm_op_name(CommOp::send), "send");
    EXPECT_STREQ(comm_op_name(CommOp::recv), "recv");
}
