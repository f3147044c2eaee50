// tests/cuda_emu/test_wmma.cu — the emulator's wmma model (device_wmma.hpp) against a plain C++
// matmul, its made-up fragment layout, and its collective checks.
//
// Reference: d = a * b + c with bf16 inputs (exact products in fp32) summed in fp32 over k in
// increasing order, the order the model documents: results must match bit for bit. Each kernel runs
// under every thread order. The layout test shows the model catching a kernel that reads fragment
// elements by position (wmma's mapping is unspecified): its output changes with the layout seed,
// while a kernel that touches elements uniformly gives the same correct bits under every seed.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "model/cuda/mma.cuh"
#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;
using llmtrain::cuda::wmma::accumulator;
using llmtrain::cuda::wmma::col_major;
using llmtrain::cuda::wmma::fragment;
using llmtrain::cuda::wmma::matrix_a;
using llmtrain::cuda::wmma::matrix_b;
using llmtrain::cuda::wmma::row_major;
namespace wmma = llmtrain::cuda::wmma;
using bf16 = __nv_bfloat16;

namespace {

/// d (16x16 fp32, row-major) = sum over kt of A[:, 16kt..] B[16kt.., :] + c. A (16 x 16*kt_n,
/// row-major), B (16*kt_n x 16, row-major, or its transpose stored (16 x 16*kt_n) when b_col).
__global__ void mma_kernel(float* d, const bf16* a, const bf16* b, const float* c, int kt_n, int b_col) {
    fragment<accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, c, 16, wmma::mem_row_major);
    const unsigned lda = 16 * kt_n;
    for (int kt = 0; kt < kt_n; kt++) {
        fragment<matrix_a, 16, 16, 16, bf16, row_major> fa;
        wmma::load_matrix_sync(fa, a + 16 * kt, lda);
        if (b_col) {
            fragment<matrix_b, 16, 16, 16, bf16, col_major> fb;
            wmma::load_matrix_sync(fb, b + 16 * kt, lda);
            wmma::mma_sync(acc, fa, fb, acc);
        } else {
            fragment<matrix_b, 16, 16, 16, bf16, row_major> fb;
            wmma::load_matrix_sync(fb, b + 16 * kt * 16, 16);
            wmma::mma_sync(acc, fa, fb, acc);
        }
    }
    wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

/// Uniform use: out = 2 * (m loaded as an accumulator), stored column-major.
__global__ void scale_kernel(float* out, const float* m) {
    fragment<accumulator, 16, 16, 16, float> f;
    wmma::load_matrix_sync(f, m, 16, wmma::mem_row_major);
    for (int e = 0; e < f.num_elements; e++) f.x[e] *= 2.0f;
    wmma::store_matrix_sync(out, f, 16, wmma::mem_col_major);
}

/// Positional use (wrong: the mapping is unspecified): out[lane] = x[0], as if x[0] of lane l held
/// row l / 4, column 2 (l % 4) (mma.sync's accumulator layout in the PTX ISA).
__global__ void positional_kernel(float* out, const float* m) {
    fragment<accumulator, 16, 16, 16, float> f;
    wmma::load_matrix_sync(f, m, 16, wmma::mem_row_major);
    out[threadIdx.x] = f.x[0];
}

/// Only `lanes` lanes of the warp call the load; or lane 5 passes another pointer (skew).
__global__ void partial_warp_kernel(float* out, const float* m, int lanes, int skew) {
    if (static_cast<int>(threadIdx.x) >= lanes) return;
    fragment<accumulator, 16, 16, 16, float> f;
    wmma::load_matrix_sync(f, m + (skew && threadIdx.x == 5 ? 32 : 0), 16, wmma::mem_row_major);
    wmma::store_matrix_sync(out, f, 16, wmma::mem_row_major);
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
    std::vector<bf16> r;
    for (float x : v) r.push_back(__float2bfloat16(x));
    return r;
}

class Wmma : public ::testing::TestWithParam<const char*> {
protected:
    emu_test::ScopedOrder order{GetParam()};
};

TEST_P(Wmma, MmaMatchesPlainMatmulBitwise) {
    for (int b_col : {0, 1})
        for (int kt_n : {1, 3}) {
            const int K = 16 * kt_n;
            const auto a = to_bf16(random_floats(16 * K, 1 + kt_n, 1.0f));
            const auto b = to_bf16(random_floats(K * 16, 7 + kt_n, 1.0f));
            const auto c = random_floats(256, 3, 4.0f);
            DeviceArray<bf16> da(a), db(b);
            DeviceArray<float> dc(c), dd(256);
            llmtrain::launch(mma_kernel, 1, 32, 0, nullptr, dd.p, da.p, db.p, dc.p, kt_n, b_col);
            const auto d = dd.download();
            for (int r = 0; r < 16; r++)
                for (int col = 0; col < 16; col++) {
                    float acc = c[r * 16 + col];
                    for (int k = 0; k < K; k++) {
                        const float bv = b_col ? __bfloat162float(b[col * K + k]) : __bfloat162float(b[k * 16 + col]);
                        acc += __bfloat162float(a[r * K + k]) * bv;
                    }
                    ASSERT_EQ(d[r * 16 + col], acc) << "r " << r << " c " << col << " K " << K << " b_col " << b_col;
                }
        }
}

TEST_P(Wmma, UniformUseIsLayoutIndependentPositionalUseIsNot) {
    std::vector<float> m(256);
    for (int i = 0; i < 256; i++) m[i] = static_cast<float>(i);  // value = its row-major position
    DeviceArray<float> dm(m), out(256), pos(32);
    std::vector<std::vector<float>> positional;
    const uint64_t saved = emu::wmma_layout();
    for (uint64_t seed : {1, 2, 3}) {
        emu::set_wmma_layout(seed);
        llmtrain::launch(scale_kernel, 1, 32, 0, nullptr, out.p, dm.p);
        const auto o = out.download();
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++) ASSERT_EQ(o[c * 16 + r], 2.0f * m[r * 16 + c]) << "seed " << seed;
        llmtrain::launch(positional_kernel, 1, 32, 0, nullptr, pos.p, dm.p);
        positional.push_back(pos.download());
    }
    emu::set_wmma_layout(saved);
    // The PTX layout's x[0] of lane l is (l / 4, 2 (l % 4)); a made-up layout must not agree with
    // it, and different seeds must disagree with each other, so positional reads show.
    std::vector<float> ptx(32);
    for (int l = 0; l < 32; l++) ptx[l] = static_cast<float>((l / 4) * 16 + 2 * (l % 4));
    EXPECT_NE(positional[0], ptx);
    EXPECT_NE(positional[0], positional[1]);
    EXPECT_NE(positional[1], positional[2]);
}

INSTANTIATE_TEST_SUITE_P(Orders, Wmma, ::testing::ValuesIn(emu_test::kThreadOrders), [](const auto& info) {
    std::string s = info.param;
    for (char& c : s)
        if (c == ':') c = '_';
    return s;
});

TEST(WmmaChecks, EveryLaneOfTheWarpMustCall) {
    DeviceArray<float> m(256), out(256);
    llmtrain::launch(partial_warp_kernel, 1, 32, 0, nullptr, out.p, m.p, 16, 0);
    emu_test::expect_fault("__syncwarp");
}

TEST(WmmaChecks, PointerMustBeWarpUniform) {
    DeviceArray<float> m(512), out(256);
    llmtrain::launch(partial_warp_kernel, 1, 32, 0, nullptr, out.p, m.p, 32, 1);
    emu_test::expect_fault("warp-uniform");
}

TEST(WmmaChecks, PointerMustBe256BitAligned) {
    DeviceArray<float> m(512), out(256);
    llmtrain::launch(partial_warp_kernel, 1, 32, 0, nullptr, out.p, m.p + 4, 32, 0);
    emu_test::expect_fault("256-bit");
}

}  // namespace
