// tests/parallel/test_mpi_comm.cpp — MpiComm collectives against references computed locally.
//
// Run under `mpirun -np 3` (and once as a plain single process). Every rank regenerates every other
// rank's input from a seeded generator, so the expected result is known without communication:
//  - f32 sums must equal the rank-order float sum bit for bit (and a double sum to 1e-6 of sum |x|);
//  - bf16 sums must equal the fp32 rank-order sum rounded to nearest-even bf16, rounding done here
//    independently by comparing the two neighbouring bf16 values in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "parallel/comm.hpp"

using namespace llmtrain;

namespace {

/// Rank r's input: n floats of mixed sign and magnitude (so the summation order matters).
std::vector<float> input_of(int r, size_t n) {
    std::mt19937_64 g(1000 + r);
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
    const int P = comm->size();
    const size_t n = 777;
    std::vector<std::vector<uint16_t>> all(P);
    for (int r = 0; r < P; ++r)
        for (float v : input_of(r, n)) all[r].push_back(trunc_bf16(v));
    auto buf = all[comm->rank()];
    comm->all_reduce_sum(buf.data(), n, DType::bf16);
    for (size_t i = 0; i < n; ++i) {
        float acc = bits_to_f32(all[0][i]);
        for (int r = 1; r < P; ++r) acc += bits_to_f32(all[r][i]);
        ASSERT_EQ(buf[i], nearest_bf16(acc)) << "i=" << i;
    }
}

TEST(MpiComm, MaxBroadcastBarrier) {
    auto comm = make_mpi_comm();
    const int P = comm->size(), me = comm->rank();
    std::vector<float> m = {float(me), float(-me), 0.5f};
    comm->all_reduce_max(m.data(), m.size());
    EXPECT_EQ(m[0], float(P - 1));
    EXPECT_EQ(m[1], 0.0f);
    EXPECT_EQ(m[2], 0.5f);
    const int root = P - 1;
    std::vector<uint8_t> b(300001, uint8_t(me));
    if (me == root)
        for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i * 7);
    comm->broadcast(b.data(), b.size(), root);
    for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], uint8_t(i * 7));
    comm->barrier();
}

TEST(MpiComm, SubGroupsFollowTheListedOrder) {
    const int W = world_size(), me = world_rank();
    if (W < 3) GTEST_SKIP() << "needs 3 ranks";
    // Group (2, 0) on ranks 0 and 2; rank 1 alone.
    std::vector<int> ranks = me == 1 ? std::vector<int>{1} : std::vector<int>{2, 0};
    auto comm = make_mpi_comm(ranks);
    EXPECT_EQ(comm->size(), int(ranks.size()));
    EXPECT_EQ(comm->rank(), me == 0 ? 1 : 0);  // world 2 is index 0, world 0 index 1
    float v[2] = {float(me + 1), 1.0f};
    comm->all_reduce_sum(v, 2, DType::f32);
    EXPECT_EQ(v[0], me == 1 ? 2.0f : 4.0f);  // (0+1) + (2+1)
    EXPECT_EQ(v[1], float(ranks.size()));
}

TEST(MpiComm, BadGroupsAreRejected) {
    const int W = world_size(), me = world_rank();
    EXPECT_THROW(make_mpi_comm({me, me}), std::invalid_argument);
    EXPECT_THROW(make_mpi_comm({W}), std::invalid_argument);
    if (W > 1) {
        EXPECT_THROW(make_mpi_comm({(me + 1) % W}), std::invalid_argument);
    }
}

int main(int argc, char** argv) {
    mpi_init_once(&argc, &argv);
    ::testing::InitGoogleTest(&argc, argv);
    int rc = RUN_ALL_TESTS();
    mpi_finalize();
    return rc;
}
