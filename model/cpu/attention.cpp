// model/cpu/attention.cpp — causal multi-head and grouped-query self-attention (Ainslie et al.
// 2023; multi-head is the case NKV = NH), forward and backward, without a (B,NH,T,T) buffer.
// Source: FlashAttention-2 (Dao 2023): work per (batch, head), queries in blocks, the log-sum-exp
// of each score row saved so that backward recomputes the probabilities.
//
// On the CPU a block of kBq query rows sees all of its causal keys at once: its scores (kBq, T) sit
// in a per-thread scratch (O(T) memory per thread, like FlashAttention's on-chip tile), so the
// softmax is exact in one pass rather than online. Scores and products are single-threaded sgemm
// calls on strided views of qkv; OpenMP runs the (b, h) pairs (backward: (b, key/value head)) in
// parallel with a static schedule, and each is computed in a fixed order: results do not depend on
// the thread count.
#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/cpu/cpu_ops.hpp"
#include "model/cpu/vec_math.hpp"

namespace llmtrain {

namespace {
constexpr int kBq = 64;  // query rows per block

/// The first key position row t of batch row b sees: ds[b,t] under document masking, else 0.
inline int first_key(const int* ds, int b, int T, int t) {
    return ds == nullptr ? 0 : ds[static_cast<size_t>(b) * T + t];
}

/// out (B,T,NH*HS), lse (B,NH,T) fp32 from qkv (B,T,(NH + 2 NKV)*HS) = [q | k | v]; query head h
/// reads key/value head h / (NH/NKV) (Ainslie et al. 2023). ds: null (causal) or doc_start (B,T)
/// (ops.hpp), lo_i = ds[b,i]: out_i = sum_{lo_i<=j<=i} softmax_j(q_i.k_j / sqrt(HS)) v_j;
/// lse_i = log sum_{lo_i<=j<=i} exp(q_i.k_j / sqrt(HS)). A query block's scores start at the key
/// its first row sees (ds is nondecreasing): keys before it are skipped, as FlashAttention's blocks.
/// rows: the query rows computed and where they go (ops.hpp AttentionRows; all(T): the whole window
/// into (B,T) buffers), blocks of kBq from rows.q0.
void forward(float* o, float* lse, const float* qkv, const int* ds, int B, int T, int NH, int NKV, int HS,
             const AttentionRows& rows) {
    const int C = NH * HS, W = (NH + 2 * NKV) * HS, group = NH / NKV;  // W: row stride of qkv
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
    {
        std::vector<float> S(static_cast<size_t>(kBq) * T);  // (nq, nk) scores, then probabilities
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; ++bh) {
            const int b = bh / NH, h = bh % NH, g = h / group;
            const float* base = qkv + static_cast<size_t>(b) * T * W;
            const float* q = base + h * HS;
            const float* k = base + C + g * HS;
            const float* v = base + C + (NKV + g) * HS;
            // query row i of the window goes to out row i + shift of (B,Tout,C) and lse (B,NH,Tout)
            const int shift = rows.o0 - rows.q0, qend = rows.q0 + rows.nq;
            float* ob = o + static_cast<size_t>(b) * rows.Tout * C + h * HS + static_cast<ptrdiff_t>(shift) * C;
            float* lrow = lse + static_cast<size_t>(bh) * rows.Tout + shift;
            for (int i0 = rows.q0; i0 < qend; i0 += kBq) {
                const int nq = std::min(kBq, qend - i0), j0 = first_key(ds, b, T, i0);
                const int nk = i0 + nq - j0;  // keys j0..i0+nq-1 are visible to some row
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, scale,
                            q + static_cast<size_t>(i0) * W, W, k + static_cast<size_t>(j0) * W, W, 0.0f,
                            S.data(), nk);
                for (int r = 0; r < nq; ++r) {
                    const int i = i0 + r, lo = first_key(ds, b, T, i) - j0, hi = i - j0;  // visible: [lo, hi]
                    float* s = S.data() + static_cast<size_t>(r) * nk;
                    float mx = s[lo];
#pragma omp simd reduction(max : mx)
                    for (int j = lo + 1; j <= hi; ++j) mx = s[j] > mx ? s[j] : mx;  // vectorizes; std::max does not
                    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                    for (int j = lo; j <= hi; ++j) {
                        s[j] = cpu::vexp(s[j] - mx);
                        sum += s[j];
                    }
                    const float inv = 1.0f / sum;
                    for (int j = lo; j <= hi; ++j) s[j] *= inv;
                    for (int j = 0; j < lo; ++j) s[j] = 0.0f;       // earlier documents
                    for (int j = hi + 1; j < nk; ++j) s[j] = 0.0f;  // causal mask
                    lrow[i] = mx + std::log(sum);
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, nk, 1.0f, S.data(), nk,
                            v + static_cast<size_t>(j0) * W, W, 0.0f, ob + static_cast<size_t>(i0) * C, C);
            }
        }
    }
}

/// dqkv (B,T,(NH + 2 NKV)*HS) (overwritten) from dout (B,T,NH*HS), with P recomputed as
/// exp(q.k*scale - lse): dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dO o O)); dQ = scale dS K;
/// dK = scale dS^T Q. OpenMP over (batch, key/value head): the NH/NKV query heads of a group run in
/// order inside one thread, each adding into its group's dK and dV, so no two threads write alike.
/// ds: as forward (masked probabilities are 0, so their dS is too). rows: as forward; dQ of those
/// rows and dK, dV of every key row: written (dK, dV zeroed first) when zero_kv, else added to.
void backward(float* dqkv, const float* dout, const float* qkv, const float* o, const float* lse, const int* ds,
              int B, int T, int NH, int NKV, int HS, const AttentionRows& rows, bool zero_kv) {
    const int C = NH * HS, W = (NH + 2 * NKV) * HS, group = NH / NKV;
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
    {
        std::vector<float> P(static_cast<size_t>(kBq) * T), dP(static_cast<size_t>(kBq) * T);
#pragma omp for schedule(static)
        for (int bg = 0; bg < B * NKV; ++bg) {
            const int b = bg / NKV, g = bg % NKV;
            const size_t boff = static_cast<size_t>(b) * T * W;
            const float *k = qkv + boff + C + g * HS, *v = qkv + boff + C + (NKV + g) * HS;
            float *dk = dqkv + boff + C + g * HS, *dv = dqkv + boff + C + (NKV + g) * HS;
            for (int t = 0; zero_kv && t < T; ++t) {  // dK and dV accumulate over query blocks and the group's heads
                std::memset(dk + static_cast<size_t>(t) * W, 0, HS * sizeof(float));
                std::memset(dv + static_cast<size_t>(t) * W, 0, HS * sizeof(float));
            }
            const int shift = rows.o0 - rows.q0, qend = rows.q0 + rows.nq;  // window row i: out row i + shift
            for (int h = g * group; h < (g + 1) * group; ++h) {
                const ptrdiff_t ooff = static_cast<ptrdiff_t>(b) * rows.Tout * C + h * HS + static_cast<ptrdiff_t>(shift) * C;
                const float* q = qkv + boff + h * HS;
                float* dq = dqkv + boff + h * HS;
                const float* ob = o + ooff;
                const float* dob = dout + ooff;
                const float* lrow = lse + (static_cast<size_t>(b) * NH + h) * rows.Tout + shift;
                for (int i0 = rows.q0; i0 < qend; i0 += kBq) {
                    const int nq = std::min(kBq, qend - i0), j0 = first_key(ds, b, T, i0), nk = i0 + nq - j0;
                    const size_t k0 = static_cast<size_t>(j0) * W;  // keys j0..i0+nq-1
                    const float* qb = q + static_cast<size_t>(i0) * W;
                    const float* dob_i = dob + static_cast<size_t>(i0) * C;
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, scale, qb, W, k + k0, W, 0.0f,
                                P.data(), nk);
                    for (int r = 0; r < nq; ++r) {
                        const int i = i0 + r, lo = first_key(ds, b, T, i) - j0, hi = i - j0;
                        float* p = P.data() + static_cast<size_t>(r) * nk;
                        const float l = lrow[i];
                        for (int j = 0; j < lo; ++j) p[j] = 0.0f;
#pragma omp simd
                        for (int j = lo; j <= hi; ++j) p[j] = cpu::vexp(p[j] - l);
                        for (int j = hi + 1; j < nk; ++j) p[j] = 0.0f;
                    }
                    // dV[j0:] += P^T (nk, nq) @ dO_blk (nq, HS)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nq, 1.0f, P.data(), nk, dob_i, C,
                                1.0f, dv + k0, W);
                    // dP (nq, nk) = dO_blk @ V[j0:]^T
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, 1.0f, dob_i, C, v + k0, W, 0.0f,
                                dP.data(), nk);
                    for (int r = 0; r < nq; ++r) {
                        const int i = i0 + r;
                        const float* orow = ob + static_cast<size_t>(i) * C;
                        const float* drow = dob + static_cast<size_t>(i) * C;
                        float D = 0.0f;  // rowsum(P o dP) = dO_i . O_i
                        for (int d = 0; d < HS; ++d) D += drow[d] * orow[d];
                        const float* p = P.data() + static_cast<size_t>(r) * nk;
                        float* ds = dP.data() + static_cast<size_t>(r) * nk;
#pragma omp simd
                        for (int j = 0; j < nk; ++j) ds[j] = p[j] * (ds[j] - D);  // masked p = 0 -> 0
                    }
                    // dQ_blk (nq, HS) = scale dS @ K[j0:];  dK[j0:] += scale dS^T @ Q_blk
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, nk, scale, dP.data(), nk, k + k0,
                                W, zero_kv ? 0.0f : 1.0f, dq + static_cast<size_t>(i0) * W, W);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nq, scale, dP.data(), nk, qb, W,
                                1.0f, dk + k0, W);
                }
            }
        }
    }
}

}  // namespace

/// out (B,T,C), lse (B,NH,T) fp32 from qkv (B,T,3C) = [q | k | v], head h at columns h*HS: the
/// grouped-query form with NKV = NH (bitwise the same arithmetic).
void CpuOps::attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH) {
    attention_forward_gqa(out, lse, qkv, B, T, NH, NH, C / NH);
}

/// Causal grouped-query attention (ops.hpp): forward() above with no document mask.
void CpuOps::attention_forward_gqa(void* out, float* lse, const void* qkv, int B, int T, int NH, int NKV, int HS) {
    forward(static_cast<float*>(out), lse, static_cast<const float*>(qkv), nullptr, B, T, NH, NKV, HS, AttentionRows::all(T));
}

/// Block-causal (document-masked) attention (ops.hpp): forward() above with doc_start (B,T) int32.
void CpuOps::attention_forward_doc(void* out, float* lse, const void* qkv, const int* doc_start, int B, int T,
                                   int NH, int NKV, int HS) {
    forward(static_cast<float*>(out), lse, static_cast<const float*>(qkv), doc_start, B, T, NH, NKV, HS,
            AttentionRows::all(T));
}

/// Query rows of the window only (ops.hpp, context parallelism): forward() above over rows.
void CpuOps::attention_forward_rows(void* out, float* lse, const void* qkv, const int* doc_start, int B, int T,
                                    int NH, int NKV, int HS, const AttentionRows& rows) {
    forward(static_cast<float*>(out), lse, static_cast<const float*>(qkv), doc_start, B, T, NH, NKV, HS, rows);
}

/// dqkv (B,T,3C) (overwritten) from dout (B,T,C): the grouped-query form with NKV = NH.
void CpuOps::attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                int B, int T, int C, int NH) {
    attention_backward_gqa(dqkv, dout, qkv, out, lse, B, T, NH, NH, C / NH);
}

/// The causal backward (ops.hpp): backward() above with no document mask.
void CpuOps::attention_backward_gqa(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                    int B, int T, int NH, int NKV, int HS) {
    backward(static_cast<float*>(dqkv), static_cast<const float*>(dout), static_cast<const float*>(qkv),
             static_cast<const float*>(out), lse, nullptr, B, T, NH, NKV, HS, AttentionRows::all(T), true);
}

/// The block-causal backward (ops.hpp): backward() above with doc_start (B,T) int32.
void CpuOps::attention_backward_doc(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                    const int* doc_start, int B, int T, int NH, int NKV, int HS) {
    backward(static_cast<float*>(dqkv), static_cast<const float*>(dout), static_cast<const float*>(qkv),
             static_cast<const float*>(out), lse, doc_start, B, T, NH, NKV, HS, AttentionRows::all(T), true);
}

/// The backward of attention_forward_rows (ops.hpp): backward() above over rows, dK and dV added to.
void CpuOps::attention_backward_rows(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                                     const int* doc_start, int B, int T, int NH, int NKV, int HS,
                                     const AttentionRows& rows) {
    backward(static_cast<float*>(dqkv), static_cast<const float*>(dout), static_cast<const float*>(qkv),
             static_cast<const float*>(out), lse, doc_start, B, T, NH, NKV, HS, rows, false);
}

}  // namespace llmtrain
