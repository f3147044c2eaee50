// model/cuda/qk_norm.cu — Qwen3's QK-norm (Qwen Team 2025, "Qwen3 Technical Report"; HuggingFace's
// Qwen3RMSNorm over head_dim): an RMSNorm (Zhang & Sennrich 2019) of every q and k head, in place
// in the q|k|v rows, after the projection and before the rotation.
//
// Layout: qkv (N, (NH + 2 NKV) HS) T = [q (NH,HS) | k (NKV,HS) | v (NKV,HS)] per row; the H = NH + NKV
// heads of q|k are normalized, v is untouched. pre (N, H HS) T keeps q|k as they were, rstd (N, H)
// fp32 each head's 1/sqrt(mean_c x^2 + eps); wq, wk (HS) T shared by the heads (the act dtype, as
// the other norms' weights).
// Forward: one warp per head, lanes striding the head (any HS, no packs: heads are short and sit at
// HS-element offsets); sum(x^2) in fp32 by the xor butterfly (the same bits in every lane).
// Backward (rmsnorm.cu's formulas per head): dwq (HS) += sum over rows and q heads of dout * x * rstd,
// dwk over the k heads, each by reduce.cuh's deterministic column reduction (the heads as rows, no
// atomics), launched before the in-place d x kernel that overwrites dout.
#include "model/cuda/kernels.cuh"
#include "model/cuda/reduce.cuh"

namespace llmtrain::cuda {

/// One warp per head g < N H (row g / H, head g % H): pre's head = x, rstd[g] = r, x = x * r * w with
/// w = wq for the first NH heads of a row, wk after.
template <typename T>
__global__ void qk_norm_forward_kernel(T* qkv, T* pre, float* rstd, const T* wq, const T* wk, int N, int NH, int NKV,
                                       int HS, float eps) {
    const int lane = threadIdx.x % kWarpSize, H = NH + NKV;
    const long g = static_cast<long>(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (g >= static_cast<long>(N) * H) return;  // warp-uniform
    const long n = g / H;
    const int h = static_cast<int>(g % H);
    T* x = qkv + n * (H + NKV) * HS + static_cast<long>(h) * HS;
    T* p = pre + g * HS;
    const T* w = h < NH ? wq : wk;
    float ss = 0.0f;
    for (int c = lane; c < HS; c += kWarpSize) {
        const float v = to_float(x[c]);
        ss += v * v;
    }
    const float r = 1.0f / sqrtf(warp_sum(ss) / HS + eps);
    for (int c = lane; c < HS; c += kWarpSize) {
        const T v = x[c];
        p[c] = v;
        x[c] = from_float<T>(to_float(v) * r * to_float(w[c]));
    }
    if (lane == 0) rstd[g] = r;
}

template <typename T>
void qk_norm_forward(T* qkv, T* pre, float* rstd, const T* wq, const T* wk, int N, int NH, int NKV, int HS, float eps,
                     cudaStream_t stream) {
    const int block = 256, heads_per_block = block / kWarpSize;
    const long heads = static_cast<long>(N) * (NH + NKV);
    launch(qk_norm_forward_kernel<T>, dim3(static_cast<unsigned>((heads + heads_per_block - 1) / heads_per_block)),
           dim3(block), 0, stream, qkv, pre, rstd, wq, wk, N, NH, NKV, HS, eps);
}

/// One warp per head g < N H: dout (in dqkv) becomes r (dn - n mean_c(dn n)) with n = x r, dn = w dout.
template <typename T>
__global__ void qk_norm_backward_dx_kernel(T* dqkv, const T* pre, const T* wq, const T* wk, const float* rstd, int N,
                                           int NH, int NKV, int HS) {
    const int lane = threadIdx.x % kWarpSize, H = NH + NKV;
    const long g = static_cast<long>(blockIdx.x) * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (g >= static_cast<long>(N) * H) return;  // warp-uniform
    const long n = g / H;
    const int h = static_cast<int>(g % H);
    T* d = dqkv + n * (H + NKV) * HS + static_cast<long>(h) * HS;
    const T* x = pre + g * HS;
    const T* w = h < NH ? wq : wk;
    const float r = rstd[g];
    float s = 0.0f;
    for (int c = lane; c < HS; c += kWarpSize) s += to_float(w[c]) * to_float(d[c]) * to_float(x[c]) * r;
    const float mean = warp_sum(s) / HS;  // every lane has read its d[c] before any lane writes
    for (int c = lane; c < HS; c += kWarpSize)
        d[c] = from_float<T>(r * (to_float(w[c]) * to_float(d[c]) - to_float(x[c]) * r * mean));
}

/// Head j < N * count of the heads [first, first + count) of every row, column c: dout * x * rstd.
template <typename T>
struct QkNormParamGrad {
    const T* dqkv;
    const T* pre;
    const float* rstd;
    int H, NKV, HS, first, count;
    __device__ void operator()(int j, int c, float* acc) const {
        const long n = j / count;
        const int h = first + j % count;
        const float d = to_float(dqkv[n * (H + NKV) * HS + static_cast<long>(h) * HS + c]);
        acc[0] += d * to_float(pre[(n * H + h) * HS + c]) * rstd[n * H + h];
    }
};

template <typename T>
void qk_norm_backward(T* dqkv, T* dwq, T* dwk, const T* pre, const T* wq, const T* wk, const float* rstd, int N,
                      int NH, int NKV, int HS, float* scratch, cudaStream_t stream) {
    const int H = NH + NKV;
    column_reduce<1, T>(dwq, static_cast<T*>(nullptr), scratch, N * NH, HS,
                        QkNormParamGrad<T>{dqkv, pre, rstd, H, NKV, HS, 0, NH}, stream);
    column_reduce<1, T>(dwk, static_cast<T*>(nullptr), scratch, N * NKV, HS,
                        QkNormParamGrad<T>{dqkv, pre, rstd, H, NKV, HS, NH, NKV}, stream);
    const int block = 256, heads_per_block = block / kWarpSize;
    const long heads = static_cast<long>(N) * H;
    launch(qk_norm_backward_dx_kernel<T>, dim3(static_cast<unsigned>((heads + heads_per_block - 1) / heads_per_block)),
           dim3(block), 0, stream, dqkv, pre, wq, wk, rstd, N, NH, NKV, HS);
}

size_t qk_norm_backward_scratch_bytes(int N, int NH, int NKV, int HS) {
    return column_reduce_scratch_floats(1, N * (NH > NKV ? NH : NKV), HS) * sizeof(float);
}

#define INSTANTIATE(T)                                                                                           \
    template void qk_norm_forward<T>(T*, T*, float*, const T*, const T*, int, int, int, int, float, cudaStream_t); \
    template void qk_norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*, int, int, int, int, \
                                      float*, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
