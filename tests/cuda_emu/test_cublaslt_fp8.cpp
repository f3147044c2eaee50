// tests/cuda_emu/test_cublaslt_fp8.cpp — the emulated cublasLtMatmul with FP8 inputs
// (cublaslt_fp8.hpp's rules, the shared GEMM's FP8 path) and $CUDA_EMU_CC.
//
// Reference, per batch entry, with FP8 codes decoded by model/fp8.hpp (KnownCodes checks a few
// codes by hand) and everything in double:
//   D(i,j) = alpha sa(i) sb(j) sum_p op(A)(i,p) op(B)(p,j) + beta C(i,j) [+ bias(i)]
// sa, sb one scale each (tensorwide) or vectors of m and n (OUTER_VEC_32F); a null scale is 1.
// Tolerance: the emulation sums exact fp32 products in fp32 over k and rounds a few more times
// (alpha*sa*sb, the product, beta*C, the additions): at most (k + 6) 2^-24 times the magnitude
// M = |alpha sa sb| sum |a b| + |beta C| + |bias|; then the output's own rounding, half an ulp:
// <= 2^-8 |D| for bf16 (8 significant bits), 2^-11 for fp16 (plus 2^-25 below its normal range),
// 2^-24 for fp32. So
//   |got - want| <= 1.01 (k + 6) 2^-24 M + r |want| (+ 2^-25 for fp16),  r = 2^-8, 2^-11 or 2^-24.
// FP8 inputs are random finite codes over the whole range (|x| <= 8 for fp16 D, whose max is 65504).
// D's padding (ld > m) must stay untouched.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/fp8.hpp"

namespace {

constexpr cudaDataType E4M3 = CUDA_R_8F_E4M3, E5M2 = CUDA_R_8F_E5M2, BF16 = CUDA_R_16BF, F16 = CUDA_R_16F,
                       F32 = CUDA_R_32F;
constexpr int32_t kScalar = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, kOuter = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
constexpr float kSentinel = 1280.0f;  // exact in bf16, fp16, fp32

/// True for the two FP8 types; bytes per element of the tested types.
bool fp8(cudaDataType t) { return t == E4M3 || t == E5M2; }
size_t bytes_of(cudaDataType t) { return fp8(t) ? 1 : t == F32 ? 4 : 2; }

/// The value of FP8 code c of type t (model/fp8.hpp); NaN/Inf for those codes.
double decode_fp8(uint8_t c, cudaDataType t) {
    return llmtrain::fp8_to_f32(c, t == E4M3 ? llmtrain::Fp8Format::kE4M3 : llmtrain::Fp8Format::kE5M2);
}

/// Random codes of FP8 type t with |value| <= max_abs (NaN, Inf and larger codes redrawn), zeros
/// for other types.
std::vector<uint8_t> random_codes(size_t count, cudaDataType t, uint32_t seed, double max_abs) {
    std::vector<uint8_t> v(count * bytes_of(t), 0);
    if (!fp8(t)) return v;
    std::mt19937 rng(seed);
    for (uint8_t& c : v)
        do c = static_cast<uint8_t>(rng());
        while (!std::isfinite(decode_fp8(c, t)) || std::fabs(decode_fp8(c, t)) > max_abs);
    return v;
}

/// Values exact in t (bf16/fp16/fp32) <-> their bytes.
std::vector<uint8_t> encode(const std::vector<float>& v, cudaDataType t) {
    std::vector<uint8_t> out(v.size() * bytes_of(t));
    for (size_t i = 0; i < v.size(); ++i) {
        if (t == F32) std::memcpy(&out[4 * i], &v[i], 4);
        if (t == BF16) { __nv_bfloat16 h = __float2bfloat16_rn(v[i]); std::memcpy(&out[2 * i], &h, 2); }
        if (t == F16) { __half h = __float2half_rn(v[i]); std::memcpy(&out[2 * i], &h, 2); }
    }
    return out;
}
/// Element i of bytes b holding type t (bf16/fp16/fp32) as a float.
float decode(const std::vector<uint8_t>& b, cudaDataType t, size_t i) {
    if (t == F32) { float f; std::memcpy(&f, &b[4 * i], 4); return f; }
    if (t == BF16) { __nv_bfloat16 h; std::memcpy(&h, &b[2 * i], 2); return __bfloat162float(h); }
    __half h;
    std::memcpy(&h, &b[2 * i], 2);
    return __half2float(h);
}
/// Uniform values in [lo, hi), rounded to bf16 (so exact in bf16, fp16 for this range, fp32).
std::vector<float> random_values(size_t count, float lo, float hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(count);
    for (float& x : v) x = __bfloat162float(__float2bfloat16_rn(u(rng)));
    return v;
}

/// An emulated device buffer with these bytes (plus `pad` bytes, for misaligned views).
struct DeviceBytes {
    void* ptr = nullptr;
    size_t size;
    explicit DeviceBytes(const std::vector<uint8_t>& b, size_t pad = 0) : size(b.size()) {
        EXPECT_EQ(cudaMalloc(&ptr, b.size() + pad + 1), cudaSuccess);
        EXPECT_EQ(cudaMemcpy(static_cast<char*>(ptr) + pad, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
    ~DeviceBytes() { cudaFree(ptr); }
    std::vector<uint8_t> download(size_t pad = 0) const {
        std::vector<uint8_t> b(size);
        EXPECT_EQ(cudaMemcpy(b.data(), static_cast<char*>(ptr) + pad, size, cudaMemcpyDeviceToHost), cudaSuccess);
        return b;
    }
};

/// Sets $CUDA_EMU_CC for one scope (the emulator reads it at each call).
struct ScopedCc {
    explicit ScopedCc(const char* v) { EXPECT_EQ(setenv("CUDA_EMU_CC", v, 1), 0); }
    ~ScopedCc() { unsetenv("CUDA_EMU_CC"); }
};

/// One FP8 cublasLtMatmul problem. Defaults: TN, e4m3 x e4m3 -> bf16, tensorwide scales.
struct Problem {
    cudaDataType a_t = E4M3, b_t = E4M3, c_t = BF16, d_t = BF16;
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    int64_t m = 16, n = 8, k = 32;
    int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;  ///< 0: the rows of the stored matrix
    int32_t batch = 1;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    int32_t bias_type = -1;  ///< >= 0: set BIAS_DATA_TYPE (the bias is stored as bias_stored)
    cudaDataType bias_stored = BF16;
    int32_t a_mode = kScalar, b_mode = kScalar;
    bool scales = true;  ///< set A/B_SCALE_POINTER (else null: 1)
    float alpha = 1.0f, beta = 0.0f;
    bool in_place = false;  ///< C == D (beta 1 accumulation of weight gradients)
    int8_t fast_accum = -1;  ///< >= 0: set FAST_ACCUM
    size_t a_pad = 0;        ///< A's pointer this many bytes past a 256-aligned allocation

    int64_t a_rows() const { return ta == CUBLAS_OP_N ? m : k; }
    int64_t a_cols() const { return ta == CUBLAS_OP_N ? k : m; }
    int64_t b_rows() const { return tb == CUBLAS_OP_N ? k : n; }
    int64_t b_cols() const { return tb == CUBLAS_OP_N ? n : k; }
    int64_t lda_() const { return lda ? lda : a_rows(); }
    int64_t ldb_() const { return ldb ? ldb : b_rows(); }
    int64_t ldd_() const { return ldd ? ldd : m; }
    int64_t ldc_() const { return in_place ? ldd_() : ldc ? ldc : m; }
    // Batch entries 32 elements apart beyond each matrix (keeps every entry 16-byte aligned).
    int64_t stride_a() const { return lda_() * a_cols() + 32; }
    int64_t stride_b() const { return ldb_() * b_cols() + 32; }
    int64_t stride_c() const { return ldc_() * n + 32; }
    int64_t stride_d() const { return ldd_() * n + 32; }
    bool outer() const { return a_mode == kOuter; }
    std::string name() const {
        return "A=" + std::to_string(a_t) + " B=" + std::to_string(b_t) + " C=" + std::to_string(c_t) +
               " D=" + std::to_string(d_t) + " op=" + std::to_string(ta) + std::to_string(tb) + " m=" +
               std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) + " lda=" +
               std::to_string(lda_()) + " ldb=" + std::to_string(ldb_()) + " ldd=" + std::to_string(ldd_()) +
               " batch=" + std::to_string(batch) + " epi=" + std::to_string(epi) + " modes=" +
               std::to_string(a_mode) + "," + std::to_string(b_mode) + " beta=" + std::to_string(beta) +
               (in_place ? " in-place" : "");
    }
};

struct Outcome {
    cublasStatus_t heuristic, matmul;
};

struct CublasLtFp8 : ::testing::Test {
    cublasLtHandle_t lt = nullptr;
    cudaStream_t stream = nullptr;
    void SetUp() override {
        unsetenv("CUDA_EMU_CC");
        ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
        ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    }
    void TearDown() override {
        cublasLtDestroy(lt);
        cudaStreamDestroy(stream);
    }
    /// Runs p (heuristic, then cublasLtMatmul with its algorithm) and, when both succeed,
    /// compares D with the reference (file comment). Returns both statuses.
    Outcome run(const Problem& p, uint32_t seed = 1);
};

/// A column-major layout with a batch count and stride (elements).
cublasLtMatrixLayout_t layout(cudaDataType t, int64_t rows, int64_t cols, int64_t ld, int32_t batch, int64_t stride) {
    cublasLtMatrixLayout_t l = nullptr;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
              CUBLAS_STATUS_SUCCESS);
    return l;
}

Outcome CublasLtFp8::run(const Problem& p, uint32_t seed) {
    SCOPED_TRACE(p.name());
    const auto span = [&](int64_t ld, int64_t cols, int64_t stride) { return stride * (p.batch - 1) + ld * cols; };
    // Full-range codes (e5m2 x e4m3 products up to 2.6e7), but |x| <= 8 for fp16 D (max 65504).
    const double max_abs = p.d_t == F16 ? 8.0 : HUGE_VAL;
    const std::vector<uint8_t> a = random_codes(span(p.lda_(), p.a_cols(), p.stride_a()), p.a_t, seed, max_abs);
    const std::vector<uint8_t> b = random_codes(span(p.ldb_(), p.b_cols(), p.stride_b()), p.b_t, seed + 1, max_abs);
    const size_t c_count = span(p.ldc_(), p.n, p.stride_c()), d_count = span(p.ldd_(), p.n, p.stride_d());
    std::vector<float> c0 = random_values(c_count, -1000.0f, 1000.0f, seed + 2);
    std::vector<float> d0 = p.in_place ? c0 : std::vector<float>(d_count, kSentinel);
    if (p.in_place) d0.resize(d_count, kSentinel);
    const std::vector<float> bias0 = random_values(p.m, -500.0f, 500.0f, seed + 3);
    // Scales, negative ones included (applied as they are: docs 3.1.4, note 1).
    std::vector<float> sa = random_values(p.outer() ? p.m : 1, -2.0f, 2.0f, seed + 4);
    std::vector<float> sb = random_values(p.b_mode == kOuter ? p.n : 1, 0.25f, 2.0f, seed + 5);

    DeviceBytes da(a, p.a_pad), db(b), dd(encode(d0, p.d_t)), dbias(encode(bias0, p.bias_stored));
    DeviceBytes dc(encode(p.in_place ? std::vector<float>(1) : c0, p.c_t));
    DeviceBytes dsa(encode(sa, F32)), dsb(encode(sb, F32));
    void* c_ptr = p.in_place ? dd.ptr : dc.ptr;

    cublasLtMatmulDesc_t desc = nullptr;
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, p.compute, F32), CUBLAS_STATUS_SUCCESS);
    auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t size) {
        EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, attr, v, size), CUBLAS_STATUS_SUCCESS) << "attribute " << attr;
    };
    const uint32_t epi = p.epi;
    set(CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof p.ta);
    set(CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof p.tb);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &p.a_mode, sizeof p.a_mode);
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &p.b_mode, sizeof p.b_mode);
    if (p.scales) {
        set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dsa.ptr, sizeof dsa.ptr);
        set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dsb.ptr, sizeof dsb.ptr);
    }
    if (p.epi != CUBLASLT_EPILOGUE_DEFAULT) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias.ptr, sizeof dbias.ptr);
    if (p.bias_type >= 0) set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &p.bias_type, sizeof p.bias_type);
    if (p.fast_accum >= 0) set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, &p.fast_accum, sizeof p.fast_accum);
    cublasLtMatrixLayout_t la = layout(p.a_t, p.a_rows(), p.a_cols(), p.lda_(), p.batch, p.stride_a());
    cublasLtMatrixLayout_t lb = layout(p.b_t, p.b_rows(), p.b_cols(), p.ldb_(), p.batch, p.stride_b());
    cublasLtMatrixLayout_t lc = layout(p.c_t, p.m, p.n, p.ldc_(), p.batch, p.in_place ? p.stride_d() : p.stride_c());
    cublasLtMatrixLayout_t ld = layout(p.d_t, p.m, p.n, p.ldd_(), p.batch, p.stride_d());
    cublasLtMatmulPreference_t pref = nullptr;
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t heur[3]{};
    int found = -1;
    Outcome out{};
    out.heuristic = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 3, heur, &found);
    EXPECT_EQ(found, out.heuristic == CUBLAS_STATUS_SUCCESS ? 3 : 0);
    out.matmul = cublasLtMatmul(lt, desc, &p.alpha, static_cast<char*>(da.ptr) + p.a_pad, la, db.ptr, lb, &p.beta,
                                c_ptr, lc, dd.ptr, ld, found > 0 ? &heur[0].algo : nullptr, nullptr, 0, stream);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (auto l : {la, lb, lc, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulPreferenceDestroy(pref);
    if (out.heuristic != CUBLAS_STATUS_SUCCESS || out.matmul != CUBLAS_STATUS_SUCCESS) return out;

    const std::vector<uint8_t> d = dd.download();
    const double r = p.d_t == BF16 ? std::ldexp(1.0, -8) : p.d_t == F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -24);
    const double floor = p.d_t == F16 ? std::ldexp(1.0, -25) : 0.0;  // half fp16's subnormal spacing
    std::vector<bool> touched(d_count, false);
    int bad = 0;
    for (int32_t e = 0; e < p.batch; ++e)
        for (int64_t j = 0; j < p.n; ++j)
            for (int64_t i = 0; i < p.m; ++i) {
                double dot = 0, mag = 0;
                for (int64_t q = 0; q < p.k; ++q) {
                    const int64_t xa = e * p.stride_a() + (p.ta == CUBLAS_OP_N ? i + q * p.lda_() : q + i * p.lda_());
                    const int64_t xb = e * p.stride_b() + (p.tb == CUBLAS_OP_N ? q + j * p.ldb_() : j + q * p.ldb_());
                    const double t = decode_fp8(a[xa], p.a_t) * decode_fp8(b[xb], p.b_t);
                    dot += t;
                    mag += std::fabs(t);
                }
                const double s = p.scales ? double(p.alpha) * sa[p.outer() ? i : 0] * sb[p.b_mode == kOuter ? j : 0]
                                          : double(p.alpha);
                const int64_t xd = e * p.stride_d() + i + j * p.ldd_();
                const int64_t xc = p.in_place ? xd : e * p.stride_c() + i + j * p.ldc_();
                double want = s * dot, m_all = std::fabs(s) * mag;
                if (p.beta != 0.0f) want += p.beta * double(c0[xc]), m_all += std::fabs(p.beta * c0[xc]);
                if (p.epi == CUBLASLT_EPILOGUE_BIAS) want += bias0[i], m_all += std::fabs(bias0[i]);
                const double tol = 1.01 * (p.k + 6) * std::ldexp(1.0, -24) * m_all + r * std::fabs(want) + floor;
                const double got = decode(d, p.d_t, xd);
                touched[xd] = true;
                if (!(std::fabs(got - want) <= tol) && bad++ < 5)
                    ADD_FAILURE() << "D batch " << e << " (" << i << "," << j << ") = " << got << ", want " << want
                                  << " +- " << tol;
            }
    for (size_t x = 0; x < d_count; ++x)
        if (!touched[x] && decode(d, p.d_t, x) != d0[x] && bad++ < 5) ADD_FAILURE() << "D padding " << x << " changed";
    return out;
}

constexpr Outcome kOk{CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS};
constexpr Outcome kNotSupported{CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_NOT_SUPPORTED};

#define EXPECT_OUTCOME(want, got)                                         \
    do {                                                                  \
        const Outcome o_ = (got);                                         \
        EXPECT_EQ(o_.heuristic, (want).heuristic) << "heuristic: " #got;  \
        EXPECT_EQ(o_.matmul, (want).matmul) << "matmul: " #got;           \
    } while (0)

// e4m3 x e4m3 (forward), e5m2 x e4m3 and e4m3 x e5m2 (gradients, both orders), every output type of
// the table, tensorwide scales, smallest and padded leading dimensions, m and n off the GEMM's tiles.
TEST_F(CublasLtFp8, TensorwideProductsEveryTypeAndShape) {
    struct Shape { int64_t m, n, k, lda, ldb, ldd; };
    const Shape shapes[] = {{16, 8, 32, 0, 0, 0}, {8, 3, 16, 32, 48, 24}, {40, 7, 64, 0, 80, 48}, {8, 1, 16, 0, 0, 0}};
    for (auto [at, bt] : {std::pair{E4M3, E4M3}, {E5M2, E4M3}, {E4M3, E5M2}})
        for (cudaDataType dt : {BF16, F32, F16})
            for (const Shape& s : shapes) {
                Problem p;
                p.a_t = at, p.b_t = bt, p.c_t = p.d_t = dt;
                p.m = s.m, p.n = s.n, p.k = s.k, p.lda = s.lda, p.ldb = s.ldb, p.ldd = s.ldd;
                p.alpha = 0.75f;
                EXPECT_OUTCOME(kOk, run(p, 7 + s.m));
            }
}

// Null scale pointers mean 1 (cublasLt.h); FAST_ACCUM is accepted and changes nothing here.
TEST_F(CublasLtFp8, NullScalesAndFastAccum) {
    Problem p;
    p.scales = false;
    EXPECT_OUTCOME(kOk, run(p));
    p.scales = true;
    p.fast_accum = 1;
    EXPECT_OUTCOME(kOk, run(p));
}

// The weight gradient: dW += dY^T X with beta = 1 into D itself (C == D), bf16 and fp32.
TEST_F(CublasLtFp8, BetaOneAccumulatesInPlace) {
    for (cudaDataType dt : {BF16, F32}) {
        Problem p;
        p.a_t = E5M2, p.c_t = p.d_t = dt, p.m = 24, p.n = 5, p.k = 48, p.ldd = 32;
        p.beta = 1.0f, p.in_place = true;
        EXPECT_OUTCOME(kOk, run(p, 3));
        p.in_place = false, p.ldc = 40;  // out of place, C's own leading dimension
        EXPECT_OUTCOME(kOk, run(p, 4));
    }
}

// BIAS: bf16 bias with bf16 D, bf16 bias with fp32 D (the table's; also when BIAS_DATA_TYPE says so).
TEST_F(CublasLtFp8, BiasEpilogue) {
    Problem p;
    p.epi = CUBLASLT_EPILOGUE_BIAS, p.m = 32, p.n = 6, p.k = 32;
    EXPECT_OUTCOME(kOk, run(p));
    p.c_t = p.d_t = F32, p.beta = 1.0f;
    EXPECT_OUTCOME(kOk, run(p));
    p.bias_type = BF16;
    EXPECT_OUTCOME(kOk, run(p));
    p.c_t = p.d_t = F16, p.bias_type = -1, p.bias_stored = F16;
    EXPECT_OUTCOME(kOk, run(p));
}

// Outer vector scaling (rowwise): m scales for A's rows, n for B's columns, negative ones included.
TEST_F(CublasLtFp8, OuterVectorScales) {
    Problem p;
    p.a_mode = p.b_mode = kOuter, p.m = 24, p.n = 5, p.k = 48;
    EXPECT_OUTCOME(kOk, run(p));
    p.a_t = E5M2, p.c_t = p.d_t = F32, p.epi = CUBLASLT_EPILOGUE_BIAS, p.beta = 1.0f, p.in_place = true;
    EXPECT_OUTCOME(kOk, run(p));
    p.scales = false;  // null: all 1
    EXPECT_OUTCOME(kOk, run(p));
}

TEST_F(CublasLtFp8, StridedBatchesShareTheTensorwideScales) {
    Problem p;
    p.batch = 3, p.m = 16, p.n = 4, p.k = 16, p.beta = 1.0f;
    EXPECT_OUTCOME(kOk, run(p));
}

// Hand-decoded codes, independent of model/fp8.hpp: e4m3 0x7E = 448, 0x01 = 2^-9 (subnormal),
// 0xF8 = -256, 0x08 = 2^-6; e5m2 0x7B = 57344, 0x01 = 2^-16 (subnormal). Every product is exact
// in fp32, so D (fp32) must equal it exactly.
TEST_F(CublasLtFp8, KnownCodes) {
    const int64_t m = 4, n = 2, k = 16;
    std::vector<uint8_t> a(k * m, 0), b(k * n, 0);  // A: k x m (op(A) = A^T), B: k x n
    const uint8_t a_codes[m] = {0x7E, 0x01, 0xF8, 0x08};
    for (int64_t i = 0; i < m; ++i) a[3 + i * k] = a_codes[i];  // op(A)(i, 3)
    b[3] = 0x7B, b[3 + k] = 0x01;                                // op(B)(3, 0), op(B)(3, 1)
    const double a_val[m] = {448, std::ldexp(1, -9), -256, std::ldexp(1, -6)}, b_val[n] = {57344, std::ldexp(1, -16)};
    DeviceBytes da(a), db(b), dd(std::vector<uint8_t>(m * n * 4, 0));
    cublasLtMatmulDesc_t desc;
    ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, F32), CUBLAS_STATUS_SUCCESS);
    const int32_t t = CUBLAS_OP_T;
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayout_t la, lb, ld;
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&la, E4M3, k, m, k), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb, E5M2, k, n, k), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&ld, F32, m, n, m), CUBLAS_STATUS_SUCCESS);
    const float alpha = 1.0f, beta = 0.0f;
    ASSERT_EQ(cublasLtMatmul(lt, desc, &alpha, da.ptr, la, db.ptr, lb, &beta, nullptr, ld, dd.ptr, ld, nullptr, nullptr,
                             0, stream),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::vector<uint8_t> d = dd.download();
    for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < m; ++i) EXPECT_EQ(decode(d, F32, i + j * m), a_val[i] * b_val[j]) << i << "," << j;
    for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
}

// What cuBLASLt refuses on Hopper (cuBLAS docs 3.4.17, 2.1.11, 3.1.4), and what is not emulated:
// the heuristic and cublasLtMatmul give the same status (pointer alignment: cublasLtMatmul only).
TEST_F(CublasLtFp8, RefusalsMatchTheHeuristic) {
    const Problem ok;
    auto with = [&](auto change) { Problem p = ok; change(p); return run(p); };
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.a_t = p.b_t = E5M2; }));
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.b_t = BF16; }));
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.a_t = BF16; }));
    for (auto [ta, tb] : {std::pair{CUBLAS_OP_N, CUBLAS_OP_N}, {CUBLAS_OP_T, CUBLAS_OP_T}, {CUBLAS_OP_N, CUBLAS_OP_T},
                          {CUBLAS_OP_C, CUBLAS_OP_N}}) {
        SCOPED_TRACE("transa " + std::to_string(ta) + " transb " + std::to_string(tb));
        EXPECT_OUTCOME(kNotSupported, with([&](Problem& p) { p.ta = ta, p.tb = tb; }));
    }
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.compute = CUBLAS_COMPUTE_32F_FAST_TF32; }));
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.compute = CUBLAS_COMPUTE_32F_PEDANTIC; }));
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.d_t = F32; }));               // C bf16, D fp32
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.d_t = E4M3; }));              // FP8 D: not emulated
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.k = 24; }));                  // k % 16
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.lda = 40; }));                // lda % 16
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.ldb = 36; }));                // ldb % 16
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.m = 12; }));                  // m * 2 bytes % 16
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.ldd = 20; }));                // ldd * 2 bytes % 16
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.c_t = p.d_t = F32, p.m = 6; })); // m * 4 bytes % 16
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.beta = 1, p.ldc = 28; }));    // ldc * 2 bytes % 16
    EXPECT_OUTCOME((Outcome{CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_NOT_SUPPORTED}),
                   with([](Problem& p) { p.a_pad = 8; }));  // A not 16-byte aligned
    for (auto e : {CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                   CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD,
                   CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB, CUBLASLT_EPILOGUE_RELU}) {
        SCOPED_TRACE("epilogue " + std::to_string(e));
        EXPECT_OUTCOME(kNotSupported, with([&](Problem& p) { p.epi = e; }));
    }
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) {  // the table's bias for bf16 D is bf16
        p.epi = CUBLASLT_EPILOGUE_BIAS, p.bias_type = F32, p.bias_stored = F32;
    }));
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.a_mode = kOuter; }));       // OUTER_VEC on A only
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.b_mode = kOuter; }));       // ... on B only
    EXPECT_OUTCOME(kNotSupported, with([](Problem& p) { p.a_mode = p.b_mode = kOuter, p.batch = 2; }));
    // Scales on a matmul that is not FP8 are an error (docs 3.1.4; cublasLt.h: INVALID_VALUE).
    const Outcome invalid{CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_INVALID_VALUE};
    EXPECT_OUTCOME(invalid, with([](Problem& p) { p.a_t = p.b_t = BF16; }));
    EXPECT_OUTCOME(invalid, with([](Problem& p) { p.a_t = p.b_t = BF16, p.scales = false, p.a_mode = p.b_mode = kOuter; }));
    EXPECT_OUTCOME(kOk, with([](Problem& p) { p.a_t = p.b_t = BF16, p.scales = false; }));  // plain bf16: fine
}

// Attributes that are not emulated are refused when set, naming themselves; NULL and the default
// modes are accepted.
TEST_F(CublasLtFp8, ScaleAttributes) {
    cublasLtMatmulDesc_t desc;
    ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, F32), CUBLAS_STATUS_SUCCESS);
    float x = 1.0f;
    const void* some = &x;
    const void* null = nullptr;
    for (auto attr : {CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
                      CUBLASLT_MATMUL_DESC_AMAX_D_POINTER}) {
        EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, attr, &some, sizeof some), CUBLAS_STATUS_NOT_SUPPORTED) << attr;
        EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, attr, &null, sizeof null), CUBLAS_STATUS_SUCCESS) << attr;
        EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, attr, &null, 4), CUBLAS_STATUS_INVALID_VALUE) << attr;
    }
    auto set_mode = [&](cublasLtMatmulDescAttributes_t attr, int32_t mode) {
        return cublasLtMatmulDescSetAttribute(desc, attr, &mode, sizeof mode);
    };
    for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE}) {
        EXPECT_EQ(set_mode(attr, kScalar), CUBLAS_STATUS_SUCCESS);
        EXPECT_EQ(set_mode(attr, kOuter), CUBLAS_STATUS_SUCCESS);
        for (int32_t mode : {CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3, CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0,
                             CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F})
            EXPECT_EQ(set_mode(attr, mode), CUBLAS_STATUS_NOT_SUPPORTED) << attr << " mode " << mode;
        EXPECT_EQ(set_mode(attr, 99), CUBLAS_STATUS_INVALID_VALUE);
    }
    for (auto attr : {CUBLASLT_MATMUL_DESC_C_SCALE_MODE, CUBLASLT_MATMUL_DESC_D_SCALE_MODE}) {
        EXPECT_EQ(set_mode(attr, kScalar), CUBLAS_STATUS_SUCCESS);
        EXPECT_EQ(set_mode(attr, kOuter), CUBLAS_STATUS_NOT_SUPPORTED);
    }
    int32_t mode = -1;
    size_t written = 0;
    EXPECT_EQ(set_mode(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, kOuter), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode, &written),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(mode, kOuter);
    cublasLtMatmulDescDestroy(desc);
}

// $CUDA_EMU_CC: the reported capability, and cuBLASLt's FP8 rules by capability (3.1.4 table:
// tensorwide 8.9+, outer vector 9.0 only; TN on 8.9, 9.0, 12.x).
TEST_F(CublasLtFp8, ComputeCapabilityKnob) {
    auto cc = [] {
        cudaDeviceProp prop{};
        EXPECT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
        int major = -1, minor = -1;
        EXPECT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
        EXPECT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
        EXPECT_EQ(prop.major * 10 + prop.minor, major * 10 + minor);
        return major * 10 + minor;
    };
    EXPECT_EQ(cc(), 90);
    Problem outer;
    outer.a_mode = outer.b_mode = kOuter;
    Problem nn;
    nn.ta = CUBLAS_OP_N;
    {
        ScopedCc env("80");
        EXPECT_EQ(cc(), 80);
        EXPECT_OUTCOME(kNotSupported, run(Problem{}));
    }
    {
        ScopedCc env("89");
        EXPECT_EQ(cc(), 89);
        EXPECT_OUTCOME(kOk, run(Problem{}));
        EXPECT_OUTCOME(kNotSupported, run(outer));
        EXPECT_OUTCOME(kNotSupported, run(nn));
    }
    {
        ScopedCc env("100");  // data-center Blackwell: no TN rule, no outer vector scaling
        EXPECT_EQ(cc(), 100);
        EXPECT_OUTCOME(kOk, run(nn));
        EXPECT_OUTCOME(kNotSupported, run(outer));
    }
    {
        ScopedCc env("sm_90a");  // not a number: ignored
        EXPECT_EQ(cc(), 90);
    }
    EXPECT_OUTCOME(kOk, run(outer));
}

}  // namespace
