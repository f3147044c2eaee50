// model/cuda/reduce.cuh — deterministic column reductions over (N, C) row-major data.
//
// Used for the parameter gradients that sum over all rows: LayerNorm's dweight/dbias and the
// matmul bias gradient. Atomics would make the fp32 sums depend on scheduling; instead a first
// kernel writes per-chunk partial sums (rows split into R chunks, a fixed function of N), and a
// second kernel adds the R partials in chunk order and accumulates into the bf16/fp32 gradient.
#pragma once
#include "model/cuda/common.cuh"

namespace llmtrain::cuda {

constexpr int kColWarps = 8;  ///< rows handled at once by one partials block (one per warp)

/// Number of row chunks for N rows: a function of N only, so results are device independent.
inline int column_chunks(int N) {
    const int r = ceil_div(N, 64);
    return r < 1 ? 1 : (r > 256 ? 256 : r);
}

/// partials (K, R, C) fp32, R = gridDim.y. Block 256 threads = 32 columns x 8 row lanes; block
/// (x, y) sums f over columns [32x, 32x+32) and rows y*8+ty, stepping R*8. `f(n, c, acc)` adds row
/// n, column c's K contributions into acc[0..K). The 8 row lanes are combined in fixed order.
template <int K, typename F>
__global__ void column_partials_kernel(float* partials, int N, int C, F f) {
    __shared__ float sh[K][kColWarps][kWarpSize + 1];
    const int tx = threadIdx.x % kWarpSize, ty = threadIdx.x / kWarpSize;
    const int c = blockIdx.x * kWarpSize + tx;
    float acc[K];
    for (int k = 0; k < K; k++) acc[k] = 0.0f;
    if (c < C)
        for (int n = blockIdx.y * kColWarps + ty; n < N; n += gridDim.y * kColWarps) f(n, c, acc);
    for (int k = 0; k < K; k++) sh[k][ty][tx] = acc[k];
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int k = 0; k < K; k++) {
            float s = 0.0f;
            for (int r = 0; r < kColWarps; r++) s += sh[k][r][tx];
            partials[(static_cast<size_t>(k) * gridDim.y + blockIdx.y) * C + c] = s;
        }
    }
}

/// out_k[c] += sum over r < R (in order) of partials[k][r][c], for k < K; null outputs are skipped.
template <int K, typename T>
__global__ void column_finish_kernel(T* out0, T* out1, const float* partials, int R, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    T* outs[2] = {out0, out1};
    for (int k = 0; k < K; k++) {
        if (outs[k] == nullptr) continue;
        float s = 0.0f;
        for (int r = 0; r < R; r++) s += partials[(static_cast<size_t>(k) * R + r) * C + c];
        outs[k][c] = from_float<T>(to_float(outs[k][c]) + s);
    }
}

/// Runs both stages: out0[c] (+ out1[c] when K == 2) += sum over n < N of f's contributions.
/// `partials` must hold K * column_chunks(N) * C floats (see column_reduce_scratch_floats).
template <int K, typename T, typename F>
void column_reduce(T* out0, T* out1, float* partials, int N, int C, F f, cudaStream_t stream) {
    const int R = column_chunks(N);
    launch(column_partials_kernel<K, F>, dim3(ceil_div(C, kWarpSize), R), dim3(kWarpSize * kColWarps), 0,
           stream, partials, N, C, f);
    launch(column_finish_kernel<K, T>, dim3(ceil_div(C, 256)), dim3(256), 0, stream, out0, out1,
           static_cast<const float*>(partials), R, C);
}

/// fp32 scratch floats that column_reduce<K> needs for N rows of C columns.
inline size_t column_reduce_scratch_floats(int K, int N, int C) {
    return static_cast<size_t>(K) * column_chunks(N) * C;
}

}  // namespace llmtrain::cuda
