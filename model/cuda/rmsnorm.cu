// model/cuda/rmsnorm.cu — RMSNorm (Zhang & Sennrich 2019) forward, optionally with the residual add
// fused in, and backward: Llama's norm, as HuggingFace's LlamaRMSNorm (no mean, no bias).
//
// y = x * rstd * w, rstd = 1/sqrt(mean_c(x^2) + eps), rstd (N) fp32 saved for the backward.
// Forward: one warp per row, one pass for sum(x^2) (fp32, xor butterfly: the same bits in every
// lane and every thread order), a second to write; rows in 16-byte packs (C % 8 == 0: CudaOps
// checks). The layout is layernorm.cu's, without the mean pass.
// Backward: with n = x * rstd and dn = w * dout, dinp += rstd * (dn - n * mean_c(dn * n)), one warp
// per row; dweight = sum_n dout * n by the deterministic column reduction of reduce.cuh.
#include "model/cuda/kernels.cuh"
#include "model/cuda/reduce.cuh"

namespace llmtrain::cuda {

/// One warp per row of N rows of C (C % 8 == 0), 16-byte packs. If `residual` is non-null:
/// residual = a + b (rounded to T) and the row normalized is that rounded residual; otherwise the
/// row is `a`. out (N,C) T; rstd (N) fp32.
template <typename T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, T* residual, const T* a, const T* b, const T* weight,
                                       int N, int C, float eps) {
    constexpr int P = Pack<T>::size;
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;  // warp-uniform
    const size_t off = static_cast<size_t>(row) * C;
    const T* x = fused_residual_row(residual, a, b, off, C, lane);
    float ss = 0.0f;
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> px = load_pack(x + c);
        for (int k = 0; k < P; k++) ss += to_float(px.v[k]) * to_float(px.v[k]);
    }
    const float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> px = load_pack(x + c), pw = load_pack(weight + c);
        Pack<T> o;
        for (int k = 0; k < P; k++) o.v[k] = from_float<T>(to_float(px.v[k]) * r * to_float(pw.v[k]));
        store_pack(out + off + c, o);
    }
    if (lane == 0) rstd[row] = r;
}

template <typename T>
void rmsnorm_forward(T* out, float* rstd, T* residual, const T* a, const T* b, const T* weight, int N, int C,
                     float eps, cudaStream_t stream) {
    const int block = 256, rows_per_block = block / kWarpSize;
    launch(rmsnorm_forward_kernel<T>, dim3(ceil_div(N, rows_per_block)), dim3(block), 0, stream, out, rstd, residual,
           a, b, weight, N, C, eps);
}

/// dinp (N,C) += rstd * (dn - n * mean_c(dn * n)) with dn = dout * w, n = inp * rstd. One warp per
/// row, 16-byte packs (C % 8 == 0).
template <typename T>
__global__ void rmsnorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* rstd,
                                             int N, int C) {
    constexpr int P = Pack<T>::size;
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;  // warp-uniform
    const size_t off = static_cast<size_t>(row) * C;
    const float r = rstd[row];
    float sum_dn_n = 0.0f;
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> pg = load_pack(dout + off + c), px = load_pack(inp + off + c), pw = load_pack(weight + c);
        for (int k = 0; k < P; k++) sum_dn_n += to_float(pw.v[k]) * to_float(pg.v[k]) * to_float(px.v[k]) * r;
    }
    const float mean_dn_n = warp_sum(sum_dn_n) / C;
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> pg = load_pack(dout + off + c), px = load_pack(inp + off + c), pw = load_pack(weight + c);
        Pack<T> pd = load_pack(dinp + off + c);
        for (int k = 0; k < P; k++) {
            const float dn = to_float(pw.v[k]) * to_float(pg.v[k]);
            pd.v[k] = from_float<T>(to_float(pd.v[k]) + r * (dn - to_float(px.v[k]) * r * mean_dn_n));
        }
        store_pack(dinp + off + c, pd);
    }
}

/// Row n, column c's contribution to dweight: dout * inp * rstd.
template <typename T>
struct RmsParamGrad {
    const T* dout;
    const T* inp;
    const float* rstd;
    int C;
    __device__ void operator()(int n, int c, float* acc) const {
        const size_t i = static_cast<size_t>(n) * C + c;
        acc[0] += to_float(dout[i]) * to_float(inp[i]) * rstd[n];
    }
};

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const float* rstd, int N,
                      int C, float* scratch, cudaStream_t stream) {
    const int block = 256, rows_per_block = block / kWarpSize;
    launch(rmsnorm_backward_dinp_kernel<T>, dim3(ceil_div(N, rows_per_block)), dim3(block), 0, stream, dinp, dout, inp,
           weight, rstd, N, C);
    column_reduce<1, T>(dweight, static_cast<T*>(nullptr), scratch, N, C, RmsParamGrad<T>{dout, inp, rstd, C},
                        stream);
}

size_t rmsnorm_backward_scratch_bytes(int N, int C) { return column_reduce_scratch_floats(1, N, C) * sizeof(float); }

#define INSTANTIATE(T)                                                                                        \
    template void rmsnorm_forward<T>(T*, float*, T*, const T*, const T*, const T*, int, int, float, cudaStream_t); \
    template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const float*, int, int, float*,     \
                                      cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
