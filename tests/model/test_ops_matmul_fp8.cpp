// tests/model/test_ops_matmul_fp8.cpp — the CPU backend's FP8 linear layers (training.fp8;
// docs/fp8.md) against a double-precision reference written here from the recipe's definition:
// each operand's scale groups and amax found by plain loops, every element rounded through
// model/fp8.hpp's conversion (itself checked against the OFP8 specification by test_fp8), products
// summed in double, times the two inverse scales. Then what the recipes are for: the FP8 product
// stays within FP8's rounding bound of the exact fp32 product, and rowwise keeps rows of very
// different magnitudes that one tensorwise scale loses.
#include <cmath>

#include "model/cpu/cpu_ops.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

using Vec = std::vector<double>;
constexpr int N = 32, C = 48, OC = 80;

/// x (R, Cc) quantized in double: the value each element stands for (fp8 value / scale), with one
/// scale, one per row (by_rows) or one per column.
Vec ref_quantized(const std::vector<float>& x, int R, int Cc, bool grouped, bool by_rows, Fp8Format f) {
    const int groups = !grouped ? 1 : by_rows ? R : Cc;
    std::vector<float> amax(size_t(groups), 0.0f);
    auto group = [&](int r, int c) { return !grouped ? 0 : by_rows ? r : c; };
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < Cc; ++c)
            amax[size_t(group(r, c))] = std::max(amax[size_t(group(r, c))], std::fabs(x[size_t(r) * Cc + c]));
    Vec out(x.size());
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < Cc; ++c) {
            const float a = amax[size_t(group(r, c))];
            const float s = a > 0 ? (f == Fp8Format::kE4M3 ? 448.0f : 57344.0f) / a : 1.0f;
            const uint8_t q = f32_to_fp8(x[size_t(r) * Cc + c] * s, f, Fp8Saturation::kSatFinite);
            out[size_t(r) * Cc + c] = double(fp8_to_f32(q, f)) * double(1.0f / s);
        }
    return out;
}

/// y (M, P) = a (M, K) @ b (P, K)^T in double.
Vec ref_abt(const Vec& a, const Vec& b, int M, int K, int P) {
    Vec y(size_t(M) * P, 0.0);
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < P; ++j)
            for (int k = 0; k < K; ++k) y[size_t(i) * P + j] += a[size_t(i) * K + k] * b[size_t(j) * K + k];
    return y;
}

/// a (R, Cc) transposed.
Vec transposed(const Vec& a, int R, int Cc) {
    Vec t(a.size());
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < Cc; ++c) t[size_t(c) * R + r] = a[size_t(r) * Cc + c];
    return t;
}

class CpuMatmulFp8 : public ::testing::TestWithParam<Fp8Recipe> {};

TEST_P(CpuMatmulFp8, ForwardMatchesDoubleReference) {
    CpuOps ops;
    const bool rw = GetParam() == Fp8Recipe::rowwise;
    auto x = randu(size_t(N) * C, 1, -3.0f, 3.0f), w = randu(size_t(OC) * C, 2, -0.1f, 0.1f), b = randu(OC, 3);
    std::vector<float> out(size_t(N) * OC);
    ops.matmul_forward_fp8(GetParam(), out.data(), x.data(), w.data(), b.data(), N, C, OC);
    const Vec xq = ref_quantized(x, N, C, rw, true, Fp8Format::kE4M3);
    const Vec wq = ref_quantized(w, OC, C, rw, true, Fp8Format::kE4M3);
    Vec want = ref_abt(xq, wq, N, C, OC);
    for (int n = 0; n < N; ++n)
        for (int j = 0; j < OC; ++j) want[size_t(n) * OC + j] += b[size_t(j)];
    // fp32 sums of 48 products of magnitude <= 0.3: absolute error well below 1e-4.
    expect_close("out", out, want, 1e-5, 1e-4);
}

TEST_P(CpuMatmulFp8, BackwardMatchesDoubleReference) {
    CpuOps ops;
    const bool rw = GetParam() == Fp8Recipe::rowwise;
    auto x = randu(size_t(N) * C, 4), w = randu(size_t(OC) * C, 5), dy = randu(size_t(N) * OC, 6, -1e-3f, 1e-3f);
    std::vector<float> dx(size_t(N) * C), dw = randu(size_t(OC) * C, 7), db = randu(OC, 8);
    const std::vector<float> dw0 = dw, db0 = db;
    ops.matmul_backward_fp8(GetParam(), dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC);
    // dinp (N,C) = q5(dy) [rows] @ q4(w) [columns]
    const Vec dyr = ref_quantized(dy, N, OC, rw, true, Fp8Format::kE5M2);
    const Vec wc = ref_quantized(w, OC, C, rw, false, Fp8Format::kE4M3);
    // fp32 sums of 80 products of magnitude <= 1e-3: absolute error well below 1e-6.
    expect_close("dinp", dx, ref_abt(dyr, transposed(wc, OC, C), N, OC, C), 1e-5, 1e-6);
    // dweight (OC,C) += q5(dy)^T [columns] @ q4(x) [columns]
    const Vec dyc = ref_quantized(dy, N, OC, rw, false, Fp8Format::kE5M2);
    const Vec xc = ref_quantized(x, N, C, rw, false, Fp8Format::kE4M3);
    Vec want_dw = ref_abt(transposed(dyc, N, OC), transposed(xc, N, C), OC, N, C);
    for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += dw0[i];
    expect_close("dweight", dw, want_dw, 1e-5, 1e-6);
    Vec want_db(db0.begin(), db0.end());  // the bias gradient is not quantized
    for (int n = 0; n < N; ++n)
        for (int j = 0; j < OC; ++j) want_db[size_t(j)] += dy[size_t(n) * OC + j];
    expect_close("dbias", db, want_db, 1e-6, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Recipes, CpuMatmulFp8, ::testing::Values(Fp8Recipe::tensorwise, Fp8Recipe::rowwise),
                         [](const auto& info) { return std::string(fp8_recipe_name(info.param)); });

/// One forward product against the exact one: per element |FP8 - exact| / sum_k |x||w| (the
/// rounding bound's unit), and the FP8 output itself.
struct Errors {
    std::vector<float> out;
    Vec rel;
};

/// x and w with |values| in [0.5, 1] (random signs), x's row n scaled by spread^n, multiplied
/// with recipe r; compared with the exact product.
Errors forward_errors(Fp8Recipe r, double spread) {
    CpuOps ops;
    auto x = randu(size_t(N) * C, 9, 0.5f, 1.0f), w = randu(size_t(OC) * C, 10, 0.5f, 1.0f);
    const auto sx = randu(x.size(), 11), sw = randu(w.size(), 12);
    for (size_t i = 0; i < x.size(); ++i) x[i] *= float((sx[i] < 0 ? -1 : 1) * std::pow(spread, double(i / C)));
    for (size_t i = 0; i < w.size(); ++i) w[i] *= sw[i] < 0 ? -1.0f : 1.0f;
    Errors e{std::vector<float>(size_t(N) * OC), Vec(size_t(N) * OC)};
    ops.matmul_forward_fp8(r, e.out.data(), x.data(), w.data(), nullptr, N, C, OC);
    for (int n = 0; n < N; ++n)
        for (int j = 0; j < OC; ++j) {
            double exact = 0, mag = 0;
            for (int c = 0; c < C; ++c) {
                const double t = double(x[size_t(n) * C + c]) * w[size_t(j) * C + c];
                exact += t, mag += std::fabs(t);
            }
            e.rel[size_t(n) * OC + j] = std::fabs(e.out[size_t(n) * OC + j] - exact) / mag;
        }
    return e;
}

// Every scaled operand here is an e4m3 normal (|x| * scale >= 224), within 2^-4 (relative) of what
// it stands for; a product of two is within (1 + 2^-4)^2 - 1 < 0.129 of the exact term, so each
// output is within 0.13 of sum |x||w| (fp32 summation adds ~1e-6).
constexpr double kBound = 0.13;

TEST(CpuMatmulFp8Bounds, WithinE4M3RoundingOfTheExactProduct) {
    for (Fp8Recipe r : {Fp8Recipe::tensorwise, Fp8Recipe::rowwise})
        for (double rel : forward_errors(r, 1.0).rel) ASSERT_LT(rel, kBound) << fp8_recipe_name(r);
}

TEST(CpuMatmulFp8Bounds, RowwiseKeepsRowsOfDifferentMagnitude) {
    // x's rows span 1 .. 2^-31 (x 0.5 per row). One tensorwise scale (448 / amax of row 0) puts
    // the last row below 2^-10, under half e4m3's smallest subnormal (2^-9): it comes out as 0.
    // Rowwise scales every row onto e4m3's range: the bound holds on every row.
    const Errors t = forward_errors(Fp8Recipe::tensorwise, 0.5);
    for (int j = 0; j < OC; ++j) EXPECT_EQ(t.out[size_t(N - 1) * OC + j], 0.0f);
    for (double rel : forward_errors(Fp8Recipe::rowwise, 0.5).rel) ASSERT_LT(rel, kBound);
}

}  // namespace
}  // namespace llmtrain::test
