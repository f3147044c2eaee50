// model/cpu/adamw.cpp — the AdamW update, squared norms and scaling on fp32 buffers.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/cpu/adamw_kernel.hpp"
#include "model/cpu/cpu_ops.hpp"

namespace llmtrain {

/// AdamW (Loshchilov & Hutter 2019) on n elements in PyTorch's order (see ops.hpp), by the host loop
/// shared with the offloaded optimizer (adamw_kernel.hpp). params fp32; master, when non-null, holds
/// the weights and params receives a copy (fp32: no rounding, so index0 plays no part).
void CpuOps::adamw_update(void* params, float* master, const void* grads, float* m, float* v, size_t n,
                          float lr, float beta1, float beta2, float eps, float weight_decay,
                          float grad_scale, int t, size_t index0) {
    if (t < 1) throw std::invalid_argument("cpu adamw_update: step count t must be >= 1, got " + std::to_string(t));
    float* p = static_cast<float*>(params);
    const AdamWCoeffs c = adamw_coeffs(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    const float* g = static_cast<const float*>(grads);
    if (master)
        cpu::adamw_loop<false>(master, m, v, g, p, n, c, index0);
    else
        cpu::adamw_loop<false>(p, m, v, g, static_cast<cpu::NoParams*>(nullptr), n, c, index0);
}

/// out[0] = (accumulate ? out[0] : 0) + sum x^2 over n fp32 values. Each fixed chunk of 4096 elements
/// is summed in double, then the chunks in order: the result does not depend on the thread count.
void CpuOps::norm_squared(float* out, const void* x_, size_t n, bool accumulate) {
    const float* x = static_cast<const float*>(x_);
    constexpr size_t kChunk = 4096;
    const long long nchunks = static_cast<long long>((n + kChunk - 1) / kChunk);
    std::vector<double> partial(static_cast<size_t>(nchunks));
#pragma omp parallel for schedule(static)
    for (long long c = 0; c < nchunks; ++c) {
        const size_t lo = static_cast<size_t>(c) * kChunk, hi = std::min(n, lo + kChunk);
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * x[i];
        partial[static_cast<size_t>(c)] = s;
    }
    double total = accumulate ? out[0] : 0.0;
    for (double s : partial) total += s;
    out[0] = static_cast<float>(total);
}

/// x[i] *= s for i < n (fp32).
void CpuOps::scale(void* x_, float s, size_t n) {
    float* x = static_cast<float*>(x_);
    const long long nn = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < nn; ++i) x[i] *= s;
}

}  // namespace llmtrain
