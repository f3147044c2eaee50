// model/cuda/rope.cu — rotary position embedding (Su et al. 2021, RoFormer) in HuggingFace's
// rotate-half convention, forward and backward, in place on the q and k heads of the packed
// qkv (B,T,(NH + 2 NKV)*HS) = [q (NH,HS) | k (NKV,HS) | v (NKV,HS)] per position (v untouched).
//
// For a head x at position t, i < half = HS/2, a_i = t * theta^(-2i/HS):
//   x'_i = x_i cos a_i - x_{i+half} sin a_i,   x'_{i+half} = x_{i+half} cos a_i + x_i sin a_i;
// the backward is the transpose (angle -a_i) applied to the gradient. One thread per rotated pair
// (position, head, i): it owns both elements it reads and writes, so the op is in place with no
// ordering between threads. The angle, its cos and sin are computed in double and rounded to fp32
// (as the CPU backend's tables, so fp32 results agree to the last bits); the products in fp32,
// rounded once to T. No table in device memory: the op allocates nothing.
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

/// qkv (B*T rows of (NH + 2 NKV)*HS): the NH + NKV heads at the start of each row turned by
/// sign * a_i. Grid-stride over N * (NH + NKV) * HS/2 pairs.
template <typename T>
__global__ void rope_kernel(T* qkv, int N, int T_, int NH, int NKV, int HS, float theta, float sign) {
    const int half = HS / 2, heads = NH + NKV;
    const size_t row = static_cast<size_t>(NH + 2 * NKV) * HS;
    const size_t total = static_cast<size_t>(N) * heads * half;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int i = static_cast<int>(x % half);
        const size_t nh = x / half;
        const int h = static_cast<int>(nh % heads);
        const size_t n = nh / heads;
        const int t = static_cast<int>(n % T_);
        const double a = t * pow(static_cast<double>(theta), -2.0 * i / HS);
        const float c = static_cast<float>(cos(a)), s = sign * static_cast<float>(sin(a));
        T* lo = qkv + n * row + static_cast<size_t>(h) * HS + i;
        T* hi = lo + half;
        const float xl = to_float(*lo), xh = to_float(*hi);
        *lo = from_float<T>(xl * c - xh * s);
        *hi = from_float<T>(xh * c + xl * s);
    }
}

template <typename T>
void rope(T* qkv, int B, int T_, int NH, int NKV, int HS, float theta, bool backward, cudaStream_t stream) {
    const int block = 256;
    const size_t pairs = static_cast<size_t>(B) * T_ * (NH + NKV) * (HS / 2);
    launch(rope_kernel<T>, dim3(elementwise_grid(pairs, block)), dim3(block), 0, stream, qkv, B * T_, T_, NH, NKV, HS,
           theta, backward ? -1.0f : 1.0f);
}

#define INSTANTIATE(T) template void rope<T>(T*, int, int, int, int, int, float, bool, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
