// tests/cuda_emu/test_cublas.cpp — emulated cuBLAS GEMMs against naive double loops.
//
// Every case runs through the emulated runtime (cudaMalloc'd buffers, a created stream,
// cudaStreamSynchronize) and compares each element with the double-precision reference within
// rel_tol(type) * sum_p |alpha a b| + |beta c| (fp32 1e-5, bf16 2^-8). Leading dimensions carry
// padding filled with a sentinel that must survive; beta == 0 runs with C full of NaN.
#include <cublas_v2.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tests/cuda_emu/cublas_test_util.hpp"

namespace {

using namespace emu_test;

constexpr float kSentinel = 12345.0f;  // padding marker; rounded to C's type before use
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Cublas : ::testing::Test {
    cublasHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    void SetUp() override {
        ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
        ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
        ASSERT_EQ(cublasSetStream(handle, stream), CUBLAS_STATUS_SUCCESS);
    }
    void TearDown() override {
        cublasDestroy(handle);
        cudaStreamDestroy(stream);
    }
};

/// One strided-batched GEMM problem and its check. batch == 1 with zero strides is a plain GEMM.
struct Problem {
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    int m = 1, n = 1, k = 1;
    int pad = 0;              ///< extra rows in every leading dimension
    float alpha = 1.0f, beta = 0.0f;
    cudaDataType ab = CUDA_R_32F, c = CUDA_R_32F;
    int batch = 1;
    int gap = 0;              ///< elements between batch entries (beyond the matrix itself)
    bool share_b = false;     ///< strideB = 0: every entry uses the same B

    int a_rows() const { return ta == CUBLAS_OP_N ? m : k; }
    int a_cols() const { return ta == CUBLAS_OP_N ? k : m; }
    int b_rows() const { return tb == CUBLAS_OP_N ? k : n; }
    int b_cols() const { return tb == CUBLAS_OP_N ? n : k; }
    int lda() const { return a_rows() + pad; }
    int ldb() const { return b_rows() + pad; }
    int ldc() const { return m + pad; }
    long long stride_a() const { return static_cast<long long>(lda()) * a_cols() + gap; }
    long long stride_b() const { return share_b ? 0 : static_cast<long long>(ldb()) * b_cols() + gap; }
    long long stride_c() const { return static_cast<long long>(ldc()) * n + gap; }
    std::string name() const {
        return std::string("ta=") + (ta == CUBLAS_OP_N ? "N" : "T") + " tb=" + (tb == CUBLAS_OP_N ? "N" : "T") +
               " m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
               " pad=" + std::to_string(pad) + " beta=" + std::to_string(beta) + " ab=" + std::to_string(ab) +
               " c=" + std::to_string(c) + " batch=" + std::to_string(batch);
    }
};

enum class Api { sgemm, gemm_ex, strided_batched };

/// Runs `p` through `api` on the fixture's stream and checks every element of C, padding included.
void run_and_check(Cublas& f, const Problem& p, Api api) {
    SCOPED_TRACE(p.name());
    const size_t a_size = p.stride_a() * (p.batch - 1) + static_cast<size_t>(p.lda()) * p.a_cols();
    const size_t b_size = p.stride_b() * (p.batch - 1) + static_cast<size_t>(p.ldb()) * p.b_cols();
    const size_t c_size = p.stride_c() * (p.batch - 1) + static_cast<size_t>(p.ldc()) * p.n;
    std::vector<float> a = random_values(a_size, p.ab, 1), b = random_values(b_size, p.ab, 2);
    std::vector<float> c0 = random_values(c_size, p.c, 3);
    const float sentinel = round_to(p.c, kSentinel);
    std::vector<bool> inside(c_size, false);  // elements of C proper, not padding or gaps
    for (int e = 0; e < p.batch; ++e)
        for (int j = 0; j < p.n; ++j)
            for (int i = 0; i < p.m; ++i) inside[e * p.stride_c() + i + j * p.ldc()] = true;
    for (size_t x = 0; x < c_size; ++x)
        if (!inside[x]) c0[x] = sentinel;
        else if (p.beta == 0.0f) c0[x] = kNaN;  // beta == 0: C must not be read
    DeviceMatrix da(a, p.ab), db(b, p.ab), dc(c0, p.c);

    cublasStatus_t s;
    if (api == Api::sgemm)
        s = cublasSgemm(f.handle, p.ta, p.tb, p.m, p.n, p.k, &p.alpha, static_cast<float*>(da.get()), p.lda(),
                        static_cast<float*>(db.get()), p.ldb(), &p.beta, static_cast<float*>(dc.get()), p.ldc());
    else if (api == Api::gemm_ex)
        s = cublasGemmEx(f.handle, p.ta, p.tb, p.m, p.n, p.k, &p.alpha, da.get(), p.ab, p.lda(), db.get(), p.ab,
                         p.ldb(), &p.beta, dc.get(), p.c, p.ldc(), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
        s = cublasGemmStridedBatchedEx(f.handle, p.ta, p.tb, p.m, p.n, p.k, &p.alpha, da.get(), p.ab, p.lda(),
                                       p.stride_a(), db.get(), p.ab, p.ldb(), p.stride_b(), &p.beta, dc.get(), p.c,
                                       p.ldc(), p.stride_c(), p.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    ASSERT_EQ(s, CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(f.stream), cudaSuccess);
    std::vector<float> got = dc.download();

    int bad = 0;
    for (int e = 0; e < p.batch; ++e) {
        Product ref = reference_product(a, p.ta, p.lda(), e * p.stride_a(), b, p.tb, p.ldb(), e * p.stride_b(),
                                        p.m, p.n, p.k);
        for (int j = 0; j < p.n; ++j)
            for (int i = 0; i < p.m; ++i) {
                const size_t x = e * p.stride_c() + i + j * p.ldc();
                double c_term = p.beta == 0.0f ? 0.0 : p.beta * static_cast<double>(c0[x]);
                double want = p.alpha * ref.dot[i + j * p.m] + c_term;
                double tol = rel_tol(p.c) * (std::fabs(p.alpha) * ref.magnitude[i + j * p.m] + std::fabs(c_term)) +
                             1e-30;
                if (!(std::fabs(got[x] - want) <= tol) && bad++ < 5)
                    ADD_FAILURE() << "batch " << e << " C(" << i << "," << j << ") = " << got[x] << ", want " << want
                                  << " +- " << tol;
            }
    }
    for (size_t x = 0; x < c_size; ++x)
        if (!inside[x] && got[x] != sentinel && bad++ < 5) ADD_FAILURE() << "padding/gap element " << x << " changed";
}

const cublasOperation_t kOps[] = {CUBLAS_OP_N, CUBLAS_OP_T};
struct Shape { int m, n, k; };
const Shape kShapes[] = {{1, 1, 1}, {7, 5, 3}, {33, 18, 65}, {64, 41, 31}};

TEST_F(Cublas, GemmExAllTransposesTypesAndBetas) {
    const std::pair<cudaDataType, cudaDataType> types[] = {
        {CUDA_R_32F, CUDA_R_32F}, {CUDA_R_16BF, CUDA_R_16BF}, {CUDA_R_16BF, CUDA_R_32F}};
    for (auto [ab, c] : types)
        for (cublasOperation_t ta : kOps)
            for (cublasOperation_t tb : kOps)
                for (Shape sh : kShapes)
                    for (int pad : {0, 3})
                        for (float beta : {0.0f, 1.0f}) {
                            Problem p;
                            p.ta = ta; p.tb = tb; p.m = sh.m; p.n = sh.n; p.k = sh.k;
                            p.pad = pad; p.alpha = 0.75f; p.beta = beta; p.ab = ab; p.c = c;
                            run_and_check(*this, p, Api::gemm_ex);
                        }
}

TEST_F(Cublas, SgemmAlphaBeta) {
    for (cublasOperation_t ta : kOps)
        for (cublasOperation_t tb : kOps) {
            Problem p;
            p.ta = ta; p.tb = tb; p.m = 19; p.n = 23; p.k = 29; p.pad = 2;
            p.alpha = -1.5f; p.beta = 0.5f;
            run_and_check(*this, p, Api::sgemm);
        }
}

TEST_F(Cublas, StridedBatchedWithGapsAndSharedB) {
    for (cudaDataType t : {CUDA_R_32F, CUDA_R_16BF})
        for (cublasOperation_t ta : kOps)
            for (cublasOperation_t tb : kOps)
                for (bool share_b : {false, true})
                    for (float beta : {0.0f, 1.0f}) {
                        Problem p;
                        p.ta = ta; p.tb = tb; p.m = 9; p.n = 6; p.k = 11; p.pad = 1;
                        p.alpha = 1.25f; p.beta = beta; p.ab = t; p.c = t;
                        p.batch = 3; p.gap = 5; p.share_b = share_b;
                        run_and_check(*this, p, Api::strided_batched);
                    }
}

// BLAS does not reference A and B when alpha == 0: NaN inputs must not reach C.
TEST_F(Cublas, AlphaZeroDoesNotReadInputs) {
    const int m = 5, n = 4, k = 3;
    std::vector<float> nan_a(m * k, kNaN), nan_b(k * n, kNaN), c0 = random_values(m * n, CUDA_R_32F, 7);
    DeviceMatrix da(nan_a, CUDA_R_32F), db(nan_b, CUDA_R_32F), dc(c0, CUDA_R_32F);
    const float alpha = 0.0f, beta = 2.0f;
    ASSERT_EQ(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, static_cast<float*>(da.get()), m,
                          static_cast<float*>(db.get()), k, &beta, static_cast<float*>(dc.get()), m),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    std::vector<float> got = dc.download();
    for (int x = 0; x < m * n; ++x) EXPECT_EQ(got[x], 2.0f * c0[x]) << x;  // exact: a power-of-two scale
}

// Streams are deferred: C changes only when the stream is synchronized.
TEST_F(Cublas, ResultAppearsOnlyAtSynchronization) {
    const int m = 4, n = 4, k = 4;
    std::vector<float> ones(m * k, 1.0f), c0(m * n, -7.0f);
    DeviceMatrix da(ones, CUDA_R_32F), db(ones, CUDA_R_32F), dc(c0, CUDA_R_32F);
    const float alpha = 1.0f, beta = 0.0f;
    ASSERT_EQ(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, da.get(), CUDA_R_32F, m, db.get(),
                           CUDA_R_32F, k, &beta, dc.get(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    float before;
    std::memcpy(&before, dc.get(), sizeof(float));  // emulated device memory is host memory
    EXPECT_EQ(before, -7.0f);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(dc.download()[0], 4.0f);
}

TEST_F(Cublas, InvalidArgumentsAreRefused) {
    std::vector<float> v(64, 0.0f);
    DeviceMatrix d(v, CUDA_R_32F);
    const float one = 1.0f;
    auto ex = [&](int m, int n, int k, int lda, int ldb, int ldc, cudaDataType at, cudaDataType bt, cudaDataType ct,
                  cublasComputeType_t comp, void* ptr) {
        return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, ptr, at, lda, ptr, bt, ldb, &one, ptr,
                            ct, ldc, comp, CUBLAS_GEMM_DEFAULT);
    };
    const auto F = CUDA_R_32F, H = CUDA_R_16BF;
    EXPECT_EQ(ex(4, 4, 4, 3, 4, 4, F, F, F, CUBLAS_COMPUTE_32F, d.get()), CUBLAS_STATUS_INVALID_VALUE);  // lda < m
    EXPECT_EQ(ex(4, 4, 4, 4, 3, 4, F, F, F, CUBLAS_COMPUTE_32F, d.get()), CUBLAS_STATUS_INVALID_VALUE);  // ldb < k
    EXPECT_EQ(ex(4, 4, 4, 4, 4, 3, F, F, F, CUBLAS_COMPUTE_32F, d.get()), CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
    EXPECT_EQ(ex(-1, 4, 4, 4, 4, 4, F, F, F, CUBLAS_COMPUTE_32F, d.get()), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(ex(4, 4, 4, 4, 4, 4, F, H, F, CUBLAS_COMPUTE_32F, d.get()), CUBLAS_STATUS_NOT_SUPPORTED);  // A != B
    EXPECT_EQ(ex(4, 4, 4, 4, 4, 4, F, F, H, CUBLAS_COMPUTE_32F, d.get()), CUBLAS_STATUS_NOT_SUPPORTED);  // fp32 -> bf16
    EXPECT_EQ(ex(4, 4, 4, 4, 4, 4, F, F, F, CUBLAS_COMPUTE_64F, d.get()), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(ex(4, 4, 4, 4, 4, 4, F, F, F, CUBLAS_COMPUTE_32F, v.data()), CUBLAS_STATUS_INVALID_VALUE);  // host
    EXPECT_EQ(ex(9, 9, 9, 9, 9, 9, F, F, F, CUBLAS_COMPUTE_32F, d.get()), CUBLAS_STATUS_INVALID_VALUE);  // 81 > 64
    EXPECT_EQ(cublasSetStream(nullptr, stream), CUBLAS_STATUS_NOT_INITIALIZED);
    EXPECT_EQ(cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    cublasMath_t mode;
    EXPECT_EQ(cublasGetMathMode(handle, &mode), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(mode, CUBLAS_TF32_TENSOR_OP_MATH);
    EXPECT_EQ(cublasSetWorkspace(handle, d.get(), d.bytes()), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasSetWorkspace(handle, v.data(), 64), CUBLAS_STATUS_INVALID_VALUE);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // nothing was queued by the refused calls
}

}  // namespace
