// tests/cuda_emu/test_ptx.cu — the emulator's model of model/cuda/ptx.cuh (device_ptx.hpp, ptx.cpp)
// against PTX ISA's documented layouts, and its checks.
//
// - mma: fragments are built by hand in the kernel from the PTX ISA layout ("Matrix Fragments for
//   mma.m16n8k16 with floating point type"; no ldmatrix involved) and D is compared BITWISE with a
//   plain C++ loop in the model's documented order (fp32, from C, k = 0..15 increasing; bf16
//   products are exact), and within 1e-5 relative to a double-precision matmul.
// - ldmatrix x1/x2/x4 (.trans): every 16-bit element is unique, compared exactly with the documented
//   mapping (lane i: row i/4, elements 2(i%4), 2(i%4)+1 of each matrix; .trans: the transpose).
// - cp.async -> ldmatrix -> mma: a full 16x16x16 product through shared memory, bitwise.
// - cp.async: reads before the wait see the poison (0xFF bytes), wait_group 1 retires only the
//   older of two groups, __syncthreads completes nothing, valid = false writes zeros; misuse faults.
// - ex2_approx within ex2.approx.ftz's documented bound and flushes.
// - the bank-conflict count of ldmatrix against rows placed on known banks.
// Collective tests run under every thread order. The kernels are in kernels/ptx_kernels.cuh
// (shared with ptx_layout_check.cu, which runs them on a real GPU too); the misuse kernel is here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/cuda/ptx.cuh"
#include "tests/cuda_emu/kernels/ptx_kernels.cuh"
#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;
namespace ptx = llmtrain::cuda::ptx;
using namespace ptx_kernels;

namespace {

/// Misuse, one per mode (32 threads; src is 16+ floats of device memory):
///   0: exit with a committed copy not waited for       1: exit with an uncommitted copy
///   2: a second copy onto a destination in flight      3: a plain store into a destination in flight
///   4: ldmatrix of a row with a copy in flight         5: destination in global memory
///   6: destination on the thread's stack               7: misaligned ldmatrix row address
///   8: mma called by lanes 0-15 only                   9: misaligned cp.async source
/// Two warps (64 threads), no __syncthreads between what warp 0 and warp 1 do to rows 0-7 (the
/// hazards: faults under every thread order); with `mode | 16`, one barrier between (no fault):
///   10: warp 0 reads rows 0-7 with ldmatrix, then warp 1 copies into them (write after read)
///   11: warp 1 copies into rows 0-7 and waits, then warp 0 reads them (read after write)
__global__ void misuse_kernel(float* src, int mode) {
    __shared__ __align__(16) float s[32 * 4];
    const unsigned lane = threadIdx.x;
    uint32_t r[4];
    switch (mode) {
        case 0: ptx::cp_async_16(&s[lane * 4], src, true), ptx::cp_async_commit(); break;
        case 1: ptx::cp_async_16(&s[lane * 4], src, true); break;
        case 2:
            ptx::cp_async_16(&s[lane * 4], src, true), ptx::cp_async_commit();
            __syncthreads();  // every copy issued, none retired
            if (lane == 0) ptx::cp_async_16(&s[4], src, true), ptx::cp_async_commit();  // lane 1's destination
            ptx::cp_async_wait<0>();
            break;
        case 3:
            ptx::cp_async_16(&s[lane * 4], src, true), ptx::cp_async_commit();
            s[lane * 4 + 1] = 1.0f;
            ptx::cp_async_wait<0>();
            break;
        case 4:
            ptx::cp_async_16(&s[lane * 4], src, true), ptx::cp_async_commit();
            ptx::ldmatrix_x1(r, &s[(lane % 8) * 4]);
            ptx::cp_async_wait<0>();
            break;
        case 5: ptx::cp_async_16(src, src, true), ptx::cp_async_wait<0>(); break;
        case 6: {
            __align__(16) float local[4];
            ptx::cp_async_16(local, src, true);
            ptx::cp_async_commit(), ptx::cp_async_wait<0>();
            src[lane] = local[0];
            break;
        }
        case 7: ptx::ldmatrix_x4(r, reinterpret_cast<char*>(&s[lane * 4]) + 8); break;
        case 8:
            if (lane < 16) {
                const uint32_t a[4] = {}, b[2] = {};
                const float c[4] = {};
                float d[4];
                ptx::mma_bf16_16816(d, a, b, c);
            }
            break;
        case 9: ptx::cp_async_16(&s[lane * 4], src + 1, true), ptx::cp_async_commit(), ptx::cp_async_wait<0>(); break;
    }
    const bool barrier = mode & 16, warp1 = lane >= 32;
    auto copy_rows = [&] {  // warp 1: lane 32 + i copies row i % 8 (lanes 32-39 only: one copy per row)
        if (warp1 && lane < 40) ptx::cp_async_16(&s[(lane % 8) * 4], src, true);
        ptx::cp_async_commit(), ptx::cp_async_wait<0>();
    };
    auto read_rows = [&] {
        if (!warp1) ptx::ldmatrix_x1(r, &s[(lane % 8) * 4]);
    };
    switch (mode & 15) {
        case 10:
            read_rows();
            if (barrier) __syncthreads();
            copy_rows();
            break;
        case 11:
            copy_rows();
            if (barrier) __syncthreads();
            read_rows();
            break;
    }
}

/// One ldmatrix_x1 whose 8 rows lie `stride` floats apart (lanes 0-7 give them), for the bank count.
__global__ void banks_kernel(int stride) {
    __shared__ __align__(16) float s[8 * 36];
    uint32_t r[1];
    ptx::ldmatrix_x1(r, &s[(threadIdx.x % 8) * stride]);
}

// ---- helpers ----

std::vector<uint16_t> random_bf16_bits(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<uint16_t> v(n);
    for (auto& x : v) {
        const __nv_bfloat16 h = __float2bfloat16_rn(u(rng));
        std::memcpy(&x, &h, 2);
    }
    return v;
}

float bf(uint16_t bits) {
    const uint32_t u = uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

class Ptx : public ::testing::TestWithParam<const char*> {
protected:
    emu_test::ScopedOrder order{GetParam()};
};

// ---- tests ----

/// D = A*B + C for two warps (warp 1 with d aliasing c): bitwise against the model's order, and
/// within 1e-5 relative (plus 1e-6 absolute) of a double matmul.
TEST_P(Ptx, MmaByHandMatchesPlainMatmulBitwise) {
    const auto A = random_bf16_bits(2 * 256, 1), B = random_bf16_bits(2 * 128, 2);
    std::vector<float> C(2 * 128);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-4.0f, 4.0f);
    for (auto& x : C) x = u(rng);
    DeviceArray<uint16_t> da(A), db(B);
    DeviceArray<float> dc(C), dd(2 * 128);
    llmtrain::launch(mma_by_hand, 1, 64, 0, nullptr, dd.p, da.p, db.p, dc.p);
    const auto D = dd.download();
    for (int w = 0; w < 2; w++)
        for (int r = 0; r < 16; r++)
            for (int n = 0; n < 8; n++) {
                float acc = C[128 * w + r * 8 + n];
                double ref = acc;
                for (int k = 0; k < 16; k++) {
                    acc += bf(A[256 * w + r * 16 + k]) * bf(B[128 * w + k * 8 + n]);
                    ref += double(bf(A[256 * w + r * 16 + k])) * bf(B[128 * w + k * 8 + n]);
                }
                const float got = D[128 * w + r * 8 + n];
                ASSERT_EQ(bits_of(got), bits_of(acc)) << "warp " << w << " row " << r << " col " << n;
                ASSERT_NEAR(got, ref, 1e-5 * std::abs(ref) + 1e-6);
            }
}

/// Every ldmatrix form against the documented mapping, exactly (unique 16-bit values).
TEST_P(Ptx, LdmatrixDeliversTheDocumentedLayout) {
    std::vector<uint16_t> src(256);  // matrix j, row r, col c = j * 64 + r * 8 + c
    for (int i = 0; i < 256; i++) src[i] = static_cast<uint16_t>(0x1000 + i);
    DeviceArray<uint16_t> dsrc(src);
    DeviceArray<uint32_t> dout(128);
    for (int op : {1, 2, 4, 12, 14}) {
        llmtrain::launch(ldmatrix_kernel, 1, 32, 0, nullptr, dout.p, dsrc.p, op);
        const auto out = dout.download();
        const int num = op % 10;
        const bool trans = op > 10;
        for (int lane = 0; lane < 32; lane++)
            for (int j = 0; j < 4; j++) {
                auto M = [&](int r, int c) { return uint32_t{src[j * 64 + r * 8 + c]}; };
                const int g = lane / 4, c = 2 * (lane % 4);
                const uint32_t want = j >= num ? 0u
                                      : trans  ? M(c, g) | M(c + 1, g) << 16
                                               : M(g, c) | M(g, c + 1) << 16;
                ASSERT_EQ(out[lane * 4 + j], want) << "op " << op << " lane " << lane << " matrix " << j;
            }
    }
}

/// cp.async -> ldmatrix_x4 (A) / ldmatrix_x4_trans (B) -> mma: the 16x16x16 product, bitwise
/// against fp32 sums from 0 over k increasing.
TEST_P(Ptx, CpAsyncLdmatrixMmaComposeToAFullProduct) {
    const auto A = random_bf16_bits(256, 11), B = random_bf16_bits(256, 12);
    DeviceArray<uint16_t> da(A), db(B);
    DeviceArray<float> dd(256);
    llmtrain::launch(composed_kernel, 1, 32, 1024, nullptr, dd.p, da.p, db.p);
    const auto D = dd.download();
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float acc = 0.0f;
            for (int k = 0; k < 16; k++) acc += bf(A[r * 16 + k]) * bf(B[k * 16 + n]);
            ASSERT_EQ(bits_of(D[r * 16 + n]), bits_of(acc)) << "row " << r << " col " << n;
        }
}

INSTANTIATE_TEST_SUITE_P(Orders, Ptx, ::testing::ValuesIn(emu_test::kThreadOrders), [](const auto& info) {
    std::string s = info.param;
    for (char& c : s)
        if (c == ':') c = '_';
    return s;
});

/// Runs cp_async_kernel's `mode` on 64 threads; returns the 3 x 64 x 4 floats it read.
std::vector<float> run_cp_async(int mode, const std::vector<float>& src) {
    DeviceArray<float> dsrc(src), dout(3 * 64 * 4);
    llmtrain::launch(cp_async_kernel, 1, 64, 0, nullptr, dout.p, dsrc.p, mode);
    return dout.download();
}

std::vector<float> iota_floats(size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = static_cast<float>(i) + 0.5f;
    return v;
}

constexpr uint32_t kPoison = 0xFFFFFFFFu;  // what a destination holds while its copy is in flight

/// A read before cp_async_wait sees the poison (every byte 0xFF: NaN), after it the data.
TEST(PtxCpAsync, ReadBeforeTheWaitSeesPoison) {
    const auto src = iota_floats(2 * 64 * 4);
    const auto out = run_cp_async(0, src);
    for (int i = 0; i < 64 * 4; i++) {
        ASSERT_EQ(bits_of(out[i]), kPoison) << i;
        ASSERT_EQ(out[64 * 4 + i], src[i]) << i;
    }
}

/// With two committed groups, wait_group 1 retires the older only; wait_group 0 the other.
TEST(PtxCpAsync, WaitGroupOneRetiresOnlyTheOlderGroup) {
    const auto src = iota_floats(2 * 64 * 4);
    const auto out = run_cp_async(1, src);
    for (int i = 0; i < 64 * 4; i++) {
        ASSERT_EQ(out[i], src[i]) << i;                          // group 1: done
        ASSERT_EQ(bits_of(out[64 * 4 + i]), kPoison) << i;       // group 2: still in flight
        ASSERT_EQ(out[2 * 64 * 4 + i], src[64 * 4 + i]) << i;    // after wait_group 0
    }
}

/// valid = false (src-size 0) writes 16 zero bytes.
TEST(PtxCpAsync, InvalidSourceWritesZeros) {
    const auto out = run_cp_async(2, iota_floats(2 * 64 * 4));
    for (int i = 0; i < 64 * 4; i++) ASSERT_EQ(bits_of(out[i]), 0u) << i;
}

/// A wait retires committed groups only: an uncommitted copy stays in flight through wait<0>.
TEST(PtxCpAsync, WaitDoesNotRetireUncommittedCopies) {
    const auto src = iota_floats(2 * 64 * 4);
    const auto out = run_cp_async(3, src);
    for (int i = 0; i < 64 * 4; i++) {
        ASSERT_EQ(bits_of(out[i]), kPoison) << i;
        ASSERT_EQ(out[64 * 4 + i], src[i]) << i;
    }
}

/// __syncthreads completes no copy: another thread's chunk is poison until its writer waited (then
/// a barrier), under every thread order.
TEST(PtxCpAsync, SyncthreadsDoesNotCompleteCopies) {
    const auto src = iota_floats(2 * 64 * 4);
    for (const char* order : emu_test::kThreadOrders) {
        emu_test::ScopedOrder scoped(order);
        const auto out = run_cp_async(4, src);
        for (int t = 0; t < 64; t++)
            for (int e = 0; e < 4; e++) {
                ASSERT_EQ(bits_of(out[t * 4 + e]), kPoison) << order << " thread " << t;
                ASSERT_EQ(out[64 * 4 + t * 4 + e], src[(t ^ 1) * 4 + e]) << order << " thread " << t;
            }
    }
}

/// Each misuse ends the kernel with a report containing the given text.
TEST(PtxChecks, MisuseIsReported) {
    const std::pair<int, const char*> cases[] = {
        {0, "cp.async copy in flight"},        {1, "1 not committed"},
        {2, "already has a cp.async in flight"}, {3, "was written while the copy was in flight"},
        {4, "while a cp.async into it"},        {5, "not shared memory"},
        {6, "on the thread's stack"},           {7, "not 16-byte aligned"},
        {8, "__syncwarp"},                      {9, "source"},
    };
    for (const auto& [mode, needle] : cases) {
        SCOPED_TRACE("mode " + std::to_string(mode));
        DeviceArray<float> src(64);
        llmtrain::launch(misuse_kernel, 1, 32, 0, nullptr, src.p, mode);
        emu_test::expect_fault(needle);
    }
}

/// Between warps, cp.async and ldmatrix on the same rows need a __syncthreads between them, in
/// both directions, whatever order the emulator happens to run the warps in: without it each case
/// faults under every thread order (forward runs warp 0 first, reverse warp 1); with it none does.
TEST(PtxChecks, CrossWarpHazardsWithoutABarrierAreReported) {
    for (const char* order : emu_test::kThreadOrders) {
        emu_test::ScopedOrder scoped(order);
        for (int mode : {10, 11}) {
            SCOPED_TRACE(std::string(order) + ", mode " + std::to_string(mode));
            {
                DeviceArray<float> src(64);
                llmtrain::launch(misuse_kernel, 1, 64, 0, nullptr, src.p, mode);
                emu_test::expect_fault("with no __syncthreads between");  // resets the device
            }
            DeviceArray<float> src(64);
            llmtrain::launch(misuse_kernel, 1, 64, 0, nullptr, src.p, mode | 16);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
        }
    }
}

/// The bank count of ldmatrix (emu::ldmatrix_banks): 8 rows 128 bytes apart all hit the same 4
/// banks (7 wavefronts more than one), 144 bytes apart (FlashAttention-2's padded bf16 rows at head
/// size 64) 8 different groups of 4 (none more), 16 bytes apart (one packed 8x8 tile) none more.
TEST(PtxBanks, LdmatrixCountsTheBusiestBank) {
    for (const auto& [stride, extra] : {std::pair{32, 7u}, std::pair{36, 0u}, std::pair{4, 0u}, std::pair{8, 1u}}) {
        emu::reset_ldmatrix_banks();
        llmtrain::launch(banks_kernel, 1, 32, 0, nullptr, stride);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
        const emu::LdmatrixBanks b = emu::ldmatrix_banks();
        EXPECT_EQ(b.matrices, 1u) << "stride " << stride;
        EXPECT_EQ(b.extra_wavefronts, extra) << "stride " << stride << " floats";
    }
}

/// pack_bf16x2: round to nearest even, lo in bits 0-15 (ties: 1 + 2^-8 -> 1, 1 + 3*2^-8 -> 1 + 2^-6).
TEST(PtxPack, RoundsToNearestEvenLoInTheLowHalf) {
    EXPECT_EQ(ptx::pack_bf16x2(1.0f, -2.0f), 0xC0003F80u);
    EXPECT_EQ(ptx::pack_bf16x2(1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f), 0x3F823F80u);
    EXPECT_EQ(ptx::pack_bf16x2(1.0f + 0x1.8p-8f, 0.0f), 0x00003F81u);  // above the tie: up
}

/// ex2_approx (the softmax's 2^x): the emulator's model within ex2.approx.ftz.f32's documented
/// bound, flushes included (ex2_mismatches; the same check runs on a GPU in ptx_layout_check).
TEST(PtxEx2, WithinTheDocumentedBoundAndFlushes) {
    const std::vector<float> x = ex2_inputs();
    DeviceArray<float> in(x), out(x.size());
    llmtrain::launch(ex2_kernel, (static_cast<int>(x.size()) + 127) / 128, 128, 0, nullptr, out.p, in.p,
                     static_cast<int>(x.size()));
    EXPECT_EQ(ex2_mismatches(x, out.download()), 0);
}

}  // namespace
