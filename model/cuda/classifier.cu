// model/cuda/classifier.cu — fused softmax + cross-entropy + logit gradient, in place.
//
// One block per row of logits (N, Vp). Pass 1: each thread keeps an online (max, sum of exp) over
// its columns of [0, V) (Milakov & Gimelshein 2018), combined across the block. The loss is
// logsumexp - logit[target]. Pass 2 (training) overwrites the row with dloss * (softmax - onehot)
// on [0, V) and 0 on the padding [V, Vp): no probability buffer is ever written (llm.c's design).
//
// Vocab-parallel cross-entropy (tensor parallelism; Megatron-LM's vocab_parallel_cross_entropy,
// Shoeybi et al. 2019): a rank holds only the logit columns [v0, v0 + nv). classifier_partial runs
// pass 1 of the kernel above on its slice and writes per-row stats (max m, sum of exp(x - m),
// target logit or 0) instead of a loss; the group all-gathers them; classifier_finish combines the
// ranks' stats in rank order (M = max m_r, S = sum s_r exp(m_r - M)) — every rank gets the same
// bits — and writes the loss and, in place, the gradient of its slice. Block-wide reductions as
// above; the combination is a short serial loop, so both kernels are deterministic.
#include <cstdint>

#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

/// P consecutive elements of a row: one 16-byte pack when P is Pack<T>::size (p 16-byte aligned),
/// else P plain loads (P = 1 for slices whose width or address does not suit packs).
template <typename T, int P>
struct Elems {
    T v[P];
};
template <typename T, int P>
__device__ inline Elems<T, P> load_elems(const T* p) {
    Elems<T, P> e;
    if constexpr (P == Pack<T>::size) {
        const Pack<T> x = load_pack(p);
        for (int k = 0; k < P; k++) e.v[k] = x.v[k];
    } else {
        for (int k = 0; k < P; k++) e.v[k] = p[k];
    }
    return e;
}
template <typename T, int P>
__device__ inline void store_elems(T* p, const Elems<T, P>& e) {
    if constexpr (P == Pack<T>::size) {
        Pack<T> x;
        for (int k = 0; k < P; k++) x.v[k] = e.v[k];
        store_pack(p, x);
    } else {
        for (int k = 0; k < P; k++) p[k] = e.v[k];
    }
}

/// The block's softmax statistics of the first n columns of `row` (Milakov & Gimelshein 2018):
/// each thread folds its columns, P at a time, into an online (max, sum of exp(x - max)), and the
/// block combines them. Every thread gets (row max, sum); (-inf, 0) when n is 0. The fused and the
/// vocab-parallel cross-entropy share it, so a slice is reduced exactly as a whole row is.
struct RowStats {
    float max, sum;
};
template <typename T, int P>
__device__ inline RowStats block_softmax_stats(const T* row, int n, float* scratch) {
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x * P; c < n; c += blockDim.x * P) {
        const Elems<T, P> px = load_elems<T, P>(row + c);
        for (int k = 0; k < P && c + k < n; k++) {
            const float x = to_float(px.v[k]);
            const float m_new = fmaxf(m, x);
            s = s * expf(m - m_new) + expf(x - m_new);
            m = m_new;
        }
    }
    const float row_max = block_max(m, scratch);
    // A thread with no columns has m = -inf and s = 0: its term is 0 (guarded to avoid inf - inf).
    return {row_max, block_sum(m == -INFINITY ? 0.0f : s * expf(m - row_max), scratch)};
}

/// logits (N,Vp) T, losses (N) fp32, targets (N) int32. blockDim.x a multiple of 32. The row is
/// read and written in 16-byte packs (Vp is a multiple of 128); columns >= V are masked per element.
template <typename T>
__global__ void fused_classifier_kernel(T* logits, float* losses, const int* targets, int V, int Vp,
                                        float dloss, bool write_grad) {
    __shared__ float scratch[kWarpSize];
    constexpr int P = Pack<T>::size;
    T* row = logits + static_cast<size_t>(blockIdx.x) * Vp;
    const int target = targets[blockIdx.x];
    const float target_logit = to_float(row[target]);  // read before any thread overwrites the row
    const RowStats st = block_softmax_stats<T, P>(row, V, scratch);
    const float lse = st.max + logf(st.sum);
    if (threadIdx.x == 0) losses[blockIdx.x] = lse - target_logit;
    if (!write_grad) return;  // block-uniform
    for (int c = threadIdx.x * P; c < Vp; c += blockDim.x * P) {
        const Pack<T> px = load_pack(row + c);
        Pack<T> g;
        for (int k = 0; k < P; k++) {
            const int v = c + k;
            float gv = 0.0f;
            if (v < V) gv = dloss * (expf(to_float(px.v[k]) - lse) - (v == target ? 1.0f : 0.0f));
            g.v[k] = from_float<T>(gv);
        }
        store_pack(row + c, g);
    }
}

template <typename T>
void fused_classifier(T* logits, float* losses, const int* targets, int N, int V, int Vp, float dloss,
                      bool write_grad, cudaStream_t stream) {
    launch(fused_classifier_kernel<T>, dim3(N), dim3(512), 0, stream, logits, losses, targets, V, Vp,
           dloss, write_grad);
}

/// One block per row of logits (N,nv), columns [v0, v0 + nv) of the vocab, of which the first
/// n_valid (those below V) count. stats (N,3) fp32: (max, sum exp(x - max), target logit or 0);
/// a row with no valid column gets (-inf, 0, .). blockDim.x a multiple of 32; nv a multiple of P.
template <typename T, int P>
__global__ void classifier_partial_kernel(float* stats, const T* logits, const int* targets, int nv, int v0,
                                          int n_valid) {
    __shared__ float scratch[kWarpSize];
    const T* row = logits + static_cast<size_t>(blockIdx.x) * nv;
    const RowStats st = block_softmax_stats<T, P>(row, n_valid, scratch);  // (-inf, 0) without valid columns
    if (threadIdx.x == 0) {
        const int j = targets[blockIdx.x] - v0;
        float* out = stats + static_cast<size_t>(blockIdx.x) * 3;
        out[0] = st.max;
        out[1] = st.sum;
        out[2] = j >= 0 && j < nv ? to_float(row[j]) : 0.0f;
    }
}

/// One block per row: M, S and the target logit from all (tp,N,3) in rank order (every thread
/// computes them alike), losses[row] = M + log S - t; with write_grad the row of logits (N,nv) is
/// overwritten by dloss * (exp(x - M) / S - onehot) on its first n_valid columns and 0 after.
template <typename T, int P>
__global__ void classifier_finish_kernel(T* logits, float* losses, const float* all, int tp, const int* targets,
                                         int N, int nv, int v0, int n_valid, float dloss, bool write_grad) {
    const int n = blockIdx.x;
    float M = -INFINITY;
    for (int r = 0; r < tp; r++) M = fmaxf(M, all[(static_cast<size_t>(r) * N + n) * 3]);
    float S = 0.0f, t = 0.0f;
    for (int r = 0; r < tp; r++) {
        const float* st = all + (static_cast<size_t>(r) * N + n) * 3;
        if (st[0] != -INFINITY) S += st[1] * expf(st[0] - M);  // a rank without valid columns adds 0
        t += st[2];
    }
    if (threadIdx.x == 0) losses[n] = M + logf(S) - t;
    if (!write_grad) return;  // block-uniform
    const int target = targets[n] - v0;
    T* row = logits + static_cast<size_t>(n) * nv;
    for (int c = threadIdx.x * P; c < nv; c += blockDim.x * P) {
        Elems<T, P> px = load_elems<T, P>(row + c);
        for (int k = 0; k < P; k++) {
            const int v = c + k;
            float g = 0.0f;
            if (v < n_valid) g = dloss * (expf(to_float(px.v[k]) - M) / S - (v == target ? 1.0f : 0.0f));
            px.v[k] = from_float<T>(g);
        }
        store_elems<T, P>(row + c, px);
    }
}

/// Whether rows of `width` elements starting at p can move in 16-byte packs.
template <typename T>
bool rows_packable(const T* p, int width) {
    return width % Pack<T>::size == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
/// Columns of [v0, v0 + nv) below V.
inline int valid_columns(int nv, int v0, int V) { return V - v0 < 0 ? 0 : (V - v0 < nv ? V - v0 : nv); }

template <typename T>
void classifier_partial(float* stats, const T* logits, const int* targets, int N, int nv, int v0, int V,
                        cudaStream_t stream) {
    if (N == 0) return;
    const int n_valid = valid_columns(nv, v0, V);
    if (rows_packable(logits, nv))
        launch(classifier_partial_kernel<T, Pack<T>::size>, dim3(N), dim3(512), 0, stream, stats, logits, targets,
               nv, v0, n_valid);
    else
        launch(classifier_partial_kernel<T, 1>, dim3(N), dim3(512), 0, stream, stats, logits, targets, nv, v0,
               n_valid);
}

template <typename T>
void classifier_finish(T* logits, float* losses, const float* all, int tp, const int* targets, int N, int nv,
                       int v0, int V, float dloss, bool write_grad, cudaStream_t stream) {
    if (N == 0) return;
    const int n_valid = valid_columns(nv, v0, V);
    if (rows_packable(logits, nv))
        launch(classifier_finish_kernel<T, Pack<T>::size>, dim3(N), dim3(512), 0, stream, logits, losses, all, tp,
               targets, N, nv, v0, n_valid, dloss, write_grad);
    else
        launch(classifier_finish_kernel<T, 1>, dim3(N), dim3(512), 0, stream, logits, losses, all, tp, targets, N,
               nv, v0, n_valid, dloss, write_grad);
}

template void fused_classifier<float>(float*, float*, const int*, int, int, int, float, bool, cudaStream_t);
template void fused_classifier<__nv_bfloat16>(__nv_bfloat16*, float*, const int*, int, int, int, float,
                                              bool, cudaStream_t);

#define INSTANTIATE(T)                                                                                        \
    template void classifier_partial<T>(float*, const T*, const int*, int, int, int, int, cudaStream_t);     \
    template void classifier_finish<T>(T*, float*, const float*, int, const int*, int, int, int, int, float, \
                                       bool, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
