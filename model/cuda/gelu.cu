// model/cuda/gelu.cu — GELU (tanh approximation) forward and backward where cuBLASLt's epilogue
// does not fuse it. gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016).
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;

/// gelu(x) in fp32.
__device__ inline float gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCube * x * x * x)));
}
/// gelu'(x) in fp32.
__device__ inline float gelu_grad(float x) {
    const float th = tanhf(kGeluScale * (x + kGeluCube * x * x * x));
    const float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
}

/// out[i] = gelu(inp[i]) for i < n: 16-byte packs, then the tail of n % P elements.
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
    constexpr int P = Pack<T>::size;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    for (size_t i = first * P; i + P <= n; i += stride * P) {
        const Pack<T> px = load_pack(inp + i);
        Pack<T> o;
        for (int k = 0; k < P; k++) o.v[k] = from_float<T>(gelu(to_float(px.v[k])));
        store_pack(out + i, o);
    }
    for (size_t i = n - n % P + first; i < n; i += stride) out[i] = from_float<T>(gelu(to_float(inp[i])));
}

/// dinp[i] = gelu'(inp[i]) * dout[i]; dinp may alias dout (each pack is read before it is written).
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
    constexpr int P = Pack<T>::size;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    for (size_t i = first * P; i + P <= n; i += stride * P) {
        const Pack<T> px = load_pack(inp + i), pg = load_pack(dout + i);
        Pack<T> d;
        for (int k = 0; k < P; k++) d.v[k] = from_float<T>(gelu_grad(to_float(px.v[k])) * to_float(pg.v[k]));
        store_pack(dinp + i, d);
    }
    for (size_t i = n - n % P + first; i < n; i += stride)
        dinp[i] = from_float<T>(gelu_grad(to_float(inp[i])) * to_float(dout[i]));
}

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n, cudaStream_t stream) {
    const int block = 256;
    launch(gelu_forward_kernel<T>, dim3(elementwise_grid(n / Pack<T>::size + 1, block)), dim3(block), 0, stream,
           out, inp, n);
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n, cudaStream_t stream) {
    const int block = 256;
    launch(gelu_backward_kernel<T>, dim3(elementwise_grid(n / Pack<T>::size + 1, block)), dim3(block), 0, stream,
           dinp, inp, dout, n);
}

#define INSTANTIATE(T)                                                        \
    template void gelu_forward<T>(T*, const T*, size_t, cudaStream_t);      \
    template void gelu_backward<T>(T*, const T*, const T*, size_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
