// emu/cublaslt_fp8.hpp — the emulated cuBLASLt's rules for FP8 matmuls and for the
// scale attributes (implemented in cublaslt_fp8.cpp; cublaslt.cpp calls them).
//
// cuBLASLt's FP8 matmul is a separate kernel family with its own requirements (cuBLAS
// documentation, CUDA 13: 3.4.17 cublasLtMatmul "To use tensor- or block-scaled FP8 kernels" and
// its FP8 type table; 2.1.11 Tensor Core Usage for the 16-byte alignment; 3.1.4 Narrow Precision
// Data Types Usage for the scaling modes). What a GPU would refuse is refused here too, so that a
// bad call fails in CI rather than on the rare GPU run; what is not emulated (FP8 outputs, C/D
// scales, amax, block scaling, GELU epilogues with FP8 inputs) is refused with
// CUBLAS_STATUS_NOT_SUPPORTED. The product itself is the shared GEMM's (cublas_gemm.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include <cublasLt.h>

namespace emu::blas {

/// The A/B dequantization scale attributes of a matmul descriptor (CUBLASLT_MATMUL_DESC_A/B_SCALE_
/// POINTER: device floats or null; A/B_SCALE_MODE: a cublasLtMatmulMatrixScale_t).
struct LtScales {
    const void* a = nullptr;
    const void* b = nullptr;
    int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
};

/// What the FP8 rules need of a described cublasLtMatmul problem: op(A) m x k, op(B) k x n, C and
/// D m x n; leading dimensions in elements; transa/transb as set on the descriptor (N, T or C);
/// bias_type as set (-1: not set).
struct LtFp8Problem {
    int32_t compute_type;
    int32_t transa, transb;
    cudaDataType a_type, b_type, c_type, d_type;
    int64_t m, n, k, lda, ldb, ldc, ldd;
    int32_t batch;
    cublasLtEpilogue_t epilogue;
    int32_t bias_type;
    LtScales scales;
};

/// Checks one cublasLtMatmulDescSetAttribute value of the scale family before it is stored:
/// C_SCALE_POINTER, D_SCALE_POINTER and AMAX_D_POINTER must be NULL, C_SCALE_MODE and D_SCALE_MODE
/// SCALAR_32F, A_SCALE_MODE and B_SCALE_MODE SCALAR_32F or OUTER_VEC_32F (anything else is not
/// emulated: CUBLAS_STATUS_NOT_SUPPORTED naming the attribute; a mode beyond the enum:
/// CUBLAS_STATUS_INVALID_VALUE). Other attributes, and values of the wrong size (left to the
/// caller's size check), pass. `fn` names the caller in the message on stderr.
cublasStatus_t check_scale_attribute(cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size,
                                     const char* fn);

/// For a problem whose A and B are not FP8: scales set on it are an error (docs 3.1.4: "If any
/// scale is set for a non-narrow precisions matmul, cuBLAS will return an error"; cublasLt.h names
/// CUBLAS_STATUS_INVALID_VALUE), and so is OUTER_VEC_32F.
cublasStatus_t check_no_fp8_scales(const char* fn, const LtScales& s);

/// The bias type an FP8 matmul uses when BIAS_DATA_TYPE is not set (docs 3.4.17, FP8 table): D's
/// type for bf16/fp16 D, CUDA_R_16BF for fp32 D.
cudaDataType fp8_default_bias_type(cudaDataType d_type);

/// All FP8 rules that the descriptors decide (cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul
/// alike), for a problem with A or B FP8 whose layouts and shapes are already valid. Returns
/// CUBLAS_STATUS_NOT_SUPPORTED, with the reason on stderr, for: a device below compute capability
/// 8.9 (emu::compute_capability, $CUDA_EMU_CC); compute type other than CUBLAS_COMPUTE_32F; a type
/// combination outside the FP8 table (e5m2 x e5m2, FP8 x non-FP8, C type != D type) or an FP8 D
/// (not emulated); not "TN" (transa CUBLAS_OP_T, transb CUBLAS_OP_N) on 8.9, 9.0 and 12.x; a
/// dimension or leading dimension off the 16-byte rule of Tensor Core Usage; an epilogue other than
/// DEFAULT and BIAS (not emulated with FP8 inputs); a bias type other than the table's; OUTER_VEC
/// scaling on a device other than 9.0, on only one of A and B, or with batch count > 1 (not
/// emulated); block scaling modes (not emulated).
cublasStatus_t check_fp8_problem(const char* fn, const LtFp8Problem& p);

/// The pointer half of Tensor Core Usage's 16-byte rule, checked by cublasLtMatmul (the heuristic
/// does not see pointers): A, B, C (when not null) and D must be 16-byte aligned, else
/// CUBLAS_STATUS_NOT_SUPPORTED.
cublasStatus_t check_fp8_pointers(const char* fn, const void* a, const void* b, const void* c, const void* d);

}  // namespace emu::blas
