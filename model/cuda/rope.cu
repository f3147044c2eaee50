// model/cuda/rope.cu — rotary position embedding (Su et al. 2021, RoFormer) in HuggingFace's
// rotate-half convention, forward and backward, in place on the q and k heads of the packed
// qkv (B,T,(NH + 2 NKV)*HS) = [q (NH,HS) | k (NKV,HS) | v (NKV,HS)] per position (v untouched).
//
// For a head x at position t, i < half = HS/2, a_i = t * theta^(-2i/HS):
//   x'_i = x_i cos a_i - x_{i+half} sin a_i,   x'_{i+half} = x_{i+half} cos a_i + x_i sin a_i;
// the backward is the transpose (angle -a_i) applied to the gradient. The angles' cos and sin come
// from a table (rope_table.hpp: T x HS/2 fp32 pairs, computed once per (T, HS, theta) in double and
// rounded to fp32, as the CPU backend's tables, so fp32 results agree to the last bits; CudaOps
// keeps one per shape), not from pow/cos/sin in double per element at every call. One thread per
// rotated pair (position, head, i): it owns both elements it reads and writes, so the op is in
// place with no ordering between threads; the products in fp32, rounded once to T.
#include <stdexcept>
#include <string>

#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

/// table[t][i] = (cos a, sin a), a = t * theta^(-2i/HS) in double, rounded to fp32. Grid-stride over
/// T * HS/2 pairs.
__global__ void rope_table_kernel(float2* table, int T_, int HS, float theta) {
    const int half = HS / 2;
    const size_t total = static_cast<size_t>(T_) * half;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int i = static_cast<int>(x % half), t = static_cast<int>(x / half);
        const double a = t * pow(static_cast<double>(theta), -2.0 * i / HS);
        table[x] = make_float2(static_cast<float>(cos(a)), static_cast<float>(sin(a)));
    }
}

void rope_table(float* table, int T_, int HS, float theta, cudaStream_t stream) {
    if (T_ < 1 || HS < 2 || HS % 2 != 0)
        throw std::invalid_argument("cuda rope table: seq_len " + std::to_string(T_) + " must be positive and head size " +
                                    std::to_string(HS) + " even and positive");
    const int block = 256;
    const size_t pairs = static_cast<size_t>(T_) * (HS / 2);
    launch(rope_table_kernel, dim3(elementwise_grid(pairs, block)), dim3(block), 0, stream,
           reinterpret_cast<float2*>(table), T_, HS, theta);
}

/// qkv (B*T rows of (NH + 2 NKV)*HS): the NH + NKV heads at the start of each row turned by
/// sign * a_i, cos and sin from table (T x HS/2 float2) at row pos[n] of the (B,T) positions
/// (int32 in [0, T); null: t = n mod T). Grid-stride over N * (NH + NKV) * HS/2 pairs.
template <typename T>
__global__ void rope_kernel(T* qkv, const float2* table, const int* pos, int N, int T_, int NH, int NKV, int HS,
                            float sign) {
    const int half = HS / 2, heads = NH + NKV;
    const size_t row = static_cast<size_t>(NH + 2 * NKV) * HS;
    const size_t total = static_cast<size_t>(N) * heads * half;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int i = static_cast<int>(x % half);
        const size_t nh = x / half;
        const int h = static_cast<int>(nh % heads);
        const size_t n = nh / heads;
        const int t = pos == nullptr ? static_cast<int>(n % T_) : pos[n];
        const float2 cs = table[static_cast<size_t>(t) * half + i];
        const float c = cs.x, s = sign * cs.y;
        T* lo = qkv + n * row + static_cast<size_t>(h) * HS + i;
        T* hi = lo + half;
        const float xl = to_float(*lo), xh = to_float(*hi);
        *lo = from_float<T>(xl * c - xh * s);
        *hi = from_float<T>(xh * c + xl * s);
    }
}

template <typename T>
void rope(T* qkv, const float* table, int B, int T_, int NH, int NKV, int HS, bool backward, cudaStream_t stream,
          const int* pos) {
    const int block = 256;
    const size_t pairs = static_cast<size_t>(B) * T_ * (NH + NKV) * (HS / 2);
    launch(rope_kernel<T>, dim3(elementwise_grid(pairs, block)), dim3(block), 0, stream, qkv,
           reinterpret_cast<const float2*>(table), pos, B * T_, T_, NH, NKV, HS, backward ? -1.0f : 1.0f);
}

#define INSTANTIATE(T) \
    template void rope<T>(T*, const float*, int, int, int, int, int, bool, cudaStream_t, const int*);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
