// tests/cuda/attention_bound.hpp — a per-element error bound for bf16 attention whose GEMMs run on
// tensor cores (cuDNN's fused attention, the cublas path) against the CPU backend's fp32 attention
// on the same bf16-exact inputs, derived rather than fixed: one global tolerance cannot hold, since
// the error of a sum of T rounded terms grows with T while the result may cancel (seen at T 256:
// cublas dqkv 0.039 and native 0.023 of (|x| + rms), above the 2^-5 / 2^-6 the small op tests use;
// cuDNN against native at T 256 / 1024 on an H100: 0.030).
//
// The roundings, each at most u_b = 2^-8 relative (bf16 keeps 8 significant bits: round to nearest
// is off by at most half an ulp, 2^-8 of the value's power of two), as
// FlashAttention-2 and llm.c place them and as cudnn_attention.cu's graphs and cublas_attention.cu
// state: P rounded to bf16 where it enters O = P V and dV = P^T dO; dS rounded where it enters
// dQ = dS K and dK = dS^T Q; the outputs out and dqkv rounded to bf16; D = rowsum(dO o out) read
// from the rounded out; and once more p_ij dP_ij: cuDNN's deterministic dQ pass reads a (b,h,T,T)
// workspace of 2 bytes a score (cudnn-frontend sizes it so), which may hold dP rather than dS.
// Everything else is fp32, whose sums of at most T + HS terms, on both sides,
// add 2 (T + HS) u_f (u_f = 2^-24) relative to the same magnitudes (Higham's gamma_n bound) — folded
// into c = u_b + 2 (T + HS) u_f. With p the exact probabilities, scale = 1/sqrt(HS), first order:
//   out_i:  c (2 sum_j p_ij |v_j| + |out_i|)        (2: P's rounding in the sum and, when the row sum
//                                                    l is taken from the rounded P, in the division)
//   D_i:    dD_i = sum_d |dO_id| err(out_id)
//   dS_ij:  ddS_ij = p_ij dD_i + c |dS_ij| + c p_ij |dP_ij|,  dP_ij = dO_i . v_j,  dS_ij = p_ij (dP_ij - D_i)
//   dq_i:   scale sum_j ddS_ij |k_j| + c |dq_i|;    dk_j: scale sum_i ddS_ij |q_i| + c |dk_j|
//   dv_j:   c sum_i p_ij |dO_i| + c |dv_j|
// (errors of the lse, fp32 from fp32 scores, move P by ~T u_f: inside the fp32 budget). The exact
// values come from float64 loops here, independent of both backends.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace llmtrain::cudatest {

/// Bounds on |got - cpu| for out (B,T,C) and dqkv (B,T,3C), element by element (see above).
struct AttentionBound {
    std::vector<double> out, dqkv;
};

/// The bound for attention forward + backward on qkv (B,T,3C) and dout (B,T,C), heads of HS = C/NH;
/// `dqkv_exact`, when given, receives the exact (float64) dqkv the bound was derived from.
inline AttentionBound attention_bound(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T,
                                      int C, int NH, std::vector<double>* dqkv_exact = nullptr) {
    const int HS = C / NH;
    const double c = 1.0 / 256 + 2.0 * (T + HS) / (1 << 24), scale = 1.0 / std::sqrt(double(HS));
    AttentionBound r{std::vector<double>(size_t(B) * T * C), std::vector<double>(size_t(B) * T * 3 * C)};
    if (dqkv_exact != nullptr) dqkv_exact->assign(r.dqkv.size(), 0.0);
    // one (b, h) per iteration, in parallel (OpenMP; each writes only its own head's elements), the
    // head's rows copied to contiguous float64 arrays and every inner loop over d: at T 1024 a head
    // is ~10^9 float64 operations, and test_cuda_gpu's GPU-first part is time-boxed (tools/gpu/run.sh)
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<double> p(size_t(T) * T), ds(size_t(T) * T), eds(size_t(T) * T);
            std::vector<double> q(size_t(T) * HS), k(q.size()), v(q.size()), go(q.size());
            std::vector<double> s1(HS), s2(HS), s3(HS), s4(HS);
            const auto at = [&](size_t row, int t, int d) { return (size_t(b) * T + t) * row + h * HS + d; };
            for (int t = 0; t < T; t++)
                for (int d = 0; d < HS; d++) {
                    q[size_t(t) * HS + d] = qkv[at(3 * C, t, d)];
                    k[size_t(t) * HS + d] = qkv[at(3 * C, t, d) + C];
                    v[size_t(t) * HS + d] = qkv[at(3 * C, t, d) + 2 * C];
                    go[size_t(t) * HS + d] = dout[at(C, t, d)];
                }
            for (int i = 0; i < T; i++) {  // p, out and its bound, D's error
                const double* qi = &q[size_t(i) * HS];
                const double* goi = &go[size_t(i) * HS];
                double* pi = &p[size_t(i) * T];
                double mx = -INFINITY, z = 0, D = 0, dDi = 0;
                for (int j = 0; j <= i; j++) {
                    double sc = 0;
                    for (int d = 0; d < HS; d++) sc += qi[d] * k[size_t(j) * HS + d];
                    pi[j] = sc * scale;
                    mx = std::max(mx, sc * scale);
                }
                for (int j = 0; j <= i; j++) z += pi[j] = std::exp(pi[j] - mx);
                for (int j = 0; j <= i; j++) pi[j] /= z;
                std::fill(s1.begin(), s1.end(), 0.0), std::fill(s2.begin(), s2.end(), 0.0);
                for (int j = 0; j <= i; j++)
                    for (int d = 0; d < HS; d++)
                        s1[d] += pi[j] * v[size_t(j) * HS + d], s2[d] += pi[j] * std::fabs(v[size_t(j) * HS + d]);
                for (int d = 0; d < HS; d++) {
                    const double e = r.out[at(C, i, d)] = c * (2 * s2[d] + std::fabs(s1[d]));
                    D += goi[d] * s1[d];
                    dDi += std::fabs(goi[d]) * e;
                }
                for (int j = 0; j <= i; j++) {  // dS and its error
                    double dp = 0;
                    for (int d = 0; d < HS; d++) dp += goi[d] * v[size_t(j) * HS + d];
                    const double pij = pi[j];
                    ds[size_t(i) * T + j] = pij * (dp - D);
                    eds[size_t(i) * T + j] = pij * dDi + c * std::fabs(pij * (dp - D)) + c * pij * std::fabs(dp);
                }
            }
            for (int i = 0; i < T; i++) {  // dq
                std::fill(s1.begin(), s1.end(), 0.0), std::fill(s2.begin(), s2.end(), 0.0);
                for (int j = 0; j <= i; j++)
                    for (int d = 0; d < HS; d++)
                        s1[d] += ds[size_t(i) * T + j] * k[size_t(j) * HS + d],
                            s2[d] += eds[size_t(i) * T + j] * std::fabs(k[size_t(j) * HS + d]);
                for (int d = 0; d < HS; d++) {
                    r.dqkv[at(3 * C, i, d)] = scale * s2[d] + c * scale * std::fabs(s1[d]);
                    if (dqkv_exact != nullptr) (*dqkv_exact)[at(3 * C, i, d)] = scale * s1[d];
                }
            }
            for (int j = 0; j < T; j++) {  // dk, dv
                for (auto* a : {&s1, &s2, &s3, &s4}) std::fill(a->begin(), a->end(), 0.0);
                for (int i = j; i < T; i++) {
                    const double pij = p[size_t(i) * T + j], dsij = ds[size_t(i) * T + j], edsij = eds[size_t(i) * T + j];
                    for (int d = 0; d < HS; d++) {
                        const double qd = q[size_t(i) * HS + d], god = go[size_t(i) * HS + d];
                        s1[d] += dsij * qd, s2[d] += edsij * std::fabs(qd);
                        s3[d] += pij * god, s4[d] += pij * std::fabs(god);
                    }
                }
                for (int d = 0; d < HS; d++) {
                    r.dqkv[at(3 * C, j, d) + C] = scale * s2[d] + c * scale * std::fabs(s1[d]);
                    r.dqkv[at(3 * C, j, d) + 2 * C] = c * s4[d] + c * std::fabs(s3[d]);
                    if (dqkv_exact != nullptr) {
                        (*dqkv_exact)[at(3 * C, j, d) + C] = scale * s1[d];
                        (*dqkv_exact)[at(3 * C, j, d) + 2 * C] = s3[d];
                    }
                }
            }
        }
    return r;
}

/// The bound for grouped-query attention on qkv (B,T,(NH + 2 NKV)*HS) = q | k | v, query head h
/// reading key/value head h / (NH/NKV), dout (B,T,NH*HS); dqkv in the same layout as qkv. Derived
/// from the multi-head problem with the key/value heads repeated (attention_bound above, on that
/// copy): out and dq as there; dK and dV of key/value head g are sums over its NH/NKV query heads, as
/// cuDNN's grouped-query graph computes them (cudnn_attention.cu: each head's dK, dV rounded to bf16,
/// as the multi-head bound already counts, then summed and rounded once more), so their bound is the
/// sum of the query heads' bounds, plus u_b |dk_g| for the last rounding and (group - 1) u_f sum|dk_h|
/// for the fp32 sum. An engine that sums in fp32 before one rounding stays inside it.
inline AttentionBound attention_bound_gqa(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T,
                                          int NH, int NKV, int HS) {
    const int C = NH * HS, group = NH / NKV;
    const size_t W = size_t(NH + 2 * NKV) * HS, W3 = 3 * size_t(C), N = size_t(B) * T;
    std::vector<float> q3(N * W3);
    for (size_t n = 0; n < N; n++)
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HS; d++) {
                const int g = h / group;
                q3[n * W3 + h * HS + d] = qkv[n * W + h * HS + d];
                q3[n * W3 + C + h * HS + d] = qkv[n * W + C + g * HS + d];
                q3[n * W3 + 2 * C + h * HS + d] = qkv[n * W + C + (NKV + g) * HS + d];
            }
    std::vector<double> exact3;
    const AttentionBound b3 = attention_bound(q3, dout, B, T, C, NH, &exact3);
    AttentionBound r{b3.out, std::vector<double>(N * W, 0.0)};
    std::vector<double> exact(N * W, 0.0), abs_sum(N * W, 0.0);
    for (size_t n = 0; n < N; n++)
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HS; d++) {
                const int g = h / group;
                r.dqkv[n * W + h * HS + d] = b3.dqkv[n * W3 + h * HS + d];
                for (int part = 1; part <= 2; part++) {  // k, then v
                    const size_t to = n * W + C + size_t((part - 1) * NKV + g) * HS + d;
                    const size_t from = n * W3 + size_t(part) * C + size_t(h) * HS + d;
                    r.dqkv[to] += b3.dqkv[from];
                    exact[to] += exact3[from];
                    abs_sum[to] += std::fabs(exact3[from]);
                }
            }
    if (group > 1)
        for (size_t n = 0; n < N; n++)
            for (size_t x = C; x < W; x++)
                r.dqkv[n * W + x] += std::fabs(exact[n * W + x]) / 256 +
                                     (group - 1) * abs_sum[n * W + x] / (1 << 24);
    return r;
}

/// Expects |got_i - want_i| <= bound_i for every i; names the worst element and its share of the bound.
inline void expect_within_bound(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                                const std::vector<double>& bound) {
    ASSERT_EQ(got.size(), want.size()) << what;
    ASSERT_EQ(got.size(), bound.size()) << what;
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double r = std::fabs(double(got[i]) - want[i]) / (bound[i] + 1e-30);
        if (std::isnan(r)) r = INFINITY;
        if (r > worst) worst = r, wi = i;
    }
    EXPECT_LE(worst, 1.0) << what << ": worst element " << wi << " got " << got[wi] << " cpu " << want[wi]
                          << " bound " << bound[wi] << " (" << worst << " of it)";
}

}  // namespace llmtrain::cudatest
