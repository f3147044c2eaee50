// model/cuda/elementwise.cu — the memory-bound one-liners: dtype casts, scaling, the residual add.
// Each is a grid-stride loop over n elements with fp32 math; bf16 results round to nearest even.
// The residual add (per layer and micro-batch) moves 16-byte packs; casts and scaling run once per
// step on parameter-sized buffers of any length and stay scalar.
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

/// dst[i] = (Dst) src[i].
template <typename Dst, typename Src>
__global__ void cast_kernel(Dst* dst, const Src* src, size_t n) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dst[i] = from_float<Dst>(to_float(src[i]));
}

/// x[i] *= s.
template <typename T>
__global__ void scale_kernel(T* x, float s, size_t n) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        x[i] = from_float<T>(to_float(x[i]) * s);
}

/// out[i] = a[i] + b[i]: 16-byte packs over the first n - n % P elements, then the tail.
template <typename T>
__global__ void residual_kernel(T* out, const T* a, const T* b, size_t n) {
    constexpr int P = Pack<T>::size;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    for (size_t i = first * P; i + P <= n; i += stride * P) {
        const Pack<T> pa = load_pack(a + i), pb = load_pack(b + i);
        Pack<T> o;
        for (int k = 0; k < P; k++) o.v[k] = from_float<T>(to_float(pa.v[k]) + to_float(pb.v[k]));
        store_pack(out + i, o);
    }
    for (size_t i = n - n % P + first; i < n; i += stride) out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

template <typename Dst, typename Src>
void cast(Dst* dst, const Src* src, size_t n, cudaStream_t stream) {
    const int block = 256;
    launch(cast_kernel<Dst, Src>, dim3(elementwise_grid(n, block)), dim3(block), 0, stream, dst, src, n);
}

template <typename T>
void scale(T* x, float s, size_t n, cudaStream_t stream) {
    const int block = 256;
    launch(scale_kernel<T>, dim3(elementwise_grid(n, block)), dim3(block), 0, stream, x, s, n);
}

template <typename T>
void residual_forward(T* out, const T* a, const T* b, size_t n, cudaStream_t stream) {
    const int block = 256;
    launch(residual_kernel<T>, dim3(elementwise_grid(n / Pack<T>::size + 1, block)), dim3(block), 0, stream, out, a,
           b, n);
}

template void cast<float, __nv_bfloat16>(float*, const __nv_bfloat16*, size_t, cudaStream_t);
template void cast<__nv_bfloat16, float>(__nv_bfloat16*, const float*, size_t, cudaStream_t);
#define INSTANTIATE(T)                                               \
    template void scale<T>(T*, float, size_t, cudaStream_t);       \
    template void residual_forward<T>(T*, const T*, const T*, size_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
