// tests/parallel/test_mpi_comm.cpp — MpiComm operations against references computed locally.
//
// Run as a plain single process and under `mpirun -np 3` and `-np 4`. Every rank regenerates every
// other rank's input from a seeded generator, so the expected result is known without communication:
//  - fp32 sums must equal the rank-order float sum bit for bit (and a double sum to 1e-6 of sum |x|);
//  - bf16 sums must equal the fp32 rank-order sum rounded to nearest-even bf16, the rounding done
//    here independently by comparing the two neighbouring bf16 values in double precision;
//  - moves (all-gather, broadcast, send/recv) must deliver the source bytes exactly;
//  - byte counters must equal the formulas documented in parallel/comm.hpp (CommStats).
// The segmented code paths run with a segment of 3 elements (parallel/mpi_comm_testing.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "parallel/comm.hpp"
#include "parallel/mpi_comm_testing.hpp"

using namespace llmtrain;

namespace {

using Bytes = std::vector<uint8_t>;

/// Rank r's input number `salt`: n floats of mixed sign and magnitude (so the summation order matters).
std::vector<float> input_of(int r, size_t n, int salt = 0) {
    std::mt19937_64 g(1000 + r + 7919 * salt);
    std::vector<float> x(n);
    for (auto& v : x) {
        double mant = double(g() % 2000001) / 1e6 - 1.0;  // [-1, 1]
        int ex = int(g() % 17) - 8;
        v = float(std::ldexp(mant, ex));
    }
    return x;
}

float bits_to_f32(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

/// Nearest bf16 to x (ties to even mantissa), chosen by distance in double.
uint16_t nearest_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);  // |lo| <= |x| <= |hi| (same sign)
    double dlo = std::fabs(double(x) - bits_to_f32(lo)), dhi = std::fabs(double(x) - bits_to_f32(hi));
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) ? hi : lo;
}

uint16_t trunc_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return uint16_t(u >> 16);
}

/// Rank r's input as raw elements of t: the floats, their truncation to bf16, or their low bytes.
Bytes input_bytes(int r, size_t n, DType t, int salt = 0) {
    const auto x = input_of(r, n, salt);
    Bytes b(n * dtype_size(t));
    for (size_t i = 0; i < n; ++i) {
        if (t == DType::f32) std::memcpy(&b[4 * i], &x[i], 4);
        if (t == DType::bf16) {
            uint16_t h = trunc_bf16(x[i]);
            std::memcpy(&b[2 * i], &h, 2);
        }
        if (t == DType::u8) b[i] = uint8_t(std::lround(std::fabs(x[i]) * 1000));
    }
    return b;
}

/// The rank-order sum of elements [first, first+n) of equal-length inputs (f32: float adds in order
/// 0..P-1; bf16: that fp32 sum of the bf16 values, rounded to the nearest bf16); all when n == -1.
Bytes rank_order_sum(const std::vector<Bytes>& in, DType t, size_t first = 0, size_t n = size_t(-1)) {
    const size_t es = dtype_size(t);
    if (n == size_t(-1)) n = in[0].size() / es;
    Bytes out(n * es);
    for (size_t j = 0; j < n; ++j) {
        const size_t i = first + j;
        float acc = 0;
        for (size_t r = 0; r < in.size(); ++r) {
            float v;
            if (t == DType::f32) {
                std::memcpy(&v, &in[r][4 * i], 4);
            } else {
                uint16_t h;
                std::memcpy(&h, &in[r][2 * i], 2);
                v = bits_to_f32(h);
            }
            acc = r == 0 ? v : acc + v;
        }
        if (t == DType::f32) {
            std::memcpy(&out[4 * j], &acc, 4);
        } else {
            uint16_t h = nearest_bf16(acc);
            std::memcpy(&out[2 * j], &h, 2);
        }
    }
    return out;
}

/// Index of the first differing element of two equal-size buffers of t, or -1.
long first_diff(const uint8_t* a, const uint8_t* b, size_t n, DType t) {
    const size_t es = dtype_size(t);
    for (size_t i = 0; i < n; ++i)
        if (std::memcmp(a + i * es, b + i * es, es) != 0) return long(i);
    return -1;
}

/// Every world rank's input for group members, in group order.
std::vector<Bytes> inputs_of_group(const Comm& comm, size_t n, DType t, int salt = 0) {
    std::vector<Bytes> all;
    for (int w : comm.world_ranks()) all.push_back(input_bytes(w, n, t, salt));
    return all;
}

/// Reduce-scatter of n elements per rank (in place: recv = send + rank*n) against the reference;
/// `all` holds every group member's P*n-element input.
void check_reduce_scatter(Comm& comm, const std::vector<Bytes>& all, size_t n, DType t, bool in_place) {
    SCOPED_TRACE("reduce_scatter n=" + std::to_string(n) + (t == DType::f32 ? " f32" : " bf16") +
                 (in_place ? " in place" : " out of place"));
    const int me = comm.rank();
    const size_t es = dtype_size(t);
    Bytes send = all[me], recv(in_place ? 0 : n * es);
    uint8_t* out = in_place ? send.data() + me * n * es : recv.data();
    comm.reduce_scatter_sum(send.data(), out, n, t);
    EXPECT_EQ(first_diff(out, rank_order_sum(all, t, me * n, n).data(), n, t), -1);
}

void check_reduce_scatter(Comm& comm, size_t n, DType t, bool in_place) {
    check_reduce_scatter(comm, inputs_of_group(comm, comm.size() * n, t), n, t, in_place);
}

/// All-gather of n elements per rank (in place: send = recv + rank*n) against the concatenation;
/// `all` holds every group member's n-element input.
void check_all_gather(Comm& comm, const std::vector<Bytes>& all, size_t n, DType t, bool in_place) {
    SCOPED_TRACE("all_gather n=" + std::to_string(n) + " dtype " + std::to_string(int(t)) +
                 (in_place ? " in place" : " out of place"));
    const int P = comm.size(), me = comm.rank();
    const size_t es = dtype_size(t);
    Bytes recv(P * n * es, 0xAB);
    const Bytes& send = all[me];
    if (in_place) std::memcpy(recv.data() + me * n * es, send.data(), n * es);
    comm.all_gather(in_place ? recv.data() + me * n * es : send.data(), recv.data(), n, t);
    for (int r = 0; r < P; ++r) EXPECT_EQ(first_diff(recv.data() + r * n * es, all[r].data(), n, t), -1) << "r=" << r;
}

void check_all_gather(Comm& comm, size_t n, DType t, bool in_place) {
    check_all_gather(comm, inputs_of_group(comm, n, t), n, t, in_place);
}

/// In-place all-reduce of n elements against the rank-order sum.
void check_all_reduce(Comm& comm, size_t n, DType t) {
    SCOPED_TRACE("all_reduce n=" + std::to_string(n));
    const auto all = inputs_of_group(comm, n, t);
    Bytes buf = all[comm.rank()];
    comm.all_reduce_sum(buf.data(), n, t);
    EXPECT_EQ(first_diff(buf.data(), rank_order_sum(all, t).data(), n, t), -1);
}

/// Broadcast of n elements from group index `root`: every rank ends with root's input.
void check_broadcast(Comm& comm, size_t n, DType t, int root) {
    SCOPED_TRACE("broadcast n=" + std::to_string(n) + " root=" + std::to_string(root));
    const auto want = input_bytes(comm.world_ranks()[root], n, t);
    Bytes buf = comm.rank() == root ? want : Bytes(want.size(), 0x5C);
    comm.broadcast(buf.data(), n, t, root);
    EXPECT_EQ(first_diff(buf.data(), want.data(), n, t), -1);
}

/// Two messages of n elements around the ring (to rank+1, from rank-1), async; must arrive in order.
void check_ring(Comm& comm, size_t n, DType t) {
    SCOPED_TRACE("ring n=" + std::to_string(n));
    const int P = comm.size(), me = comm.rank(), right = (me + 1) % P, left = (me + P - 1) % P;
    const int w = comm.world_ranks()[me], wl = comm.world_ranks()[left];
    const size_t es = dtype_size(t);
    Bytes in1(n * es), in2(n * es);
    const Bytes out1 = input_bytes(w, n, t, 1), out2 = input_bytes(w, n, t, 2);
    auto r1 = comm.recv_async(in1.data(), n, t, left);
    auto r2 = comm.recv_async(in2.data(), n, t, left);
    auto s1 = comm.send_async(out1.data(), n, t, right);
    auto s2 = comm.send_async(out2.data(), n, t, right);
    s2->wait();
    s1->wait();
    r2->wait();
    r1->wait();
    EXPECT_EQ(first_diff(in1.data(), input_bytes(wl, n, t, 1).data(), n, t), -1);
    EXPECT_EQ(first_diff(in2.data(), input_bytes(wl, n, t, 2).data(), n, t), -1);
}

}  // namespace

TEST(MpiComm, AllReduceSumF32IsRankOrderSumOnEveryRank) {
    auto comm = make_mpi_comm();
    const int P = comm->size();
    for (size_t n : {size_t(0), size_t(2), size_t(1001), size_t(65537)}) {
        auto buf = input_of(comm->rank(), n);
        comm->all_reduce_sum(buf.data(), n, DType::f32);
        std::vector<std::vector<float>> all;
        for (int r = 0; r < P; ++r) all.push_back(input_of(r, n));
        for (size_t i = 0; i < n; ++i) {
            float acc = all[0][i];
            double dacc = all[0][i], mag = std::fabs(all[0][i]);
            for (int r = 1; r < P; ++r) acc += all[r][i], dacc += all[r][i], mag += std::fabs(all[r][i]);
            ASSERT_EQ(std::memcmp(&acc, &buf[i], 4), 0) << "n=" << n << " i=" << i;
            ASSERT_NEAR(buf[i], dacc, 1e-6 * mag) << "i=" << i;
        }
    }
}

TEST(MpiComm, AllReduceSumBf16RoundsTheFp32SumToNearestEven) {
    auto comm = make_mpi_comm();
    check_all_reduce(*comm, 777, DType::bf16);
}

TEST(MpiComm, ReduceScatterIsTheRankOrderSumInAndOutOfPlace) {
    auto comm = make_mpi_comm();
    for (size_t n : {size_t(7), size_t(1000003)})
        for (DType t : {DType::f32, DType::bf16}) {
            const auto all = inputs_of_group(*comm, comm->size() * n, t);
            for (bool in_place : {false, true}) check_reduce_scatter(*comm, all, n, t, in_place);
        }
}

TEST(MpiComm, AllGatherConcatenatesInAndOutOfPlace) {
    auto comm = make_mpi_comm();
    for (size_t n : {size_t(7), size_t(1000003)})
        for (DType t : {DType::f32, DType::bf16, DType::u8}) {
            const auto all = inputs_of_group(*comm, n, t);
            for (bool in_place : {false, true}) check_all_gather(*comm, all, n, t, in_place);
        }
}

TEST(MpiComm, EveryOperationIsCorrectAcrossManySegments) {
    set_mpi_segment_elements(3);
    auto comm = make_mpi_comm();
    set_mpi_segment_elements(size_t(1) << 25);
    const int P = comm->size();
    for (size_t n : {size_t(7), size_t(9)}) {
        for (DType t : {DType::f32, DType::bf16}) {
            check_reduce_scatter(*comm, n, t, false);
            check_reduce_scatter(*comm, n, t, true);
            check_all_reduce(*comm, 4 * n + 1, t);  // segments of 3 over P ranks: some chunks empty
        }
        check_all_gather(*comm, n, DType::f32, false);
        check_all_gather(*comm, n, DType::bf16, true);
        check_broadcast(*comm, n, DType::u8, P - 1);
        check_ring(*comm, n, DType::f32);
    }
}

TEST(MpiComm, HandlesInFlightTogetherCanBeWaitedInReverseOrder) {
    auto comm = make_mpi_comm();
    const int P = comm->size(), me = comm->rank();
    const size_t na = 1001, nb = 501, nc = 777, nd = 3001;
    const auto a_in = inputs_of_group(*comm, P * na, DType::f32);
    const auto b_in = inputs_of_group(*comm, nb, DType::bf16);
    const auto c_in = inputs_of_group(*comm, nc, DType::bf16);
    Bytes a = a_in[me], a_out(na * 4), b(P * nb * 2), c = c_in[me];
    Bytes d = me == 0 ? input_bytes(0, nd, DType::u8) : Bytes(nd, 0);
    auto ha = comm->reduce_scatter_sum_async(a.data(), a_out.data(), na, DType::f32);
    auto hb = comm->all_gather_async(b_in[me].data(), b.data(), nb, DType::bf16);
    auto hc = comm->all_reduce_sum_async(c.data(), nc, DType::bf16);
    auto hd = comm->broadcast_async(d.data(), nd, DType::u8, 0);
    hd->wait();
    hc->wait();
    hb->wait();
    ha->wait();
    ha->wait();  // idempotent
    EXPECT_EQ(first_diff(a_out.data(), rank_order_sum(a_in, DType::f32, me * na, na).data(), na, DType::f32), -1);
    for (int r = 0; r < P; ++r) EXPECT_EQ(first_diff(b.data() + r * nb * 2, b_in[r].data(), nb, DType::bf16), -1);
    EXPECT_EQ(first_diff(c.data(), rank_order_sum(c_in, DType::bf16).data(), nc, DType::bf16), -1);
    EXPECT_EQ(first_diff(d.data(), input_bytes(0, nd, DType::u8).data(), nd, DType::u8), -1);
}

TEST(MpiComm, DestroyingAnUnwaitedHandleWaits) {
    auto comm = make_mpi_comm();
    const int P = comm->size(), me = comm->rank();
    const auto in = inputs_of_group(*comm, 101, DType::f32);
    Bytes out(P * 101 * 4);
    { auto h = comm->all_gather_async(in[me].data(), out.data(), 101, DType::f32); }
    for (int r = 0; r < P; ++r) EXPECT_EQ(first_diff(out.data() + r * 404, in[r].data(), 101, DType::f32), -1);
}

TEST(MpiComm, SendRecvRingDeliversMessagesInOrder) {
    auto comm = make_mpi_comm();
    check_ring(*comm, 1, DType::u8);
    check_ring(*comm, 100003, DType::f32);
}

TEST(MpiComm, BroadcastFromTheLastRank) {
    auto comm = make_mpi_comm();
    check_broadcast(*comm, 300001, DType::u8, comm->size() - 1);
    check_broadcast(*comm, 1001, DType::f32, comm->size() - 1);
}

TEST(MpiComm, MaxAndBarrier) {
    auto comm = make_mpi_comm();
    const int P = comm->size(), me = comm->rank();
    std::vector<float> m = {float(me), float(-me), 0.5f};
    comm->all_reduce_max(m.data(), m.size());
    EXPECT_EQ(m[0], float(P - 1));
    EXPECT_EQ(m[1], 0.0f);
    EXPECT_EQ(m[2], 0.5f);
    comm->barrier();
}

TEST(MpiComm, ByteCountersFollowTheCommStatsFormulas) {
    auto comm = make_mpi_comm();
    const uint64_t P = comm->size(), me = comm->rank();
    Bytes buf(4 * 4 * 1001);
    comm->all_reduce_sum(buf.data(), 1001, DType::f32);
    comm->all_reduce_sum(buf.data(), 10, DType::bf16);
    comm->reduce_scatter_sum(buf.data(), buf.data() + me * 7 * 2, 7, DType::bf16);
    comm->all_gather(buf.data(), buf.data() + 4 * 1001, 5, DType::f32);
    comm->broadcast(buf.data(), 100, DType::u8, int(P - 1));
    check_ring(*comm, 3, DType::f32);  // two sends and two receives of 3 fp32
    const CommStats& s = comm->stats();
    auto at = [&](CommOp op) { return std::make_pair(s.bytes[int(op)], s.calls[int(op)]); };
    using BC = std::pair<uint64_t, uint64_t>;
    // all_reduce 2(P-1)/P*n*es, reduce_scatter and all_gather (P-1)/P*n*es with n the full length.
    EXPECT_EQ(at(CommOp::all_reduce), BC(2 * (P - 1) * 1001 * 4 / P + 2 * (P - 1) * 10 * 2 / P, 2));
    EXPECT_EQ(at(CommOp::reduce_scatter), BC((P - 1) * 7 * 2, 1));
    EXPECT_EQ(at(CommOp::all_gather), BC((P - 1) * 5 * 4, 1));
    EXPECT_EQ(at(CommOp::broadcast), BC(P > 1 && me == P - 1 ? 100 : 0, 1));
    EXPECT_EQ(at(CommOp::send), BC(P > 1 ? 2 * 3 * 4 : 0, 2));  // a single rank sends to itself: off the wire
    EXPECT_EQ(at(CommOp::recv), BC(0, 2));
    EXPECT_EQ(s.total_bytes(), at(CommOp::all_reduce).first + at(CommOp::reduce_scatter).first +
                                   at(CommOp::all_gather).first + at(CommOp::broadcast).first +
                                   at(CommOp::send).first);
    comm->reset_stats();
    EXPECT_EQ(comm->stats().total_bytes(), 0u);
}

TEST(MpiComm, SubGroupsFollowTheListedOrder) {
    const int W = world_size(), me = world_rank();
    if (W < 3) GTEST_SKIP() << "needs 3 ranks";
    // Group (2, 0) on ranks 0 and 2; every other rank alone.
    std::vector<int> ranks = me == 0 || me == 2 ? std::vector<int>{2, 0} : std::vector<int>{me};
    auto comm = make_mpi_comm(ranks);
    EXPECT_EQ(comm->size(), int(ranks.size()));
    EXPECT_EQ(comm->world_ranks(), ranks);
    EXPECT_EQ(comm->rank(), me == 0 ? 1 : 0);  // world 2 is index 0, world 0 index 1
    float v[2] = {float(me + 1), 1.0f};
    comm->all_reduce_sum(v, 2, DType::f32);
    EXPECT_EQ(v[0], ranks.size() == 1 ? float(me + 1) : 4.0f);  // (0+1) + (2+1)
    EXPECT_EQ(v[1], float(ranks.size()));
    check_reduce_scatter(*comm, 7, DType::f32, false);
    check_all_gather(*comm, 7, DType::bf16, true);
    check_broadcast(*comm, 11, DType::f32, 0);
}

TEST(MpiComm, EvenAndOddRankGroupsWorkSideBySide) {
    const int W = world_size(), me = world_rank();
    std::vector<int> ranks;
    for (int r = me % 2; r < W; r += 2) ranks.push_back(r);
    auto comm = make_mpi_comm(ranks);
    EXPECT_EQ(comm->world_ranks(), ranks);
    check_reduce_scatter(*comm, 1001, DType::bf16, true);
    check_all_gather(*comm, 7, DType::f32, false);
    check_all_reduce(*comm, 999, DType::f32);
    check_ring(*comm, 5, DType::bf16);
}

TEST(MpiComm, BadArgumentsAreRejected) {
    const int W = world_size(), me = world_rank();
    EXPECT_THROW(make_mpi_comm({me, me}), std::invalid_argument);
    EXPECT_THROW(make_mpi_comm({W}), std::invalid_argument);
    if (W > 1) {
        EXPECT_THROW(make_mpi_comm({(me + 1) % W}), std::invalid_argument);
    }
    auto comm = make_mpi_comm();
    uint8_t b[8] = {};
    EXPECT_THROW(comm->all_reduce_sum_async(b, 8, DType::u8), std::invalid_argument);
    EXPECT_THROW(comm->broadcast_async(b, 8, DType::u8, W), std::invalid_argument);
    EXPECT_THROW(comm->send_async(b, 8, DType::u8, -1), std::invalid_argument);
    EXPECT_EQ(comm->stats().total_bytes(), 0u);  // nothing counted for refused calls
}

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
