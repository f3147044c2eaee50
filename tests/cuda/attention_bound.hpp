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
    std::vector<double> p(size_t(T) * T), ds(size_t(T) * T), eds(size_t(T) * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const auto q = [&](int t, int d) { return double(qkv[(size_t(b) * T + t) * 3 * C + h * HS + d]); };
            const auto k = [&](int t, int d) { return q(t, d + C); };
            const auto v = [&](int t, int d) { return q(t, d + 2 * C); };
            const auto go = [&](int t, int d) { return double(dout[(size_t(b) * T + t) * C + h * HS + d]); };
            const auto at = [&](size_t row, int t, int d) { return (size_t(b) * T + t) * row + h * HS + d; };
            for (int i = 0; i < T; i++) {  // p, out and its bound, D's error
                double mx = -INFINITY, z = 0, D = 0, dDi = 0;
                for (int j = 0; j <= i; j++) {
                    double s = 0;
                    for (int d = 0; d < HS; d++) s += q(i, d) * k(j, d);
                    p[size_t(i) * T + j] = s * scale;
                    mx = std::max(mx, s * scale);
                }
                for (int j = 0; j <= i; j++) z += p[size_t(i) * T + j] = std::exp(p[size_t(i) * T + j] - mx);
                for (int j = 0; j <= i; j++) p[size_t(i) * T + j] /= z;
                for (int d = 0; d < HS; d++) {
                    double s = 0, sa = 0;
                    for (int j = 0; j <= i; j++)
                        s += p[size_t(i) * T + j] * v(j, d), sa += p[size_t(i) * T + j] * std::fabs(v(j, d));
                    const double e = r.out[at(C, i, d)] = c * (2 * sa + std::fabs(s));
                    D += go(i, d) * s;
                    dDi += std::fabs(go(i, d)) * e;
                }
                for (int j = 0; j <= i; j++) {  // dS and its error
                    double dp = 0;
                    for (int d = 0; d < HS; d++) dp += go(i, d) * v(j, d);
                    const double pij = p[size_t(i) * T + j];
                    ds[size_t(i) * T + j] = pij * (dp - D);
                    eds[size_t(i) * T + j] = pij * dDi + c * std::fabs(pij * (dp - D)) + c * pij * std::fabs(dp);
                }
            }
            for (int i = 0; i < T; i++)
                for (int d = 0; d < HS; d++) {  // dq
                    double s = 0, e = 0;
                    for (int j = 0; j <= i; j++)
                        s += ds[size_t(i) * T + j] * k(j, d), e += eds[size_t(i) * T + j] * std::fabs(k(j, d));
                    r.dqkv[at(3 * C, i, d)] = scale * e + c * scale * std::fabs(s);
                    if (dqkv_exact != nullptr) (*dqkv_exact)[at(3 * C, i, d)] = scale * s;
                }
            for (int j = 0; j < T; j++)
                for (int d = 0; d < HS; d++) {  // dk, dv
                    double sk = 0, ek = 0, sv = 0, ev = 0;
                    for (int i = j; i < T; i++) {
                        const double pij = p[size_t(i) * T + j];
                        sk += ds[size_t(i) * T + j] * q(i, d), ek += eds[size_t(i) * T + j] * std::fabs(q(i, d));
                        sv += pij * go(i, d), ev += pij * std::fabs(go(i, d));
                    }
                    r.dqkv[at(3 * C, j, d) + C] = scale * ek + c * scale * std::fabs(sk);
                    r.dqkv[at(3 * C, j, d) + 2 * C] = c * ev + c * std::fabs(sv);
                    if (dqkv_exact != nullptr) {
                        (*dqkv_exact)[at(3 * C, j, d) + C] = scale * sk;
                        (*dqkv_exact)[at(3 * C, j, d) + 2 * C] = sv;
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
