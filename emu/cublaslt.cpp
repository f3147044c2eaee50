// emu/cublaslt.cpp — emulated cuBLASLt: matmul descriptors, matrix layouts,
// preferences, the heuristic query and cublasLtMatmul with its GELU/bias epilogues.
//
// The descriptor types of cublasLt.h are "semi-opaque" fixed-size structs (so that the *Init
// functions can fill caller-owned storage); each holds one of the plain structs below, built in
// place. Attributes are set and read with the exact sizes the header documents; an attribute
// that would change results in a way not emulated (C/D scales, amax, block scaling, ...) is refused
// with CUBLAS_STATUS_NOT_SUPPORTED instead of being ignored. cublasLtMatmul validates like cuBLASLt
// (FP8 problems by cublaslt_fp8.hpp's rules), then queues the shared GEMM (cublas_gemm.hpp) on its
// stream.
#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "emu/cublas_gemm.hpp"
#include "emu/cublaslt_fp8.hpp"
#include "emu/emu.hpp"

struct cublasLtContext {
    int unused = 0;  // the emulation keeps no per-handle state
};

namespace {

using emu::blas::fail;

/// Algorithms the heuristic offers at most, and the tag in the first 8 bytes of each.
constexpr int kEmulatedAlgos = 3;
constexpr char kAlgoTag[9] = "cuda_emu";

/// A matrix layout (CUBLASLT_MATRIX_LAYOUT_*), field types as documented in cublasLt.h.
struct Layout {
    uint32_t type;
    int32_t order = CUBLASLT_ORDER_COL;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch_count = 1;
    int64_t batch_stride = 0;  ///< STRIDED_BATCH_OFFSET, in elements
    int64_t plane_offset = 0;
    uint32_t batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
};

/// A matmul descriptor (CUBLASLT_MATMUL_DESC_*). -1 data types mean "D's type".
struct MatmulDesc {
    int32_t compute_type;
    int32_t scale_type;
    int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, transc = CUBLAS_OP_N;
    int32_t fill_mode = CUBLAS_FILL_MODE_FULL;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    void* bias = nullptr;
    int64_t bias_batch_stride = 0;
    int32_t bias_type = -1;
    void* aux = nullptr;
    int64_t aux_ld = 0;
    int64_t aux_batch_stride = 0;
    int32_t aux_type = -1;
    int32_t sm_count_target = 0;
    int8_t fast_accum = 0;  ///< FP8 only; accepted, no effect (the emulation always accumulates in fp32)
    emu::blas::LtScales scales;  ///< A/B_SCALE_POINTER and A/B_SCALE_MODE (FP8 only)
    const void* c_scale = nullptr;  ///< C/D_SCALE_POINTER, AMAX_D_POINTER: only NULL is accepted
    const void* d_scale = nullptr;
    void* amax_d = nullptr;
    int32_t c_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;  ///< only SCALAR_32F is accepted
    int32_t d_scale_mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
};

/// A heuristic preference: only the workspace limit matters here.
struct Preference {
    uint32_t search_mode = CUBLASLT_SEARCH_BEST_FIT;
    uint64_t max_workspace = 0;
};

static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(MatmulDesc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Preference) <= sizeof(cublasLtMatmulPreferenceOpaque_t));

Layout& get(cublasLtMatrixLayout_t p) { return *std::launder(reinterpret_cast<Layout*>(p->data)); }
MatmulDesc& get(cublasLtMatmulDesc_t p) { return *std::launder(reinterpret_cast<MatmulDesc*>(p->data)); }
Preference& get(cublasLtMatmulPreference_t p) {
    return *std::launder(reinterpret_cast<Preference*>(p->data));
}

/// One attribute's storage: where it lives and its documented size in bytes.
struct Field {
    void* ptr;
    size_t size;
};

template <class T>
Field field(T& v) {
    return {&v, sizeof(T)};
}

cublasStatus_t set_field(Field f, const void* buf, size_t size, const char* fn, int attr) {
    if (f.ptr == nullptr)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "attribute " + std::to_string(attr) + " is not emulated");
    if (buf == nullptr || size != f.size)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                    "attribute " + std::to_string(attr) + ": size " + std::to_string(size) +
                        " bytes, expected " + std::to_string(f.size));
    std::memcpy(f.ptr, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

// sizeInBytes == 0 asks for the size only (returned in *written), as documented in cublasLt.h.
cublasStatus_t get_field(Field f, void* buf, size_t size, size_t* written, const char* fn, int attr) {
    if (f.ptr == nullptr)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "attribute " + std::to_string(attr) + " is not emulated");
    if (size == 0) {
        if (written == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
        *written = f.size;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (buf == nullptr || size != f.size) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(buf, f.ptr, size);
    if (written != nullptr) *written = size;
    return CUBLAS_STATUS_SUCCESS;
}

Field layout_field(Layout& l, cublasLtMatrixLayoutAttribute_t attr) {
    switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_TYPE: return field(l.type);
        case CUBLASLT_MATRIX_LAYOUT_ORDER: return field(l.order);
        case CUBLASLT_MATRIX_LAYOUT_ROWS: return field(l.rows);
        case CUBLASLT_MATRIX_LAYOUT_COLS: return field(l.cols);
        case CUBLASLT_MATRIX_LAYOUT_LD: return field(l.ld);
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return field(l.batch_count);
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return field(l.batch_stride);
        case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return field(l.plane_offset);
        case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return field(l.batch_mode);
    }
    return {nullptr, 0};
}

Field desc_field(MatmulDesc& d, cublasLtMatmulDescAttributes_t attr) {
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return field(d.compute_type);
        case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return field(d.scale_type);
        case CUBLASLT_MATMUL_DESC_POINTER_MODE: return field(d.pointer_mode);
        case CUBLASLT_MATMUL_DESC_TRANSA: return field(d.transa);
        case CUBLASLT_MATMUL_DESC_TRANSB: return field(d.transb);
        case CUBLASLT_MATMUL_DESC_TRANSC: return field(d.transc);
        case CUBLASLT_MATMUL_DESC_FILL_MODE: return field(d.fill_mode);
        case CUBLASLT_MATMUL_DESC_EPILOGUE: return field(d.epilogue);
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field(d.bias);
        case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return field(d.bias_batch_stride);
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field(d.bias_type);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return field(d.aux);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return field(d.aux_ld);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return field(d.aux_batch_stride);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return field(d.aux_type);
        case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return field(d.sm_count_target);
        case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return field(d.fast_accum);  // fp8 only: no effect
        case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return field(d.scales.a);
        case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return field(d.scales.b);
        case CUBLASLT_MATMUL_DESC_A_SCALE_MODE: return field(d.scales.a_mode);
        case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: return field(d.scales.b_mode);
        case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: return field(d.c_scale);
        case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: return field(d.d_scale);
        case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: return field(d.amax_d);
        case CUBLASLT_MATMUL_DESC_C_SCALE_MODE: return field(d.c_scale_mode);
        case CUBLASLT_MATMUL_DESC_D_SCALE_MODE: return field(d.d_scale_mode);
        default: return {nullptr, 0};
    }
}

Field preference_field(Preference& p, cublasLtMatmulPreferenceAttributes_t attr) {
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return field(p.search_mode);
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return field(p.max_workspace);
        default: return {nullptr, 0};  // alignment, waves, masks: nothing to filter among one algo
    }
}

std::string dims(const Layout& l) {
    return std::to_string(l.rows) + "x" + std::to_string(l.cols) + " (ld " + std::to_string(l.ld) + ")";
}

// Checks one layout on its own: column-major, strided batches, a supported type, ld >= rows.
cublasStatus_t check_layout(const Layout& l, const char* name, const char* fn) {
    const std::string who = std::string("matrix ") + name + ": ";
    if (l.order != CUBLASLT_ORDER_COL)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, who + "only CUBLASLT_ORDER_COL is emulated");
    if (l.batch_mode != CUBLASLT_BATCH_MODE_STRIDED || l.plane_offset != 0)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, who + "only strided real batches are emulated");
    if (emu::blas::element_size(static_cast<cudaDataType>(l.type)) == 0)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, who + "type " + std::to_string(l.type));
    if (l.ld < 1 || static_cast<uint64_t>(l.ld) < l.rows)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, who + "ld < rows: " + dims(l));
    if (l.batch_count < 1 || l.batch_stride < 0)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                    who + "batch count " + std::to_string(l.batch_count) + ", stride " +
                        std::to_string(l.batch_stride));
    return CUBLAS_STATUS_SUCCESS;
}

// Everything cublasLtMatmul and the heuristic check before any pointer is looked at. Fills the
// problem's shapes, types and epilogue settings into *g (pointers and alpha/beta stay unset).
cublasStatus_t describe(const char* fn, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                        cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                        cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc, emu::blas::Gemm* g) {
    if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !Adesc || !Bdesc || !Cdesc || !Ddesc)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "null descriptor");
    const MatmulDesc& md = get(desc);
    const Layout &A = get(Adesc), &B = get(Bdesc), &C = get(Cdesc), &D = get(Ddesc);

    if (!emu::blas::compute_type_supported(static_cast<cublasComputeType_t>(md.compute_type)))
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                    "compute type " + std::to_string(md.compute_type) + " (only the CUBLAS_COMPUTE_32F family)");
    if (md.scale_type != CUDA_R_32F)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "scale type must be CUDA_R_32F with 32F compute");
    if (md.pointer_mode != CUBLASLT_POINTER_MODE_HOST)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "only CUBLASLT_POINTER_MODE_HOST is emulated");
    auto op_ok = [](int32_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
    if (!op_ok(md.transa) || !op_ok(md.transb) || md.transc != CUBLAS_OP_N)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "TRANSA/TRANSB must be N, T or C; TRANSC must be N");
    if (md.fill_mode != CUBLAS_FILL_MODE_FULL)
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "only CUBLAS_FILL_MODE_FULL is emulated");
    const auto epi = static_cast<cublasLtEpilogue_t>(md.epilogue);
    if (!emu::blas::epilogue_supported(epi))
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "epilogue " + std::to_string(md.epilogue) + " is not emulated");

    for (auto [l, name] : {std::pair{&A, "A"}, {&B, "B"}, {&C, "C"}, {&D, "D"}})
        if (cublasStatus_t s = check_layout(*l, name, fn); s != CUBLAS_STATUS_SUCCESS) return s;
    const bool fp8 = emu::blas::is_fp8(static_cast<cudaDataType>(A.type)) ||
                     emu::blas::is_fp8(static_cast<cudaDataType>(B.type));
    if (!fp8) {  // FP8 type combinations: check_fp8_problem below
        if (cublasStatus_t s = emu::blas::check_no_fp8_scales(fn, md.scales); s != CUBLAS_STATUS_SUCCESS) return s;
        if (!emu::blas::types_supported(static_cast<cudaDataType>(A.type), static_cast<cudaDataType>(B.type),
                                        static_cast<cudaDataType>(D.type)) ||
            C.type != D.type)
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn,
                        "type combination A=" + std::to_string(A.type) + " B=" + std::to_string(B.type) +
                            " C=" + std::to_string(C.type) + " D=" + std::to_string(D.type));
    }

    // op(A) is m x k, op(B) k x n, C and D m x n.
    const bool ta = md.transa != CUBLAS_OP_N, tb = md.transb != CUBLAS_OP_N;
    const uint64_t m = D.rows, n = D.cols, k = ta ? A.rows : A.cols;
    if ((ta ? A.cols : A.rows) != m || (tb ? B.cols : B.rows) != k || (tb ? B.rows : B.cols) != n ||
        C.rows != m || C.cols != n)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                    std::string("shapes do not match (TRANSA=") + (ta ? "T" : "N") + ", TRANSB=" +
                        (tb ? "T" : "N") + "): A " + dims(A) + ", B " + dims(B) + ", C " + dims(C) +
                        ", D " + dims(D));
    if (A.batch_count != D.batch_count || B.batch_count != D.batch_count || C.batch_count != D.batch_count)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "batch counts of A, B, C and D differ");

    const auto d_type = static_cast<cudaDataType>(D.type);
    if (fp8) {
        const emu::blas::LtFp8Problem p{md.compute_type, md.transa, md.transb,
                                        static_cast<cudaDataType>(A.type), static_cast<cudaDataType>(B.type),
                                        static_cast<cudaDataType>(C.type), d_type,
                                        static_cast<int64_t>(m), static_cast<int64_t>(n), static_cast<int64_t>(k),
                                        A.ld, B.ld, C.ld, D.ld, D.batch_count, epi, md.bias_type, md.scales};
        if (cublasStatus_t s = emu::blas::check_fp8_problem(fn, p); s != CUBLAS_STATUS_SUCCESS) return s;
    }
    const cudaDataType default_bias = fp8 ? emu::blas::fp8_default_bias_type(d_type) : d_type;
    const cudaDataType bias_type = md.bias_type == -1 ? default_bias : static_cast<cudaDataType>(md.bias_type);
    const cudaDataType aux_type = md.aux_type == -1 ? d_type : static_cast<cudaDataType>(md.aux_type);
    if (emu::blas::epilogue_reads_bias(epi) || emu::blas::epilogue_writes_bias(epi)) {
        if (md.bias == nullptr)
            return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "epilogue needs CUBLASLT_MATMUL_DESC_BIAS_POINTER");
        if (!fp8 && bias_type != d_type && bias_type != CUDA_R_32F)  // FP8: checked by check_fp8_problem
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "bias data type must be D's type or CUDA_R_32F");
    }
    if (emu::blas::epilogue_uses_aux(epi)) {
        if (md.aux == nullptr)
            return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "epilogue needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
        if (md.aux_ld < static_cast<int64_t>(m) || md.aux_ld % 8 != 0)
            return fail(CUBLAS_STATUS_INVALID_VALUE, fn,
                        "EPILOGUE_AUX_LD " + std::to_string(md.aux_ld) + " must be >= m (" +
                            std::to_string(m) + ") and divisible by 8");
        if (aux_type != d_type)
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, fn, "GELU aux data type must be D's type");
    }

    g->transa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    g->transb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    g->m = static_cast<int64_t>(m);
    g->n = static_cast<int64_t>(n);
    g->k = static_cast<int64_t>(k);
    g->batch = D.batch_count;
    g->a = {nullptr, static_cast<cudaDataType>(A.type), A.ld, A.batch_stride};
    g->b = {nullptr, static_cast<cudaDataType>(B.type), B.ld, B.batch_stride};
    g->c = {nullptr, static_cast<cudaDataType>(C.type), C.ld, C.batch_stride};
    g->d = {nullptr, d_type, D.ld, D.batch_stride};
    g->epilogue = epi;
    g->bias = md.bias;
    g->bias_type = bias_type;
    g->bias_batch_stride = md.bias_batch_stride;
    g->aux = md.aux;
    g->aux_type = aux_type;
    g->aux_ld = md.aux_ld;
    g->aux_batch_stride = md.aux_batch_stride;
    g->a_scale = md.scales.a;
    g->b_scale = md.scales.b;
    g->scale_outer_vec = md.scales.a_mode == CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
    if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *lightHandle = new cublasLtContext{};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
    if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete lightHandle;
    return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

// ---- matrix layouts ----

/// Fills caller storage with a column-major rows x cols layout of `type`, leading dimension ld.
cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t matLayout, size_t size,
                                                 cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (matLayout == nullptr || size < sizeof(Layout)) return CUBLAS_STATUS_ALLOC_FAILED;
    Layout* l = new (matLayout->data) Layout{};
    l->type = static_cast<uint32_t>(type);
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    emu::count_call(&emu::ApiCalls::lt_layout_create);
    if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *matLayout = new cublasLtMatrixLayoutOpaque_t{};
    return cublasLtMatrixLayoutInit_internal(*matLayout, sizeof(**matLayout), type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    emu::count_call(&emu::ApiCalls::lt_layout_destroy);
    delete matLayout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                size_t sizeInBytes) {
    if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    return set_field(layout_field(get(matLayout), attr), buf, sizeInBytes, "cublasLtMatrixLayoutSetAttribute", attr);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                size_t sizeInBytes, size_t* sizeWritten) {
    if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    return get_field(layout_field(get(matLayout), attr), buf, sizeInBytes, sizeWritten,
                     "cublasLtMatrixLayoutGetAttribute", attr);
}

// ---- matmul descriptors ----

cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t matmulDesc, size_t size,
                                               cublasComputeType_t computeType, cudaDataType_t scaleType) {
    if (matmulDesc == nullptr || size < sizeof(MatmulDesc)) return CUBLAS_STATUS_ALLOC_FAILED;
    MatmulDesc* d = new (matmulDesc->data) MatmulDesc{};
    d->compute_type = computeType;
    d->scale_type = scaleType;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    emu::count_call(&emu::ApiCalls::lt_desc_create);
    if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *matmulDesc = new cublasLtMatmulDescOpaque_t{};
    return cublasLtMatmulDescInit_internal(*matmulDesc, sizeof(**matmulDesc), computeType, scaleType);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    emu::count_call(&emu::ApiCalls::lt_desc_destroy);
    delete matmulDesc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
    if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    const char* fn = "cublasLtMatmulDescSetAttribute";
    if (cublasStatus_t s = emu::blas::check_scale_attribute(attr, buf, sizeInBytes, fn); s != CUBLAS_STATUS_SUCCESS)
        return s;
    return set_field(desc_field(get(matmulDesc), attr), buf, sizeInBytes, fn, attr);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten) {
    if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    return get_field(desc_field(get(matmulDesc), attr), buf, sizeInBytes, sizeWritten,
                     "cublasLtMatmulDescGetAttribute", attr);
}

// ---- preferences and the heuristic ----

cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size) {
    if (pref == nullptr || size < sizeof(Preference)) return CUBLAS_STATUS_ALLOC_FAILED;
    new (pref->data) Preference{};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    emu::count_call(&emu::ApiCalls::lt_preference_create);
    if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    *pref = new cublasLtMatmulPreferenceOpaque_t{};
    return cublasLtMatmulPreferenceInit_internal(*pref, sizeof(**pref));
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    emu::count_call(&emu::ApiCalls::lt_preference_destroy);
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
    if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    return set_field(preference_field(get(pref), attr), buf, sizeInBytes, "cublasLtMatmulPreferenceSetAttribute", attr);
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
    if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
    return get_field(preference_field(get(pref), attr), buf, sizeInBytes, sizeWritten,
                     "cublasLtMatmulPreferenceGetAttribute", attr);
}

/// Returns min(requestedAlgoCount, kEmulatedAlgos) algorithms (needing no workspace) for any
/// problem cublasLtMatmul accepts, as the real heuristic returns up to the count requested; the
/// problem's own error status otherwise, with *returnAlgoCount = 0. The emulated algorithms differ
/// only in their index: all run the one GEMM, in one summation order (on a GPU they differ in
/// tiling and split-k, so in rounding).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
    emu::count_call(&emu::ApiCalls::lt_heuristic);
    const char* fn = "cublasLtMatmulAlgoGetHeuristic";
    if (returnAlgoCount == nullptr || heuristicResultsArray == nullptr || preference == nullptr)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "null preference or result pointer");
    *returnAlgoCount = 0;
    if (requestedAlgoCount <= 0)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "requestedAlgoCount must be > 0");
    emu::blas::Gemm g;
    if (cublasStatus_t s = describe(fn, lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &g);
        s != CUBLAS_STATUS_SUCCESS)
        return s;
    const int count = std::min(requestedAlgoCount, kEmulatedAlgos);
    for (int i = 0; i < count; ++i) {
        cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[i];
        r = {};
        std::memcpy(r.algo.data, kAlgoTag, 8);  // recognizable; cublasLtMatmul checks the tag
        r.algo.data[1] = static_cast<uint64_t>(i);
        r.workspaceSize = 0;
        r.state = CUBLAS_STATUS_SUCCESS;
        r.wavesCount = 1.0f;
    }
    *returnAlgoCount = count;
    return CUBLAS_STATUS_SUCCESS;
}

// ---- the matmul ----

/// D = epilogue(alpha op(A) op(B) + beta C) (+ bias/aux outputs), column-major, fp32 compute,
/// queued on `stream`. beta == 0: C is not read (it may hold NaN). C and D may be the same buffer.
/// alpha/beta are host floats read now; FP8 scales are device floats read when the product runs.
/// Errors: the statuses describe() returns, CUBLAS_STATUS_NOT_SUPPORTED for an FP8 operand not
/// 16-byte aligned, and CUBLAS_STATUS_INVALID_VALUE for a buffer outside emulated device memory.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                              cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                              cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
    emu::count_call(&emu::ApiCalls::lt_matmul);
    const char* fn = "cublasLtMatmul";
    emu::blas::Gemm g;
    if (cublasStatus_t s = describe(fn, lightHandle, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &g);
        s != CUBLAS_STATUS_SUCCESS)
        return s;
    if (alpha == nullptr || beta == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "alpha or beta is null");
    if (algo != nullptr && std::memcmp(algo->data, kAlgoTag, 8) != 0)
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "algo was not returned by cublasLtMatmulAlgoGetHeuristic");
    g.alpha = *static_cast<const float*>(alpha);
    g.beta = *static_cast<const float*>(beta);
    if (g.beta != 0.0f && C == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, fn, "beta != 0 but C is null");
    if (emu::blas::is_fp8(g.a.type) || emu::blas::is_fp8(g.b.type))
        if (cublasStatus_t s = emu::blas::check_fp8_pointers(fn, A, B, C, D); s != CUBLAS_STATUS_SUCCESS) return s;
    g.a.data = A;
    g.b.data = B;
    g.c.data = C;
    g.d.data = D;
    try {
        if (workspace != nullptr && workspaceSizeInBytes > 0)
            emu::check_device_range(workspace, workspaceSizeInBytes, "workspace");
        emu::blas::submit(stream, g, fn);
    } catch (const emu::Error& e) {  // a buffer outside device memory, a destroyed stream
        return fail(CUBLAS_STATUS_INVALID_VALUE, fn, e.what());
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
