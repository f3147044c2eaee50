// emu/cublas.cpp — emulated cuBLAS: handle, stream, workspace, math mode and the GEMMs
// the CUDA backend calls (cublasSgemm, cublasGemmEx, cublasGemmStridedBatchedEx).
//
// Compiled against the real cublas_v2.h, so every function has the exact real signature (the
// header's macros turn cublasCreate into cublasCreate_v2 etc.). Arguments are validated like
// cuBLAS does (CUBLAS_STATUS_INVALID_VALUE / NOT_SUPPORTED); alpha and beta are host pointers
// (the default pointer mode) read at call time; the product itself is queued on the handle's
// stream and computed at the next synchronization (cublas_gemm.hpp). A buffer that is not emulated
// device memory is reported at the call, as CUBLAS_STATUS_INVALID_VALUE with the emulator's reason.
#include <cublas_v2.h>

#include <algorithm>
#include <string>

#include "emu/cublas_gemm.hpp"
#include "emu/emu.hpp"

/// The handle: what cuBLAS keeps per context that changes results or ordering.
struct cublasContext {
    cudaStream_t stream = nullptr;  ///< where GEMMs are queued (nullptr: the legacy default stream)
    cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

namespace {

using emu::blas::fail;

bool valid_op(cublasOperation_t op) {
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;  // C == T for real types
}

cublasOperation_t real_op(cublasOperation_t op) { return op == CUBLAS_OP_N ? CUBLAS_OP_N : CUBLAS_OP_T; }

// The common part of all three GEMM entry points: cuBLAS's argument rules, then submit.
cublasStatus_t gemm(const char* fn, cublasHandle_t handle, cublasOperation_t transa,
                    cublasOperation_t transb, int m, int n, int k, const void* alpha,
                    const void* A, cudaDataType Atype, int lda, long long strideA, const void* B,
                    cudaDataType Btype, int ldb, long long strideB, const void* beta, void* C,
                    cudaDataType Ctype, int ldc, long long strideC, int batch,
                    cublasComputeType_t compute) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!valid_op(transa) || !valid_op(transb))
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "transa/transb must be CUBLAS_OP_N, _T or _C");
    if (m < 0 || n < 0 || k < 0 || batch < 0)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                    "negative size: m=" + std::to_string(m) + " n=" + std::to_string(n) +
                        " k=" + std::to_string(k) + " batchCount=" + std::to_string(batch));
    const int a_rows = transa == CUBLAS_OP_N ? m : k;
    const int b_rows = transb == CUBLAS_OP_N ? k : n;
    if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m))
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                    "leading dimension too small: lda=" + std::to_string(lda) + " (needs >= " +
                        std::to_string(a_rows) + "), ldb=" + std::to_string(ldb) + " (needs >= " +
                        std::to_string(b_rows) + "), ldc=" + std::to_string(ldc) + " (needs >= " +
                        std::to_string(m) + ")");
    if (strideA < 0 || strideB < 0 || strideC < 0)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "negative batch stride (not emulated)");
    if (!emu::blas::compute_type_supported(compute))
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "compute type " + std::to_string(compute) + " (only the CUBLAS_COMPUTE_32F family)");
    if (!emu::blas::types_supported(Atype, Btype, Ctype))
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "type combination A=" + std::to_string(Atype) + " B=" + std::to_string(Btype) +
                        " C=" + std::to_string(Ctype));
    if (alpha == nullptr || beta == nullptr)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "alpha or beta is null");

    emu::blas::Gemm g;
    g.transa = real_op(transa);
    g.transb = real_op(transb);
    g.m = m;
    g.n = n;
    g.k = k;
    g.batch = batch;
    g.alpha = *static_cast<const float*>(alpha);  // host pointer mode: read now, like cuBLAS
    g.beta = *static_cast<const float*>(beta);
    g.a = {A, Atype, lda, strideA};
    g.b = {B, Btype, ldb, strideB};
    g.c = {C, Ctype, ldc, strideC};
    g.d = g.c;  // cuBLAS writes the result over C
    try {
        emu::blas::submit(handle->stream, g, fn);
    } catch (const emu::Error& e) {  // a buffer outside device memory, a destroyed stream
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, e.what());
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

/// Creates a handle bound to the legacy default stream. Errors: INVALID_VALUE for a null pointer.
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
    if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasContext{};
    return CUBLAS_STATUS_SUCCESS;
}

/// Destroys a handle; work it queued stays queued (it holds no reference to the handle).
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

/// Later GEMMs on this handle are queued on `streamId`.
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = streamId;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (streamId == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *streamId = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

/// Accepts a user workspace; the emulation needs none but checks it is device memory.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    try {
        if (workspace != nullptr && workspaceSizeInBytes > 0)
            emu::check_device_range(workspace, workspaceSizeInBytes, "workspace");
    } catch (const emu::Error& e) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace", e.what());
    }
    return CUBLAS_STATUS_SUCCESS;
}

/// Stores the math mode; every mode computes in plain fp32 here (tensor-op modes only allow
/// cuBLAS to round inputs more, which the tests' tolerances cover).
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    const int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH && base != CUBLAS_PEDANTIC_MATH &&
        base != CUBLAS_TF32_TENSOR_OP_MATH)
        return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode", "unknown mode " + std::to_string(mode));
    handle->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

/// C (m x n, fp32) = alpha op(A) op(B) + beta C, column-major; beta == 0: C is not read.
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                              int m, int n, int k, const float* alpha, const float* A, int lda,
                              const float* B, int ldb, const float* beta, float* C, int ldc) {
    return gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B,
                CUDA_R_32F, ldb, 0, beta, C, CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F);
}

/// As cublasSgemm with typed A, B, C (fp32/bf16/fp16 in, same or fp32 out) and fp32 compute.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                            int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                            int lda, const void* B, cudaDataType Btype, int ldb, const void* beta,
                            void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t /*algo: every algorithm computes the same here*/) {
    return gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype,
                ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType);
}

/// batchCount GEMMs; matrix i of A/B/C starts strideA/strideB/strideC elements after matrix i-1.
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype, int lda,
                                          long long int strideA, const void* B, cudaDataType Btype,
                                          int ldb, long long int strideB, const void* beta, void* C,
                                          cudaDataType Ctype, int ldc, long long int strideC,
                                          int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t /*algo*/) {
    return gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType);
}

/// Status names for error messages (CUBLAS_CHECK in the backend).
const char* cublasGetStatusName(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_<unknown>";
}

const char* cublasGetStatusString(cublasStatus_t status) { return cublasGetStatusName(status); }

}  // extern "C"
