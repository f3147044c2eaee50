// model/cuda/adamw.cu — AdamW on fp32 master weights, writing act-dtype params; global norm.
//
// AdamW (Loshchilov & Hutter 2019) in PyTorch's order, by the per-element arithmetic every backend
// shares (model/adamw_math.hpp; this file is compiled with nvcc -fmad=false so no FMA changes its
// rounding). With master weights the fp32 copy is updated and rounded to the params, either to
// nearest even or stochastically (unbiased rounding, Gupta et al. 2015) from a hash of (step, flat
// index), so results do not depend on thread order or on how the update is split. norm_squared is
// a two-stage sum: fixed-size block partials, then one thread adds them in order (deterministic).
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

template <typename T>
__device__ inline T round_param(float w, bool stochastic, uint32_t random);
template <>
__device__ inline float round_param<float>(float w, bool, uint32_t) { return w; }
template <>
__device__ inline __nv_bfloat16 round_param<__nv_bfloat16>(float w, bool stochastic, uint32_t random) {
    return stochastic ? __ushort_as_bfloat16(bf16_bits_stochastic(w, random)) : __float2bfloat16_rn(w);
}

/// One element per thread-step. params, grads (n) T; master, m, v (n) fp32 (master may be null:
/// then T is float and params are the weights). Element i is element index0 + i of the flat buffer.
template <typename T>
__global__ void adamw_kernel(T* params, float* master, const T* grads, float* m, float* v, size_t n,
                             AdamWCoeffs c, bool stochastic, size_t index0) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float w0 = master != nullptr ? master[i] : to_float(params[i]);
        const float w = adamw_element(w0, m[i], v[i], to_float(grads[i]), c);
        if (master != nullptr) master[i] = w;
        params[i] = round_param<T>(w, stochastic, rounding_bits(c.seed, index0 + i));
    }
}

template <typename T>
void adamw_update(T* params, float* master, const T* grads, float* m, float* v, size_t n,
                  const AdamWCoeffs& c, bool stochastic, size_t index0, cudaStream_t stream) {
    const int block = 256;
    launch(adamw_kernel<T>, dim3(elementwise_grid(n, block)), dim3(block), 0, stream, params, master, grads,
           m, v, n, c, stochastic, index0);
}

constexpr int kNormBlocks = 128;  ///< partial sums of norm_squared (fixed: device independent)

/// partials[blockIdx.x] = sum of x[i]^2 over this block's grid-stride elements.
template <typename T>
__global__ void norm_partials_kernel(float* partials, const T* x, size_t n) {
    __shared__ float scratch[kWarpSize];
    float s = 0.0f;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float xi = to_float(x[i]);
        s += xi * xi;
    }
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

/// out[0] = (accumulate ? out[0] : 0) + sum of partials[0..count) in order. One thread.
__global__ void norm_finish_kernel(float* out, const float* partials, int count, bool accumulate) {
    float s = accumulate ? out[0] : 0.0f;
    float t = 0.0f;
    for (int i = 0; i < count; i++) t += partials[i];
    out[0] = s + t;
}

template <typename T>
void norm_squared(float* out, const T* x, size_t n, bool accumulate, float* scratch, cudaStream_t stream) {
    launch(norm_partials_kernel<T>, dim3(kNormBlocks), dim3(256), 0, stream, scratch, x, n);
    launch(norm_finish_kernel, dim3(1), dim3(1), 0, stream, out, static_cast<const float*>(scratch),
           kNormBlocks, accumulate);
}

size_t norm_squared_scratch_bytes() { return kNormBlocks * sizeof(float); }

#define INSTANTIATE(T)                                                                              \
    template void adamw_update<T>(T*, float*, const T*, float*, float*, size_t, const AdamWCoeffs&, \
                                  bool, size_t, cudaStream_t);                                     \
    template void norm_squared<T>(float*, const T*, size_t, bool, float*, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
