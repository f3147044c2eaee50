// model/cpu/rmsnorm.cpp — RMSNorm (Zhang & Sennrich 2019) forward, with the residual add fused as
// the LayerNorm path has it, and backward. fp32, OpenMP over rows (forward, dinp) or channels
// (dweight), so every sum has a fixed order whatever the thread count. Qwen3's QK-norm is the same
// RMSNorm over each q and k head of the q|k|v rows (qk_norm_forward / qk_norm_backward).
#include <cmath>

#include "model/cpu/cpu_ops.hpp"
#include "model/cpu/parallel.hpp"

namespace llmtrain {

namespace {

/// One row x (C): *rstd = 1/sqrt(mean(x^2) + eps), out = x * rstd * w.
inline void rmsnorm_row(float* out, float* rstd, const float* x, const float* w, int C, float eps) {
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const float s = 1.0f / std::sqrt(ss / C + eps);
    for (int c = 0; c < C; ++c) out[c] = x[c] * s * w[c];
    *rstd = s;
}

}  // namespace

/// out (N,C) = inp * rstd * weight, rstd (N) fp32 = 1/sqrt(mean_c inp^2 + eps).
void CpuOps::rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, int N, int C, float eps) {
    const float* x = static_cast<const float*>(inp);
    const float* w = static_cast<const float*>(weight);
    float* o = static_cast<float*>(out);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
        rmsnorm_row(o + static_cast<size_t>(n) * C, rstd + n, x + static_cast<size_t>(n) * C, w, C, eps);
}

/// residual (N,C) = a + b, then out = RMSNorm(residual) (one pass over the row).
void CpuOps::fused_residual_rmsnorm_forward(void* residual, void* out, float* rstd, const void* a, const void* b,
                                            const void* weight, int N, int C, float eps) {
    const float* pa = static_cast<const float*>(a);
    const float* pb = static_cast<const float*>(b);
    float* r = static_cast<float*>(residual);
    float* o = static_cast<float*>(out);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        const size_t off = static_cast<size_t>(n) * C;
        for (int c = 0; c < C; ++c) r[off + c] = pa[off + c] + pb[off + c];
        rmsnorm_row(o + off, rstd + n, r + off, static_cast<const float*>(weight), C, eps);
    }
}

/// With n = x * rstd and dn = weight * dout: dinp (N,C) += rstd * (dn - n * mean_c(dn * n));
/// dweight (C) += sum_n dout * n. dinp is parallel over rows; dweight over channels, each channel
/// summing rows 0..N-1 in order.
void CpuOps::rmsnorm_backward(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight,
                              const float* rstd, int N, int C) {
    const float* dy = static_cast<const float*>(dout);
    const float* x = static_cast<const float*>(inp);
    const float* w = static_cast<const float*>(weight);
    float* dx = static_cast<float*>(dinp);
    float* dw = static_cast<float*>(dweight);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int n = 0; n < N; ++n) {
            const size_t off = static_cast<size_t>(n) * C;
            const float s = rstd[n];
            float sum_dn_norm = 0.0f;
#pragma omp simd reduction(+ : sum_dn_norm)
            for (int c = 0; c < C; ++c) sum_dn_norm += w[c] * dy[off + c] * x[off + c] * s;
            const float mean_dn_norm = sum_dn_norm / C;
            for (int c = 0; c < C; ++c) dx[off + c] += s * (w[c] * dy[off + c] - x[off + c] * s * mean_dn_norm);
        }
        int c0, c1;
        cpu::thread_range(C, 16, &c0, &c1);
        for (int n = 0; n < N; ++n) {
            const size_t off = static_cast<size_t>(n) * C;
            const float s = rstd[n];
            for (int c = c0; c < c1; ++c) dw[c] += dy[off + c] * x[off + c] * s;
        }
    }
}

/// Each row's q|k heads (NH + NKV of HS at the start of the row of qkv, (N, (NH + 2 NKV) HS)) saved
/// into pre (N, (NH + NKV) HS), then normalized in place by rmsnorm_row with wq (q heads) or wk.
void CpuOps::qk_norm_forward(void* qkv, void* pre, float* rstd, const void* wq, const void* wk, int N, int NH,
                             int NKV, int HS, float eps) {
    float* q = static_cast<float*>(qkv);
    float* x = static_cast<float*>(pre);
    const int H = NH + NKV;
    const size_t row = size_t(NH + 2 * NKV) * HS, qk = size_t(H) * HS;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        float* o = q + size_t(n) * row;
        float* xn = x + size_t(n) * qk;
        for (size_t c = 0; c < qk; ++c) xn[c] = o[c];
        for (int h = 0; h < H; ++h)
            rmsnorm_row(o + size_t(h) * HS, rstd + size_t(n) * H + h, xn + size_t(h) * HS,
                        static_cast<const float*>(h < NH ? wq : wk), HS, eps);
    }
}

/// rmsnorm_backward's formulas per head, d out replaced by d x in place (the head's values are
/// read before it is written). dwq / dwk: parallel over channels, each summing rows in order and
/// inside a row its heads in order.
void CpuOps::qk_norm_backward(void* dqkv, void* dwq, void* dwk, const void* pre, const void* wq, const void* wk,
                              const float* rstd, int N, int NH, int NKV, int HS) {
    float* d = static_cast<float*>(dqkv);
    const float* x = static_cast<const float*>(pre);
    float* dw[2] = {static_cast<float*>(dwq), static_cast<float*>(dwk)};
    const float* w[2] = {static_cast<const float*>(wq), static_cast<const float*>(wk)};
    const int H = NH + NKV;
    const size_t row = size_t(NH + 2 * NKV) * HS, qk = size_t(H) * HS;
#pragma omp parallel
    {
        int c0, c1;  // the weight gradients first: they read d out before it is overwritten below
        cpu::thread_range(HS, 16, &c0, &c1);
        for (int n = 0; n < N; ++n)
            for (int h = 0; h < H; ++h) {
                const float* dy = d + size_t(n) * row + size_t(h) * HS;
                const float* xh = x + size_t(n) * qk + size_t(h) * HS;
                const float s = rstd[size_t(n) * H + h];
                float* g = dw[h < NH ? 0 : 1];
                for (int c = c0; c < c1; ++c) g[c] += dy[c] * xh[c] * s;
            }
#pragma omp barrier
#pragma omp for schedule(static)
        for (int n = 0; n < N; ++n)
            for (int h = 0; h < H; ++h) {
                float* dy = d + size_t(n) * row + size_t(h) * HS;
                const float* xh = x + size_t(n) * qk + size_t(h) * HS;
                const float* wh = w[h < NH ? 0 : 1];
                const float s = rstd[size_t(n) * H + h];
                float sum = 0.0f;
                for (int c = 0; c < HS; ++c) sum += wh[c] * dy[c] * xh[c] * s;
                const float mean = sum / HS;
                for (int c = 0; c < HS; ++c) dy[c] = s * (wh[c] * dy[c] - xh[c] * s * mean);
            }
    }
}

}  // namespace llmtrain
