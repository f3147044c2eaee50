// model/cuda/cublas_attention.cu — causal multi-head attention on tensor cores through cuBLAS
// (model.attention = "cublas"): llm.c's attention_forward (per-head copies, a batched QK^T GEMM, a
// softmax kernel, a batched PV GEMM) tiled over queries so the scores of one tile, not (B,NH,T,T),
// live in the workspace (cublas_attention.hpp); the backward recomputes P per tile from the saved
// lse and follows FlashAttention-2's backward equations (Dao 2023, Algorithm 2).
//
// Layout: qkv (B,T,3C) holds q | k | v, each (NH,HS) per position; with grouped-query attention
// (Ainslie et al. 2023) qkv (B,T,(NH + 2 NKV)*HS) holds NKV key/value heads, and split_heads copies
// key/value head h / (NH/NKV) to query head h (the GEMMs then run as multi-head); merge_heads sums
// the NH/NKV query heads' dK and dV into their key/value head, in head order, in fp32.
// A strided-batched GEMM needs one stride between heads, so q, k, v (and dout) are first copied to
// per-head tensors (B*NH, T, HS) (split_heads) and the results copied back (merge_heads). cuBLAS is column-major: a row-major
// X (r x c) is X^T to it. For query tile [q0, q0 + rows), only keys [0, Tk = q0 + rows) can be
// seen (causal), so every product stops at Tk; the row kernels mask keys j > i inside the tile.
//   forward   S = Q_t K^T scale (fp32);  lse_i = logsumexp_{j<=i} S_ij;  P = exp(S - lse);  O_t = P V
//   backward  S and P as above (P from the saved lse);  dV += P^T dO_t;  dP = dO_t V^T;
//             dS = P o (dP - D_i), D_i = dO_i . O_i;  dQ_t = dS K scale;  dK += dS^T Q_t scale
// Every GEMM reads act-dtype inputs and accumulates in fp32 (CUBLAS_COMPUTE_32F); S, dP and the
// dq/dk/dv accumulators are fp32, P and dS are the act dtype (what the next GEMM reads). Nothing
// survives a call but the caller's workspace, so calls from any context or stream are independent.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {
namespace {

constexpr int kRowWarps = 8;  ///< rows (one warp each) per block of the row kernels
constexpr int kBlock = 256;   ///< threads per block of the elementwise kernels

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

/// Byte offsets of the workspace parts; each part starts 256-byte aligned.
struct Layout {
    size_t heads;   ///< act (4, B*NH, T, HS): q | k | v | out (forward) or dout (backward)
    size_t grads;   ///< backward: fp32 (3, B*NH, T, HS): dq | dk | dv
    size_t scores;  ///< fp32 (B*NH, Tq, Tk): S, then dP
    size_t probs;   ///< act (B*NH, Tq, Tk): P, then dS
    size_t total;
};

Layout layout_of(bool backward, int B, int T, int C, int NH, size_t act_bytes, int tile_rows) {
    const size_t head_elems = static_cast<size_t>(B) * T * C;  // B*NH*T*HS
    const size_t tile_elems = static_cast<size_t>(B) * NH * tile_rows * T;
    Layout l{};
    l.heads = 0;
    l.grads = l.heads + align256(4 * head_elems * act_bytes);
    l.scores = l.grads + (backward ? align256(3 * head_elems * sizeof(float)) : 0);
    l.probs = l.scores + align256(tile_elems * sizeof(float));
    l.total = l.probs + align256(tile_elems * act_bytes);
    return l;
}

/// Throws CudaError when a cuBLAS call fails.
void check_cublas(cublasStatus_t st, const char* what, int line) {
    if (st != CUBLAS_STATUS_SUCCESS)
        throw CudaError(std::string("model/cuda/cublas_attention.cu:") + std::to_string(line) + ": " + what +
                        " failed: " + cublasGetStatusName(st));
}
#define CUBLAS_CHECK(call) check_cublas((call), #call, __LINE__)

template <typename T>
constexpr cudaDataType cuda_type() {
    return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

/// Column-major C (m x n) = alpha op(A) op(B) + beta C for `batch` matrices, strides in elements;
/// A and B of type T, C of type ct (T or fp32), fp32 accumulation.
template <typename T>
void batched_gemm(cublasHandle_t h, cublasOperation_t opa, cublasOperation_t opb, int m, int n, int k, float alpha,
                  const T* A, int lda, long long sa, const T* B, int ldb, long long sb, float beta, void* C,
                  cudaDataType ct, int ldc, long long sc, int batch) {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, opa, opb, m, n, k, &alpha, A, cuda_type<T>(), lda, sa, B,
                                            cuda_type<T>(), ldb, sb, &beta, C, ct, ldc, sc, batch,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/// dst (3, B*NH, T, HS) = q | k | v of qkv (B, T, (NH + 2 NKV)*HS) regrouped by head; query head h
/// reads key/value head h / (NH/NKV) (grouped-query attention, Ainslie et al. 2023: the K and V
/// heads of a group are copied to each of its query heads). One thread per dst element.
template <typename T>
__global__ void split_heads_kernel(T* dst, const T* src, int B, int T_, int NH, int NKV, int HS) {
    const int C = NH * HS, group = NH / NKV;
    const size_t width = static_cast<size_t>(NH + 2 * NKV) * HS;
    const size_t n = 3 * static_cast<size_t>(B) * NH * T_ * HS;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < n;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int d = static_cast<int>(x % HS), t = static_cast<int>(x / HS % T_);
        const size_t pbh = x / HS / T_;
        const int h = static_cast<int>(pbh % NH);
        const size_t pb = pbh / NH;
        const int b = static_cast<int>(pb % B), part = static_cast<int>(pb / B);
        const size_t col = part == 0 ? static_cast<size_t>(h) * HS + d
                                     : C + static_cast<size_t>(part - 1) * NKV * HS + static_cast<size_t>(h / group) * HS + d;
        dst[x] = src[(static_cast<size_t>(b) * T_ + t) * width + col];
    }
}

/// dqkv (B, T, (NH + 2 NKV)*HS) of T from src (3, B*NH, T, HS) fp32 (dq | dk | dv per head), put
/// back in position order: a key/value head's gradient is the sum, in head order in fp32, of its
/// NH/NKV query heads' (one term, the plain copy, when NKV = NH). accumulate: added to dqkv's
/// values (after that sum) instead of overwriting them. One thread per dqkv element.
template <typename T>
__global__ void merge_heads_kernel(T* dst, const float* src, int B, int T_, int NH, int NKV, int HS, bool accumulate) {
    const int C = NH * HS, group = NH / NKV;
    const size_t width = static_cast<size_t>(NH + 2 * NKV) * HS;
    const size_t n = static_cast<size_t>(B) * T_ * width, per_part = static_cast<size_t>(B) * NH * T_ * HS;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < n;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t bt = x / width, b = bt / T_, t = bt % T_;
        const int col = static_cast<int>(x % width);
        const float before = accumulate ? to_float(dst[x]) : 0.0f;
        if (col < C) {
            const int h = col / HS, d = col % HS;
            dst[x] = from_float<T>(src[((b * NH + h) * T_ + t) * HS + d] + before);
            continue;
        }
        const int kv = col - C, part = 1 + kv / (NKV * HS), g = kv % (NKV * HS) / HS, d = kv % HS;
        const float* p = src + part * per_part + ((b * NH + static_cast<size_t>(g) * group) * T_ + t) * HS + d;
        float acc = p[0];
        for (int j = 1; j < group; j++) acc += p[static_cast<size_t>(j) * T_ * HS];
        dst[x] = from_float<T>(acc + before);
    }
}

/// Window rows [q0, q0 + nq) between a per-head tensor (B*NH, T, HS) and a (B, Tout, NH*HS) tensor
/// at rows [o0, o0 + nq): kToHeads copies the (B,Tout,C) src into the per-head dst, else the
/// per-head src into the (B,Tout,C) dst. One thread per element of the nq rows.
template <typename T, bool kToHeads>
__global__ void rows_heads_kernel(T* dst, const T* src, int B, int T_, int NH, int HS, int q0, int nq, int Tout,
                                  int o0) {
    const size_t n = static_cast<size_t>(B) * nq * NH * HS;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < n;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int c = static_cast<int>(x % (static_cast<size_t>(NH) * HS)), r = static_cast<int>(x / NH / HS % nq);
        const size_t b = x / NH / HS / nq;
        const size_t h = ((b * NH + c / HS) * T_ + q0 + r) * HS + c % HS, o = (b * Tout + o0 + r) * NH * HS + c;
        if (kToHeads) dst[h] = src[o];
        else dst[o] = src[h];
    }
}

/// The first key query row i of head bh sees: doc[b,i] (b = bh / NH) under document masking
/// (Ops::attention_forward_doc's doc_start, (B,T) int32), else 0.
__device__ __forceinline__ int first_key(const int* doc, int bh, int NH, int T_, int i) {
    return doc == nullptr ? 0 : doc[static_cast<size_t>(bh / NH) * T_ + i];
}

/// Forward row kernel: for query rows i = q0 + r (r < rows) of every head bh, with S (BH, rows, Tk):
/// lse[bh*Tout + i + shift] = log sum_{lo<=j<=i} exp(S_ij) and P_ij = exp(S_ij - lse_i) for lo <= j <= i, 0
/// elsewhere, lo = first_key (0 without documents). One warp per row; each lane keeps a running max
/// and sum over its keys, merged by butterflies.
template <typename T>
__global__ void causal_softmax_kernel(T* P, float* lse, const float* S, int BH, int rows, int Tk, int q0, int T_,
                                      const int* doc, int NH, int Tout, int shift) {
    const int lane = threadIdx.x % kWarpSize;
    const size_t row = static_cast<size_t>(blockIdx.x) * kRowWarps + threadIdx.x / kWarpSize;
    if (row >= static_cast<size_t>(BH) * rows) return;  // warp-uniform
    const int bh = static_cast<int>(row / rows), i = q0 + static_cast<int>(row % rows);
    const float* s = S + row * Tk;
    T* p = P + row * Tk;
    const int lo = first_key(doc, bh, NH, T_, i);
    float m = -INFINITY, l = 0.0f;
    for (int j = lo + lane; j <= i; j += kWarpSize) {
        const float m_new = fmaxf(m, s[j]);
        l = l * expf(m - m_new) + expf(s[j] - m_new);  // expf(-inf) = 0 on a lane's first key
        m = m_new;
    }
    const float m_row = warp_max(m);  // finite: key lo <= i is lane 0's
    const float l_row = warp_sum(l * expf(m - m_row));  // a lane without keys adds 0 * exp(-inf)
    const float lse_i = m_row + logf(l_row);
    for (int j = lane; j < Tk; j += kWarpSize) p[j] = from_float<T>(j <= i && j >= lo ? expf(s[j] - lse_i) : 0.0f);
    if (lane == 0) lse[static_cast<size_t>(bh) * Tout + i + shift] = lse_i;  // lse (B*NH, Tout), row i + shift
}

/// Backward: P (BH, rows, Tk) = exp(S - lse_i) for keys lo <= j <= i, 0 elsewhere (rows i = q0 + r;
/// lse_i at bh*Tout + i + shift).
template <typename T>
__global__ void causal_probs_kernel(T* P, const float* S, const float* lse, int BH, int rows, int Tk, int q0,
                                    int T_, const int* doc, int NH, int Tout, int shift) {
    const size_t n = static_cast<size_t>(BH) * rows * Tk;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < n;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t row = x / Tk;
        const int j = static_cast<int>(x % Tk), bh = static_cast<int>(row / rows);
        const int i = q0 + static_cast<int>(row % rows);
        const bool seen = j <= i && j >= first_key(doc, bh, NH, T_, i);
        P[x] = from_float<T>(seen ? expf(S[x] - lse[static_cast<size_t>(bh) * Tout + i + shift]) : 0.0f);
    }
}

/// Backward row kernel: dS_ij = P_ij (dP_ij - D_i) written over P for keys lo <= j <= i (P stays 0 elsewhere),
/// D_i = dout_i . out_i over head h's dims of position i, read from the (B,Tout,C) tensors at row
/// i + shift. One warp per row.
template <typename T>
__global__ void softmax_backward_kernel(T* P, const float* dP, const T* dout, const T* out, int BH, int rows, int Tk,
                                        int q0, int T_, int C, int NH, const int* doc, int Tout, int shift) {
    const int lane = threadIdx.x % kWarpSize, HS = C / NH;
    const size_t row = static_cast<size_t>(blockIdx.x) * kRowWarps + threadIdx.x / kWarpSize;
    if (row >= static_cast<size_t>(BH) * rows) return;  // warp-uniform
    const int bh = static_cast<int>(row / rows), i = q0 + static_cast<int>(row % rows);
    const size_t off = (static_cast<size_t>(bh / NH) * Tout + i + shift) * C + static_cast<size_t>(bh % NH) * HS;
    float D = 0.0f;
    for (int d = lane; d < HS; d += kWarpSize) D += to_float(dout[off + d]) * to_float(out[off + d]);
    D = warp_sum(D);
    T* p = P + row * Tk;
    const float* dp = dP + row * Tk;
    for (int j = first_key(doc, bh, NH, T_, i) + lane; j <= i; j += kWarpSize)
        p[j] = from_float<T>(to_float(p[j]) * (dp[j] - D));
}

/// Throws std::invalid_argument unless C splits into NH heads and NKV divides NH.
void check_heads(int C, int NH, int NKV) {
    if (NH <= 0 || C % NH != 0)
        throw std::invalid_argument("cuda cublas attention: n_embd " + std::to_string(C) +
                                    " must split into n_head " + std::to_string(NH) + " heads");
    if (NKV <= 0 || NH % NKV != 0)
        throw std::invalid_argument("cuda cublas attention: n_kv_head " + std::to_string(NKV) +
                                    " must divide n_head " + std::to_string(NH));
}

/// A call's query rows [q0, end) of the window and where their outputs go: row i of the window is
/// row i + shift of the (B,Tout,...) out, dout and lse (the whole window: [0, T), Tout T, shift 0).
struct RowRange {
    int q0, end, Tout, shift;
};
RowRange row_range(const CublasRows& rows, int T_) {
    if (rows.nq < 0) return {0, T_, T_, 0};
    if (rows.q0 < 0 || rows.q0 + rows.nq > T_ || rows.o0 < 0 || rows.o0 + rows.nq > rows.Tout)
        throw std::invalid_argument("cuda cublas attention: rows [" + std::to_string(rows.q0) + ", +" +
                                    std::to_string(rows.nq) + ") of T = " + std::to_string(T_) + " into rows [" +
                                    std::to_string(rows.o0) + ", +" + std::to_string(rows.nq) + ") of Tout = " +
                                    std::to_string(rows.Tout));
    return {rows.q0, rows.q0 + rows.nq, rows.Tout, rows.o0 - rows.q0};
}

unsigned row_grid(int BH, int rows) { return static_cast<unsigned>(ceil_div<size_t>(static_cast<size_t>(BH) * rows, kRowWarps)); }

}  // namespace

CublasAttentionPlan cublas_attention_plan(bool backward, int B, int T, int C, int NH, size_t act_bytes,
                                          int limit_mb) {
    if (limit_mb < 1)
        throw std::invalid_argument("model.attention_workspace_mb: expected an integer >= 1, got " +
                                    std::to_string(limit_mb));
    check_heads(C, NH, NH);
    const size_t limit = static_cast<size_t>(limit_mb) << 20;
    const size_t row_bytes = static_cast<size_t>(B) * NH * T * (sizeof(float) + act_bytes);  // one query row, all heads
    if (row_bytes > limit)
        throw std::invalid_argument(
            "model.attention_workspace_mb = " + std::to_string(limit_mb) +
            " holds no query tile of the cublas attention: one query row of scores over B*NH = " +
            std::to_string(B * NH) + " heads and T = " + std::to_string(T) + " keys takes " +
            std::to_string(row_bytes) + " bytes (fp32 scores + probabilities); set it to at least " +
            std::to_string((row_bytes + (1u << 20) - 1) >> 20));
    size_t rows = std::min(static_cast<size_t>(T), limit / row_bytes);
    if (rows < static_cast<size_t>(T) && rows >= 64) rows -= rows % 64;
    CublasAttentionPlan plan;
    plan.tile_rows = static_cast<int>(rows);
    plan.score_bytes = rows * row_bytes;
    plan.workspace_bytes = layout_of(backward, B, T, C, NH, act_bytes, plan.tile_rows).total;
    return plan;
}

template <typename T>
void cublas_attention_forward(cublasHandle_t handle, T* out, float* lse, const T* qkv, int B, int T_, int C, int NH,
                              int NKV, const CublasAttentionPlan& plan, void* workspace, cudaStream_t stream,
                              const int* doc, const CublasRows& rows) {
    check_heads(C, NH, NKV);
    const int HS = C / NH, BH = B * NH, Tq = plan.tile_rows;
    const Layout l = layout_of(false, B, T_, C, NH, sizeof(T), Tq);
    char* ws = static_cast<char*>(workspace);
    const size_t n = static_cast<size_t>(B) * T_ * C;
    const long long head = static_cast<long long>(T_) * HS;  // stride between heads of a per-head tensor
    T *q = reinterpret_cast<T*>(ws + l.heads), *k = q + n, *v = k + n, *o = v + n;
    float* S = reinterpret_cast<float*>(ws + l.scores);
    T* P = reinterpret_cast<T*>(ws + l.probs);
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    const RowRange r = row_range(rows, T_);
    launch(split_heads_kernel<T>, dim3(elementwise_grid(3 * n, kBlock)), dim3(kBlock), 0, stream, q, qkv, B, T_, NH,
           NKV, HS);
    for (int q0 = r.q0; q0 < r.end; q0 += Tq) {
        const int rows = std::min(Tq, r.end - q0), Tk = q0 + rows;
        const long long tile = static_cast<long long>(rows) * Tk;
        // S^T (Tk x rows) = K^T-view^T (Tk x HS) * Q_t^T-view (HS x rows)
        batched_gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, Tk, rows, HS, scale, k, HS, head, q + q0 * HS, HS, head, 0.0f,
                     S, CUDA_R_32F, Tk, tile, BH);
        launch(causal_softmax_kernel<T>, dim3(row_grid(BH, rows)), dim3(kRowWarps * kWarpSize), 0, stream, P, lse, S,
               BH, rows, Tk, q0, T_, doc, NH, r.Tout, r.shift);
        // O_t^T (HS x rows) = V^T-view (HS x Tk) * P^T-view (Tk x rows)
        batched_gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, rows, Tk, 1.0f, v, HS, head, P, Tk, tile, 0.0f,
                     o + q0 * HS, cuda_type<T>(), HS, head, BH);
    }
    const size_t nr = static_cast<size_t>(B) * (r.end - r.q0) * C;  // the rows' outputs, back in position order
    launch(rows_heads_kernel<T, false>, dim3(elementwise_grid(nr, kBlock)), dim3(kBlock), 0, stream, out,
           static_cast<const T*>(o), B, T_, NH, HS, r.q0, r.end - r.q0, r.Tout, r.q0 + r.shift);
}

template <typename T>
void cublas_attention_backward(cublasHandle_t handle, T* dqkv, const T* dout, const T* qkv, const T* out,
                               const float* lse, int B, int T_, int C, int NH, int NKV,
                               const CublasAttentionPlan& plan, void* workspace, cudaStream_t stream,
                               const int* doc, const CublasRows& rows) {
    check_heads(C, NH, NKV);
    const int HS = C / NH, BH = B * NH, Tq = plan.tile_rows;
    const Layout l = layout_of(true, B, T_, C, NH, sizeof(T), Tq);
    char* ws = static_cast<char*>(workspace);
    const size_t n = static_cast<size_t>(B) * T_ * C;
    const long long head = static_cast<long long>(T_) * HS;
    T *q = reinterpret_cast<T*>(ws + l.heads), *k = q + n, *v = k + n, *dO = v + n;
    float *dq = reinterpret_cast<float*>(ws + l.grads), *dk = dq + n, *dv = dk + n;
    float* S = reinterpret_cast<float*>(ws + l.scores);  // S, then dP
    T* P = reinterpret_cast<T*>(ws + l.probs);           // P, then dS
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    launch(split_heads_kernel<T>, dim3(elementwise_grid(3 * n, kBlock)), dim3(kBlock), 0, stream, q, qkv, B, T_, NH,
           NKV, HS);
    const RowRange r = row_range(rows, T_);
    const size_t nr = static_cast<size_t>(B) * (r.end - r.q0) * C;
    launch(rows_heads_kernel<T, true>, dim3(elementwise_grid(nr, kBlock)), dim3(kBlock), 0, stream, dO, dout, B, T_,
           NH, HS, r.q0, r.end - r.q0, r.Tout, r.q0 + r.shift);
    // dk, dv accumulate over tiles; dq too is cleared, since rows outside [q0, end) are none of the tiles'
    CUDA_CHECK(cudaMemsetAsync(dq, 0, 3 * n * sizeof(float), stream));
    for (int q0 = r.q0; q0 < r.end; q0 += Tq) {
        const int rows = std::min(Tq, r.end - q0), Tk = q0 + rows;
        const long long tile = static_cast<long long>(rows) * Tk;
        const size_t elems = static_cast<size_t>(BH) * rows * Tk;
        batched_gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, Tk, rows, HS, scale, k, HS, head, q + q0 * HS, HS, head, 0.0f,
                     S, CUDA_R_32F, Tk, tile, BH);
        launch(causal_probs_kernel<T>, dim3(elementwise_grid(elems, kBlock)), dim3(kBlock), 0, stream, P,
               static_cast<const float*>(S), lse, BH, rows, Tk, q0, T_, doc, NH, r.Tout, r.shift);
        // dV^T (HS x Tk) += dO_t^T-view (HS x rows) * P (rows x Tk)
        batched_gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, Tk, rows, 1.0f, dO + q0 * HS, HS, head, P, Tk, tile, 1.0f,
                     dv, CUDA_R_32F, HS, head, BH);
        // dP^T (Tk x rows) = V (Tk x HS) * dO_t^T-view (HS x rows), over S
        batched_gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, Tk, rows, HS, 1.0f, v, HS, head, dO + q0 * HS, HS, head, 0.0f,
                     S, CUDA_R_32F, Tk, tile, BH);
        launch(softmax_backward_kernel<T>, dim3(row_grid(BH, rows)), dim3(kRowWarps * kWarpSize), 0, stream, P,
               static_cast<const float*>(S), dout, out, BH, rows, Tk, q0, T_, C, NH, doc, r.Tout, r.shift);
        // dQ_t^T (HS x rows) = K^T-view (HS x Tk) * dS^T-view (Tk x rows) * scale
        batched_gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, HS, rows, Tk, scale, k, HS, head, P, Tk, tile, 0.0f,
                     dq + q0 * HS, CUDA_R_32F, HS, head, BH);
        // dK^T (HS x Tk) += Q_t^T-view (HS x rows) * dS (rows x Tk) * scale
        batched_gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, HS, Tk, rows, scale, q + q0 * HS, HS, head, P, Tk, tile, 1.0f,
                     dk, CUDA_R_32F, HS, head, BH);
    }
    const size_t dqkv_elems = static_cast<size_t>(B) * T_ * (NH + 2 * NKV) * HS;
    launch(merge_heads_kernel<T>, dim3(elementwise_grid(dqkv_elems, kBlock)), dim3(kBlock), 0, stream, dqkv,
           static_cast<const float*>(dq), B, T_, NH, NKV, HS, rows.nq >= 0);
}

#define INSTANTIATE(T)                                                                                            \
    template void cublas_attention_forward<T>(cublasHandle_t, T*, float*, const T*, int, int, int, int, int,     \
                                              const CublasAttentionPlan&, void*, cudaStream_t, const int*,       \
                                              const CublasRows&);                                                 \
    template void cublas_attention_backward<T>(cublasHandle_t, T*, const T*, const T*, const T*, const float*,   \
                                               int, int, int, int, int, const CublasAttentionPlan&, void*,       \
                                               cudaStream_t, const int*, const CublasRows&);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
