// tests/cuda_emu/test_cublaslt.cpp — emulated cublasLtMatmul and its epilogues against naive
// double loops, plus the descriptor/attribute/heuristic API.
//
// Reference (column-major, op(A) m x k, op(B) k x n), per batch entry:
//   pre = alpha op(A) op(B) + beta C (+ bias[i] for the BIAS epilogues)
//   GELU*: D = gelu(pre), aux = pre;  DGELU*: D = pre * gelu'(aux);  others: D = pre
//   BGRADA: bias[i] = sum_p op(A)[i,p];  BGRADB: bias[j] = sum_p op(B)[p,j];
//   DGELU_BGRAD: bias[i] = sum_j D[i,j]
// with gelu the tanh approximation, evaluated in double. Tolerance: rel_tol(type) (fp32 1e-5,
// bf16 2^-8) times the magnitude of the terms (sum |alpha a b| + |beta c| + |bias|), times 1.2
// where a GELU derivative (at most 1.13) scales it. Padding of D and aux must stay untouched.
#include <cublasLt.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/cuda_emu/cublas_test_util.hpp"

namespace {

using namespace emu_test;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kSentinel = 4321.0f;

double gelu_ref(double x) {
    const double s = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

double gelu_grad_ref(double x) {
    const double s = std::sqrt(2.0 / M_PI);
    const double t = std::tanh(s * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

bool has(cublasLtEpilogue_t e, std::initializer_list<cublasLtEpilogue_t> set) {
    for (auto x : set)
        if (x == e) return true;
    return false;
}

const cublasLtEpilogue_t kEpilogues[] = {
    CUBLASLT_EPILOGUE_DEFAULT,   CUBLASLT_EPILOGUE_BIAS,          CUBLASLT_EPILOGUE_GELU,
    CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,      CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
    CUBLASLT_EPILOGUE_DGELU,     CUBLASLT_EPILOGUE_DGELU_BGRAD,   CUBLASLT_EPILOGUE_BGRADA,
    CUBLASLT_EPILOGUE_BGRADB};

/// One cublasLtMatmul problem: A, B, C, D of type `t` (bias in `bias_t`), batch entries packed
/// `gap` elements apart; D has ld m+1, C ld m+2 (or C is D when in_place), aux ld round8(m)+8.
struct Case {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    int m = 1, n = 1, k = 1;
    cudaDataType t = CUDA_R_32F, bias_t = CUDA_R_32F;
    bool bias_type_set = false;  ///< set CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE (else D's type)
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    float alpha = 0.875f, beta = 0.0f;
    int batch = 1, gap = 3;
    bool in_place = false;

    int a_rows() const { return ta == CUBLAS_OP_N ? m : k; }
    int a_cols() const { return ta == CUBLAS_OP_N ? k : m; }
    int b_rows() const { return tb == CUBLAS_OP_N ? k : n; }
    int b_cols() const { return tb == CUBLAS_OP_N ? n : k; }
    int64_t lda() const { return a_rows() + 1; }
    int64_t ldb() const { return b_rows(); }
    int64_t ldd() const { return m + 1; }
    int64_t ldc() const { return in_place ? ldd() : m + 2; }
    int64_t aux_ld() const { return (m + 7) / 8 * 8 + 8; }
    int64_t stride_a() const { return lda() * a_cols() + gap; }
    int64_t stride_b() const { return ldb() * b_cols() + gap; }
    int64_t stride_c() const { return ldc() * n + gap; }
    int64_t stride_d() const { return ldd() * n + gap; }
    int64_t stride_aux() const { return aux_ld() * n + 8; }
    int64_t bias_len() const { return epi == CUBLASLT_EPILOGUE_BGRADB ? n : m; }
    int64_t stride_bias() const { return bias_len() + 2; }
    std::string name() const {
        return std::string("ta=") + (ta == CUBLAS_OP_N ? "N" : "T") + " tb=" + (tb == CUBLAS_OP_N ? "N" : "T") +
               " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " type=" + std::to_string(t) + " bias_type=" + std::to_string(bias_t) + " epilogue=" +
               std::to_string(epi) + " beta=" + std::to_string(beta) + " batch=" + std::to_string(batch) +
               (in_place ? " in-place" : "");
    }
};

size_t span(int64_t ld, int64_t cols, int64_t stride, int batch) { return stride * (batch - 1) + ld * cols; }

// Creates a layout with batch attributes.
cublasLtMatrixLayout_t layout(cudaDataType t, int64_t rows, int64_t cols, int64_t ld, int batch, int64_t stride) {
    cublasLtMatrixLayout_t l = nullptr;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld), CUBLAS_STATUS_SUCCESS);
    int32_t b = batch;
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof(b)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
              CUBLAS_STATUS_SUCCESS);
    return l;
}

struct CublasLt : ::testing::Test {
    cublasLtHandle_t lt = nullptr;
    cudaStream_t stream = nullptr;
    void SetUp() override {
        ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
        ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    }
    void TearDown() override {
        cublasLtDestroy(lt);
        cudaStreamDestroy(stream);
    }

    void run_case(const Case& c);
};

void CublasLt::run_case(const Case& c) {
    SCOPED_TRACE(c.name());
    const cudaDataType t = c.t;
    const bool reads_bias = has(c.epi, {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS});
    const bool writes_bias = has(c.epi, {CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB, CUBLASLT_EPILOGUE_DGELU_BGRAD});
    const bool gelu_fwd = has(c.epi, {CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX,
                                      CUBLASLT_EPILOGUE_GELU_AUX_BIAS});
    const bool aux_out = has(c.epi, {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_AUX_BIAS});
    const bool aux_in = has(c.epi, {CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD});

    // Host data. D, aux and bias outputs start as sentinels; C is NaN where beta == 0 (not read).
    std::vector<float> a = random_values(span(c.lda(), c.a_cols(), c.stride_a(), c.batch), t, 11);
    std::vector<float> b = random_values(span(c.ldb(), c.b_cols(), c.stride_b(), c.batch), t, 12);
    const size_t d_size = span(c.ldd(), c.n, c.stride_d(), c.batch);
    const size_t c_size = span(c.ldc(), c.n, c.stride_c(), c.batch);
    std::vector<float> c0 = c.beta == 0.0f ? std::vector<float>(c_size, kNaN) : random_values(c_size, t, 13);
    std::vector<float> d0(d_size, round_to(t, kSentinel));
    if (c.in_place) d0 = c0;
    const size_t bias_size = c.stride_bias() * c.batch;
    std::vector<float> bias0 = writes_bias ? std::vector<float>(bias_size, round_to(c.bias_t, kSentinel))
                                           : random_values(bias_size, c.bias_t, 14);
    const size_t aux_size = span(c.aux_ld(), c.n, c.stride_aux(), c.batch);
    std::vector<float> aux0(aux_size, round_to(t, kSentinel));
    if (aux_in) {  // GELU inputs in [-3, 3): both tails and the curved middle of gelu'
        aux0 = random_values(aux_size, t, 15);
        for (float& x : aux0) x = round_to(t, 3.0f * x);
    }

    DeviceMatrix da(a, t), db(b, t), dd(d0, t), dbias(bias0, c.bias_t), daux(aux0, t);
    DeviceMatrix dc(c.in_place ? std::vector<float>(1, 0.0f) : c0, t);
    void* c_ptr = c.in_place ? dd.get() : dc.get();

    cublasLtMatmulDesc_t desc = nullptr;
    ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t size) {
        EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, attr, v, size), CUBLAS_STATUS_SUCCESS) << "attribute " << attr;
    };
    int32_t ta = c.ta, tb = c.tb;
    uint32_t epi = c.epi;
    set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
    set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    if (reads_bias || writes_bias) {
        void* p = dbias.get();
        int64_t stride = c.stride_bias();
        set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof(p));
        set(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &stride, sizeof(stride));
        if (c.bias_type_set) {
            int32_t bt = c.bias_t;
            set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt));
        }
    }
    if (aux_in || aux_out) {
        void* p = daux.get();
        int64_t ld = c.aux_ld(), stride = c.stride_aux();
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof(p));
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld));
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &stride, sizeof(stride));
    }
    cublasLtMatrixLayout_t la = layout(t, c.a_rows(), c.a_cols(), c.lda(), c.batch, c.stride_a());
    cublasLtMatrixLayout_t lb = layout(t, c.b_rows(), c.b_cols(), c.ldb(), c.batch, c.stride_b());
    cublasLtMatrixLayout_t lc = layout(t, c.m, c.n, c.ldc(), c.batch, c.in_place ? c.stride_d() : c.stride_c());
    cublasLtMatrixLayout_t ld = layout(t, c.m, c.n, c.ldd(), c.batch, c.stride_d());

    cublasLtMatmulPreference_t pref = nullptr;
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t heur{};
    int found = 0;
    ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 1, &heur, &found), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(found, 1);
    ASSERT_EQ(cublasLtMatmul(lt, desc, &c.alpha, da.get(), la, db.get(), lb, &c.beta, c_ptr, lc, dd.get(), ld,
                             &heur.algo, nullptr, 0, stream),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (auto l : {la, lb, lc, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulPreferenceDestroy(pref);

    const std::vector<float> d = dd.download(), bias = dbias.download(), aux = daux.download();
    const double rel = rel_tol(t), bias_rel = rel_tol(c.bias_t);
    int bad = 0;
    auto check = [&](const char* what, double got, double want, double tol, int e, int64_t i, int64_t j) {
        if (!(std::fabs(got - want) <= tol) && bad++ < 6)
            ADD_FAILURE() << what << " batch " << e << " (" << i << "," << j << ") = " << got << ", want " << want
                          << " +- " << tol;
    };
    std::vector<bool> d_touched(d_size, false), aux_touched(aux_size, false), bias_touched(bias_size, false);
    for (int e = 0; e < c.batch; ++e) {
        Product ref = reference_product(a, c.ta, c.lda(), e * c.stride_a(), b, c.tb, c.ldb(), e * c.stride_b(), c.m,
                                        c.n, c.k);
        std::vector<double> row_sum(c.m, 0.0), row_tol(c.m, 0.0);
        for (int j = 0; j < c.n; ++j)
            for (int i = 0; i < c.m; ++i) {
                const int64_t xd = e * c.stride_d() + i + j * c.ldd();
                const int64_t xc = (c.in_place ? e * c.stride_d() + i + j * c.ldd() : e * c.stride_c() + i + j * c.ldc());
                double pre = c.alpha * ref.dot[i + j * c.m];
                double mag = std::fabs(c.alpha) * ref.magnitude[i + j * c.m];
                if (c.beta != 0.0f) {
                    pre += c.beta * static_cast<double>(c0[xc]);
                    mag += std::fabs(c.beta * c0[xc]);
                }
                if (reads_bias) {
                    pre += bias0[e * c.stride_bias() + i];
                    mag += std::fabs(bias0[e * c.stride_bias() + i]);
                }
                double want = pre;
                if (gelu_fwd) want = gelu_ref(pre);
                if (aux_in) want = pre * gelu_grad_ref(aux0[e * c.stride_aux() + i + j * c.aux_ld()]);
                const double tol = 1.2 * rel * mag + 1e-30;
                check("D", d[xd], want, tol, e, i, j);
                d_touched[xd] = true;
                if (aux_out) {
                    const int64_t xa = e * c.stride_aux() + i + j * c.aux_ld();
                    check("aux", aux[xa], pre, rel * mag + 1e-30, e, i, j);
                    aux_touched[xa] = true;
                }
                row_sum[i] += want;
                row_tol[i] += 1e-5 * mag + std::fabs(want) * 1e-6;
            }
        if (c.epi == CUBLASLT_EPILOGUE_DGELU_BGRAD)
            for (int i = 0; i < c.m; ++i) {
                const int64_t xb = e * c.stride_bias() + i;
                check("dbias", bias[xb], row_sum[i], row_tol[i] + bias_rel * std::fabs(row_sum[i]) + 1e-30, e, i, 0);
                bias_touched[xb] = true;
            }
        if (c.epi == CUBLASLT_EPILOGUE_BGRADA || c.epi == CUBLASLT_EPILOGUE_BGRADB) {
            const bool by_row = c.epi == CUBLASLT_EPILOGUE_BGRADA;
            for (int64_t x = 0; x < c.bias_len(); ++x) {
                double s = 0, mag = 0;
                for (int p = 0; p < c.k; ++p) {
                    double v = by_row ? op_at(a, c.ta, c.lda(), x, p, e * c.stride_a())
                                      : op_at(b, c.tb, c.ldb(), p, x, e * c.stride_b());
                    s += v;
                    mag += std::fabs(v);
                }
                const int64_t xb = e * c.stride_bias() + x;
                check("dbias", bias[xb], s, 1e-5 * mag + bias_rel * std::fabs(s) + 1e-30, e, x, 0);
                bias_touched[xb] = true;
            }
        }
    }
    // Outputs outside the matrices (padding rows, batch gaps) keep their initial values.
    for (size_t x = 0; x < d_size; ++x)
        if (!d_touched[x] && !(d[x] == d0[x] || (std::isnan(d[x]) && std::isnan(d0[x]))) && bad++ < 6)
            ADD_FAILURE() << "D padding element " << x << " changed to " << d[x];
    for (size_t x = 0; x < aux_size; ++x)
        if (!aux_touched[x] && aux[x] != aux0[x] && bad++ < 6) ADD_FAILURE() << "aux element " << x << " changed";
    for (size_t x = 0; x < bias_size; ++x)
        if (!bias_touched[x] && bias[x] != bias0[x] && bad++ < 6) ADD_FAILURE() << "bias element " << x << " changed";
}

const cublasOperation_t kOps[] = {CUBLAS_OP_N, CUBLAS_OP_T};

TEST_F(CublasLt, EveryEpilogueTransposeTypeAndBeta) {
    struct Shape { int m, n, k; };
    for (cudaDataType t : {CUDA_R_32F, CUDA_R_16BF})
        for (cublasLtEpilogue_t epi : kEpilogues)
            for (cublasOperation_t ta : kOps)
                for (cublasOperation_t tb : kOps)
                    for (Shape s : {Shape{1, 1, 1}, Shape{13, 7, 5}, Shape{40, 33, 17}})
                        for (float beta : {0.0f, 1.0f}) {
                            Case c;
                            c.ta = ta; c.tb = tb; c.m = s.m; c.n = s.n; c.k = s.k;
                            c.t = t; c.bias_t = t; c.epi = epi; c.beta = beta;
                            run_case(c);
                        }
}

TEST_F(CublasLt, StridedBatchesWithBiasAndAuxStrides) {
    for (cudaDataType t : {CUDA_R_32F, CUDA_R_16BF})
        for (cublasLtEpilogue_t epi : kEpilogues)
            for (float beta : {0.0f, 1.0f}) {
                Case c;
                c.ta = CUBLAS_OP_T; c.m = 11; c.n = 6; c.k = 9;
                c.t = t; c.bias_t = t; c.epi = epi; c.beta = beta; c.batch = 3;
                run_case(c);
            }
}

TEST_F(CublasLt, Fp32BiasWithBf16Output) {
    for (cublasLtEpilogue_t epi : {CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_BGRADB}) {
        Case c;
        c.tb = CUBLAS_OP_T; c.m = 24; c.n = 10; c.k = 7;
        c.t = CUDA_R_16BF; c.bias_t = CUDA_R_32F; c.bias_type_set = true; c.epi = epi;
        run_case(c);
    }
}

TEST_F(CublasLt, InPlaceCEqualsD) {
    for (cudaDataType t : {CUDA_R_32F, CUDA_R_16BF})
        for (cublasLtEpilogue_t epi : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_GELU_BIAS}) {
            Case c;
            c.m = 17; c.n = 5; c.k = 8; c.t = t; c.bias_t = t; c.epi = epi; c.beta = 1.0f; c.in_place = true;
            run_case(c);
        }
}

// The descriptor API: exact attribute sizes, size queries, refusal of what is not emulated.
TEST_F(CublasLt, AttributesAndValidation) {
    cublasLtMatmulDesc_t desc = nullptr;
    ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    int32_t trans = CUBLAS_OP_T;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, 8), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans, 4), CUBLAS_STATUS_SUCCESS);
    size_t needed = 0;
    EXPECT_EQ(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, nullptr, 0, &needed),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(needed, sizeof(int64_t));
    int32_t got = 0;
    size_t written = 0;
    EXPECT_EQ(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &got, 4, &written), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(got, CUBLAS_OP_T);
    EXPECT_EQ(written, 4u);
    const void* scale = &got;  // a C scale is not emulated (FP8 attributes: test_cublaslt_fp8.cpp)
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, &scale, sizeof(scale)),
              CUBLAS_STATUS_NOT_SUPPORTED);

    // A problem: op(A) = A^T with A 5x8 -> m = 8, k = 5; B 5x3 -> n = 3.
    std::vector<float> v(256, 0.5f);
    DeviceMatrix buf(v, CUDA_R_32F);
    cublasLtMatrixLayout_t la, lb, ld;
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 5, 8, 5), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 5, 3, 5), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 8, 3, 8), CUBLAS_STATUS_SUCCESS);
    uint64_t rows = 0;
    EXPECT_EQ(cublasLtMatrixLayoutGetAttribute(la, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows), &written),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(rows, 5u);
    const float alpha = 1.0f, beta = 0.0f;
    auto matmul = [&](cublasLtMatrixLayout_t a_layout, void* d) {
        return cublasLtMatmul(lt, desc, &alpha, buf.get(), a_layout, buf.get(), lb, &beta, nullptr, ld, d, ld, nullptr,
                              nullptr, 0, stream);
    };
    EXPECT_EQ(matmul(la, buf.get()), CUBLAS_STATUS_SUCCESS);  // beta == 0: C may be null
    EXPECT_EQ(matmul(lb, buf.get()), CUBLAS_STATUS_INVALID_VALUE);  // shapes do not match
    EXPECT_EQ(matmul(la, v.data()), CUBLAS_STATUS_INVALID_VALUE);  // D in host memory

    // The heuristic offers up to 3 algorithms (as many as asked for, below that), each accepted by
    // cublasLtMatmul; an algorithm it never returned is refused.
    {
        cublasLtMatmulPreference_t p0;
        ASSERT_EQ(cublasLtMatmulPreferenceCreate(&p0), CUBLAS_STATUS_SUCCESS);
        cublasLtMatmulHeuristicResult_t res[8]{};
        int n_found = 0;
        ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, p0, 8, res, &n_found), CUBLAS_STATUS_SUCCESS);
        EXPECT_EQ(n_found, 3);
        ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, p0, 2, res, &n_found), CUBLAS_STATUS_SUCCESS);
        EXPECT_EQ(n_found, 2);
        auto with_algo = [&](const cublasLtMatmulAlgo_t* algo) {
            return cublasLtMatmul(lt, desc, &alpha, buf.get(), la, buf.get(), lb, &beta, nullptr, ld, buf.get(), ld, algo,
                                  nullptr, 0, stream);
        };
        for (int i = 0; i < n_found; ++i) EXPECT_EQ(with_algo(&res[i].algo), CUBLAS_STATUS_SUCCESS) << "algorithm " << i;
        const cublasLtMatmulAlgo_t foreign{};
        EXPECT_EQ(with_algo(&foreign), CUBLAS_STATUS_INVALID_VALUE);
        cublasLtMatmulPreferenceDestroy(p0);
    }

    uint32_t epi = CUBLASLT_EPILOGUE_BIAS;  // without BIAS_POINTER
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(matmul(la, buf.get()), CUBLAS_STATUS_INVALID_VALUE);
    epi = CUBLASLT_EPILOGUE_GELU_AUX;  // aux ld 12: >= m but not a multiple of 8
    void* aux = buf.get();
    int64_t aux_ld = 12;
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(matmul(la, buf.get()), CUBLAS_STATUS_INVALID_VALUE);
    epi = CUBLASLT_EPILOGUE_RELU;  // not emulated
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(matmul(la, buf.get()), CUBLAS_STATUS_NOT_SUPPORTED);

    cublasLtMatmulPreference_t pref;
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    uint64_t ws = 1 << 20;
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
              CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t heur{};
    int found = -1;
    EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &heur, &found), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(found, 0);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    for (auto l : {la, lb, ld}) cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulPreferenceDestroy(pref);
}

}  // namespace
