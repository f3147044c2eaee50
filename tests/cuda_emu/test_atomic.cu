// tests/cuda_emu/test_atomic.cu — atomics from many blocks on two worker threads.
//
// References are closed forms: counts, sums of integers (exact in fp32 and bf16 when small),
// extremes, and the set of old values an atomic hands out (each exactly once).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;

namespace {

constexpr int kBlocks = 40, kThreads = 128, kN = kBlocks * kThreads;

/// One of each integer atomic per thread; `olds` receives atomicAdd's old value.
__global__ void int_atomics_kernel(int* ints, unsigned* uints, unsigned long long* ulls, long long* lls, int* olds) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    olds[i] = atomicAdd(&ints[0], 1);
    atomicSub(&ints[1], 2);
    atomicMax(&ints[2], i);
    atomicMin(&ints[3], -i);
    atomicOr(&uints[0], 1u << (i % 32));
    atomicAnd(&uints[1], ~(1u << (i % 32)));
    atomicXor(&uints[2], 1u << (i % 7));
    atomicAdd(&ulls[0], 1ull << 33);
    atomicMax(&ulls[1], static_cast<unsigned long long>(i) << 35);
    atomicMin(&lls[0], -(static_cast<long long>(i) << 35));
    atomicMax(&lls[1], static_cast<long long>(i) << 35);
}

TEST(Atomic, IntegerOperations) {
    DeviceArray<int> ints(std::vector<int>{0, 0, -1, 1}), olds(kN);
    DeviceArray<unsigned> uints(std::vector<unsigned>{0u, 0xffffffffu, 0u});
    DeviceArray<unsigned long long> ulls(std::vector<unsigned long long>{0ull, 0ull});
    DeviceArray<long long> lls(std::vector<long long>{0ll, 0ll});
    llmtrain::launch(int_atomics_kernel, kBlocks, kThreads, 0, nullptr, ints.p, uints.p, ulls.p, lls.p, olds.p);
    auto iv = ints.download();
    EXPECT_EQ(iv[0], kN);
    EXPECT_EQ(iv[1], -2 * kN);
    EXPECT_EQ(iv[2], kN - 1);
    EXPECT_EQ(iv[3], -(kN - 1));
    auto uv = uints.download();
    EXPECT_EQ(uv[0], 0xffffffffu);
    EXPECT_EQ(uv[1], 0u);
    unsigned x = 0;
    for (int i = 0; i < kN; ++i) x ^= 1u << (i % 7);
    EXPECT_EQ(uv[2], x);
    auto ullv = ulls.download();
    EXPECT_EQ(ullv[0], static_cast<unsigned long long>(kN) << 33);
    EXPECT_EQ(ullv[1], static_cast<unsigned long long>(kN - 1) << 35);
    auto llv = lls.download();
    EXPECT_EQ(llv[0], -(static_cast<long long>(kN - 1) << 35));
    EXPECT_EQ(llv[1], static_cast<long long>(kN - 1) << 35);
    // atomicAdd handed out every old value 0..kN-1 exactly once.
    auto ov = olds.download();
    std::sort(ov.begin(), ov.end());
    for (int i = 0; i < kN; ++i) ASSERT_EQ(ov[i], i);
}

/// atomicInc wraps to 0 after reaching `limit`; atomicDec wraps to `limit` below 0; CAS and Exch.
__global__ void wrap_kernel(unsigned* counters, unsigned limit, int* cas_winners, int* exch) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicInc(&counters[0], limit);
    atomicDec(&counters[1], limit);
    if (atomicCAS(&cas_winners[0], -1, i) == -1) atomicAdd(&cas_winners[1], 1);  // exactly one winner
    atomicExch(&exch[0], i);
}

TEST(Atomic, IncDecCasExch) {
    const unsigned limit = 17;
    DeviceArray<unsigned> counters(std::vector<unsigned>{0u, 0u});
    DeviceArray<int> cas(std::vector<int>{-1, 0}), exch(std::vector<int>{-5});
    llmtrain::launch(wrap_kernel, kBlocks, kThreads, 0, nullptr, counters.p, limit, cas.p, exch.p);
    auto c = counters.download();
    EXPECT_EQ(c[0], kN % (limit + 1));  // counts modulo limit+1
    // Dec from 0: 0 -> limit -> limit-1 ... : after k steps, (limit + 1 - k % (limit+1)) % (limit+1)
    EXPECT_EQ(c[1], (limit + 1 - kN % (limit + 1)) % (limit + 1));
    auto w = cas.download();
    EXPECT_GE(w[0], 0);
    EXPECT_LT(w[0], kN);
    EXPECT_EQ(w[1], 1);
    const int last = exch.download()[0];
    EXPECT_GE(last, 0);
    EXPECT_LT(last, kN);
}

/// Floating-point atomicAdd of small integers: exact in any order, so the sum is exact.
__global__ void float_atomics_kernel(float* f, double* d, __nv_bfloat16* h, __nv_bfloat162* h2, __half* hf) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(f, static_cast<float>(i % 3));
    atomicAdd(d, 0.5 * (i % 5));
    if (i < 64) {  // bf16 keeps 8 significant bits: partial sums stay ≤ 256, exact
        atomicAdd(h, __float2bfloat16(static_cast<float>(i % 8)));
        atomicAdd(h2, __floats2bfloat162_rn(1.0f, 2.0f));
        atomicAdd(hf, __float2half(static_cast<float>(i % 4)));
    }
    atomicExch(f + 1, 7.25f);
}

TEST(Atomic, FloatDoubleBf16AndHalfAdd) {
    DeviceArray<float> f(std::vector<float>{0.0f, 0.0f});
    DeviceArray<double> d(std::vector<double>{0.0});
    DeviceArray<__nv_bfloat16> h(std::vector<__nv_bfloat16>{__float2bfloat16(0.0f)});
    DeviceArray<__nv_bfloat162> h2(std::vector<__nv_bfloat162>{__floats2bfloat162_rn(0.0f, 0.0f)});
    DeviceArray<__half> hf(std::vector<__half>{__float2half(0.0f)});
    llmtrain::launch(float_atomics_kernel, kBlocks, kThreads, 0, nullptr, f.p, d.p, h.p, h2.p, hf.p);
    double fsum = 0, dsum = 0, hsum = 0, hfsum = 0;
    for (int i = 0; i < kN; ++i) fsum += i % 3, dsum += 0.5 * (i % 5);
    for (int i = 0; i < 64; ++i) hsum += i % 8, hfsum += i % 4;
    auto fv = f.download();
    EXPECT_EQ(fv[0], fsum);
    EXPECT_EQ(fv[1], 7.25f);
    EXPECT_EQ(d.download()[0], dsum);
    EXPECT_EQ(__bfloat162float(h.download()[0]), hsum);
    const float2 pair = __bfloat1622float2(h2.download()[0]);
    EXPECT_EQ(pair.x, 64.0f);
    EXPECT_EQ(pair.y, 128.0f);
    EXPECT_EQ(__half2float(hf.download()[0]), hfsum);
}

/// A bf16 add rounds to nearest even, as the hardware's: 256 + 1 stays 256, 256 + 3 gives 260.
__global__ void bf16_rounding_kernel(__nv_bfloat16* h) {
    atomicAdd(&h[0], __float2bfloat16(1.0f));
    atomicAdd(&h[1], __float2bfloat16(3.0f));
}

TEST(Atomic, Bf16AddRoundsToNearestEven) {
    DeviceArray<__nv_bfloat16> h(std::vector<__nv_bfloat16>{__float2bfloat16(256.0f), __float2bfloat16(256.0f)});
    llmtrain::launch(bf16_rounding_kernel, 1, 1, 0, nullptr, h.p);
    auto v = h.download();
    EXPECT_EQ(__bfloat162float(v[0]), 256.0f);
    EXPECT_EQ(__bfloat162float(v[1]), 260.0f);
}

}  // namespace
