// model/cpu/gelu.cpp — standalone GELU forward/backward (elementwise, OpenMP static).
#include "model/cpu/cpu_ops.hpp"
#include "model/cpu/gelu.hpp"

namespace llmtrain {

/// out[i] = gelu_tanh(inp[i]), fp32, n elements.
void CpuOps::gelu_forward(void* out, const void* inp, size_t n) {
    float* o = static_cast<float*>(out);
    const float* x = static_cast<const float*>(inp);
    const long long nn = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < nn; ++i) o[i] = cpu::gelu_tanh(x[i]);
}

/// dinp[i] = gelu_tanh'(inp[i]) * dout[i] (dinp may alias dout), fp32, n elements.
void CpuOps::gelu_backward(void* dinp, const void* inp, const void* dout, size_t n) {
    float* dx = static_cast<float*>(dinp);
    const float* x = static_cast<const float*>(inp);
    const float* dy = static_cast<const float*>(dout);
    const long long nn = static_cast<long long>(n);
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < nn; ++i) dx[i] = cpu::gelu_tanh_grad(x[i]) * dy[i];
}

}  // namespace llmtrain
