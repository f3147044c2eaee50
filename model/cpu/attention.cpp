// model/cpu/attention.cpp — causal multi-head self-attention, forward and backward, without a
// (B,NH,T,T) buffer. Source: FlashAttention-2 (Dao 2023): work per (batch, head), queries in blocks,
// the log-sum-exp of each score row saved so that backward recomputes the probabilities.
//
// On the CPU a block of kBq query rows sees all of its causal keys at once: its scores (kBq, T) sit
// in a per-thread scratch (O(T) memory per thread, like FlashAttention's on-chip tile), so the
// softmax is exact in one pass rather than online. Scores and products are single-threaded sgemm
// calls on strided views of qkv; OpenMP runs the (b, h) pairs in parallel with a static schedule,
// and each pair is computed in a fixed order: results do not depend on the thread count.
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
}

/// out (B,T,C), lse (B,NH,T) fp32 from qkv (B,T,3C) = [q | k | v], head h at columns h*HS.
/// out_i = sum_{j<=i} softmax_j(q_i.k_j / sqrt(HS)) v_j; lse_i = log sum_{j<=i} exp(q_i.k_j / sqrt(HS)).
void CpuOps::attention_forward(void* out, float* lse, const void* qkv_, int B, int T, int C, int NH) {
    const float* qkv = static_cast<const float*>(qkv_);
    float* o = static_cast<float*>(out);
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
    {
        std::vector<float> S(static_cast<size_t>(kBq) * T);  // (nq, nk) scores, then probabilities
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; ++bh) {
            const int b = bh / NH, h = bh % NH;
            const float* q = qkv + static_cast<size_t>(b) * T * C3 + h * HS;  // row stride 3C
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* ob = o + static_cast<size_t>(b) * T * C + h * HS;          // row stride C
            float* lrow = lse + static_cast<size_t>(bh) * T;
            for (int i0 = 0; i0 < T; i0 += kBq) {
                const int nq = std::min(kBq, T - i0), nk = i0 + nq;  // keys 0..nk-1 are visible
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, scale,
                            q + static_cast<size_t>(i0) * C3, C3, k, C3, 0.0f, S.data(), nk);
                for (int r = 0; r < nq; ++r) {
                    const int i = i0 + r;
                    float* s = S.data() + static_cast<size_t>(r) * nk;
                    float mx = s[0];
#pragma omp simd reduction(max : mx)
                    for (int j = 1; j <= i; ++j) mx = s[j] > mx ? s[j] : mx;  // vectorizes; std::max does not
                    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                    for (int j = 0; j <= i; ++j) {
                        s[j] = cpu::vexp(s[j] - mx);
                        sum += s[j];
                    }
                    const float inv = 1.0f / sum;
                    for (int j = 0; j <= i; ++j) s[j] *= inv;
                    for (int j = i + 1; j < nk; ++j) s[j] = 0.0f;  // causal mask
                    lrow[i] = mx + std::log(sum);
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, nk, 1.0f, S.data(), nk,
                            v, C3, 0.0f, ob + static_cast<size_t>(i0) * C, C);
            }
        }
    }
}

/// dqkv (B,T,3C) (overwritten) from dout (B,T,C), with P recomputed as exp(q.k*scale - lse):
/// dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(dO o O)); dQ = scale dS K; dK = scale dS^T Q.
void CpuOps::attention_backward(void* dqkv_, const void* dout_, const void* qkv_, const void* out_,
                                const float* lse, int B, int T, int C, int NH) {
    const float* qkv = static_cast<const float*>(qkv_);
    const float* o = static_cast<const float*>(out_);
    const float* dout = static_cast<const float*>(dout_);
    float* dqkv = static_cast<float*>(dqkv_);
    const int HS = C / NH, C3 = 3 * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
    {
        std::vector<float> P(static_cast<size_t>(kBq) * T), dP(static_cast<size_t>(kBq) * T);
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; ++bh) {
            const int b = bh / NH, h = bh % NH;
            const size_t qoff = static_cast<size_t>(b) * T * C3 + h * HS;
            const size_t ooff = static_cast<size_t>(b) * T * C + h * HS;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float* ob = o + ooff;
            const float* dob = dout + ooff;
            const float* lrow = lse + static_cast<size_t>(bh) * T;
            for (int t = 0; t < T; ++t) {  // dK and dV accumulate over query blocks
                std::memset(dk + static_cast<size_t>(t) * C3, 0, HS * sizeof(float));
                std::memset(dv + static_cast<size_t>(t) * C3, 0, HS * sizeof(float));
            }
            for (int i0 = 0; i0 < T; i0 += kBq) {
                const int nq = std::min(kBq, T - i0), nk = i0 + nq;
                const float* qb = q + static_cast<size_t>(i0) * C3;
                const float* dob_i = dob + static_cast<size_t>(i0) * C;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, scale, qb, C3, k, C3,
                            0.0f, P.data(), nk);
                for (int r = 0; r < nq; ++r) {
                    const int i = i0 + r;
                    float* p = P.data() + static_cast<size_t>(r) * nk;
                    const float l = lrow[i];
#pragma omp simd
                    for (int j = 0; j <= i; ++j) p[j] = cpu::vexp(p[j] - l);
                    for (int j = i + 1; j < nk; ++j) p[j] = 0.0f;
                }
                // dV[0:nk] += P^T (nk, nq) @ dO_blk (nq, HS)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nq, 1.0f, P.data(), nk,
                            dob_i, C, 1.0f, dv, C3);
                // dP (nq, nk) = dO_blk @ V[0:nk]^T
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, HS, 1.0f, dob_i, C, v, C3,
                            0.0f, dP.data(), nk);
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
                // dQ_blk (nq, HS) = scale dS @ K[0:nk];  dK[0:nk] += scale dS^T @ Q_blk
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, HS, nk, scale, dP.data(), nk,
                            k, C3, 0.0f, dq + static_cast<size_t>(i0) * C3, C3);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, HS, nq, scale, dP.data(), nk,
                            qb, C3, 1.0f, dk, C3);
            }
        }
    }
}

}  // namespace llmtrain
