// emu/cublas_gemm.hpp — the one GEMM that emulated cuBLAS and cuBLASLt both run.
//
// cublasGemmEx, cublasSgemm, cublasGemmStridedBatchedEx and cublasLtMatmul differ only in how
// they describe a problem; once described, all of them compute, for every batch entry b,
//     D = epilogue(alpha * op(A) * op(B) + beta * C)
// in column-major storage with fp32 accumulation. This header is that common description and the
// host function that computes it. It runs at once on host memory: the callers validate arguments,
// check device ranges and queue it on a stream (see cublas.cpp, cublaslt.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <cublasLt.h>
#include <cublas_v2.h>

namespace emu::blas {

/// One column-major matrix operand: element (r, c) of batch entry b lives at
/// data + b*batch_stride + r + c*ld, all counted in elements of `type`.
struct Operand {
    const void* data = nullptr;
    cudaDataType type = CUDA_R_32F;
    int64_t ld = 0;
    int64_t batch_stride = 0;
};

/// A complete GEMM problem (shapes follow cuBLAS: op(A) is m x k, op(B) is k x n, C and D m x n).
struct Gemm {
    cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    int64_t m = 0, n = 0, k = 0;
    int64_t batch = 1;
    float alpha = 1.0f, beta = 0.0f;  ///< beta == 0: C is never read (it may hold NaN)
    Operand a, b, c;
    Operand d;  ///< written; d.data is really mutable
    /// DEFAULT, BIAS, GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU, DGELU_BGRAD, BGRADA, BGRADB.
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    /// BIAS*: read, length m. BGRADA: written, length m. BGRADB: written, length n.
    /// DGELU_BGRAD: written, length m (row sums of D).
    void* bias = nullptr;
    cudaDataType bias_type = CUDA_R_32F;
    int64_t bias_batch_stride = 0;
    /// GELU_AUX*: written, the GELU input; DGELU*: read. m x n with its own leading dimension.
    void* aux = nullptr;
    cudaDataType aux_type = CUDA_R_32F;
    int64_t aux_ld = 0;
    int64_t aux_batch_stride = 0;
    /// FP8 dequantization scales (cuBLASLt's A_SCALE_POINTER, B_SCALE_POINTER): emulated device
    /// floats, read when the GEMM runs; null means 1. One float each (tensorwide scaling), or with
    /// scale_outer_vec m floats for A and n for B, the same for every batch entry:
    /// D(i,j) = epilogue((alpha * a_scale[i] * b_scale[j]) * sum_p op(A)(i,p) op(B)(p,j) + beta C(i,j)).
    const void* a_scale = nullptr;
    const void* b_scale = nullptr;
    bool scale_outer_vec = false;
};

/// True for the OFP8 element types CUDA_R_8F_E4M3 and CUDA_R_8F_E5M2 (cuBLASLt inputs only).
bool is_fp8(cudaDataType t);

/// Bytes of one element of `t` (fp32 4, bf16 and fp16 2, e4m3 and e5m2 1), 0 for any other type.
size_t element_size(cudaDataType t);

/// Elements spanned by `batch` column-major rows x cols matrices with leading dimension ld,
/// batch_stride apart: the size a buffer must have. 0 when the matrix is empty.
int64_t span_elements(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t batch_stride);

/// The epilogue's properties, so callers can validate without repeating the bit patterns.
bool epilogue_supported(cublasLtEpilogue_t e);
bool epilogue_reads_bias(cublasLtEpilogue_t e);   ///< BIAS, GELU_BIAS, GELU_AUX_BIAS
bool epilogue_writes_bias(cublasLtEpilogue_t e);  ///< BGRADA, BGRADB, DGELU_BGRAD
bool epilogue_uses_aux(cublasLtEpilogue_t e);     ///< GELU_AUX, GELU_AUX_BIAS, DGELU, DGELU_BGRAD

/// GELU, tanh approximation (Hendrycks & Gimpel 2016, eq. in sec. 2):
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its derivative with respect to x.
float gelu(float x);
float gelu_grad(float x);

/// True for the fp32-accumulating compute types (32F, 32F_PEDANTIC, 32F_FAST_16F/16BF/TF32):
/// all of them compute in plain fp32 here.
bool compute_type_supported(cublasComputeType_t t);

/// True when A and B share one type (fp32, bf16, fp16) and C/D is that type or fp32, the
/// combinations cuBLAS offers with fp32 compute. FP8 is not among them: cuBLASLt's FP8 rules are
/// checked by cublaslt_fp8.hpp.
bool types_supported(cudaDataType a, cudaDataType b, cudaDataType c);

/// Reports why `function` refused its arguments on stderr ("cuda_emu: <function>: <why>") and
/// returns `status`, so that a failing CUBLAS_CHECK in the backend comes with a reason.
cublasStatus_t fail(cublasStatus_t status, const char* function, const std::string& why);

/// Checks that A, B (when read), C (when beta != 0), D, bias, aux and the scales lie inside emulated
/// device allocations and queues run(g) on `stream`; the product is computed when the stream is
/// synchronized. Errors: emu::Error from emu::check_device_range / emu::enqueue.
void submit(cudaStream_t stream, const Gemm& g, const char* what);

/// Computes the problem on host memory, now. Preconditions (checked by the callers): types are
/// fp32/bf16/fp16 (A and B also e4m3/e5m2, decoded exactly by model/fp8.hpp), leading dimensions
/// cover the matrices, strides are non-negative. Accumulates each dot product in fp32 over k in
/// increasing order, so results do not depend on blocking (products of two FP8 values are exact in
/// fp32); the scales multiply alpha first, (alpha * a_scale) * b_scale in fp32; bf16/fp16 outputs
/// are rounded to nearest even once, at the end.
void run(const Gemm& g);

}  // namespace emu::blas
