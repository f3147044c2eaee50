// tests/cuda_emu/test_nccl.cpp — emulated NCCL under mpirun (-np 2 and -np 3, see libs_tests.cmake).
//
// Every rank generates every rank's contribution from a seed, so each rank computes the expected
// result by itself: reductions are defined as the left-to-right fold over ranks 0..n-1 in the
// accumulation type (fp32 for float and bf16, rounded once), which must match bit for bit; the
// fp32 sums are also checked against a double sum (tolerance n * 2^-24 of the magnitude), and
// the results are compared across ranks (MPI_Allgather of the bytes) to prove they are identical.
// Buffers are cudaMalloc'd, work is queued on created streams and runs at cudaStreamSynchronize.
// Tests use EXPECT (not ASSERT) after collectives so that every rank issues the same sequence.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1  // MPI's C API only: OpenMPI's deprecated C++ bindings need libmpi_cxx
#endif
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

int world_rank() {
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
int world_size() {
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/// Device array of T (cudaMalloc, filled with 0xFF by the emulator) with blocking copies.
template <class T>
struct Dev {
    T* p = nullptr;
    size_t n;
    explicit Dev(size_t count) : n(count) { EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess); }
    ~Dev() { cudaFree(p); }
    void put(const std::vector<T>& v) {
        EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
    std::vector<T> get() const {
        std::vector<T> v(n);
        EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
        return v;
    }
};

/// Rank r's contribution for a test: floats spread over 2^-8..2^8 so that summation order shows.
std::vector<float> floats_of(int rank, size_t count, uint32_t salt) {
    std::mt19937 rng(1000u * salt + rank);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_int_distribution<int> e(-8, 8);
    std::vector<float> v(count);
    for (float& x : v) x = std::ldexp(u(rng), e(rng));
    return v;
}

template <class T>
std::vector<T> ints_of(int rank, size_t count, uint32_t salt) {
    std::mt19937_64 rng(1000u * salt + rank);
    std::vector<T> v(count);
    for (T& x : v) x = static_cast<T>(rng());
    return v;
}

/// True when `bytes` are identical on every rank of MPI_COMM_WORLD.
bool same_on_all_ranks(const void* data, size_t bytes) {
    std::vector<char> all(bytes * world_size());
    MPI_Allgather(data, static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes), MPI_BYTE,
                  MPI_COMM_WORLD);
    for (int r = 1; r < world_size(); ++r)
        if (std::memcmp(all.data(), all.data() + r * bytes, bytes) != 0) return false;
    return true;
}

uint32_t bits(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
}

ncclComm_t world_comm = nullptr;  // created in main()

struct Nccl : ::testing::Test {
    cudaStream_t stream = nullptr;
    int rank = world_rank(), n = world_size();
    void SetUp() override { ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess); }
    void TearDown() override {
        if (stream != nullptr) cudaStreamDestroy(stream);
    }
};

TEST_F(Nccl, AllReduceSumIsRankOrderedAndIdentical) {
    for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{4099}}) {
        SCOPED_TRACE(count);
        Dev<float> send(count), recv(count);
        send.put(floats_of(rank, count, 1));
        ASSERT_EQ(ncclAllReduce(send.p, recv.p, count, ncclFloat, ncclSum, world_comm, stream), ncclSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        std::vector<float> got = recv.get();
        std::vector<float> fold = floats_of(0, count, 1);
        std::vector<double> exact(fold.begin(), fold.end()), mag(count);
        for (size_t i = 0; i < count; ++i) mag[i] = std::fabs(fold[i]);
        for (int r = 1; r < n; ++r) {
            std::vector<float> x = floats_of(r, count, 1);
            for (size_t i = 0; i < count; ++i) {
                fold[i] += x[i];
                exact[i] += x[i];
                mag[i] += std::fabs(x[i]);
            }
        }
        int bad = 0;
        for (size_t i = 0; i < count; ++i) {
            if (bits(got[i]) != bits(fold[i]) && bad++ < 5) ADD_FAILURE() << i << ": " << got[i] << " vs fold " << fold[i];
            if (std::fabs(got[i] - exact[i]) > n * std::ldexp(mag[i], -24)) ADD_FAILURE() << i << " far from exact";
        }
        EXPECT_TRUE(same_on_all_ranks(got.data(), count * sizeof(float)));
    }
}

TEST_F(Nccl, AllReduceInPlaceAvgMaxMin) {
    const size_t count = 513;
    for (ncclRedOp_t op : {ncclAvg, ncclMax, ncclMin}) {
        SCOPED_TRACE(op);
        Dev<float> buf(count);
        buf.put(floats_of(rank, count, 2));
        ASSERT_EQ(ncclAllReduce(buf.p, buf.p, count, ncclFloat32, op, world_comm, stream), ncclSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        std::vector<float> got = buf.get(), want = floats_of(0, count, 2);
        for (int r = 1; r < n; ++r) {
            std::vector<float> x = floats_of(r, count, 2);
            for (size_t i = 0; i < count; ++i)
                want[i] = op == ncclAvg ? want[i] + x[i] : op == ncclMax ? std::max(want[i], x[i]) : std::min(want[i], x[i]);
        }
        if (op == ncclAvg)
            for (float& w : want) w /= static_cast<float>(n);
        for (size_t i = 0; i < count; ++i) EXPECT_EQ(bits(got[i]), bits(want[i])) << i;
        EXPECT_TRUE(same_on_all_ranks(got.data(), count * sizeof(float)));
    }
}

TEST_F(Nccl, AllReduceBf16SumsInFp32AndRoundsOnce) {
    const size_t count = 300;
    auto bf16_of = [&](int r) {
        std::vector<float> f = floats_of(r, count, 3);
        std::vector<__nv_bfloat16> v(count);
        for (size_t i = 0; i < count; ++i) v[i] = __float2bfloat16_rn(f[i]);
        return v;
    };
    Dev<__nv_bfloat16> send(count), recv(count);
    send.put(bf16_of(rank));
    ASSERT_EQ(ncclAllReduce(send.p, recv.p, count, ncclBfloat16, ncclSum, world_comm, stream), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<__nv_bfloat16> got = recv.get();
    std::vector<float> acc(count, 0.0f);
    for (int r = 0; r < n; ++r) {
        std::vector<__nv_bfloat16> x = bf16_of(r);
        for (size_t i = 0; i < count; ++i) acc[i] = r == 0 ? __bfloat162float(x[i]) : acc[i] + __bfloat162float(x[i]);
    }
    for (size_t i = 0; i < count; ++i)
        EXPECT_EQ(__bfloat162float(got[i]), __bfloat162float(__float2bfloat16_rn(acc[i]))) << i;
    EXPECT_TRUE(same_on_all_ranks(got.data(), count * 2));
}

// Integer sums wrap around (two's complement), max/min compare as signed or unsigned.
TEST_F(Nccl, AllReduceIntegers) {
    const size_t count = 65;
    {
        Dev<int32_t> buf(count);
        buf.put(ints_of<int32_t>(rank, count, 4));
        ASSERT_EQ(ncclAllReduce(buf.p, buf.p, count, ncclInt32, ncclSum, world_comm, stream), ncclSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        std::vector<int32_t> got = buf.get();
        std::vector<uint32_t> want(count, 0);
        for (int r = 0; r < n; ++r) {
            std::vector<int32_t> x = ints_of<int32_t>(r, count, 4);
            for (size_t i = 0; i < count; ++i) want[i] += static_cast<uint32_t>(x[i]);
        }
        for (size_t i = 0; i < count; ++i) EXPECT_EQ(static_cast<uint32_t>(got[i]), want[i]) << i;
    }
    {
        Dev<int64_t> send(count), recv(count);
        send.put(ints_of<int64_t>(rank, count, 5));
        ASSERT_EQ(ncclAllReduce(send.p, recv.p, count, ncclInt64, ncclMax, world_comm, stream), ncclSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        std::vector<int64_t> got = recv.get(), want(count, INT64_MIN);
        for (int r = 0; r < n; ++r) {
            std::vector<int64_t> x = ints_of<int64_t>(r, count, 5);
            for (size_t i = 0; i < count; ++i) want[i] = std::max(want[i], x[i]);
        }
        EXPECT_EQ(got, want);
    }
    {
        Dev<uint8_t> buf(count);
        buf.put(ints_of<uint8_t>(rank, count, 6));
        ASSERT_EQ(ncclAllReduce(buf.p, buf.p, count, ncclUint8, ncclSum, world_comm, stream), ncclSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        std::vector<uint8_t> got = buf.get(), want(count, 0);
        for (int r = 0; r < n; ++r) {
            std::vector<uint8_t> x = ints_of<uint8_t>(r, count, 6);
            for (size_t i = 0; i < count; ++i) want[i] = static_cast<uint8_t>(want[i] + x[i]);
        }
        EXPECT_EQ(got, want);
    }
}

// recvbuff gets block `rank` of the reduced sendbuff; in place when recvbuff = sendbuff + rank*count.
TEST_F(Nccl, ReduceScatterOutOfPlaceAndInPlace) {
    const size_t count = 37;
    std::vector<float> want(n * count, 0.0f);
    for (int r = 0; r < n; ++r) {
        std::vector<float> x = floats_of(r, n * count, 7);
        for (size_t i = 0; i < n * count; ++i) want[i] = r == 0 ? x[i] : want[i] + x[i];
    }
    for (bool in_place : {false, true}) {
        SCOPED_TRACE(in_place ? "in place" : "out of place");
        Dev<float> send(n * count), other(count);
        send.put(floats_of(rank, n * count, 7));
        float* recv = in_place ? send.p + rank * count : other.p;
        ASSERT_EQ(ncclReduceScatter(send.p, recv, count, ncclFloat, ncclSum, world_comm, stream), ncclSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        std::vector<float> got(count);
        ASSERT_EQ(cudaMemcpy(got.data(), recv, count * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < count; ++i) EXPECT_EQ(bits(got[i]), bits(want[rank * count + i])) << i;
    }
}

TEST_F(Nccl, AllGatherOutOfPlaceAndInPlace) {
    const size_t count = 29;
    std::vector<float> want;
    for (int r = 0; r < n; ++r) {
        std::vector<float> x = floats_of(r, count, 8);
        want.insert(want.end(), x.begin(), x.end());
    }
    for (bool in_place : {false, true}) {
        SCOPED_TRACE(in_place ? "in place" : "out of place");
        Dev<float> recv(n * count), mine(count);
        mine.put(floats_of(rank, count, 8));
        const float* send = mine.p;
        if (in_place) {
            ASSERT_EQ(cudaMemcpy(recv.p + rank * count, mine.p, count * sizeof(float), cudaMemcpyDeviceToDevice),
                      cudaSuccess);
            send = recv.p + rank * count;
        }
        ASSERT_EQ(ncclAllGather(send, recv.p, count, ncclFloat, world_comm, stream), ncclSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_EQ(recv.get(), want);
    }
}

TEST_F(Nccl, BroadcastFromLastAndFirstRank) {
    const size_t count = 100;
    for (int root : {n - 1, 0}) {
        SCOPED_TRACE(root);
        Dev<float> send(count), recv(count);
        send.put(floats_of(rank, count, 9));
        // Out of place from the last rank (sendbuff unused elsewhere: pass null), in place from rank 0.
        const float* src = root == 0 ? recv.p : (rank == root ? send.p : nullptr);
        if (root == 0) recv.put(floats_of(rank, count, 9));
        ASSERT_EQ(ncclBroadcast(src, recv.p, count, ncclFloat, root, world_comm, stream), ncclSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_EQ(recv.get(), floats_of(root, count, 9));
    }
}

// A ring exchange of 4 MiB (beyond MPI's eager limit): grouped send/recv must not deadlock.
TEST_F(Nccl, SendRecvRingInGroup) {
    const size_t count = size_t{1} << 20;
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    Dev<float> send(count), recv(count);
    send.put(floats_of(rank, count, 10));
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(send.p, count, ncclFloat, next, world_comm, stream), ncclSuccess);
    ASSERT_EQ(ncclRecv(recv.p, count, ncclFloat, prev, world_comm, stream), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(recv.get(), floats_of(prev, count, 10));
}

// Outside a group: rank 0 sends to the last rank, which receives; the others take no part.
TEST_F(Nccl, SendRecvPairWithoutGroup) {
    const size_t count = 1000;
    Dev<int32_t> buf(count);
    if (rank == 0) {
        buf.put(ints_of<int32_t>(0, count, 11));
        ASSERT_EQ(ncclSend(buf.p, count, ncclInt32, n - 1, world_comm, stream), ncclSuccess);
    } else if (rank == n - 1) {
        ASSERT_EQ(ncclRecv(buf.p, count, ncclInt32, 0, world_comm, stream), ncclSuccess);
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    if (rank == n - 1) {
        EXPECT_EQ(buf.get(), ints_of<int32_t>(0, count, 11));
    }
}

// Streams are deferred: the collective's result appears only when the stream is synchronized.
TEST_F(Nccl, ResultAppearsOnlyAtSynchronization) {
    Dev<float> buf(4);
    buf.put({1.0f, 2.0f, 3.0f, 4.0f});
    ASSERT_EQ(ncclAllReduce(buf.p, buf.p, 4, ncclFloat, ncclSum, world_comm, stream), ncclSuccess);
    float before[4];
    std::memcpy(before, buf.p, sizeof(before));  // emulated device memory is host memory
    EXPECT_EQ(before[3], 4.0f);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(buf.get()[3], 4.0f * n);
}

// ncclCommSplit: color rank % 2, key -rank (reversed order); NCCL_SPLIT_NOCOLOR yields no comm.
TEST_F(Nccl, CommSplitIntoSubgroups) {
    ncclComm_t sub = nullptr;
    ASSERT_EQ(ncclCommSplit(world_comm, rank % 2, -rank, &sub, nullptr), ncclSuccess);
    ASSERT_NE(sub, nullptr);
    std::vector<int> members;
    for (int r = n - 1; r >= 0; --r)
        if (r % 2 == rank % 2) members.push_back(r);  // ordered by key = -rank
    int size = 0, sub_rank = -1;
    EXPECT_EQ(ncclCommCount(sub, &size), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(sub, &sub_rank), ncclSuccess);
    EXPECT_EQ(size, static_cast<int>(members.size()));
    EXPECT_EQ(members[sub_rank], rank);
    // All-gather of world ranks shows the order; all-reduce sums the members only.
    Dev<int32_t> one(1), all(size), sum(1);
    one.put({rank});
    ASSERT_EQ(ncclAllGather(one.p, all.p, 1, ncclInt32, sub, stream), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(one.p, sum.p, 1, ncclInt32, ncclSum, sub, stream), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<int32_t> order = all.get();
    EXPECT_EQ(std::vector<int>(order.begin(), order.end()), members);
    int want = 0;
    for (int m : members) want += m;
    EXPECT_EQ(sum.get()[0], want);
    EXPECT_EQ(ncclCommDestroy(sub), ncclSuccess);

    ncclComm_t rest = nullptr;
    ASSERT_EQ(ncclCommSplit(world_comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 7, rank, &rest, nullptr), ncclSuccess);
    if (rank == 0) {
        EXPECT_EQ(rest, nullptr);
    } else {
        ASSERT_NE(rest, nullptr);
        ASSERT_EQ(ncclCommCount(rest, &size), ncclSuccess);
        EXPECT_EQ(size, n - 1);
        EXPECT_EQ(ncclCommUserRank(rest, &sub_rank), ncclSuccess);
        EXPECT_EQ(sub_rank, rank - 1);
        EXPECT_EQ(ncclCommDestroy(rest), ncclSuccess);
    }
}

// ncclCommInitRank needs only the members: world ranks 1..n-1, id created by the last of them,
// which is not rank 0 of the new communicator; world rank 0 takes no part.
TEST_F(Nccl, InitRankBySubsetOnly) {
    if (rank == 0) return;
    const int members = n - 1, creator = n - 1;
    ncclUniqueId id;
    if (rank == creator) {
        ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
        for (int r = 1; r < creator; ++r) MPI_Send(&id, sizeof(id), MPI_BYTE, r, 77, MPI_COMM_WORLD);
    } else {
        MPI_Recv(&id, sizeof(id), MPI_BYTE, creator, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, members, id, rank - 1), ncclSuccess);
    int sub_rank = -1;
    EXPECT_EQ(ncclCommUserRank(comm, &sub_rank), ncclSuccess);
    EXPECT_EQ(sub_rank, rank - 1);
    Dev<int64_t> v(1);
    v.put({int64_t{1} << (rank + 10)});
    ASSERT_EQ(ncclAllReduce(v.p, v.p, 1, ncclInt64, ncclSum, comm, stream), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    int64_t want = 0;
    for (int r = 1; r < n; ++r) want += int64_t{1} << (r + 10);
    EXPECT_EQ(v.get()[0], want);
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// Argument errors are reported at the call, locally, and queue nothing.
TEST_F(Nccl, ErrorsAreReportedAtTheCall) {
    Dev<float> buf(8);
    std::vector<float> host(8);
    EXPECT_EQ(ncclBroadcast(buf.p, buf.p, 8, ncclFloat, n, world_comm, stream), ncclInvalidArgument);  // root
    EXPECT_EQ(ncclAllReduce(host.data(), buf.p, 8, ncclFloat, ncclSum, world_comm, stream), ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(buf.p, buf.p, 9, ncclFloat, ncclSum, world_comm, stream), ncclInvalidArgument);  // size
    EXPECT_EQ(ncclAllReduce(buf.p, buf.p, 8, ncclFloat8e4m3, ncclSum, world_comm, stream), ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(buf.p, buf.p, 8, ncclFloat, static_cast<ncclRedOp_t>(9), world_comm, stream),
              ncclInvalidArgument);
    EXPECT_EQ(ncclSend(buf.p, 8, ncclFloat, -1, world_comm, stream), ncclInvalidArgument);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
    ncclResult_t async = ncclInternalError;
    EXPECT_EQ(ncclCommGetAsyncError(world_comm, &async), ncclSuccess);
    EXPECT_EQ(async, ncclSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
}

// ncclCommAbort from a watchdog thread ends a receive that will never be matched: it is abandoned
// and the stream synchronization returns instead of hanging, with no device error (a real NCCL
// kernel returns once aborted), so later work on the stream runs. The outcome does not depend on
// when the abort comes (before or during the wait). Kept last: it leaves the abandoned receive
// behind and resets the emulated device.
TEST_F(Nccl, AbortEndsAHungReceive) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommSplit(world_comm, 0, rank, &comm, nullptr), ncclSuccess);
    if (rank != 0) {
        EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
        return;
    }
    {
        Dev<float> buf(16);
        ASSERT_EQ(ncclRecv(buf.p, 16, ncclFloat, 1, comm, stream), ncclSuccess);  // rank 1 never sends
        std::thread watchdog([comm] {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            ncclCommAbort(comm);
        });
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        watchdog.join();
        EXPECT_EQ(cudaMemsetAsync(buf.p, 0, 16 * sizeof(float), stream), cudaSuccess);  // the stream goes on
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    stream = nullptr;  // destroyed by the reset
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    ::testing::InitGoogleTest(&argc, argv);
    ncclUniqueId id;
    if (world_rank() == 0 && ncclGetUniqueId(&id) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    if (ncclCommInitRank(&world_comm, world_size(), id, world_rank()) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 2);
    int failed = RUN_ALL_TESTS() != 0;
    ncclCommDestroy(world_comm);
    int any_failed = 0;
    MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any_failed;
}
