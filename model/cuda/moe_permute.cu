// model/cuda/moe_permute.cu — the mixture-of-experts dispatch on the device: the plan (a stable
// grouping of the (token, slot) pairs by expert, with Switch Transformer's expert capacity), the
// permute of the rows into expert order and its transpose, the combine and its backward
// (docs/cuda.md "Mixture of experts").
//
// Sources: model/moe.hpp moe_dispatch_plan / moe_dispatch_plan_capped (a counting sort, stable in
// pair order i = n*k + j; capacity: Fedus et al. 2021 §2.2, GShard), moe_permute_*, moe_combine_*;
// the CPU reference is model/cpu/moe.cpp. The plan is the CPU's exactly, without atomics: one block
// per expert counts its pairs, one thread turns the counts into offsets, and one block per expert
// ranks its pairs with block-wide prefix sums over the pairs in order (so within an expert, pairs
// keep their order); the dropped pairs get their places by one more prefix sum in pair order. It
// reads the P ids once per expert (O(P E) reads, parallel over experts): fine for the E of the
// configs (8 to 64), not for hundreds of experts. The row kernels are elementwise, fp32 sums in the
// CPU's slot order with one rounding to T.
#include "model/cuda/moe_kernels.cuh"

namespace llmtrain::cuda {

namespace {
constexpr int kPlanBlock = 256;  ///< threads of the plan's blocks (the prefix sums' width)
}  // namespace

/// Inclusive prefix sum of v over the block's kPlanBlock threads (Hillis-Steele in sh (kPlanBlock)
/// ints, two barriers a step); every thread gets its own prefix, sh[kPlanBlock - 1] the block's
/// total. All threads must call it; it ends with a barrier, so sh may be reused after.
__device__ inline int plan_block_scan(int v, int* sh) {
    const int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int d = 1; d < kPlanBlock; d *= 2) {
        const int add = t >= d ? sh[t - d] : 0;
        __syncthreads();
        sh[t] += add;
        __syncthreads();
    }
    return sh[t];
}

/// Block e (grid E, kPlanBlock threads): counts[e] = min(pairs with ids = e, cap).
__global__ void moe_plan_count_kernel(int* counts, const int* ids, int P, int cap) {
    __shared__ int sh[kPlanBlock];
    const int e = blockIdx.x;
    int c = 0;
    for (int i = threadIdx.x; i < P; i += kPlanBlock) c += ids[i] == e ? 1 : 0;
    sh[threadIdx.x] = c;
    __syncthreads();
    for (int w = kPlanBlock / 2; w > 0; w /= 2) {
        if (static_cast<int>(threadIdx.x) < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) counts[e] = sh[0] < cap ? sh[0] : cap;
}

/// One thread: offsets (E+1) = the exclusive prefix sums of counts (E), offsets[E] the kept total.
__global__ void moe_plan_offsets_kernel(int* offsets, const int* counts, int E) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    offsets[0] = 0;
    for (int e = 0; e < E; e++) offsets[e + 1] = offsets[e] + counts[e];
}

/// Block e (grid E, kPlanBlock threads): expert e's pairs in pair order, chunk by chunk; the r-th
/// (from 0) goes to grouped position offsets[e] + r while r < counts[e] (pos[i], pair_of[p]),
/// the rest are marked dropped (pos[i] = -1, placed by moe_plan_dropped_kernel).
__global__ void moe_plan_place_kernel(int* pair_of, int* pos, const int* ids, const int* counts, const int* offsets,
                                      int P) {
    __shared__ int sh[kPlanBlock];
    const int e = blockIdx.x, kept = counts[e], off = offsets[e];
    int run = 0;
    for (int i0 = 0; i0 < P; i0 += kPlanBlock) {
        const int i = i0 + static_cast<int>(threadIdx.x);
        const int flag = i < P && ids[i] == e ? 1 : 0;
        const int r = run + plan_block_scan(flag, sh) - flag;
        if (flag) {
            if (r < kept) {
                pos[i] = off + r;
                pair_of[off + r] = i;
            } else {
                pos[i] = -1;
            }
        }
        run += sh[kPlanBlock - 1];
        __syncthreads();  // sh is read above before the next chunk's scan writes it
    }
}

/// One block (kPlanBlock threads): the dropped pairs (pos = -1) in pair order get the grouped
/// positions offsets[E], offsets[E] + 1, ... (pos, pair_of).
__global__ void moe_plan_dropped_kernel(int* pair_of, int* pos, const int* offsets, int E, int P) {
    __shared__ int sh[kPlanBlock];
    int run = offsets[E];
    for (int i0 = 0; i0 < P; i0 += kPlanBlock) {
        const int i = i0 + static_cast<int>(threadIdx.x);
        const int flag = i < P && pos[i] < 0 ? 1 : 0;
        const int p = run + plan_block_scan(flag, sh) - flag;
        if (flag) {
            pos[i] = p;
            pair_of[p] = i;
        }
        run += sh[kPlanBlock - 1];
        __syncthreads();
    }
}

/// xg (P,C) = x (N,C) row pair_of[p] / k, one thread per element (grid-stride).
template <typename T>
__global__ void moe_permute_forward_kernel(T* xg, const T* x, const int* pair_of, int P, int k, int C) {
    const size_t total = static_cast<size_t>(P) * C;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t p = i / C, c = i % C;
        xg[i] = x[static_cast<size_t>(pair_of[p] / k) * C + c];
    }
}

/// rows (P,C): the elements of rows >= offsets[E] = 0 (grid-stride).
template <typename T>
__global__ void moe_zero_dropped_kernel(T* rows, const int* offsets, int E, int P, int C) {
    const size_t total = static_cast<size_t>(P) * C, first = static_cast<size_t>(offsets[E]) * C;
    for (size_t i = first + blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        rows[i] = from_float<T>(0.0f);
}

/// out (N,C) += sum_j gates[n,j] yg[pos[n k + j]], one thread per element (grid-stride).
template <typename T>
__global__ void moe_combine_forward_kernel(T* out, const T* yg, const float* gates, const int* pos, int N, int k,
                                           int C) {
    const size_t total = static_cast<size_t>(N) * C;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t n = x / C, c = x % C;
        float acc = to_float(out[x]);
        for (int j = 0; j < k; j++)
            acc += gates[n * k + j] * to_float(yg[static_cast<size_t>(pos[n * k + j]) * C + c]);
        out[x] = from_float<T>(acc);
    }
}

/// One warp per pair i = n k + j (grid ceil(P / 8), 256 threads): dyg row pos[i] = gates[i] dout[n];
/// dgates[i] = dot(dout[n], yg row pos[i]) over lanes striding C, then warp_sum.
template <typename T>
__global__ void moe_combine_backward_kernel(T* dyg, float* dgates, const T* dout, const T* yg, const float* gates,
                                            const int* pos, int P, int k, int C) {
    const int i = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (i >= P) return;  // whole warps leave together
    const int lane = threadIdx.x % kWarpSize;
    const size_t n = static_cast<size_t>(i / k), p = static_cast<size_t>(pos[i]);
    const float g = gates[i];
    float dot = 0.0f;
    for (int c = lane; c < C; c += kWarpSize) {
        const float d = to_float(dout[n * C + c]);
        dyg[p * C + c] = from_float<T>(g * d);
        dot += d * to_float(yg[p * C + c]);
    }
    dot = warp_sum(dot);
    if (lane == 0) dgates[i] = dot;
}

void moe_dispatch_plan(int* counts, int* offsets, int* pair_of, int* pos, const int* ids, int N, int k, int E,
                       int capacity, cudaStream_t stream) {
    const int P = N * k;
    const int cap = capacity <= 0 || capacity > P ? P : capacity;
    launch(moe_plan_count_kernel, dim3(E), dim3(kPlanBlock), 0, stream, counts, ids, P, cap);
    launch(moe_plan_offsets_kernel, dim3(1), dim3(32), 0, stream, offsets, static_cast<const int*>(counts), E);
    if (P == 0) return;
    launch(moe_plan_place_kernel, dim3(E), dim3(kPlanBlock), 0, stream, pair_of, pos, ids,
           static_cast<const int*>(counts), static_cast<const int*>(offsets), P);
    if (cap < P)
        launch(moe_plan_dropped_kernel, dim3(1), dim3(kPlanBlock), 0, stream, pair_of, pos,
               static_cast<const int*>(offsets), E, P);
}

template <typename T>
void moe_permute_forward(T* xg, const T* x, const int* pair_of, int N, int k, int C, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(N) * k * C;
    if (n == 0) return;
    launch(moe_permute_forward_kernel<T>, dim3(elementwise_grid(n, 256)), dim3(256), 0, stream, xg, x, pair_of,
           N * k, k, C);
}

template <typename T>
void moe_zero_dropped(T* rows, const int* offsets, int E, int P, int C, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(P) * C;
    if (n == 0) return;
    launch(moe_zero_dropped_kernel<T>, dim3(elementwise_grid(n, 256)), dim3(256), 0, stream, rows, offsets, E, P, C);
}

template <typename T>
void moe_combine_forward(T* out, const T* yg, const float* gates, const int* pos, int N, int k, int C,
                         cudaStream_t stream) {
    const size_t n = static_cast<size_t>(N) * C;
    if (n == 0) return;
    launch(moe_combine_forward_kernel<T>, dim3(elementwise_grid(n, 256)), dim3(256), 0, stream, out, yg, gates, pos,
           N, k, C);
}

template <typename T>
void moe_combine_backward(T* dyg, float* dgates, const T* dout, const T* yg, const float* gates, const int* pos,
                          int N, int k, int C, cudaStream_t stream) {
    const int P = N * k;
    if (P == 0) return;
    launch(moe_combine_backward_kernel<T>, dim3(ceil_div(P, 8)), dim3(8 * kWarpSize), 0, stream, dyg, dgates, dout,
           yg, gates, pos, P, k, C);
}

#define INSTANTIATE(T)                                                                                          \
    template void moe_permute_forward<T>(T*, const T*, const int*, int, int, int, cudaStream_t);                \
    template void moe_zero_dropped<T>(T*, const int*, int, int, int, cudaStream_t);                             \
    template void moe_combine_forward<T>(T*, const T*, const float*, const int*, int, int, int, cudaStream_t); \
    template void moe_combine_backward<T>(T*, float*, const T*, const T*, const float*, const int*, int, int,   \
                                          int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
