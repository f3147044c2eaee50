// model/cuda/swiglu.cu — the SwiGLU activation (Shazeer 2020, "GLU Variants Improve Transformer"):
// out = silu(gate) * up over the [gate | up] halves of each row of inp (N,2F), forward and backward.
//
// Elementwise, one thread per output column (grid-stride), fp32 arithmetic, one rounding to T per
// stored value; silu(g) = g * s, s = sigmoid(g) = 1/(1 + e^-g), silu'(g) = s (1 + g (1 - s)).
// Any F (no packs: the gate and up halves of a row are F apart, and the op is a small share of the
// MLP's time next to its two matmuls).
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

/// out (N,F) = silu(inp[n, f]) * inp[n, F + f].
template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, int N, int F) {
    const size_t total = static_cast<size_t>(N) * F;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t n = x / F, f = x % F;
        const float g = to_float(inp[n * 2 * F + f]), u = to_float(inp[n * 2 * F + F + f]);
        const float s = 1.0f / (1.0f + expf(-g));
        out[x] = from_float<T>(g * s * u);
    }
}

/// dinp (N,2F) = [dout * up * silu'(gate) | dout * silu(gate)] (overwritten).
template <typename T>
__global__ void swiglu_backward_kernel(T* dinp, const T* dout, const T* inp, int N, int F) {
    const size_t total = static_cast<size_t>(N) * F;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t n = x / F, f = x % F, gi = n * 2 * F + f;
        const float g = to_float(inp[gi]), u = to_float(inp[gi + F]), d = to_float(dout[x]);
        const float s = 1.0f / (1.0f + expf(-g));
        dinp[gi] = from_float<T>(d * u * s * (1.0f + g * (1.0f - s)));
        dinp[gi + F] = from_float<T>(d * g * s);
    }
}

template <typename T>
void swiglu_forward(T* out, const T* inp, int N, int F, cudaStream_t stream) {
    const int block = 256;
    launch(swiglu_forward_kernel<T>, dim3(elementwise_grid(static_cast<size_t>(N) * F, block)), dim3(block), 0,
           stream, out, inp, N, F);
}

template <typename T>
void swiglu_backward(T* dinp, const T* dout, const T* inp, int N, int F, cudaStream_t stream) {
    const int block = 256;
    launch(swiglu_backward_kernel<T>, dim3(elementwise_grid(static_cast<size_t>(N) * F, block)), dim3(block), 0,
           stream, dinp, dout, inp, N, F);
}

#define INSTANTIATE(T)                                                          \
    template void swiglu_forward<T>(T*, const T*, int, int, cudaStream_t); \
    template void swiglu_backward<T>(T*, const T*, const T*, int, int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
