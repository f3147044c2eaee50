// model/cuda/encoder.cu — token + position embedding, forward and deterministic backward, whole or
// vocab-parallel.
//
// Forward: out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], one thread per output element.
// Backward without atomics (issue 4): the (B*T) positions are bucketed by token on the host
// (the token ids are copied back once; llm.c buckets on the host the same way), then one block per
// distinct token sums its positions' gradient rows in position order in fp32 and adds the sum to
// its wte row once. dwpe sums over the batch in order b = 0..B-1. Results are bitwise independent
// of thread and block order.
// Vocab-parallel (tensor parallelism; Megatron-LM's VocabParallelEmbedding, Shoeybi et al. 2019):
// the rank holding token rows [v0, v0 + nv) runs the same kernels restricted to that range. Forward
// writes the full value where it owns the token and exact zeros elsewhere (the group's all-reduce
// then adds one non-zero term per position); backward runs the blocks of the buckets whose token is
// in the range (a contiguous run: buckets are sorted by token), so each of its dwte rows gets
// bitwise the sum the whole-vocabulary backward gives that row.
#include <algorithm>
#include <numeric>

#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

/// out (N,C) T, inp (N) int32 with N = B*T, wte (nv,C) T holding token rows [v0, v0 + nv),
/// wpe (maxT,C) T, or null for no positions (Llama: out = wte row); the row of position n is
/// pos[n] ((N) int32, reset_position_ids) or, with pos null, n mod T. A position whose token is
/// outside that range gets exact zeros.
template <typename T>
__global__ void encoder_forward_kernel(T* out, const int* inp, const T* wte, const T* wpe, int N,
                                       int T_, int C, int v0, int nv, const int* pos_ids) {
    const size_t total = static_cast<size_t>(N) * C;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int n = static_cast<int>(i / C), c = static_cast<int>(i % C);
        const int t = pos_ids == nullptr ? n % T_ : pos_ids[n];
        const int row = inp[n] - v0;
        const float pos = wpe != nullptr ? to_float(wpe[static_cast<size_t>(t) * C + c]) : 0.0f;
        out[i] = row >= 0 && row < nv ? from_float<T>(to_float(wte[static_cast<size_t>(row) * C + c]) + pos)
                                      : from_float<T>(0.0f);
    }
}

template <typename T>
void encoder_forward(T* out, const int* inp, const T* wte, const T* wpe, int B, int T_, int C, int v0,
                     int nv, cudaStream_t stream, const int* pos) {
    const int block = 256;
    const size_t n = static_cast<size_t>(B) * T_ * C;
    launch(encoder_forward_kernel<T>, dim3(elementwise_grid(n, block)), dim3(block), 0, stream, out,
           inp, wte, wpe, B * T_, T_, C, v0, nv, pos);
}

/// One block per bucket (distinct token): dwte[token[k] - token0, c] += sum over the bucket's
/// positions p (ascending) of dout[p, c]. bucket_start (n_buckets+1) indexes `positions` (N).
template <typename T>
__global__ void encoder_backward_wte_kernel(T* dwte, const T* dout, const int* bucket_token,
                                            const int* bucket_start, const int* positions, int C,
                                            int token0) {
    const int k = blockIdx.x;
    const int begin = bucket_start[k], end = bucket_start[k + 1];
    const size_t row = static_cast<size_t>(bucket_token[k] - token0) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = begin; j < end; j++) acc += to_float(dout[static_cast<size_t>(positions[j]) * C + c]);
        dwte[row + c] = from_float<T>(to_float(dwte[row + c]) + acc);
    }
}

/// One thread per (t, c): dwpe[t, c] += sum over b of dout[b, t, c], b ascending.
template <typename T>
__global__ void encoder_backward_wpe_kernel(T* dwpe, const T* dout, int B, int T_, int C) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T_ * C) return;
    float acc = 0.0f;
    for (int b = 0; b < B; b++) acc += to_float(dout[static_cast<size_t>(b) * T_ * C + i]);
    dwpe[i] = from_float<T>(to_float(dwpe[i]) + acc);
}

int build_encoder_buckets(const int* tokens, int N, std::vector<int>& packed) {
    std::vector<int> order(N);
    std::iota(order.begin(), order.end(), 0);
    // Stable: positions of one token stay ascending, which fixes the summation order.
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return tokens[x] < tokens[y]; });
    std::vector<int> token, start;
    for (int j = 0; j < N; j++)
        if (j == 0 || tokens[order[j]] != tokens[order[j - 1]]) {
            token.push_back(tokens[order[j]]);
            start.push_back(j);
        }
    start.push_back(N);
    packed.clear();
    packed.insert(packed.end(), token.begin(), token.end());
    packed.insert(packed.end(), start.begin(), start.end());
    packed.insert(packed.end(), order.begin(), order.end());
    return static_cast<int>(token.size());
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const EncoderBuckets& buckets, int B, int T_,
                      int C, cudaStream_t stream) {
    const int block = 256;
    if (buckets.n_buckets > 0)
        launch(encoder_backward_wte_kernel<T>, dim3(buckets.n_buckets), dim3(block), 0, stream, dwte,
               dout, buckets.bucket_token, buckets.bucket_start, buckets.positions, C, buckets.token0);
    if (dwpe != nullptr)  // null: no learned positions (Llama)
        launch(encoder_backward_wpe_kernel<T>, dim3(ceil_div(T_ * C, block)), dim3(block), 0, stream, dwpe,
               dout, B, T_, C);
}

#define INSTANTIATE(T)                                                                            \
    template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int, int, int, cudaStream_t, \
                                     const int*);                                                \
    template void encoder_backward<T>(T*, T*, const T*, const EncoderBuckets&, int, int, int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
