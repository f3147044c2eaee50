// model/cuda/cuda_ops_optim.cu — CudaOps (cuda_ops.hpp), the optimizer's ops: AdamW (coefficients
// derived on the host by model/adamw_math.hpp, as the CPU backend does), the squared norm of the
// gradients for clipping (a deterministic two-stage sum through the stream's scratch) and the
// in-place scale.

#include <cstddef>
#include <stdexcept>
#include <string>

#include "model/adamw_math.hpp"
#include "model/cuda/cuda_ops.hpp"
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

void CudaOps::adamw_update(void* params, float* master, const void* grads, float* m, float* v, size_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t,
                           size_t index0) {
    if (master == nullptr && act_ != DType::f32)
        throw std::invalid_argument("cuda adamw_update: bf16 params need fp32 master weights (master is null)");
    if (t < 1) throw std::invalid_argument("cuda adamw_update: step count t must be >= 1, got " + std::to_string(t));
    const AdamWCoeffs c = adamw_coeffs(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    dispatch([&](auto x) {
        using X = decltype(x);
        cuda::adamw_update(as<X>(params), master, as<X>(grads), m, v, n, c, opt_.stochastic_rounding, index0,
                           stream_);
    });
}

void CudaOps::norm_squared(float* out, const void* x, size_t n, bool accumulate) {
    float* scratch = scratch_for(cuda::norm_squared_scratch_bytes());
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::norm_squared(out, as<X>(x), n, accumulate, scratch, stream_);
    });
}

void CudaOps::scale(void* x, float s, size_t n) {
    dispatch([&](auto t) {
        using X = decltype(t);
        cuda::scale(as<X>(x), s, n, stream_);
    });
}

}  // namespace llmtrain::cuda
