// model/cpu/rmsnorm.cpp — RMSNorm (Zhang & Sennrich 2019) forward, with the residual add fused as
// the LayerNorm path has it, and backward. fp32, OpenMP over rows (forward, dinp) or channels
// (dweight), so every sum has a fixed order whatever the thread count.
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

}  // namespace llmtrain
