// model/cuda/matmul.cu — linear layers through cuBLASLt, with bias and GELU epilogues.
//
// Row-major (N,C) @ (OC,C)^T is, in cuBLAS's column-major view, D (OC x N) = W^T-view (OC x C) * X (C x N):
// A = weight read as a C x OC column-major matrix with op T, B = inp as C x N, m = OC, n = N, k = C.
// Forward epilogues: BIAS (bias of length m = OC) and GELU_AUX_BIAS (pre-GELU written to the aux
// buffer, GELU to D). Backward: dinp (C x N) = W (C x OC) * dout (OC x N), with the DGELU epilogue
// when the input was a GELU output; dweight (C x OC) += inp (C x N) * dout^T (N x OC) with beta = 1;
// dbias by our own deterministic column reduction (reduce.cuh), which accumulates like the weights
// (cuBLASLt's BGRADB epilogue would overwrite). All products accumulate in fp32 (CUBLAS_COMPUTE_32F).
// Each problem (shape, leading dimensions, epilogue, dtype, accumulation, pointer alignment) gets
// its descriptors and algorithm once (LtPlan, kernels.cuh): the heuristic's first, or with
// model.matmul_autotune the fastest of its first 8, timed on the problem's first call. The FP8
// linear layers (training.fp8, docs/fp8.md) run their e4m3/e5m2 products through the same plans
// (matmul_fp8: the "TN" layout, the operands' scale pointers).
#include <algorithm>

#include "model/cuda/kernels.cuh"
#include "model/cuda/reduce.cuh"

namespace llmtrain::cuda {

/// Throws CudaError when a cuBLAS(Lt) call fails.
static void check_cublas(cublasStatus_t st, const char* what, int line) {
    if (st != CUBLAS_STATUS_SUCCESS)
        throw CudaError(std::string("model/cuda/matmul.cu:") + std::to_string(line) + ": " + what + " failed: " +
                        cublasLtGetStatusName(st) + ": " + cublasLtGetStatusString(st));
}
#define CUBLAS_CHECK(call) check_cublas((call), #call, __LINE__)

template <typename T>
constexpr cudaDataType cuda_type() {
    return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

/// Largest power of two, at most 256, that divides the address (cuBLASLt's alignment unit).
static uint32_t alignment_of(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uint32_t al = 256;
    while (al > 1 && a % al != 0) al /= 2;
    return al;
}

LtContext::~LtContext() {
    for (auto& [key, p] : plans) {
        cublasLtMatrixLayoutDestroy(p.a);
        cublasLtMatrixLayoutDestroy(p.b);
        cublasLtMatrixLayoutDestroy(p.d);
        cublasLtMatmulDescDestroy(p.desc);
    }
}

constexpr int kAutotuneCandidates = 8;  ///< heuristic results timed with model.matmul_autotune
constexpr int kAutotuneReps = 3;        ///< timed calls per candidate, after one untimed call

/// D (m x n, leading dimension ldd) = alpha op(A) op(B) + beta D with `plan` and algorithm `algo`
/// (the element types are the plan's layouts').
static cublasStatus_t lt_call(LtContext& lt, const LtPlan& plan, const cublasLtMatmulAlgo_t& algo, const void* A,
                              const void* B, void* D, bool accumulate, cudaStream_t stream) {
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    return cublasLtMatmul(lt.handle, plan.desc, &alpha, A, plan.a, B, plan.b, &beta, D, plan.d, D, plan.d, &algo,
                          lt.workspace, lt.workspace_bytes, stream);
}

/// model.matmul_autotune: the index among the heuristic's `found` results whose call is fastest
/// (kAutotuneReps calls timed with events on `stream`, after one untimed call; the lowest index wins
/// ties; a candidate the library refuses is skipped). The host waits for the timing. D ends as it
/// started: when the product accumulates into it, it is saved first and restored after (a
/// temporary device buffer of ldd x n elements); otherwise the caller's call overwrites it. An aux
/// output (GELU_AUX) is likewise rewritten by that call. d_elem: bytes per element of D.
static int fastest_algo(LtContext& lt, const LtPlan& plan, const cublasLtMatmulHeuristicResult_t* results, int found,
                        const void* A, const void* B, void* D, int ldd, int n, size_t d_elem, bool accumulate,
                        cudaStream_t stream) {
    const size_t d_bytes = static_cast<size_t>(ldd) * n * d_elem;
    void* saved = nullptr;
    if (accumulate) {
        CUDA_CHECK(cudaMalloc(&saved, d_bytes));
        CUDA_CHECK(cudaMemcpyAsync(saved, D, d_bytes, cudaMemcpyDeviceToDevice, stream));
    }
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    int best = 0;
    float best_ms = -1.0f;  // none timed yet
    for (int i = 0; i < found; ++i) {
        if (results[i].state != CUBLAS_STATUS_SUCCESS ||
            lt_call(lt, plan, results[i].algo, A, B, D, accumulate, stream) != CUBLAS_STATUS_SUCCESS)
            continue;
        CUDA_CHECK(cudaEventRecord(start, stream));
        for (int r = 0; r < kAutotuneReps; ++r) CUBLAS_CHECK(lt_call(lt, plan, results[i].algo, A, B, D, accumulate, stream));
        CUDA_CHECK(cudaEventRecord(stop, stream));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (best_ms < 0.0f || ms < best_ms) best = i, best_ms = ms;
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    if (saved != nullptr) {
        CUDA_CHECK(cudaMemcpyAsync(D, saved, d_bytes, cudaMemcpyDeviceToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        CUDA_CHECK(cudaFree(saved));
    }
    return best;
}

/// The element types of one GEMM (A, B, D; C is D), and with FP8 operands their dequantization
/// scales: device fp32 pointers, one value each, or with outer_vec one per row of op(A) (m) and per
/// column of op(B) (n) (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F). Null scales: 1.
struct LtTypes {
    cudaDataType a, b, d;
    const float* a_scale = nullptr;
    const float* b_scale = nullptr;
    bool outer_vec = false;
    size_t d_elem() const { return d == CUDA_R_32F ? 4 : 2; }
    /// The plan key's type field: the three types and the scale mode in one int.
    int key() const { return int(a) | int(b) << 8 | int(d) << 16 | int(outer_vec) << 24; }
};

/// One column-major GEMM D (m x n) = op(A) (m x k) * op(B) (k x n) [+ D if accumulate], with an
/// optional epilogue (bias of length m and D's type, aux of m x n with leading dimension m). The
/// problem's plan (descriptors, algorithm) is made on its first call and reused after; only the
/// bias, aux and scale pointers are set per call.
static void lt_matmul(LtContext& lt, const LtTypes& ty, bool transa, bool transb, int m, int n, int k, const void* A,
                      int lda, const void* B, int ldb, void* D, int ldd, bool accumulate, cublasLtEpilogue_t epilogue,
                      const void* bias, const void* aux, cudaStream_t stream) {
    const cudaDataType type = ty.d;
    // Parameter tensors sit inside one flat buffer, 16-byte aligned; the heuristic otherwise assumes 256.
    const uint32_t align = std::min({alignment_of(A), alignment_of(B), alignment_of(D)});
    const LtContext::Key key{transa, transb, m, n, k, lda, ldb, ldd, static_cast<int>(epilogue), ty.key(),
                             accumulate, align};
    auto it = lt.plans.find(key);
    const bool fresh = it == lt.plans.end();
    if (fresh) {
        LtPlan p;
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t opa = transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
        if (bias != nullptr)
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof(type)));
        if (aux != nullptr) {
            const int64_t aux_ld = m;
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &type, sizeof(type)));
        }
        if (ty.outer_vec) {  // FP8 "rowwise": a scale per row of op(A) and per column of op(B)
            const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
        }
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, ty.a, transa ? k : m, transa ? m : k, lda));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, ty.b, transb ? n : k, transb ? k : n, ldb));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, type, m, n, ldd));
        it = lt.plans.emplace(key, p).first;  // owned by lt from here (destroyed in ~LtContext)
    }
    LtPlan& plan = it->second;
    // The epilogue's pointers change from call to call (each layer has its own bias).
    if (bias != nullptr)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    if (aux != nullptr)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    if (ty.a_scale != nullptr) {  // FP8: the operands' inverse scales (cuBLASLt multiplies them in)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ty.a_scale,
                                                    sizeof(ty.a_scale)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ty.b_scale,
                                                    sizeof(ty.b_scale)));
    }
    if (fresh) {
        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                          &lt.workspace_bytes, sizeof(lt.workspace_bytes)));
#ifndef EMU_BUILD  // cuda_emu's algorithms run the one GEMM: it does not emulate the alignment filters
        for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
#endif
        cublasLtMatmulHeuristicResult_t results[kAutotuneCandidates];
        int found = 0;
        CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt.handle, plan.desc, plan.a, plan.b, plan.d, plan.d, pref,
                                                    lt.autotune ? kAutotuneCandidates : 1, results, &found));
        CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
        if (found == 0)
            throw CudaError("cuBLASLt has no algorithm for m=" + std::to_string(m) + " n=" + std::to_string(n) +
                            " k=" + std::to_string(k) + " epilogue=" + std::to_string(static_cast<int>(epilogue)));
        const int pick =
            found > 1 ? fastest_algo(lt, plan, results, found, A, B, D, ldd, n, ty.d_elem(), accumulate, stream) : 0;
        plan.algo = results[pick].algo;
    }
    CUBLAS_CHECK(lt_call(lt, plan, plan.algo, A, B, D, accumulate, stream));
}

template <typename T>
void matmul_forward(LtContext& lt, T* out, T* pre_gelu, const T* inp, const T* weight, const T* bias,
                    int N, int C, int OC, cudaStream_t stream) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (pre_gelu != nullptr) epi = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    else if (bias != nullptr) epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType t = cuda_type<T>();
    lt_matmul(lt, {t, t, t}, true, false, OC, N, C, weight, C, inp, C, out, OC, false, epi, bias, pre_gelu, stream);
}

/// Row n, column c's contribution to dbias: dout itself.
template <typename T>
struct BiasGrad {
    const T* dout;
    int C;
    __device__ void operator()(int n, int c, float* acc) const { acc[0] += to_float(dout[static_cast<size_t>(n) * C + c]); }
};

template <typename T>
void bias_backward(T* dbias, const T* dout, int N, int OC, float* scratch, cudaStream_t stream) {
    column_reduce<1, T>(dbias, static_cast<T*>(nullptr), scratch, N, OC, BiasGrad<T>{dout, OC}, stream);
}

template <typename T>
void matmul_backward(LtContext& lt, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                     const T* weight, const T* pre_gelu, int N, int C, int OC, float* scratch,
                     cudaStream_t stream) {
    if (dbias != nullptr) bias_backward(dbias, dout, N, OC, scratch, stream);
    const cudaDataType t = cuda_type<T>();
    lt_matmul(lt, {t, t, t}, false, true, C, OC, N, inp, C, dout, OC, dweight, C, true, CUBLASLT_EPILOGUE_DEFAULT,
              nullptr, nullptr, stream);
    lt_matmul(lt, {t, t, t}, false, false, C, N, OC, weight, C, dout, OC, dinp, C, false,
              pre_gelu != nullptr ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT, nullptr, pre_gelu, stream);
}

template <typename T>
void matmul_fp8(LtContext& lt, T* D, const uint8_t* A, Fp8Format fa, const float* a_scale, const uint8_t* B,
                Fp8Format fb, const float* b_scale, bool outer_vec, int m, int n, int k, bool accumulate,
                const T* bias, cudaStream_t stream) {
    auto fp8 = [](Fp8Format f) { return f == Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; };
    const LtTypes ty{fp8(fa), fp8(fb), cuda_type<T>(), a_scale, b_scale, outer_vec};
    // TN: A (k x m) transposed, B (k x n) not; leading dimensions k (docs/fp8.md "The GEMMs").
    lt_matmul(lt, ty, true, false, m, n, k, A, k, B, k, D, m, accumulate,
              bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, bias, nullptr, stream);
}

size_t matmul_backward_scratch_bytes(int N, int OC) { return column_reduce_scratch_floats(1, N, OC) * sizeof(float); }

#define INSTANTIATE(T)                                                                                    \
    template void matmul_forward<T>(LtContext&, T*, T*, const T*, const T*, const T*, int, int, int, \
                                    cudaStream_t);                                                         \
    template void matmul_backward<T>(LtContext&, T*, T*, T*, const T*, const T*, const T*, const T*, \
                                     int, int, int, float*, cudaStream_t);                                \
    template void bias_backward<T>(T*, const T*, int, int, float*, cudaStream_t);                        \
    template void matmul_fp8<T>(LtContext&, T*, const uint8_t*, Fp8Format, const float*, const uint8_t*, \
                                Fp8Format, const float*, bool, int, int, int, bool, const T*, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
