// tests/cuda_emu/test_layernorm.cu — the example LayerNorm kernel under the emulator, against a
// double-precision reference, under forward, reverse and random thread orders (and random block
// order): a kernel without races gives the same result under every order.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cuda_emu/kernels/layernorm_example.cuh"
#include "tests/cuda_emu/test_util.hpp"

namespace {

struct Case {
    int N, C;
};

/// Reference: y = (x - mean) / sqrt(var + 1e-5) * w + b per row, in double.
void layernorm_ref(std::vector<double>& y, std::vector<double>& mean, std::vector<double>& rstd,
                   const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b, int N, int C) {
    for (int r = 0; r < N; ++r) {
        double m = 0, v = 0;
        for (int i = 0; i < C; ++i) m += x[r * C + i];
        m /= C;
        for (int i = 0; i < C; ++i) v += (x[r * C + i] - m) * (x[r * C + i] - m);
        v /= C;
        double s = 1.0 / std::sqrt(v + 1e-5);
        for (int i = 0; i < C; ++i) y[r * C + i] = (x[r * C + i] - m) * s * w[i] + b[i];
        mean[r] = m;
        rstd[r] = s;
    }
}

class LayerNormExample : public ::testing::TestWithParam<std::tuple<Case, const char*>> {};

TEST_P(LayerNormExample, MatchesDoubleReference) {
    const auto [c, order_spec] = GetParam();
    const int N = c.N, C = c.C;
    emu_test::ScopedOrder scoped(order_spec, std::string(order_spec).rfind("random", 0) == 0 ? "random:3" : "");

    std::mt19937 rng(42);
    std::normal_distribution<float> dist(0.5f, 2.0f);
    std::vector<float> x(N * C), w(C), b(C);
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng);
    for (float& v : b) v = dist(rng);

    float *d_x, *d_w, *d_b, *d_y, *d_mean, *d_rstd;
    CUDA_CHECK(cudaMalloc(&d_x, N * C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_y, N * C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_w, C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_b, C * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_mean, N * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&d_rstd, N * sizeof(float)));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUDA_CHECK(cudaMemcpyAsync(d_x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(d_w, w.data(), C * sizeof(float), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(d_b, b.data(), C * sizeof(float), cudaMemcpyHostToDevice, stream));
    llmtrain::example::layernorm_forward(d_y, d_mean, d_rstd, d_x, d_w, d_b, N, C, stream);
    std::vector<float> y(N * C), mean(N), rstd(N);
    CUDA_CHECK(cudaMemcpyAsync(y.data(), d_y, y.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(mean.data(), d_mean, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaMemcpyAsync(rstd.data(), d_rstd, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));

    std::vector<double> ry(N * C), rmean(N), rrstd(N);
    layernorm_ref(ry, rmean, rrstd, x, w, b, N, C);
    // fp32 accumulation over C ≤ 2048 terms: relative error well below 1e-5 of the row's scale.
    for (int i = 0; i < N * C; ++i) ASSERT_NEAR(y[i], ry[i], 2e-5 * (1 + std::abs(ry[i]))) << "element " << i;
    for (int r = 0; r < N; ++r) {
        ASSERT_NEAR(mean[r], rmean[r], 1e-5 * (1 + std::abs(rmean[r]))) << "row " << r;
        ASSERT_NEAR(rstd[r], rrstd[r], 1e-5 * rrstd[r]) << "row " << r;
    }

    for (float* p : {d_x, d_w, d_b, d_y, d_mean, d_rstd}) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaStreamDestroy(stream));
}

/// How gtest (and ctest's discovered test names) prints a Case, instead of its raw bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << "N " << c.N << ", C " << c.C; }

/// "N51_C48_random_1": rows, channels and thread order.
std::string case_name(const ::testing::TestParamInfo<std::tuple<Case, const char*>>& info) {
    const Case c = std::get<0>(info.param);
    std::ostringstream s;
    s << "N" << c.N << "_C" << c.C << "_" << std::get<1>(info.param);
    std::string name = s.str();
    for (char& ch : name)
        if (ch == ':') ch = '_';
    return name;
}

// N = B*T = 3*17 rows (not a multiple of the 4 rows per block); C = 48 (lanes loop unevenly),
// C = 256, and C = 8192 (64 KiB of weights: needs the cudaFuncSetAttribute opt-in).
INSTANTIATE_TEST_SUITE_P(Orders, LayerNormExample,
                         ::testing::Combine(::testing::Values(Case{51, 48}, Case{51, 256}, Case{5, 8192}),
                                            ::testing::ValuesIn(emu_test::kThreadOrders)),
                         case_name);

}  // namespace
