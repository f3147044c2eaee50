// model/cuda/adamw.cu — AdamW on fp32 master weights, writing act-dtype params; global norm.
//
// AdamW (Loshchilov & Hutter 2019) in PyTorch's order (decay, then the Adam step with bias
// corrections). With master weights the fp32 copy is updated and rounded to the params, either to
// nearest even or stochastically (unbiased rounding, Gupta et al. 2015) from a counter-based hash
// of (seed, index), so results do not depend on thread order. norm_squared is a two-stage sum:
// fixed-size block partials, then one thread adds them in order (deterministic, no atomics).
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

/// A 32-bit integer hash (the "lowbias32" finalizer) of the element index and seed.
__device__ inline uint32_t hash_u32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/// bf16 from fp32 with probability proportional to the distance to each neighbour: adds 16 random
/// bits below the bf16 mantissa, then truncates. Non-finite values round to nearest.
__device__ inline __nv_bfloat16 stochastic_round_bf16(float x, uint32_t random) {
    if (!isfinite(x)) return __float2bfloat16_rn(x);
    uint32_t bits;
    memcpy(&bits, &x, 4);
    bits += random & 0xffffu;
    bits &= 0xffff0000u;
    float r;
    memcpy(&r, &bits, 4);
    return __float2bfloat16_rn(r);  // exact: r has a bf16-representable value
}

template <typename T>
__device__ inline T round_param(float w, bool stochastic, uint32_t random);
template <>
__device__ inline float round_param<float>(float w, bool, uint32_t) { return w; }
template <>
__device__ inline __nv_bfloat16 round_param<__nv_bfloat16>(float w, bool stochastic, uint32_t random) {
    return stochastic ? stochastic_round_bf16(w, random) : __float2bfloat16_rn(w);
}

/// One element per thread-step. params, grads (n) T; master, m, v (n) fp32 (master may be null:
/// then T is float and params are the weights). bc1 = 1 - beta1^t, bc2 = 1 - beta2^t.
template <typename T>
__global__ void adamw_kernel(T* params, float* master, const T* grads, float* m, float* v, size_t n,
                             AdamWArgs a) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float g = to_float(grads[i]) * a.grad_scale;
        const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
        const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float w = master != nullptr ? master[i] : to_float(params[i]);
        w -= a.lr * a.weight_decay * w;
        w -= a.lr * (mi / a.bc1) / (sqrtf(vi / a.bc2) + a.eps);
        if (master != nullptr) master[i] = w;
        params[i] = round_param<T>(w, a.stochastic, hash_u32(static_cast<uint32_t>(i) ^ hash_u32(a.seed)));
    }
}

template <typename T>
void adamw_update(T* params, float* master, const T* grads, float* m, float* v, size_t n,
                  const AdamWArgs& args, cudaStream_t stream) {
    const int block = 256;
    launch(adamw_kernel<T>, dim3(elementwise_grid(n, block)), dim3(block), 0, stream, params, master, grads,
           m, v, n, args);
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
    template void adamw_update<T>(T*, float*, const T*, float*, float*, size_t, const AdamWArgs&,  \
                                  cudaStream_t);                                                   \
    template void norm_squared<T>(float*, const T*, size_t, bool, float*, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
