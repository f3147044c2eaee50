// model/cuda/gqa.cu — grouped-query attention (Ainslie et al. 2023) on the attention paths whose
// kernels take one head count (attention.cu; cuDNN only where it refuses its grouped-query graph,
// cuda_ops.cu's fallback): the key/value heads are expanded to one per query head around the
// multi-head op.
//
// qkv (B,T,(NH + 2 NKV)*HS) = [q (NH,HS) | k (NKV,HS) | v (NKV,HS)] per position; query head h reads
// key/value head h / (NH/NKV). gqa_expand writes the multi-head qkv (B,T,3C), C = NH*HS, with k and
// v head h a copy of key/value head h / (NH/NKV); the multi-head forward or backward runs on it;
// gqa_reduce turns the multi-head dqkv (B,T,3C) back into (B,T,(NH + 2 NKV)*HS): dq copied, dk and
// dv of key/value head g the sum of its NH/NKV query heads' in head order (fp32, rounded once to T).
// Elementwise, one thread per output element, grid-stride; deterministic. The cuBLAS path maps
// heads inside its own split/merge kernels instead (cublas_attention.cu) and needs neither.
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

/// dst (B,T,3C) multi-head qkv from src (B,T,(NH + 2 NKV)*HS).
template <typename T>
__global__ void gqa_expand_kernel(T* dst, const T* src, int N, int NH, int NKV, int HS) {
    const int C = NH * HS, group = NH / NKV;
    const size_t W = static_cast<size_t>(NH + 2 * NKV) * HS, total = static_cast<size_t>(N) * 3 * C;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t n = x / (3 * static_cast<size_t>(C));
        const int col = static_cast<int>(x % (3 * static_cast<size_t>(C)));
        const int part = col / C, h = col % C / HS, d = col % HS;
        const size_t src_col = part == 0 ? static_cast<size_t>(col)
                                         : C + static_cast<size_t>(part - 1) * NKV * HS +
                                               static_cast<size_t>(h / group) * HS + d;
        dst[x] = src[n * W + src_col];
    }
}

/// dst (B,T,(NH + 2 NKV)*HS) from the multi-head gradient src (B,T,3C): q copied, each key/value
/// head the sum of its group's query heads (head order, fp32).
template <typename T>
__global__ void gqa_reduce_kernel(T* dst, const T* src, int N, int NH, int NKV, int HS) {
    const int C = NH * HS, group = NH / NKV;
    const size_t W = static_cast<size_t>(NH + 2 * NKV) * HS, total = static_cast<size_t>(N) * W;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t n = x / W;
        const int col = static_cast<int>(x % W);
        const T* row = src + n * 3 * C;
        if (col < C) {
            dst[x] = row[col];
            continue;
        }
        const int kv = col - C, part = 1 + kv / (NKV * HS), g = kv % (NKV * HS) / HS, d = kv % HS;
        const T* p = row + static_cast<size_t>(part) * C + static_cast<size_t>(g) * group * HS + d;
        float acc = to_float(p[0]);
        for (int j = 1; j < group; j++) acc += to_float(p[static_cast<size_t>(j) * HS]);
        dst[x] = from_float<T>(acc);
    }
}

template <typename T>
void gqa_expand(T* dst, const T* src, int B, int T_, int NH, int NKV, int HS, cudaStream_t stream) {
    const int block = 256;
    const size_t total = static_cast<size_t>(B) * T_ * 3 * NH * HS;
    launch(gqa_expand_kernel<T>, dim3(elementwise_grid(total, block)), dim3(block), 0, stream, dst, src, B * T_, NH,
           NKV, HS);
}

template <typename T>
void gqa_reduce(T* dst, const T* src, int B, int T_, int NH, int NKV, int HS, cudaStream_t stream) {
    const int block = 256;
    const size_t total = static_cast<size_t>(B) * T_ * (NH + 2 * NKV) * HS;
    launch(gqa_reduce_kernel<T>, dim3(elementwise_grid(total, block)), dim3(block), 0, stream, dst, src, B * T_, NH,
           NKV, HS);
}

#define INSTANTIATE(T)                                                                              \
    template void gqa_expand<T>(T*, const T*, int, int, int, int, int, cudaStream_t); \
    template void gqa_reduce<T>(T*, const T*, int, int, int, int, int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
