// model/cuda/gelu.cu — GELU (tanh approximation) forward and backward where cuBLASLt's epilogue
// does not fuse it. gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016).
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;

/// out[i] = gelu(inp[i]) for i < n; T in, T out, fp32 math.
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float x = to_float(inp[i]);
        out[i] = from_float<T>(0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCube * x * x * x))));
    }
}

/// dinp[i] = gelu'(inp[i]) * dout[i]; dinp may alias dout (each element is read before written).
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float x = to_float(inp[i]);
        const float u = kGeluScale * (x + kGeluCube * x * x * x);
        const float th = tanhf(u);
        const float sech2 = 1.0f - th * th;
        const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
        dinp[i] = from_float<T>(grad * to_float(dout[i]));
    }
}

template <typename T>
void gelu_forward(T* out, const T* inp, size_t n, cudaStream_t stream) {
    const int block = 256;
    launch(gelu_forward_kernel<T>, dim3(elementwise_grid(n, block)), dim3(block), 0, stream, out, inp, n);
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n, cudaStream_t stream) {
    const int block = 256;
    launch(gelu_backward_kernel<T>, dim3(elementwise_grid(n, block)), dim3(block), 0, stream, dinp, inp,
           dout, n);
}

#define INSTANTIATE(T)                                                        \
    template void gelu_forward<T>(T*, const T*, size_t, cudaStream_t);      \
    template void gelu_backward<T>(T*, const T*, const T*, size_t, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
