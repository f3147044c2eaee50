// emu/cublas_gemm.cpp — the host GEMM behind emulated cuBLAS/cuBLASLt, with epilogues.
//
// Design (the usual packed GEMM, as in GotoBLAS/BLIS): op(A) is copied to fp32 panels of MR rows
// (k x MR each, zero-padded), op(B) to fp32 blocks of NR columns (k x NR each); a micro-kernel
// keeps an MR x NR tile of D in vector registers and walks k in increasing order. Converting on
// the way in makes every input type (FP8 included, decoded exactly) one fp32 kernel; the fixed order over k makes results
// independent of the blocking. The epilogue (cublasLtEpilogue_t) is applied per tile on the fp32
// value before the single rounding to D's type.
#include "emu/cublas_gemm.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "model/fp8.hpp"
#include "emu/emu.hpp"

namespace emu::blas {

size_t element_size(cudaDataType t) {
    switch (t) {
        case CUDA_R_32F: return 4;
        case CUDA_R_16BF: return 2;
        case CUDA_R_16F: return 2;
        case CUDA_R_8F_E4M3: return 1;
        case CUDA_R_8F_E5M2: return 1;
        default: return 0;
    }
}

bool is_fp8(cudaDataType t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

int64_t span_elements(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t batch_stride) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
    return (batch - 1) * batch_stride + (cols - 1) * ld + rows;
}

bool epilogue_supported(cublasLtEpilogue_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_BIAS:
        case CUBLASLT_EPILOGUE_GELU: case CUBLASLT_EPILOGUE_GELU_BIAS:
        case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
        case CUBLASLT_EPILOGUE_DGELU: case CUBLASLT_EPILOGUE_DGELU_BGRAD:
        case CUBLASLT_EPILOGUE_BGRADA: case CUBLASLT_EPILOGUE_BGRADB:
            return true;
        default:
            return false;
    }
}

bool epilogue_reads_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

bool epilogue_writes_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB ||
           e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

bool epilogue_uses_aux(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

bool compute_type_supported(cublasComputeType_t t) {
    return t == CUBLAS_COMPUTE_32F || t == CUBLAS_COMPUTE_32F_PEDANTIC ||
           t == CUBLAS_COMPUTE_32F_FAST_16F || t == CUBLAS_COMPUTE_32F_FAST_16BF ||
           t == CUBLAS_COMPUTE_32F_FAST_TF32;
}

bool types_supported(cudaDataType a, cudaDataType b, cudaDataType c) {
    return element_size(a) != 0 && !is_fp8(a) && a == b && (c == a || c == CUDA_R_32F);
}

cublasStatus_t fail(cublasStatus_t status, const char* function, const std::string& why) {
    std::fprintf(stderr, "cuda_emu: %s: %s\n", function, why.c_str());
    return status;
}

namespace {

// With alpha == 0, BLAS does not reference A and B; the input bias gradients still read them.
bool reads_inputs(const Gemm& g) {
    return g.k > 0 && (g.alpha != 0.0f || g.epilogue == CUBLASLT_EPILOGUE_BGRADA ||
                       g.epilogue == CUBLASLT_EPILOGUE_BGRADB);
}

void check_operand(const Operand& o, int64_t rows, int64_t cols, int64_t batch, const char* what) {
    int64_t n = span_elements(rows, cols, o.ld, batch, o.batch_stride);
    if (n > 0) emu::check_device_range(o.data, static_cast<size_t>(n) * element_size(o.type), what);
}

}  // namespace

void submit(cudaStream_t stream, const Gemm& g, const char* what) {
    if (g.m <= 0 || g.n <= 0 || g.batch <= 0) return;
    if (reads_inputs(g)) {
        bool ta = g.transa != CUBLAS_OP_N, tb = g.transb != CUBLAS_OP_N;
        check_operand(g.a, ta ? g.k : g.m, ta ? g.m : g.k, g.batch, "A");
        check_operand(g.b, tb ? g.n : g.k, tb ? g.k : g.n, g.batch, "B");
    }
    if (g.beta != 0.0f) check_operand(g.c, g.m, g.n, g.batch, "C");
    check_operand(g.d, g.m, g.n, g.batch, "D");
    if (epilogue_reads_bias(g.epilogue) || epilogue_writes_bias(g.epilogue)) {
        int64_t len = g.epilogue == CUBLASLT_EPILOGUE_BGRADB ? g.n : g.m;
        check_operand({g.bias, g.bias_type, len, g.bias_batch_stride}, len, 1, g.batch, "bias");
    }
    if (epilogue_uses_aux(g.epilogue))
        check_operand({g.aux, g.aux_type, g.aux_ld, g.aux_batch_stride}, g.m, g.n, g.batch, "aux");
    if (g.a_scale != nullptr)
        emu::check_device_range(g.a_scale, sizeof(float) * (g.scale_outer_vec ? g.m : 1), "A scale");
    if (g.b_scale != nullptr)
        emu::check_device_range(g.b_scale, sizeof(float) * (g.scale_outer_vec ? g.n : 1), "B scale");
    emu::enqueue(stream, [g] { run(g); }, what);
}

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
}  // namespace

float gelu(float x) {
    float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    return 0.5f * x * (1.0f + std::tanh(u));
}

float gelu_grad(float x) {
    float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    float t = std::tanh(u);
    float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
}

namespace {

// 16 floats: one AVX-512 register with -march=native, two AVX2 ones elsewhere (GCC vector extension).
using v16 = float __attribute__((vector_size(64)));
constexpr int kVec = 16;
constexpr int MR = 2 * kVec;  // rows of a D tile (two vectors)
constexpr int NR = 6;         // columns of a D tile: 12 accumulators stay in registers

float load(const void* base, cudaDataType t, int64_t i) {
    switch (t) {
        case CUDA_R_32F: return static_cast<const float*>(base)[i];
        case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
        case CUDA_R_16F: return __half2float(static_cast<const __half*>(base)[i]);
        case CUDA_R_8F_E4M3: return llmtrain::e4m3_to_f32(static_cast<const uint8_t*>(base)[i]);
        case CUDA_R_8F_E5M2: return llmtrain::e5m2_to_f32(static_cast<const uint8_t*>(base)[i]);
        default: throw std::logic_error("cuda_emu gemm: unsupported element type");
    }
}

// Fills s[0..count) with the dequantization scales at `p`: count floats when `vec`, else one float
// repeated; all 1 when p is null (cuBLASLt's default).
void load_scales(const void* p, bool vec, int64_t count, std::vector<float>& s) {
    s.assign(static_cast<size_t>(count), 1.0f);
    if (p == nullptr) return;
    if (vec) {
        std::memcpy(s.data(), p, sizeof(float) * static_cast<size_t>(count));
    } else {
        float v;
        std::memcpy(&v, p, sizeof v);
        std::fill(s.begin(), s.end(), v);
    }
}

void store(void* base, cudaDataType t, int64_t i, float v) {
    switch (t) {
        case CUDA_R_32F: static_cast<float*>(base)[i] = v; return;
        case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v); return;
        case CUDA_R_16F: static_cast<__half*>(base)[i] = __float2half_rn(v); return;
        default: throw std::logic_error("cuda_emu gemm: unsupported element type");
    }
}

const char* byte_ptr(const void* p, cudaDataType t, int64_t offset) {
    if (p == nullptr) return nullptr;  // operands that are not read may be null
    return static_cast<const char*>(p) + offset * static_cast<int64_t>(element_size(t));
}

// Packs op(A) (m x k) into panels: ap[(panel*k + p)*MR + r] = op(A)[panel*MR + r, p], zero-padded.
void pack_a(const Gemm& g, const void* a, std::vector<float>& ap) {
    int64_t panels = (g.m + MR - 1) / MR;
    ap.assign(static_cast<size_t>(panels * g.k * MR), 0.0f);
    for (int64_t i = 0; i < g.m; ++i) {
        float* dst = ap.data() + (i / MR) * g.k * MR + (i % MR);
        for (int64_t p = 0; p < g.k; ++p) {
            int64_t idx = g.transa == CUBLAS_OP_N ? i + p * g.a.ld : p + i * g.a.ld;
            dst[p * MR] = load(a, g.a.type, idx);
        }
    }
}

// Packs op(B) (k x n) into blocks: bp[(blk*k + p)*NR + c] = op(B)[p, blk*NR + c], zero-padded.
void pack_b(const Gemm& g, const void* b, std::vector<float>& bp) {
    int64_t blocks = (g.n + NR - 1) / NR;
    bp.assign(static_cast<size_t>(blocks * g.k * NR), 0.0f);
    for (int64_t j = 0; j < g.n; ++j) {
        float* dst = bp.data() + (j / NR) * g.k * NR + (j % NR);
        for (int64_t p = 0; p < g.k; ++p) {
            int64_t idx = g.transb == CUBLAS_OP_N ? p + j * g.b.ld : j + p * g.b.ld;
            dst[p * NR] = load(b, g.b.type, idx);
        }
    }
}

// tile[c*MR + r] = sum over p (increasing) of ap[p*MR + r] * bp[p*NR + c]   (MR x NR, fp32).
void micro_kernel(int64_t k, const float* ap, const float* bp, float* tile) {
    v16 acc[NR][2] = {};
    for (int64_t p = 0; p < k; ++p) {
        v16 a0, a1;
        std::memcpy(&a0, ap + p * MR, sizeof(v16));
        std::memcpy(&a1, ap + p * MR + kVec, sizeof(v16));
        const float* b = bp + p * NR;
        for (int c = 0; c < NR; ++c) {
            acc[c][0] += a0 * b[c];
            acc[c][1] += a1 * b[c];
        }
    }
    std::memcpy(tile, acc, sizeof(acc));
}

// One batch entry. a..aux are the entry's base pointers (already offset by the batch strides).
// sa (length m) and sb (length n) are the dequantization scales (all 1 without FP8 scales).
void run_one(const Gemm& g, const void* a, const void* b, const void* c, void* d, void* bias,
             void* aux, std::vector<float>& ap, std::vector<float>& bp, const std::vector<float>& sa,
             const std::vector<float>& sb) {
    const cublasLtEpilogue_t e = g.epilogue;
    const bool add_bias = epilogue_reads_bias(e);
    const bool gelu_fwd = e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
                          e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const bool gelu_bwd = e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    const bool store_aux = gelu_fwd && epilogue_uses_aux(e);

    pack_a(g, a, ap);
    pack_b(g, b, bp);

    // Bias gradients over the inputs: BGRADA sums op(A) rows over k (length m), BGRADB sums
    // op(B) columns over k (length n); both in fp32, k increasing.
    if (e == CUBLASLT_EPILOGUE_BGRADA) {
        for (int64_t i = 0; i < g.m; ++i) {
            const float* row = ap.data() + (i / MR) * g.k * MR + (i % MR);
            float s = 0.0f;
            for (int64_t p = 0; p < g.k; ++p) s += row[p * MR];
            store(bias, g.bias_type, i, s);
        }
    } else if (e == CUBLASLT_EPILOGUE_BGRADB) {
        for (int64_t j = 0; j < g.n; ++j) {
            const float* col = bp.data() + (j / NR) * g.k * NR + (j % NR);
            float s = 0.0f;
            for (int64_t p = 0; p < g.k; ++p) s += col[p * NR];
            store(bias, g.bias_type, j, s);
        }
    }

    float tile[NR * MR];
    float row_sum[MR];  // DGELU_BGRAD: sum over the columns of D, j increasing
    for (int64_t i0 = 0; i0 < g.m; i0 += MR) {
        const int64_t mr = std::min<int64_t>(MR, g.m - i0);
        const float* apanel = ap.data() + (i0 / MR) * g.k * MR;
        std::fill(row_sum, row_sum + MR, 0.0f);
        for (int64_t j0 = 0; j0 < g.n; j0 += NR) {
            const int64_t nr = std::min<int64_t>(NR, g.n - j0);
            micro_kernel(g.k, apanel, bp.data() + (j0 / NR) * g.k * NR, tile);
            for (int64_t cc = 0; cc < nr; ++cc) {
                const int64_t j = j0 + cc;
                for (int64_t r = 0; r < mr; ++r) {
                    const int64_t i = i0 + r;
                    float v = (g.alpha * sa[i] * sb[j]) * tile[cc * MR + r];
                    if (g.beta != 0.0f) v += g.beta * load(c, g.c.type, i + j * g.c.ld);
                    if (add_bias) v += load(bias, g.bias_type, i);
                    if (gelu_fwd) {
                        if (store_aux) store(aux, g.aux_type, i + j * g.aux_ld, v);
                        v = gelu(v);
                    } else if (gelu_bwd) {
                        v *= gelu_grad(load(aux, g.aux_type, i + j * g.aux_ld));
                    }
                    store(d, g.d.type, i + j * g.d.ld, v);
                    row_sum[r] += v;
                }
            }
        }
        if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
            for (int64_t r = 0; r < mr; ++r) store(bias, g.bias_type, i0 + r, row_sum[r]);
    }
}

}  // namespace

void run(const Gemm& problem) {
    if (problem.m <= 0 || problem.n <= 0) return;
    Gemm g = problem;
    if (!reads_inputs(g)) g.k = 0;  // D = beta*C (+ epilogue) without touching A and B
    // Packing buffers are reused across calls: the emulated backend runs many small GEMMs.
    thread_local std::vector<float> ap, bp, sa, sb;
    load_scales(g.a_scale, g.scale_outer_vec, g.m, sa);  // the same for every batch entry
    load_scales(g.b_scale, g.scale_outer_vec, g.n, sb);
    for (int64_t bi = 0; bi < g.batch; ++bi) {
        const void* a = byte_ptr(g.a.data, g.a.type, bi * g.a.batch_stride);
        const void* b = byte_ptr(g.b.data, g.b.type, bi * g.b.batch_stride);
        const void* c = g.beta != 0.0f ? byte_ptr(g.c.data, g.c.type, bi * g.c.batch_stride) : nullptr;
        void* d = const_cast<char*>(byte_ptr(g.d.data, g.d.type, bi * g.d.batch_stride));
        void* bias = g.bias ? const_cast<char*>(byte_ptr(g.bias, g.bias_type, bi * g.bias_batch_stride))
                            : nullptr;
        void* aux = g.aux ? const_cast<char*>(byte_ptr(g.aux, g.aux_type, bi * g.aux_batch_stride))
                          : nullptr;
        run_one(g, a, b, c, d, bias, aux, ap, bp, sa, sb);
    }
}

}  // namespace emu::blas
