// model/cuda/classifier.cu — fused softmax + cross-entropy + logit gradient, in place.
//
// One block per row of logits (N, Vp). Pass 1: each thread keeps an online (max, sum of exp) over
// its columns of [0, V) (Milakov & Gimelshein 2018), combined across the block. The loss is
// logsumexp - logit[target]. Pass 2 (training) overwrites the row with dloss * (softmax - onehot)
// on [0, V) and 0 on the padding [V, Vp): no probability buffer is ever written (llm.c's design).
#include "model/cuda/kernels.cuh"

namespace llmtrain::cuda {

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
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x * P; c < V; c += blockDim.x * P) {
        const Pack<T> px = load_pack(row + c);
        for (int k = 0; k < P && c + k < V; k++) {
            const float x = to_float(px.v[k]);
            const float m_new = fmaxf(m, x);
            s = s * expf(m - m_new) + expf(x - m_new);
            m = m_new;
        }
    }
    const float row_max = block_max(m, scratch);
    // A thread with no columns has m = -inf and s = 0: its term is 0 (guarded to avoid inf - inf).
    const float sum = block_sum(m == -INFINITY ? 0.0f : s * expf(m - row_max), scratch);
    const float lse = row_max + logf(sum);
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

template void fused_classifier<float>(float*, float*, const int*, int, int, int, float, bool, cudaStream_t);
template void fused_classifier<__nv_bfloat16>(__nv_bfloat16*, float*, const int*, int, int, int, float,
                                              bool, cudaStream_t);

}  // namespace llmtrain::cuda
