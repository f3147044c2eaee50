// tests/cuda/test_mpi_cuda_comm.cpp — MpiCudaComm (parallel/mpi_cuda_comm.cpp, parallel.comm = "mpi"
// on the cuda backend) under cuda_emu, run by mpirun with 2 and 3 ranks (tests/cuda/CMakeLists.txt).
//
// The reference is MpiComm on host copies of the same inputs: MpiCudaComm runs exactly MpiComm's
// rank-order sums on its pinned copies, so every result must equal MpiComm's BITWISE (tolerance 0),
// in fp32 and bf16, on a GPU too. Inputs are uploaded without a synchronization and results read
// after further queued work, so a missing event wait or a staging buffer reused too early shows as
// wrong bits under the emulator's deferred streams (NaN-filled device→host destinations).
// Tests use EXPECT after collectives so that every rank issues the same sequence.
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "model/backend.hpp"
#include "parallel/comm.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain {
namespace {

using cudatest::DevBuf;

/// Raw bits of rank r's n values for a test (salt), in dtype t (f32 or bf16).
std::vector<uint8_t> bits_of(int r, size_t n, uint64_t salt, DType t) {
    const bool bf16 = t == DType::bf16;
    const std::vector<float> x = cudatest::random_vec(n, 7919 * salt + r, bf16, -4.0f, 4.0f);
    std::vector<uint8_t> b(n * dtype_size(t));
    for (size_t i = 0; i < n; ++i) {
        if (bf16) {
            const uint16_t v = cudatest::bf16_bits(x[i]);
            std::memcpy(&b[2 * i], &v, 2);
        } else {
            std::memcpy(&b[4 * i], &x[i], 4);
        }
    }
    return b;
}

struct MpiCudaCommTest : ::testing::TestWithParam<std::string> {
    std::unique_ptr<Ops> ops = make_backend("cuda", GetParam());
    DType t = ops->act_dtype();
    size_t es = dtype_size(t);
    int me = world_rank(), P = world_size();
    std::unique_ptr<Comm> host = make_mpi_comm();  // the reference
    std::unique_ptr<Comm> comm = make_cuda_mpi();

    std::unique_ptr<Comm> make_cuda_mpi(const std::vector<int>& ranks = {}) {
        CommOptions opt;
        opt.comm = "mpi";
        return make_comm(*ops, ranks, opt);
    }
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

TEST_P(MpiCudaCommTest, IsTheMpiCudaCommOfTheGroup) {
    EXPECT_EQ(comm->describe().rfind("MpiCudaComm on world ranks [", 0), 0u) << comm->describe();
    EXPECT_EQ(comm->rank(), me);
    EXPECT_EQ(comm->size(), P);
    EXPECT_EQ(comm->host_timeout_s(), CommOptions{}.timeout_s);
}

TEST_P(MpiCudaCommTest, AllReduceSumEqualsMpiCommBitwise) {
    const size_t n = 1001;  // not a multiple of P: uneven chunks
    std::vector<uint8_t> in = bits_of(me, n, 1, t), want = in;
    DevBuf buf = put(in);
    comm->all_reduce_sum(buf.ptr, n, t);
    host->all_reduce_sum(want.data(), n, t);
    EXPECT_EQ(get(buf.ptr, n * es), want);
}

TEST_P(MpiCudaCommTest, ReduceScatterOutOfPlaceAndInPlaceEqualMpiComm) {
    const size_t n = 37;  // per-rank chunk
    std::vector<uint8_t> in = bits_of(me, n * P, 2, t), want(n * es);
    host->reduce_scatter_sum(in.data(), want.data(), n, t);
    DevBuf send = put(in), recv(*ops, n * es);
    comm->reduce_scatter_sum(send.ptr, recv.ptr, n, t);
    EXPECT_EQ(get(recv.ptr, n * es), want) << "out of place";
    void* mine = send.as<char>() + me * n * es;  // in place: NCCL's layout
    comm->reduce_scatter_sum(send.ptr, mine, n, t);
    EXPECT_EQ(get(mine, n * es), want) << "in place";
}

TEST_P(MpiCudaCommTest, AllGatherOutOfPlaceAndInPlace) {
    const size_t n = 29;
    std::vector<uint8_t> want;
    for (int r = 0; r < P; ++r) {
        std::vector<uint8_t> x = bits_of(r, n, 3, t);
        want.insert(want.end(), x.begin(), x.end());
    }
    const std::vector<uint8_t> in = bits_of(me, n, 3, t), zeros(n * P * es, 0);
    DevBuf send = put(in), recv(*ops, n * P * es);
    comm->all_gather(send.ptr, recv.ptr, n, t);
    EXPECT_EQ(get(recv.ptr, n * P * es), want) << "out of place";
    DevBuf gathered = put(zeros);
    void* mine = gathered.as<char>() + me * n * es;
    ops->memcpy_d2d(mine, send.ptr, n * es);
    comm->all_gather(mine, gathered.ptr, n, t);
    EXPECT_EQ(get(gathered.ptr, n * P * es), want) << "in place";
}

TEST_P(MpiCudaCommTest, BroadcastFromFirstAndLastRank) {
    const size_t n = 100;
    for (int root : {0, P - 1}) {
        const std::vector<uint8_t> in = bits_of(me, n, 4, t);
        DevBuf buf = put(in);
        comm->broadcast(buf.ptr, n, t, root);
        EXPECT_EQ(get(buf.ptr, n * es), bits_of(root, n, 4, t)) << "root " << root;
    }
}

// Both directions of a ring posted before either is waited (as the pipeline posts its sends and
// receives), on two comms at once (the pipeline's activation and gradient links).
TEST_P(MpiCudaCommTest, SendRecvRingBothWaysOnTwoComms) {
    auto other = make_cuda_mpi();
    const size_t n = 333;
    const int next = (me + 1) % P, prev = (me + P - 1) % P;
    const std::vector<uint8_t> a = bits_of(me, n, 5, t), b = bits_of(me, n, 6, t);
    DevBuf out_a = put(a), out_b = put(b), in_a(*ops, n * es), in_b(*ops, n * es);
    CommHandle rb = other->recv_async(in_b.ptr, n, t, next);
    CommHandle sa = comm->send_async(out_a.ptr, n, t, next);
    CommHandle ra = comm->recv_async(in_a.ptr, n, t, prev);
    CommHandle sb = other->send_async(out_b.ptr, n, t, prev);
    for (CommHandle* h : {&ra, &rb, &sa, &sb}) (*h)->wait();
    EXPECT_EQ(get(in_a.ptr, n * es), bits_of(prev, n, 5, t));
    EXPECT_EQ(get(in_b.ptr, n * es), bits_of(next, n, 6, t));
}

// The collective reads what the current stream produced before the call, and wait() orders later
// compute after it; as in test_nccl_comm.cpp, a created stream (run before the comm stream at a
// device sync) and the default stream (run after it) each expose one missing event.
TEST_P(MpiCudaCommTest, AsyncHandleOrdersComputeOnTheCurrentStream) {
    Stream created = ops->create_stream();
    const size_t n = 64;
    std::vector<uint8_t> want = bits_of(me, n, 7, t);
    host->all_reduce_sum(want.data(), n, t);
    DevBuf ref = put(want);
    ops->scale(ref.ptr, 0.5f, n);  // the backend's own scaling of the MpiComm sum
    const std::vector<uint8_t> scaled = get(ref.ptr, n * es);
    for (Stream compute : {created, Stream{nullptr}}) {
        ops->set_stream(compute);
        const std::vector<uint8_t> in = bits_of(me, n, 7, t);
        DevBuf buf = put(in);  // queued, not yet run
        CommHandle h = comm->all_reduce_sum_async(buf.ptr, n, t);
        h->wait();
        h->wait();  // idempotent
        ops->scale(buf.ptr, 0.5f, n);
        EXPECT_EQ(get(buf.ptr, n * es), scaled) << (compute ? "created stream" : "default stream");
    }
    ops->set_stream(nullptr);
    ops->destroy_stream(created);
}

// Several operations in flight, then operations that reuse their pinned buffers while the earlier
// copies back to the device are still queued (nothing synchronized in between): each result keeps
// its own bits. A staging buffer handed out before its copy-out ran would show the later data.
TEST_P(MpiCudaCommTest, StagingBuffersAreReusedOnlyAfterTheirCopyOut) {
    const size_t n = 50;
    std::vector<std::vector<uint8_t>> in, want;
    std::vector<DevBuf> bufs;
    for (int k = 0; k < 6; ++k) {
        in.push_back(bits_of(me, n, 10 + k, t));
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

// Sub-groups: the even world ranks in reverse order, and the odd ones.
TEST_P(MpiCudaCommTest, SubGroupsInListedOrder) {
    std::vector<int> ranks;
    for (int r = P - 1; r >= 0; --r)
        if (r % 2 == me % 2) ranks.push_back(r);
    auto sub = make_cuda_mpi(ranks);
    auto sub_host = make_mpi_comm(ranks);
    ASSERT_EQ(sub->world_ranks(), ranks);
    ASSERT_EQ(sub->rank(), sub_host->rank());
    const size_t n = 17;
    std::vector<uint8_t> in = bits_of(me, n, 8, t), want = in;
    DevBuf buf = put(in);
    sub->all_reduce_sum(buf.ptr, n, t);
    sub_host->all_reduce_sum(want.data(), n, t);
    EXPECT_EQ(get(buf.ptr, n * es), want);
}

TEST_P(MpiCudaCommTest, ByteCountersFollowMpiComm) {
    const size_t n = 40;
    std::vector<uint8_t> h = bits_of(me, n * P, 9, t), r(n * P * es);
    DevBuf d = put(h), dr(*ops, n * P * es);
    comm->reset_stats();
    host->reset_stats();
    comm->all_reduce_sum(d.ptr, n, t);
    host->all_reduce_sum(h.data(), n, t);
    comm->reduce_scatter_sum(d.ptr, dr.ptr, n, t);
    host->reduce_scatter_sum(h.data(), r.data(), n, t);
    comm->all_gather(d.ptr, dr.ptr, n, t);
    host->all_gather(h.data(), r.data(), n, t);
    comm->broadcast(d.ptr, n, t, 0);
    host->broadcast(h.data(), n, t, 0);
    ops->synchronize();
    for (int op = 0; op < int(CommOp::count); ++op) {
        EXPECT_EQ(comm->stats().bytes[op], host->stats().bytes[op]) << comm_op_name(CommOp(op));
        EXPECT_EQ(comm->stats().calls[op], host->stats().calls[op]) << comm_op_name(CommOp(op));
    }
    EXPECT_GT(comm->stats().total_bytes(), 0u);
}

TEST_P(MpiCudaCommTest, AllReduceMaxOfHostValuesBarrierAndAbort) {
    std::vector<float> v = {float(me), -float(me), 0.5f};
    comm->all_reduce_max(v.data(), v.size());
    EXPECT_EQ(v, (std::vector<float>{float(P - 1), 0.0f, 0.5f}));
    comm->barrier();
    auto doomed = make_cuda_mpi();
    doomed->abort();
    DevBuf d(*ops, 4 * es);
    EXPECT_THROW(doomed->all_reduce_sum(d.ptr, 4, t), CommError);
    EXPECT_THROW(doomed->barrier(), CommError);
}

TEST_P(MpiCudaCommTest, BadArgumentsAreRejected) {
    DevBuf d(*ops, 64);
    EXPECT_THROW(comm->send(d.ptr, 4, DType::u8, P), std::invalid_argument);
    EXPECT_THROW(comm->broadcast(d.ptr, 4, DType::u8, -1), std::invalid_argument);
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
}  // namespace llmtrain

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    ::testing::InitGoogleTest(&argc, argv);
    const int failed = RUN_ALL_TESTS() != 0;
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any_failed;
}
