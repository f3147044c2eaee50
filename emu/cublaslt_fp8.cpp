// emu/cublaslt_fp8.cpp — the emulated cuBLASLt's FP8 rules: which FP8 matmuls a GPU
// accepts, and the scale attributes (see cublaslt_fp8.hpp for the contract of each function).
//
// Kept apart from cublaslt.cpp (descriptors, heuristic, matmul) because the FP8 kernels have a
// rule set of their own. Sources, cuBLAS documentation for CUDA 13 (docs.nvidia.com/cuda/cublas):
//   3.4.17 cublasLtMatmul, "To use tensor- or block-scaled FP8 kernels, the following set of
//     requirements must be satisfied": Tensor Core Usage's alignment; scaling modes as in the
//     Scaling Mode Support Overview; "A must be transposed and B non-transposed (The "TN" format) on
//     Ada (compute capability 8.9), Hopper (compute capability 9.0), and Blackwell GeForce (compute
//     capability 12.x) GPUs"; compute type CUBLAS_COMPUTE_32F; scale type CUDA_R_32F. Its FP8 table:
//     A x B is e4m3 x e4m3, e4m3 x e5m2 or e5m2 x e4m3 (not e5m2 x e5m2), each with
//       C bf16 -> D bf16 (or FP8), bias bf16;  C fp16 -> D fp16 (or FP8), bias fp16;
//       C fp32 -> D fp32, bias bf16
//     (the FP8 D of e4m3 x e4m3 is e4m3 only). Footnote 8: no FP8 D with OUTER_VEC or block scaling.
//   2.1.11 Tensor Core Usage: ((op_A == N ? m : k) * AtypeSize) % 16 == 0,
//     ((op_B == N ? k : n) * BtypeSize) % 16 == 0, (m * CtypeSize) % 16 == 0, (lda * AtypeSize),
//     (ldb * BtypeSize), (ldc * CtypeSize) % 16 == 0, A, B, C 16-byte aligned; "To conduct matrix
//     multiplication with FP8 types ... you must ensure that your matrix dimensions and pointers
//     meet the optimal requirements listed above."
//   3.1.4 Narrow Precision Data Types Usage, Scaling Mode Support Overview: tensorwide scaling
//     (SCALAR_32F) 8.9+; outer vector scaling (OUTER_VEC_32F) 9.0; 128-element 1D and 128x128 2D
//     block scaling 9.0; 32-/16-element block scaling 10.0+. 3.1.4.3: outer vector scaling needs
//     A_SCALE_MODE and B_SCALE_MODE both OUTER_VEC_32F "while all the other scaling modes must not
//     be modified", scale_A of length M and scale_B of length N, and D fp16/bf16/fp32 only.
// Statuses: what a GPU has no kernel for is CUBLAS_STATUS_NOT_SUPPORTED (3.4.17: "If the current
// implementation on the selected device doesn't support the configured operation"), as is what the
// emulator does not compute; scales on a non-FP8 matmul are CUBLAS_STATUS_INVALID_VALUE (cublasLt.h
// on the scale pointers).
#include "emu/cublaslt_fp8.hpp"

#include <cstring>
#include <string>

#include "emu/cublas_gemm.hpp"
#include "emu/emu.hpp"

namespace emu::blas {

namespace {

// The enumerator's name of the types FP8 problems involve, for messages.
const char* type_name(cudaDataType t) {
    switch (t) {
        case CUDA_R_32F: return "CUDA_R_32F";
        case CUDA_R_16F: return "CUDA_R_16F";
        case CUDA_R_16BF: return "CUDA_R_16BF";
        case CUDA_R_8F_E4M3: return "CUDA_R_8F_E4M3";
        case CUDA_R_8F_E5M2: return "CUDA_R_8F_E5M2";
        default: return "another type";
    }
}

// "A=... B=... C=... D=...", for messages.
std::string types(const LtFp8Problem& p) {
    return std::string("A=") + type_name(p.a_type) + " B=" + type_name(p.b_type) + " C=" + type_name(p.c_type) +
           " D=" + type_name(p.d_type);
}

// The name of an attribute check_scale_attribute looks at; nullptr for any other.
const char* scale_attribute_name(cublasLtMatmulDescAttributes_t attr) {
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: return "CUBLASLT_MATMUL_DESC_C_SCALE_POINTER";
        case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: return "CUBLASLT_MATMUL_DESC_D_SCALE_POINTER";
        case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: return "CUBLASLT_MATMUL_DESC_AMAX_D_POINTER";
        case CUBLASLT_MATMUL_DESC_A_SCALE_MODE: return "CUBLASLT_MATMUL_DESC_A_SCALE_MODE";
        case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: return "CUBLASLT_MATMUL_DESC_B_SCALE_MODE";
        case CUBLASLT_MATMUL_DESC_C_SCALE_MODE: return "CUBLASLT_MATMUL_DESC_C_SCALE_MODE";
        case CUBLASLT_MATMUL_DESC_D_SCALE_MODE: return "CUBLASLT_MATMUL_DESC_D_SCALE_MODE";
        default: return nullptr;
    }
}

// "CUBLASLT_MATMUL_DESC_..._POINTER (attribute 19)", for messages (attr: one scale_attribute_name knows).
std::string attribute(cublasLtMatmulDescAttributes_t attr) {
    return std::string(scale_attribute_name(attr)) + " (attribute " + std::to_string(attr) + ")";
}

// The types of the FP8 table (3.4.17) without FP8 outputs, which are not emulated. NOT_SUPPORTED.
cublasStatus_t check_types(const char* fn, const LtFp8Problem& p) {
    if (!is_fp8(p.a_type) || !is_fp8(p.b_type))
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "FP8 needs both A and B FP8 (" + types(p) + ")");
    if (p.a_type == CUDA_R_8F_E5M2 && p.b_type == CUDA_R_8F_E5M2)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "e5m2 x e5m2 is not in cuBLASLt's FP8 table (" + types(p) + ")");
    if (is_fp8(p.d_type))
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "an FP8 D (with D_SCALE_POINTER, AMAX_D_POINTER) is not emulated (" + types(p) + ")");
    if (p.d_type != CUDA_R_16BF && p.d_type != CUDA_R_16F && p.d_type != CUDA_R_32F)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "FP8 D must be bf16, fp16 or fp32 (" + types(p) + ")");
    if (p.c_type != p.d_type)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "FP8 with a C type other than D's (" + types(p) + ")");
    return CUBLAS_STATUS_SUCCESS;
}

// TN (3.4.17: on 8.9, 9.0 and 12.x) and the dimension half of 2.1.11's 16-byte rule (A and B have
// 1-byte elements; D is held to C's rule since C may be D). NOT_SUPPORTED, naming the value.
cublasStatus_t check_layout_rules(const char* fn, const LtFp8Problem& p, int cc) {
    const bool tn_required = cc == 89 || cc == 90 || cc / 10 == 12;
    if (tn_required && (p.transa != CUBLAS_OP_T || p.transb != CUBLAS_OP_N))
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "FP8 on compute capability " + std::to_string(cc) +
                        " needs the \"TN\" format: TRANSA = CUBLAS_OP_T, TRANSB = CUBLAS_OP_N (got " +
                        std::to_string(p.transa) + ", " + std::to_string(p.transb) + ")");
    const bool an = p.transa == CUBLAS_OP_N, bn = p.transb == CUBLAS_OP_N;
    const size_t c_bytes = element_size(p.c_type), d_bytes = element_size(p.d_type);
    struct Rule {
        const char* what;
        int64_t bytes;  // must be a multiple of 16
    };
    const Rule rules[] = {
        {an ? "m * sizeof(A) (op(A) = A)" : "k * sizeof(A) (op(A) = A^T)", an ? p.m : p.k},
        {bn ? "k * sizeof(B) (op(B) = B)" : "n * sizeof(B) (op(B) = B^T)", bn ? p.k : p.n},
        {"m * sizeof(C)", p.m * static_cast<int64_t>(c_bytes)},
        {"lda * sizeof(A)", p.lda},
        {"ldb * sizeof(B)", p.ldb},
        {"ldc * sizeof(C)", p.ldc * static_cast<int64_t>(c_bytes)},
        {"ldd * sizeof(D)", p.ldd * static_cast<int64_t>(d_bytes)},  // D as C: C may be D (Cdesc == Ddesc)
    };
    for (const Rule& r : rules)
        if (r.bytes % 16 != 0)
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                        std::string("FP8 needs 16-byte multiples (cuBLAS docs, Tensor Core Usage): ") + r.what +
                            " = " + std::to_string(r.bytes) + " bytes (m=" + std::to_string(p.m) + " n=" +
                            std::to_string(p.n) + " k=" + std::to_string(p.k) + " lda=" + std::to_string(p.lda) +
                            " ldb=" + std::to_string(p.ldb) + " ldc=" + std::to_string(p.ldc) +
                            " ldd=" + std::to_string(p.ldd) + ")");
    return CUBLAS_STATUS_SUCCESS;
}

// Epilogues with FP8 inputs (DEFAULT and BIAS emulated) and the bias type of 3.4.17's FP8 table.
// NOT_SUPPORTED.
cublasStatus_t check_epilogue(const char* fn, const LtFp8Problem& p) {
    if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT && p.epilogue != CUBLASLT_EPILOGUE_BIAS)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "epilogue " + std::to_string(p.epilogue) +
                        " with FP8 inputs is not emulated (only DEFAULT and BIAS)");
    const cudaDataType want = fp8_default_bias_type(p.d_type);
    if (p.epilogue == CUBLASLT_EPILOGUE_BIAS && p.bias_type != -1 && p.bias_type != want)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    std::string("FP8 with D ") + type_name(p.d_type) + " takes a " + type_name(want) +
                        " bias (cuBLASLt's FP8 table), not BIAS_DATA_TYPE " + std::to_string(p.bias_type));
    return CUBLAS_STATUS_SUCCESS;
}

// The A/B scale modes (3.1.4 table and 3.1.4.3): both SCALAR_32F, or both OUTER_VEC_32F on 9.0 with
// batch count 1 (more batches: not emulated). NOT_SUPPORTED.
cublasStatus_t check_scale_modes(const char* fn, const LtFp8Problem& p, int cc) {
    const int32_t a = p.scales.a_mode, b = p.scales.b_mode;
    constexpr int32_t kScalar = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    constexpr int32_t kOuter = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    if (a == kScalar && b == kScalar) return CUBLAS_STATUS_SUCCESS;  // tensorwide: 8.9+, checked before
    if (a != b || a != kOuter)  // other modes never get past check_scale_attribute
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "outer vector scaling needs A_SCALE_MODE and B_SCALE_MODE both OUTER_VEC_32F (got " +
                        std::to_string(a) + ", " + std::to_string(b) + ")");
    if (cc != 90)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "outer vector scaling (OUTER_VEC_32F) needs compute capability 9.0, the device has " +
                        std::to_string(cc));
    if (p.batch > 1)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "outer vector scaling with batch count > 1 is not emulated");
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t check_scale_attribute(cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size,
                                     const char* fn) {
    if (scale_attribute_name(attr) == nullptr || buf == nullptr) return CUBLAS_STATUS_SUCCESS;
    if (attr == CUBLASLT_MATMUL_DESC_C_SCALE_POINTER || attr == CUBLASLT_MATMUL_DESC_D_SCALE_POINTER ||
        attr == CUBLASLT_MATMUL_DESC_AMAX_D_POINTER) {
        const void* v = nullptr;
        if (size != sizeof v) return CUBLAS_STATUS_SUCCESS;
        std::memcpy(&v, buf, sizeof v);
        if (v != nullptr)
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, attribute(attr) + ": not emulated (only NULL)");
        return CUBLAS_STATUS_SUCCESS;
    }
    int32_t mode = 0;
    if (size != sizeof mode) return CUBLAS_STATUS_SUCCESS;
    std::memcpy(&mode, buf, sizeof mode);
    if (mode < 0 || mode >= CUBLASLT_MATMUL_MATRIX_SCALE_END)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, attribute(attr) + ": no scale mode " + std::to_string(mode));
    const bool ab = attr == CUBLASLT_MATMUL_DESC_A_SCALE_MODE || attr == CUBLASLT_MATMUL_DESC_B_SCALE_MODE;
    if (mode == CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F || (ab && mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F))
        return CUBLAS_STATUS_SUCCESS;
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                attribute(attr) + ": scale mode " + std::to_string(mode) + " is not emulated (" +
                    (ab ? "SCALAR_32F and OUTER_VEC_32F are" : "only SCALAR_32F is") + ")");
}

cublasStatus_t check_no_fp8_scales(const char* fn, const LtScales& s) {
    if (s.a != nullptr || s.b != nullptr)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "A/B_SCALE_POINTER set on a matmul whose A and B are not FP8");
    if (s.a_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F || s.b_mode != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "A/B_SCALE_MODE set on a matmul whose A and B are not FP8");
    return CUBLAS_STATUS_SUCCESS;
}

cudaDataType fp8_default_bias_type(cudaDataType d_type) {
    return d_type == CUDA_R_32F ? CUDA_R_16BF : d_type;
}

cublasStatus_t check_fp8_problem(const char* fn, const LtFp8Problem& p) {
    const int cc = emu::compute_capability();
    if (cc < 89)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "FP8 matmul needs compute capability 8.9 or higher, the device has " + std::to_string(cc) +
                        " (CUDA_EMU_CC)");
    if (p.compute_type != CUBLAS_COMPUTE_32F)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "FP8 needs compute type CUBLAS_COMPUTE_32F, not " + std::to_string(p.compute_type));
    if (cublasStatus_t s = check_types(fn, p); s != CUBLAS_STATUS_SUCCESS) return s;
    if (cublasStatus_t s = check_layout_rules(fn, p, cc); s != CUBLAS_STATUS_SUCCESS) return s;
    if (cublasStatus_t s = check_epilogue(fn, p); s != CUBLAS_STATUS_SUCCESS) return s;
    return check_scale_modes(fn, p, cc);
}

cublasStatus_t check_fp8_pointers(const char* fn, const void* a, const void* b, const void* c, const void* d) {
    for (auto [p, name] : {std::pair{a, "A"}, {b, "B"}, {c, "C"}, {d, "D"}})
        if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0)
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                        std::string("FP8 needs 16-byte aligned pointers (cuBLAS docs, Tensor Core Usage): ") + name +
                            " is not");
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace emu::blas
