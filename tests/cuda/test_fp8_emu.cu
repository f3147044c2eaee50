// tests/cuda/test_fp8_emu.cu — model/fp8.hpp inside a CUDA kernel under cuda_emu, and against
// NVIDIA's own conversion: cuda_fp8.hpp's __nv_cvt_float_to_fp8 (its host code path, the CUDA 13
// headers) and __nv_cvt_fp8_to_halfraw for decoding. Reference: NVIDIA's functions, bit-exact,
// NaN included (both give the canonical 0x7F). The OFP8 specification tests are tests/model/test_fp8.cpp.
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/bf16.hpp"
#include "model/cuda/fp8.cuh"
#include "model/cuda/launch.cuh"
#include "model/fp8.hpp"
#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;

namespace {

/// out[4 i + k] = f32_to_fp8(x[i]) for k = (format, saturation) in the order e4m3 sat, e4m3 nosat,
/// e5m2 sat, e5m2 nosat; back[2 i + f] = the decoded satfinite code of format f. A grid-stride loop
/// (few emulated threads, many values each).
__global__ void convert_kernel(const float* x, uint8_t* out, float* back, int n) {
    using llmtrain::Fp8Format;
    using llmtrain::Fp8Saturation;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const uint8_t c4 = llmtrain::f32_to_e4m3(x[i]), c5 = llmtrain::f32_to_e5m2(x[i]);
        out[4 * i + 0] = c4;
        out[4 * i + 1] = llmtrain::f32_to_fp8(x[i], Fp8Format::kE4M3, Fp8Saturation::kNoSat);
        out[4 * i + 2] = c5;
        out[4 * i + 3] = llmtrain::f32_to_fp8(x[i], Fp8Format::kE5M2, Fp8Saturation::kNoSat);
        back[2 * i + 0] = llmtrain::e4m3_to_f32(c4);
        back[2 * i + 1] = llmtrain::e5m2_to_f32(c5);
    }
}

/// model/cuda/fp8.cuh on bf16 values: q[i] = to_fp8_scaled(x[i], scale, e4m3), y[i] = the bf16 of
/// q[i] decoded and divided back (from_fp8_scaled with 1 / scale).
__global__ void scaled_kernel(const __nv_bfloat16* x, uint8_t* q, __nv_bfloat16* y, float scale, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        q[i] = llmtrain::cuda::to_fp8_scaled(x[i], scale, llmtrain::Fp8Format::kE4M3);
        y[i] = llmtrain::cuda::from_fp8_scaled<__nv_bfloat16>(q[i], 1.0f / scale, llmtrain::Fp8Format::kE4M3);
    }
}

float nv_decode(uint8_t c, __nv_fp8_interpretation_t f) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(c, f);
    return __half2float(__half(h));
}

/// Our code equals NVIDIA's, bit for bit.
void expect_same(uint8_t ours, uint8_t nv, float x, const char* what) { ASSERT_EQ(ours, nv) << what << " x=" << x; }

/// The fp32 values of the sweep: bits stepping by 2^13 over all 2^32 (every exponent, both signs,
/// the top 10 mantissa bits) with hashed low bits, and every midpoint of the two formats' codes and
/// its two fp32 neighbours.
std::vector<float> sweep_values() {
    std::vector<float> v;
    for (uint32_t hi = 0; hi < (1u << 19); ++hi) {
        const uint32_t bits = (hi << 13) | ((hi * 2654435761u) & 0x1fffu);
        float x;
        std::memcpy(&x, &bits, 4);
        v.push_back(x);
    }
    for (int c = 0; c < 0x7f; ++c)
        for (int fmt = 0; fmt < 2; ++fmt) {
            const auto f = fmt ? llmtrain::Fp8Format::kE5M2 : llmtrain::Fp8Format::kE4M3;
            const float lo = llmtrain::fp8_to_f32(c, f), hi = llmtrain::fp8_to_f32(c + 1, f);
            if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
            const float mid = (lo + hi) / 2;
            for (float m : {mid, -mid})
                for (float x : {m, std::nextafter(m, 0.0f), std::nextafter(m, 2 * m)}) v.push_back(x);
        }
    return v;
}

TEST(Fp8Emu, KernelMatchesNvidiaConversion) {
    const std::vector<float> x = sweep_values();
    const int n = static_cast<int>(x.size());
    DeviceArray<float> dx(x), dback(2 * x.size());
    DeviceArray<uint8_t> dout(4 * x.size());
    llmtrain::launch(convert_kernel, dim3(32), dim3(128), 0, nullptr, dx.p, dout.p, dback.p, n);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> out = dout.download();
    const std::vector<float> back = dback.download();
    for (int i = 0; i < n; ++i) {
        expect_same(out[4 * i + 0], __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3), x[i], "e4m3 satfinite");
        expect_same(out[4 * i + 1], __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E4M3), x[i], "e4m3 nosat");
        expect_same(out[4 * i + 2], __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E5M2), x[i], "e5m2 satfinite");
        expect_same(out[4 * i + 3], __nv_cvt_float_to_fp8(x[i], __NV_NOSAT, __NV_E5M2), x[i], "e5m2 nosat");
        // Decoding: every value fp8.hpp gives equals NVIDIA's (via fp16, exact for both formats).
        const float n4 = nv_decode(out[4 * i + 0], __NV_E4M3), n5 = nv_decode(out[4 * i + 2], __NV_E5M2);
        if (std::isnan(n4)) ASSERT_TRUE(std::isnan(back[2 * i])) << x[i];
        else ASSERT_EQ(back[2 * i], n4) << x[i];
        if (std::isnan(n5)) ASSERT_TRUE(std::isnan(back[2 * i + 1])) << x[i];
        else ASSERT_EQ(back[2 * i + 1], n5) << x[i];
    }
}

TEST(Fp8Emu, ScaledBf16RoundTripMatchesHostReference) {
    // A bf16 tensor with amax 3.0: scale 448/3 maps it onto e4m3's range. Reference: the host's
    // bf16 -> fp32 (model/bf16.hpp), fp32 product, NVIDIA's e4m3 conversion, and back.
    const int n = 4096;
    std::vector<__nv_bfloat16> x(n);
    std::vector<uint16_t> xb(n);
    for (int i = 0; i < n; ++i) {
        const float v = 3.0f * std::sin(0.37f * i) * (i % 7 == 0 ? 1e-3f : 1.0f);
        xb[i] = llmtrain::f32_to_bf16(v);
        std::memcpy(static_cast<void*>(&x[i]), &xb[i], 2);
    }
    float amax = 0;
    for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(llmtrain::bf16_to_f32(xb[i])));
    const float scale = llmtrain::fp8_scale_from_amax(amax, llmtrain::Fp8Format::kE4M3);
    DeviceArray<__nv_bfloat16> dx(x), dy(n);
    DeviceArray<uint8_t> dq(n);
    llmtrain::launch(scaled_kernel, dim3(8), dim3(64), 0, nullptr, dx.p, dq.p, dy.p, scale, n);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> q = dq.download();
    const std::vector<__nv_bfloat16> y = dy.download();
    int at_max = 0;
    for (int i = 0; i < n; ++i) {
        const float xf = llmtrain::bf16_to_f32(xb[i]);
        const uint8_t want = __nv_cvt_float_to_fp8(xf * scale, __NV_SATFINITE, __NV_E4M3);
        ASSERT_EQ(q[i], want) << i;
        at_max += (q[i] & 0x7f) == 0x7e;
        uint16_t yb;
        std::memcpy(&yb, static_cast<const void*>(&y[i]), 2);
        ASSERT_EQ(yb, llmtrain::f32_to_bf16(nv_decode(want, __NV_E4M3) * (1.0f / scale))) << i;
        // e4m3 keeps 3 mantissa bits: relative error at most 2^-4 above the subnormal range
        // (scaled |x| >= 2^-6), absolute at most 2^-10 / scale below it; plus bf16's 2^-9.
        const float err = std::fabs(llmtrain::bf16_to_f32(yb) - xf);
        ASSERT_LE(err, std::fabs(xf) * (0.0625f + 0.002f) + std::ldexp(1.0f, -10) / scale) << i;
    }
    EXPECT_GE(at_max, 1);  // the amax element lands on 448
}

TEST(Fp8Emu, EveryCodeDecodesAsNvidiaDoes) {
    for (int c = 0; c < 256; ++c) {
        const uint8_t b = static_cast<uint8_t>(c);
        for (auto [f, nvf] : {std::pair{llmtrain::Fp8Format::kE4M3, __NV_E4M3}, std::pair{llmtrain::Fp8Format::kE5M2, __NV_E5M2}}) {
            const float ours = llmtrain::fp8_to_f32(b, f), nv = nv_decode(b, nvf);
            if (std::isnan(nv)) {
                EXPECT_TRUE(std::isnan(ours)) << c;
            } else {
                EXPECT_EQ(ours, nv) << c;
                EXPECT_EQ(std::signbit(ours), std::signbit(nv)) << c;
            }
        }
    }
}

}  // namespace
