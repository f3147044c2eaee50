// tests/cuda/test_nccl_comm.cpp — NcclComm (parallel/nccl_comm.cpp) on the CUDA backend under
// cuda_emu, run by mpirun with 2 and 3 ranks (tests/cuda/CMakeLists.txt).
//
// Every rank generates every rank's contribution from a seed, so each computes the expected
// result by itself: sums are the rank-order fp32 sum (rounded once to bf16 in bf16 mode).
// Tolerances hold on a real GPU too, where NCCL adds in another order and, for bf16, rounds each
// step (see nccl_comm.cpp): element i passes when |got − want| <= tol · Σ_r |x_r,i| with
// tol = 1e-6 for fp32 (P−1 ≤ 2 roundings of 2^-24 each) and P · 2^-8 for bf16 (up to P roundings of
// half a bf16 ulp, 2^-8 relative, of partial sums bounded by Σ|x|). Moves and max are exact.
// Buffers are device memory of the backend; work is queued on the backend's streams.
// Tests use EXPECT after collectives so that every rank issues the same sequence.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/backend.hpp"
#include "parallel/comm.hpp"
#include "tests/cuda/cuda_test_util.hpp"

#include "parallel/host_wait.hpp"
#include "parallel/zero.hpp"

#ifndef LLMTRAIN_REAL_GPU
#include "tests/cuda_emu/nccl_comm.hpp"  // emu::nccl::bytes_sent
#endif

namespace llmtrain {
namespace {

using cudatest::bf16_bits;
using cudatest::bf16_round;
using cudatest::bf16_to_float;
using cudatest::DevBuf;

int wrank() {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
int wsize() {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/// Rank r's n values for a test (salt), representable in the precision's dtype.
std::vector<float> values_of(int r, size_t n, uint64_t salt, bool bf16) {
    return cudatest::random_vec(n, 7919 * salt + r, bf16, -4.0f, 4.0f);
}

/// Uploads on the current stream without synchronizing (`keep` holds the host copy until the sync).
DevBuf put(Ops& ops, const std::vector<float>& h, DType t, std::vector<uint16_t>& keep) {
    DevBuf d(ops, h.size() * dtype_size(t));
    if (t == DType::f32) {
        ops.memcpy_h2d(d.ptr, h.data(), h.size() * 4);
    } else {
        keep.resize(h.size());
        for (size_t i = 0; i < h.size(); ++i) keep[i] = bf16_bits(h[i]);
        ops.memcpy_h2d(d.ptr, keep.data(), keep.size() * 2);
    }
    return d;
}

/// Expects got == want within tol · scale[i] per element; names the worst.
void expect_within(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                   const std::vector<float>& scale, double tol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_LE(std::fabs(double(got[i]) - want[i]), tol * scale[i])
            << what << ": element " << i << " got " << got[i] << " want " << want[i] << " (rank " << wrank() << ")";
}

struct NcclCommTest : ::testing::TestWithParam<std::string> {
    std::unique_ptr<Ops> ops = make_backend("cuda", GetParam());
    DType t = ops->act_dtype();
    bool bf16 = t == DType::bf16;
    int me = wrank(), P = wsize();
    double tol() const { return bf16 ? P / 256.0 : 1e-6; }

    /// The rank-order sum over ranks of values_of(r, n, salt) (rounded once in bf16), and Σ|x_r|.
    void expected_sum(size_t n, uint64_t salt, std::vector<float>* sum, std::vector<float>* abs_sum) const {
        sum->assign(n, 0.0f);
        abs_sum->assign(n, 0.0f);
        for (int r = 0; r < P; ++r) {
            std::vector<float> x = values_of(r, n, salt, bf16);
            for (size_t i = 0; i < n; ++i) (*sum)[i] += x[i], (*abs_sum)[i] += std::fabs(x[i]);
        }
        if (bf16)
            for (float& v : *sum) v = bf16_round(v);
    }
    std::vector<float> get(const void* p, size_t n) { return cudatest::download(*ops, p, n, t); }
};

TEST_P(NcclCommTest, AllReduceSumMatchesTheRankOrderSum) {
    auto comm = make_nccl_comm(*ops);
    ASSERT_EQ(comm->rank(), me);
    ASSERT_EQ(comm->size(), P);
    const size_t n = 1001;  // not a multiple of P: uneven chunks
    std::vector<uint16_t> keep;
    DevBuf buf = put(*ops, values_of(me, n, 1, bf16), t, keep);
    comm->all_reduce_sum(buf.ptr, n, t);
    std::vector<float> want, scale;
    expected_sum(n, 1, &want, &scale);
    expect_within("all_reduce_sum", get(buf.ptr, n), want, scale, tol());
}

TEST_P(NcclCommTest, ReduceScatterOutOfPlaceAndInPlace) {
    auto comm = make_nccl_comm(*ops);
    const size_t n = 37;  // per-rank chunk
    std::vector<float> want, scale;
    expected_sum(n * P, 2, &want, &scale);
    const std::vector<float> want_mine(want.begin() + me * n, want.begin() + (me + 1) * n);
    const std::vector<float> scale_mine(scale.begin() + me * n, scale.begin() + (me + 1) * n);
    std::vector<uint16_t> keep;
    DevBuf send = put(*ops, values_of(me, n * P, 2, bf16), t, keep);
    DevBuf recv(*ops, n * dtype_size(t));
    comm->reduce_scatter_sum(send.ptr, recv.ptr, n, t);
    expect_within("reduce_scatter out of place", get(recv.ptr, n), want_mine, scale_mine, tol());
    // In place: the result lands at send + rank*n (NCCL's layout).
    void* mine = send.as<char>() + me * n * dtype_size(t);
    comm->reduce_scatter_sum(send.ptr, mine, n, t);
    expect_within("reduce_scatter in place", get(mine, n), want_mine, scale_mine, tol());
}

TEST_P(NcclCommTest, AllGatherOutOfPlaceAndInPlace) {
    auto comm = make_nccl_comm(*ops);
    const size_t n = 29;
    std::vector<float> want;
    for (int r = 0; r < P; ++r) {
        std::vector<float> x = values_of(r, n, 3, bf16);
        want.insert(want.end(), x.begin(), x.end());
    }
    std::vector<uint16_t> keep, keep2;
    DevBuf send = put(*ops, values_of(me, n, 3, bf16), t, keep);
    DevBuf recv(*ops, n * P * dtype_size(t));
    comm->all_gather(send.ptr, recv.ptr, n, t);
    EXPECT_EQ(get(recv.ptr, n * P), want);  // moves are exact
    // In place: this rank's block already sits at recv + rank*n.
    DevBuf gathered = put(*ops, std::vector<float>(n * P, 0.0f), t, keep2);
    void* mine = gathered.as<char>() + me * n * dtype_size(t);
    ops->memcpy_d2d(mine, send.ptr, n * dtype_size(t));
    comm->all_gather(mine, gathered.ptr, n, t);
    EXPECT_EQ(get(gathered.ptr, n * P), want);
}

TEST_P(NcclCommTest, BroadcastFromFirstAndLastRank) {
    auto comm = make_nccl_comm(*ops);
    const size_t n = 100;
    for (int root : {0, P - 1}) {
        std::vector<uint16_t> keep;
        DevBuf buf = put(*ops, values_of(me, n, 4, bf16), t, keep);
        comm->broadcast(buf.ptr, n, t, root);
        EXPECT_EQ(get(buf.ptr, n), values_of(root, n, 4, bf16)) << "root " << root;
    }
}

TEST_P(NcclCommTest, SendRecvRingOfBytes) {
    auto comm = make_nccl_comm(*ops);
    const size_t n = 333;
    auto bytes_of = [](int r) {
        std::vector<uint8_t> v(333);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7 + r * 31);
        return v;
    };
    const int next = (me + 1) % P, prev = (me + P - 1) % P;
    const std::vector<uint8_t> mine = bytes_of(me);
    DevBuf out(*ops, n), in(*ops, n);
    ops->memcpy_h2d(out.ptr, mine.data(), n);
    // Rank 0 sends first, the others receive first: a chain, so no pair waits on each other.
    if (me == 0) comm->send(out.ptr, n, DType::u8, next);
    comm->recv(in.ptr, n, DType::u8, prev);
    if (me != 0) comm->send(out.ptr, n, DType::u8, next);
    std::vector<uint8_t> got(n);
    ops->memcpy_d2h(got.data(), in.ptr, n);
    ops->synchronize();
    EXPECT_EQ(got, bytes_of(prev));
}

// The collective reads what the current stream produced before the call, and the handle's wait()
// orders later compute after it. At a device synchronization the emulator runs created streams
// newest first and the default stream last, so each missing event shows on one of the two
// compute streams: a stream created after the comm runs before the comm stream (a missing wait()
// lets the scale run first), the default stream after it (a missing input wait lets the sum read
// the buffer before the upload).
TEST_P(NcclCommTest, AsyncHandleOrdersComputeOnTheCurrentStream) {
    auto comm = make_nccl_comm(*ops);
    Stream created = ops->create_stream();
    const size_t n = 64;
    std::vector<float> want, scale;
    expected_sum(n, 5, &want, &scale);
    for (size_t i = 0; i < n; ++i) want[i] = (bf16 ? bf16_round(0.5f * want[i]) : 0.5f * want[i]), scale[i] *= 0.5f;
    for (Stream compute : {created, Stream{nullptr}}) {
        ops->set_stream(compute);
        std::vector<uint16_t> keep;
        DevBuf buf = put(*ops, values_of(me, n, 5, bf16), t, keep);  // queued, not yet run
        CommHandle h = comm->all_reduce_sum_async(buf.ptr, n, t);
        h->wait();
        h->wait();                     // idempotent
        ops->scale(buf.ptr, 0.5f, n);  // after the sum, on the compute stream
        expect_within(compute ? "created stream" : "default stream", get(buf.ptr, n), want, scale, tol());
    }
    ops->set_stream(nullptr);
    ops->destroy_stream(created);
}

// Sub-groups: a group of the even world ranks in reverse order and one of the odd ranks.
TEST_P(NcclCommTest, SubGroupsInListedOrder) {
    std::vector<int> ranks;
    for (int r = P - 1; r >= 0; --r)
        if (r % 2 == me % 2) ranks.push_back(r);
    auto comm = make_nccl_comm(*ops, ranks);
    const int idx = static_cast<int>(std::find(ranks.begin(), ranks.end(), me) - ranks.begin());
    EXPECT_EQ(comm->rank(), idx);
    EXPECT_EQ(comm->size(), static_cast<int>(ranks.size()));
    EXPECT_EQ(comm->world_ranks(), ranks);
    const size_t n = 50;
    std::vector<uint16_t> keep;
    DevBuf buf = put(*ops, values_of(me, n, 6, bf16), t, keep);
    comm->all_reduce_sum(buf.ptr, n, t);
    std::vector<float> want(n, 0.0f), scale(n, 0.0f);
    for (int r : ranks) {  // group order
        std::vector<float> x = values_of(r, n, 6, bf16);
        for (size_t i = 0; i < n; ++i) want[i] += x[i], scale[i] += std::fabs(x[i]);
    }
    if (bf16)
        for (float& v : want) v = bf16_round(v);
    expect_within("sub-group all_reduce", get(buf.ptr, n), want, scale, tol());
    // The group's rank 0 broadcasts: its world rank is the largest listed.
    DevBuf b = put(*ops, values_of(me, n, 7, bf16), t, keep);
    comm->broadcast(b.ptr, n, t, 0);
    EXPECT_EQ(get(b.ptr, n), values_of(ranks[0], n, 7, bf16));
}

// Byte counters equal the bytes the emulated NCCL handed MPI for other ranks
// (emu::nccl::bytes_sent, counted where the exchange runs), and both follow CommStats' formulas:
// for P ranks and n elements of es bytes, reduce_scatter and all_gather (P−1)/P·(P·n)·es,
// all_reduce 2(P−1)/P·n·es, broadcast n·es on the root, send n·es, recv 0.
TEST_P(NcclCommTest, ByteCountersMatchTheBytesMoved) {
    auto comm = make_nccl_comm(*ops);
    auto at = [&](CommOp op) { return static_cast<int>(op); };
#ifndef LLMTRAIN_REAL_GPU
    using emu::nccl::Kind;
    const std::pair<CommOp, Kind> kinds[] = {{CommOp::all_reduce, Kind::all_reduce},
                                             {CommOp::reduce_scatter, Kind::reduce_scatter},
                                             {CommOp::all_gather, Kind::all_gather},
                                             {CommOp::broadcast, Kind::broadcast},
                                             {CommOp::send, Kind::send}};
    uint64_t before[5];
    for (int k = 0; k < 5; ++k) before[k] = emu::nccl::bytes_sent(kinds[k].second);
#endif
    const uint64_t es = dtype_size(t), n = 60;  // divisible by 2 and 3
    DevBuf a(*ops, n * P * es), b(*ops, n * P * es);
    ops->memset(a.ptr, 0, n * P * es);
    comm->all_reduce_sum(a.ptr, n, t);
    comm->all_reduce_sum(a.ptr, n, t);
    comm->reduce_scatter_sum(a.ptr, b.ptr, n, t);
    comm->all_gather(a.ptr, b.ptr, n, t);
    comm->broadcast(a.ptr, n, t, 0);
    if (P > 1) {  // a pair: rank 0 sends n bytes to rank 1
        if (me == 0) comm->send(a.ptr, n, DType::u8, 1);
        if (me == 1) comm->recv(a.ptr, n, DType::u8, 0);
    }
    ops->synchronize();
    const CommStats& s = comm->stats();
#ifndef LLMTRAIN_REAL_GPU
    for (int k = 0; k < 5; ++k)
        EXPECT_EQ(s.bytes[at(kinds[k].first)], emu::nccl::bytes_sent(kinds[k].second) - before[k])
            << comm_op_name(kinds[k].first) << " on rank " << me;
#endif
    EXPECT_EQ(s.bytes[at(CommOp::all_reduce)], 2 * (2 * (P - 1) * n * es / P));
    EXPECT_EQ(s.calls[at(CommOp::all_reduce)], 2u);
    EXPECT_EQ(s.bytes[at(CommOp::reduce_scatter)], (P - 1) * n * es);
    EXPECT_EQ(s.bytes[at(CommOp::all_gather)], (P - 1) * n * es);
    EXPECT_EQ(s.bytes[at(CommOp::broadcast)], me == 0 && P > 1 ? n * es : 0u);
    EXPECT_EQ(s.bytes[at(CommOp::send)], me == 0 && P > 1 ? n : 0u);
    EXPECT_EQ(s.calls[at(CommOp::recv)], me == 1 ? 1u : 0u);
    EXPECT_EQ(s.bytes[at(CommOp::recv)], 0u);
    EXPECT_EQ(s.total_bytes(), std::accumulate(s.bytes.begin(), s.bytes.end(), uint64_t{0}));
    comm->reset_stats();
    EXPECT_EQ(comm->stats().total_bytes(), 0u);
}

TEST_P(NcclCommTest, AllReduceMaxOfHostValuesAndBarrier) {
    auto comm = make_nccl_comm(*ops);
    std::vector<float> v = {float(me), -float(me), 1.5f * me - 2.0f};
    comm->all_reduce_max(v.data(), v.size());
    EXPECT_EQ(v, (std::vector<float>{float(P - 1), 0.0f, 1.5f * (P - 1) - 2.0f}));
    std::vector<float> big(5000, float(me));  // grows the staging buffers
    comm->all_reduce_max(big.data(), big.size());
    EXPECT_EQ(big, std::vector<float>(5000, float(P - 1)));
    comm->barrier();
}

TEST_P(NcclCommTest, BadArgumentsAreRejected) {
    auto comm = make_nccl_comm(*ops);
    DevBuf a(*ops, 64);
    EXPECT_THROW(comm->all_reduce_sum_async(a.ptr, 4, DType::u8), std::invalid_argument);
    EXPECT_THROW(comm->send_async(a.ptr, 4, t, P), std::invalid_argument);
    EXPECT_THROW(comm->broadcast_async(a.ptr, 4, t, -1), std::invalid_argument);
    EXPECT_THROW(make_nccl_comm(*ops, {me, me}), std::invalid_argument);
    EXPECT_THROW(make_nccl_comm(*ops, {P}), std::invalid_argument);
    if (P > 1) {
        EXPECT_THROW(make_nccl_comm(*ops, {(me + 1) % P}), std::invalid_argument);
    }
    auto cpu = make_backend("cpu", "fp32");
    EXPECT_THROW(make_nccl_comm(*cpu), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Cuda, NcclCommTest, ::testing::Values("fp32", "bf16"),
                         [](const auto& info) { return info.param; });

// A collective that never completes (rank 0 receives from rank 1, which never sends) ends in a
// CommError naming the operation and the group once timeout_s has passed, instead of hanging.
// Runs alone (ctest nccl_comm_hung_np2), with the other hung cases: each leaves an abandoned MPI
// request behind. The aborted operation is no device error (the stream goes on), so each test
// frees what it made through the backend.
TEST(NcclCommHung, HostWaitTimesOutAndAborts) {
    if (wsize() < 2) GTEST_SKIP() << "needs 2 ranks";
    auto ops = make_backend("cuda", "fp32");
    CommOptions opt;
    opt.timeout_s = 0.5;
    auto comm = make_nccl_comm(*ops, {0, 1}, opt);
    if (wrank() != 0) return;
    void* buf = ops->malloc(64);
    comm->recv_async(buf, 16, DType::f32, 1)->wait();
    const auto start = std::chrono::steady_clock::now();
    try {
        comm->barrier();
        ADD_FAILURE() << "barrier returned although rank 1 never sent";
    } catch (const CommError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
        EXPECT_NE(msg.find("recv"), std::string::npos) << msg;
        EXPECT_NE(msg.find("world ranks [0, 1]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("ncclCommAbort"), std::string::npos) << msg;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(waited, 0.5);
    EXPECT_LT(waited, 30.0);
    EXPECT_THROW(comm->all_reduce_sum_async(buf, 16, DType::f32), CommError);  // aborted for good
    comm.reset();
    ops->free(buf);
}

// The training path's host wait (HostWait, as ZeroEngine's gradient-norm read uses it) on an
// all-reduce that rank 1 never posts: rank 0 gets a CommError naming the operation, the group and
// its newest operation once timeout_s has passed, instead of hanging in the CUDA runtime. With a
// plain synchronize in its place the test hangs, and ctest's TIMEOUT fails it. Runs alone
// (nccl_comm_hung_np2).
TEST(NcclCommHung, TrainingHostWaitTimesOutNamingTheOpAndGroup) {
    if (wsize() < 2) GTEST_SKIP() << "needs 2 ranks";
    auto ops = make_backend("cuda", "fp32");
    CommOptions opt;
    opt.timeout_s = 1.0;
    auto zero = make_nccl_comm(*ops, {0, 1}, opt);
    auto solo = make_nccl_comm(*ops, {wrank()}, opt);  // a second comm of the wait: a role of its own
    if (wrank() != 0) return;  // rank 1 never posts the all-reduce
    float* dev = static_cast<float*>(ops->malloc(sizeof(float)));
    float* host = static_cast<float*>(ops->malloc_host(sizeof(float)));
    ops->memset(dev, 0, sizeof(float));
    zero->all_reduce_sum(dev, 1, DType::f32);
    ops->memcpy_d2h(host, dev, sizeof(float));
    HostWait host_wait(*ops);
    const auto start = std::chrono::steady_clock::now();
    try {
        host_wait("reading the gradient norm", {{zero.get(), "zero group"}, {solo.get(), "replica group"}});
        ADD_FAILURE() << "the wait returned although rank 1 never posted";
    } catch (const CommError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("reading the gradient norm: timed out after 1 s"), std::string::npos) << msg;
        EXPECT_NE(msg.find("zero group (NcclComm on world ranks [0, 1], newest operation all_reduce (1 issued))"),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find("replica group (NcclComm on world ranks [0]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("ncclCommAbort"), std::string::npos) << msg;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(waited, 1.0);
    EXPECT_LT(waited, 30.0);
    EXPECT_THROW(zero->all_reduce_sum_async(dev, 1, DType::f32), CommError);  // aborted, both of them
    EXPECT_THROW(solo->all_reduce_sum_async(dev, 1, DType::f32), CommError);
    zero.reset();
    solo.reset();
    ops->free(dev);
    ops->free_host(host);
}

// The ZeRO engine's wait for the model's value (ParamStore::host_wait, the loss read of
// GPT::forward_backward) is timed too: at stage 2 a unit's gradient reduce-scatter starts in
// grads_done, and rank 1 never posts it. Rank 0 gets CommError naming the wait, the zero group and
// its newest operation.
TEST(NcclCommHung, ZeroEngineHostWaitTimesOut) {
    if (wsize() < 2) GTEST_SKIP() << "needs 2 ranks";
    auto ops = make_backend("cuda", "fp32");
    CommOptions opt;
    opt.timeout_s = 1.0;
    auto zero = make_nccl_comm(*ops, {0, 1}, opt);
    auto replicas = make_nccl_comm(*ops, {wrank()}, opt);
    if (wrank() != 0) return;  // rank 1 never posts the reduce-scatter
    GPTConfig cfg;
    cfg.n_layer = 1, cfg.n_head = 1, cfg.n_embd = 8, cfg.seq_len = 4, cfg.vocab_size = 16;
    const ParamLayout layout(cfg, 2);
    {
        Allocator alloc(*ops);
        ZeroOptions zo;
        zo.stage = 2;
        ZeroEngine engine(alloc, layout, *zero, *replicas, zo);
        engine.begin_step();
        engine.acquire_grads(1);
        engine.grads_done(1);  // the reduce-scatter starts; reduce_grads makes the stream wait for it
        engine.reduce_grads();
        Event e = ops->create_event();
        ops->record_event(e);
        const auto start = std::chrono::steady_clock::now();
        try {
            engine.host_wait(*ops, e, "reading the loss");
            ADD_FAILURE() << "the wait returned although rank 1 never posted";
        } catch (const CommError& err) {
            const std::string msg = err.what();
            EXPECT_NE(msg.find("reading the loss: timed out after 1 s"), std::string::npos) << msg;
            EXPECT_NE(msg.find("zero group (NcclComm on world ranks [0, 1], newest operation reduce_scatter (1 issued))"),
                      std::string::npos)
                << msg;
        }
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
        ops->destroy_event(e);
    }
    zero.reset();
    replicas.reset();
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
