// tests/cuda/test_mpi_cuda_comm.cpp — MpiCudaComm (parallel/mpi_cuda_comm.cpp, parallel.comm = "mpi"
// on the cuda backend): under cuda_emu, run by mpirun with 2 and 3 ranks (tests/cuda/CMakeLists.txt),
// and in test_cuda_gpu on a GPU.
//
// The contract every Comm keeps is one suite, CommContract (tests/comm/comm_contract.hpp),
// instantiated here for MpiCudaComm: it runs exactly MpiComm's rank-order sums on pinned copies, so
// its results must equal the rank-order sums BITWISE (tolerance 0), as MpiComm's do, on a GPU too.
// Here besides what only MpiCudaComm has: staging buffers reused only after their copy back (against
// MpiComm on host copies, bitwise), make_comm's choice of Comm and its refusals, and the late-peer
// timeout (ctest mpi_cuda_comm_hung_np2). Inputs are uploaded without a synchronization and results
// read after further queued work, so a staging buffer reused too early shows as wrong bits under the
// emulator's deferred streams (NaN-filled device-to-host destinations).
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "model/backend.hpp"
#include "parallel/comm.hpp"
#include "tests/comm/comm_contract.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain {
namespace {

using cudatest::DevBuf;

std::unique_ptr<Comm> make_cuda_mpi(Ops& ops, const std::vector<int>& ranks = {}, CommOptions opt = {}) {
    opt.comm = "mpi";
    return make_comm(ops, ranks, opt);
}

/// Made through make_comm, as the trainer makes it; MpiComm's rank-order sums, over MPI's nonblocking calls.
commtest::CommKind mpi_cuda_comm_kind() {
    return {"MpiCudaComm", "cuda", {"fp32", "bf16"},
            [](Ops& ops, const std::vector<int>& ranks, const CommOptions& opt) { return make_cuda_mpi(ops, ranks, opt); },
            {.rank_order_sums = true, .serial_p2p = false, .describe_prefix = "MpiCudaComm on ", .host_timeout = true,
             .aborts = true},
            {}};
}

struct MpiCudaCommTest : ::testing::TestWithParam<std::string> {
    const bool mpi_started_ = commtest::start_mpi();
    std::unique_ptr<Ops> ops = make_backend("cuda", GetParam());
    DType t = ops->act_dtype();
    size_t es = dtype_size(t);
    int me = world_rank();
    std::unique_ptr<Comm> host = make_mpi_comm();  // the reference
    std::unique_ptr<Comm> comm = make_cuda_mpi(*ops);

    /// Queues an upload on the current stream without synchronizing (h must live until a sync).
    DevBuf put(const std::vector<uint8_t>& h) {
        DevBuf d(*ops, h.size());
        ops->memcpy_h2d(d.ptr, h.data(), h.size());
        return d;
    }
    std::vector<uint8_t> get(const void* p, size_t bytes) {
        std::vector<uint8_t> h(bytes);
        ops->memcpy_d2h(h.data(), p, bytes);
        ops->synchronize();
        return h;
    }
};

// Several operations in flight, then operations that reuse their pinned buffers while the earlier
// copies back to the device are still queued (nothing synchronized in between): each result keeps
// its own bits. A staging buffer handed out before its copy-out ran would show the later data.
TEST_P(MpiCudaCommTest, StagingBuffersAreReusedOnlyAfterTheirCopyOut) {
    const size_t n = 50;
    std::vector<std::vector<uint8_t>> in, want;
    std::vector<DevBuf> bufs;
    for (int k = 0; k < 6; ++k) {
        in.push_back(commtest::input_bytes(me, n, t, 10 + k));
        want.push_back(in.back());
        host->all_reduce_sum(want.back().data(), n, t);
        bufs.push_back(put(in.back()));
    }
    std::vector<CommHandle> hs;
    for (int k = 0; k < 3; ++k) hs.push_back(comm->all_reduce_sum_async(bufs[k].ptr, n, t));
    for (CommHandle& h : hs) h->wait();
    for (int k = 3; k < 6; ++k) comm->all_reduce_sum_async(bufs[k].ptr, n, t)->wait();
    DevBuf bcast(*ops, n * es);
    comm->broadcast(bcast.ptr, n, t, 0);  // a receive-only staging (no input copy) on ranks > 0
    for (int k = 0; k < 6; ++k) EXPECT_EQ(get(bufs[k].ptr, n * es), want[k]) << "operation " << k;
}

// make_comm's choice: "mpi" on cuda is this Comm; unknown names, "nccl" on the cpu backend and
// MpiCudaComm on the cpu backend are refused.
TEST_P(MpiCudaCommTest, MakeCommChoosesItAndRefusesTheRest) {
    EXPECT_EQ(comm->describe().rfind("MpiCudaComm on world ranks [", 0), 0u) << comm->describe();
    CommOptions bad;
    bad.comm = "gloo";
    EXPECT_THROW(make_comm(*ops, {}, bad), std::invalid_argument);
    auto cpu = make_backend("cpu", "fp32");
    CommOptions nccl;
    nccl.comm = "nccl";
    EXPECT_THROW(make_comm(*cpu, {}, nccl), std::invalid_argument);
    EXPECT_THROW(make_mpi_cuda_comm(*cpu), std::invalid_argument);
    comm->barrier();
}

INSTANTIATE_TEST_SUITE_P(Cuda, MpiCudaCommTest, ::testing::Values("fp32", "bf16"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// A peer that posts late: rank 0's wait ends with MpiComm's CommError after timeout_s (0.5 s,
// within 0.4..3 s), naming the operation and the ranks; rank 1's late all-gather then matches the
// abandoned one, and both meet on a comm with no limit.
TEST(MpiCudaCommHung, AWaitOnAHungRankTimesOut) {
    commtest::start_mpi();  // test_cuda_gpu under mpirun: perhaps the first case to need MPI
    if (world_size() != 2) GTEST_SKIP() << "needs exactly 2 ranks";
    auto ops = make_backend("cuda", "fp32");
    const int me = world_rank();
    CommOptions opt;
    opt.comm = "mpi";
    opt.timeout_s = me == 0 ? 0.5 : 30;
    auto limited = make_comm(*ops, {}, opt);
    auto unlimited = make_mpi_comm({}, CommOptions{0});
    DevBuf send(*ops, 1000 * 4), recv(*ops, 2 * 1000 * 4);
    if (me == 0) {
        const auto t0 = std::chrono::steady_clock::now();
        std::string msg;
        try {
            limited->all_gather(send.ptr, recv.ptr, 1000, DType::f32);
            ADD_FAILURE() << "no CommError";
        } catch (const CommError& e) {
            msg = e.what();
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_GE(s, 0.4) << msg;
        EXPECT_LE(s, 3.0) << msg;
        EXPECT_NE(msg.find("all_gather of 1000 fp32 elements per rank on world ranks [0,1] did not complete "
                           "within parallel.timeout_s = 0.5 s"),
                  std::string::npos)
            << msg;
    } else {
        std::this_thread::sleep_for(std::chrono::seconds(4));
        limited->all_gather(send.ptr, recv.ptr, 1000, DType::f32);
    }
    unlimited->barrier();
}

}  // namespace

namespace commtest {
INSTANTIATE_TEST_SUITE_P(MpiCudaComm, CommContract, ::testing::Values(mpi_cuda_comm_kind()), kind_suffix);
}  // namespace commtest
}  // namespace llmtrain
