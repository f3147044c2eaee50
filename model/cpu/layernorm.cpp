// model/cpu/layernorm.cpp — LayerNorm (Ba et al. 2016) forward/backward, the fused residual add,
// and the plain residual add. fp32, OpenMP over rows (forward, dinp) or channels (dweight, dbias).
#include <cmath>

#include "model/cpu/cpu_ops.hpp"
#include "model/cpu/parallel.hpp"

namespace llmtrain {

namespace {

constexpr float kEps = 1e-5f;

/// Normalizes one row x (C) into out, saving mean and rstd = 1/sqrt(var + eps) (biased variance).
inline void layernorm_row(float* out, float* mean, float* rstd, const float* x, const float* w,
                          const float* b, int C) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const float m = sum / C;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(var / C + kEps);
    for (int c = 0; c < C; ++c) out[c] = (x[c] - m) * s * w[c] + b[c];
    *mean = m;
    *rstd = s;
}

}  // namespace

/// out (N,C) = LN(inp) * weight + bias; mean, rstd (N) fp32. Source: Ba et al. 2016, eps 1e-5.
void CpuOps::layernorm_forward(void* out, float* mean, float* rstd, const void* inp,
                               const void* weight, const void* bias, int N, int C) {
    const float* x = static_cast<const float*>(inp);
    const float* w = static_cast<const float*>(weight);
    const float* b = static_cast<const float*>(bias);
    float* o = static_cast<float*>(out);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n)
        layernorm_row(o + static_cast<size_t>(n) * C, mean + n, rstd + n, x + static_cast<size_t>(n) * C,
                      w, b, C);
}

/// residual (N,C) = a + b, then out = LN(residual) as layernorm_forward (one pass over the row).
void CpuOps::fused_residual_layernorm_forward(void* residual, void* out, float* mean, float* rstd,
                                              const void* a, const void* b, const void* weight,
                                              const void* bias, int N, int C) {
    const float* pa = static_cast<const float*>(a);
    const float* pb = static_cast<const float*>(b);
    float* r = static_cast<float*>(residual);
    float* o = static_cast<float*>(out);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        const size_t off = static_cast<size_t>(n) * C;
        for (int c = 0; c < C; ++c) r[off + c] = pa[off + c] + pb[off + c];
        layernorm_row(o + off, mean + n, rstd + n, r + off, static_cast<const float*>(weight),
                      static_cast<const float*>(bias), C);
    }
}

/// dinp (N,C) += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) with dnorm = weight * dout
/// and norm = (inp - mean) * rstd; dweight (C) += sum_n dout * norm; dbias (C) += sum_n dout.
/// dinp is parallel over rows; dweight/dbias over channels, each channel summing rows 0..N-1 in
/// order, so the result does not depend on the thread count.
void CpuOps::layernorm_backward(void* dinp, void* dweight, void* dbias, const void* dout,
                                const void* inp, const void* weight, const float* mean,
                                const float* rstd, int N, int C) {
    const float* dy = static_cast<const float*>(dout);
    const float* x = static_cast<const float*>(inp);
    const float* w = static_cast<const float*>(weight);
    float* dx = static_cast<float*>(dinp);
    float* dw = static_cast<float*>(dweight);
    float* db = static_cast<float*>(dbias);
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int n = 0; n < N; ++n) {
            const size_t off = static_cast<size_t>(n) * C;
            const float m = mean[n], s = rstd[n];
            float sum_dn = 0.0f, sum_dn_norm = 0.0f;
#pragma omp simd reduction(+ : sum_dn, sum_dn_norm)
            for (int c = 0; c < C; ++c) {
                const float dn = w[c] * dy[off + c];
                sum_dn += dn;
                sum_dn_norm += dn * (x[off + c] - m) * s;
            }
            const float mean_dn = sum_dn / C, mean_dn_norm = sum_dn_norm / C;
            for (int c = 0; c < C; ++c) {
                const float norm = (x[off + c] - m) * s;
                dx[off + c] += s * (w[c] * dy[off + c] - mean_dn - norm * mean_dn_norm);
            }
        }
        int c0, c1;
        cpu::thread_range(C, 16, &c0, &c1);
        for (int n = 0; n < N; ++n) {
            const size_t off = static_cast<size_t>(n) * C;
            const float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; ++c) {
                dw[c] += dy[off + c] * (x[off + c] - m) * s;
                db[c] += dy[off + c];
            }
        }
    }
}

/// out[i] = a[i] + b[i] for i < n (fp32).
void CpuOps::residual_forward(void* out, const void* a, const void* b, size_t n) {
    float* o = static_cast<float*>(out);
    const float* pa = static_cast<const float*>(a);
    const float* pb = static_cast<const float*>(b);
    const long long nn = static_cast<long long>(n);
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < nn; ++i) o[i] = pa[i] + pb[i];
}

}  // namespace llmtrain
