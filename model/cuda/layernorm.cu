// model/cuda/layernorm.cu — LayerNorm forward (optionally with the residual add fused in) and backward.
//
// LayerNorm (Ba et al. 2016), eps 1e-5, biased variance: y = (x - mean) * rstd * w + b.
// Forward: one warp per row, two passes over the row (mean, then the centred variance) in fp32,
// rows read in 16-byte packs (C must be a multiple of 8: CudaOps checks).
// Backward: one warp per row for dinp (the standard closed form, below), and a deterministic
// column reduction (reduce.cuh) for dweight = sum_n dout*xhat and dbias = sum_n dout.
#include "model/cuda/kernels.cuh"
#include "model/cuda/reduce.cuh"

namespace llmtrain::cuda {

constexpr float kLnEps = 1e-5f;

/// One warp per row of N rows of C (C % 8 == 0), read and written in 16-byte packs. If `residual`
/// is non-null: residual = a + b (rounded to T) and the row normalized is that rounded residual;
/// otherwise the row is `a`. out (N,C) T; mean, rstd (N) fp32.
template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, T* residual, const T* a,
                                         const T* b, const T* weight, const T* bias, int N, int C) {
    constexpr int P = Pack<T>::size;
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;  // warp-uniform
    const size_t off = static_cast<size_t>(row) * C;
    const T* x = fused_residual_row(residual, a, b, off, C, lane);
    float s = 0.0f;
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> px = load_pack(x + c);
        for (int k = 0; k < P; k++) s += to_float(px.v[k]);
    }
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> px = load_pack(x + c);
        for (int k = 0; k < P; k++) {
            const float d = to_float(px.v[k]) - m;
            v += d * d;
        }
    }
    const float r = 1.0f / sqrtf(warp_sum(v) / C + kLnEps);
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> px = load_pack(x + c), pw = load_pack(weight + c), pbias = load_pack(bias + c);
        Pack<T> o;
        for (int k = 0; k < P; k++)
            o.v[k] = from_float<T>((to_float(px.v[k]) - m) * r * to_float(pw.v[k]) + to_float(pbias.v[k]));
        store_pack(out + off + c, o);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, T* residual, const T* a, const T* b,
                       const T* weight, const T* bias, int N, int C, cudaStream_t stream) {
    const int block = 256, rows_per_block = block / kWarpSize;
    launch(layernorm_forward_kernel<T>, dim3(ceil_div(N, rows_per_block)), dim3(block), 0, stream, out,
           mean, rstd, residual, a, b, weight, bias, N, C);
}

/// dinp (N,C) += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)) with dnorm = dout * w,
/// xhat = (inp - mean) * rstd. One warp per row, 16-byte packs (C % 8 == 0).
template <typename T>
__global__ void layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                               const float* mean, const float* rstd, int N, int C) {
    constexpr int P = Pack<T>::size;
    const int lane = threadIdx.x % kWarpSize;
    const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
    if (row >= N) return;  // warp-uniform
    const size_t off = static_cast<size_t>(row) * C;
    const float m = mean[row], r = rstd[row];
    float sum_dn = 0.0f, sum_dn_xhat = 0.0f;
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> pg = load_pack(dout + off + c), px = load_pack(inp + off + c), pw = load_pack(weight + c);
        for (int k = 0; k < P; k++) {
            const float dn = to_float(pg.v[k]) * to_float(pw.v[k]);
            sum_dn += dn;
            sum_dn_xhat += dn * (to_float(px.v[k]) - m) * r;
        }
    }
    const float mean_dn = warp_sum(sum_dn) / C, mean_dn_xhat = warp_sum(sum_dn_xhat) / C;
    for (int c = lane * P; c < C; c += kWarpSize * P) {
        const Pack<T> pg = load_pack(dout + off + c), px = load_pack(inp + off + c), pw = load_pack(weight + c);
        Pack<T> pd = load_pack(dinp + off + c);
        for (int k = 0; k < P; k++) {
            const float dn = to_float(pg.v[k]) * to_float(pw.v[k]);
            const float xhat = (to_float(px.v[k]) - m) * r;
            pd.v[k] = from_float<T>(to_float(pd.v[k]) + (dn - mean_dn - xhat * mean_dn_xhat) * r);
        }
        store_pack(dinp + off + c, pd);
    }
}

/// Row n, column c's contributions to (dweight, dbias): (dout * xhat, dout).
template <typename T>
struct LnParamGrad {
    const T* dout;
    const T* inp;
    const float* mean;
    const float* rstd;
    int C;
    __device__ void operator()(int n, int c, float* acc) const {
        const size_t i = static_cast<size_t>(n) * C + c;
        const float g = to_float(dout[i]);
        acc[0] += g * (to_float(inp[i]) - mean[n]) * rstd[n];
        acc[1] += g;
    }
};

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int N, int C, float* scratch,
                        cudaStream_t stream) {
    const int block = 256, rows_per_block = block / kWarpSize;
    launch(layernorm_backward_dinp_kernel<T>, dim3(ceil_div(N, rows_per_block)), dim3(block), 0, stream,
           dinp, dout, inp, weight, mean, rstd, N, C);
    column_reduce<2, T>(dweight, dbias, scratch, N, C, LnParamGrad<T>{dout, inp, mean, rstd, C}, stream);
}

size_t layernorm_backward_scratch_bytes(int N, int C) {
    return column_reduce_scratch_floats(2, N, C) * sizeof(float);
}

#define INSTANTIATE(T)                                                                               \
    template void layernorm_forward<T>(T*, float*, float*, T*, const T*, const T*, const T*, const T*, \
                                       int, int, cudaStream_t);                                        \
    template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const float*,        \
                                        const float*, int, int, float*, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
