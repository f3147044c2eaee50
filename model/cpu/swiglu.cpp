// model/cpu/swiglu.cpp — the SwiGLU activation (Shazeer 2020, "GLU Variants Improve Transformer"):
// silu(gate) * up over the [gate | up] halves of each row, forward and backward. fp32, elementwise,
// OpenMP over rows.
#include "model/cpu/cpu_ops.hpp"
#include "model/cpu/vec_math.hpp"

namespace llmtrain {

namespace {
/// sigmoid(g) = 1 / (1 + e^-g) with the vectorizing exp of vec_math.hpp.
inline float sigmoid(float g) { return 1.0f / (1.0f + cpu::vexp(-g)); }
}  // namespace

/// out (N,F) = silu(gate) * up, inp (N,2F) = [gate | up] per row.
void CpuOps::swiglu_forward(void* out, const void* inp, int N, int F) {
    const float* in = static_cast<const float*>(inp);
    float* o = static_cast<float*>(out);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        const float* g = in + static_cast<size_t>(n) * 2 * F;
        const float* u = g + F;
        float* y = o + static_cast<size_t>(n) * F;
#pragma omp simd
        for (int f = 0; f < F; ++f) y[f] = g[f] * sigmoid(g[f]) * u[f];
    }
}

/// dinp (N,2F) = [dout * up * silu'(gate) | dout * silu(gate)], silu'(g) = s (1 + g (1 - s)) with
/// s = sigmoid(g). dinp must not overlap dout or inp.
void CpuOps::swiglu_backward(void* dinp, const void* dout, const void* inp, int N, int F) {
    const float* in = static_cast<const float*>(inp);
    const float* dy = static_cast<const float*>(dout);
    float* dx = static_cast<float*>(dinp);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
        const size_t row = static_cast<size_t>(n) * 2 * F;
        const float* g = in + row;
        const float* u = g + F;
        const float* d = dy + static_cast<size_t>(n) * F;
        float* dg = dx + row;
        float* du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; ++f) {
            const float s = sigmoid(g[f]);
            dg[f] = d[f] * u[f] * s * (1.0f + g[f] * (1.0f - s));
            du[f] = d[f] * g[f] * s;
        }
    }
}

}  // namespace llmtrain
