// model/cuda/moe_router.cu — the mixture-of-experts router on the device: logits, softmax or
// sigmoid scores, the top-k with the CPU's tie order, the gates, the load-balancing loss and its
// gradient, and the router's backward (docs/cuda.md "Mixture of experts").
//
// Sources (the math, and the CPU reference these kernels follow line by line, model/cpu/moe.cpp):
// Shazeer et al. 2017 (top-k gating); Jiang et al. 2024 Mixtral eq. 1-2 and Qwen3-MoE (softmax over
// the E logits, top-k, renormalized); Liu et al. 2024 DeepSeek-V3 eq. 12-16 (sigmoid affinities, the
// selection bias, gates normalized over the k) and eq. 17-20 (balance loss); Fedus et al. 2021
// Switch Transformer eq. 4-6. Everything after the logits is fp32 with double sums where the CPU
// uses them, so a row's scores are the CPU's to a rounding and the selection matches it whenever
// the logits do: the logits are fp32 sums of the same (bf16 or fp32) inputs, not bf16 GEMM outputs,
// because a bf16-rounded logit would tie or swap experts the CPU tells apart. The per-row kernels
// take one thread per row (E and k are small: a row is O(E k) work); the router's products are
// CUDA-core kernels (E columns: the router is ~E / (6 k F) of the layer's FLOPs).
#include "model/cuda/moe_kernels.cuh"

namespace llmtrain::cuda {

namespace {
constexpr int kWarpsPerBlock = 8;
constexpr int kRowBlock = 128;
}  // namespace

/// logits (N,E) fp32 = x (N,C) @ w (E,C)^T. One warp per logit (n, e): lanes stride the C
/// columns, then warp_sum's fixed butterfly. Grid ceil(N E / 8), 256 threads.
template <typename T>
__global__ void moe_router_logits_kernel(float* logits, const T* x, const T* w, int N, int C, int E) {
    const size_t idx = static_cast<size_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
    if (idx >= static_cast<size_t>(N) * E) return;  // whole warps leave together
    const int lane = threadIdx.x % kWarpSize;
    const size_t n = idx / E, e = idx % E;
    float acc = 0.0f;
    for (int c = lane; c < C; c += kWarpSize) acc += to_float(x[n * C + c]) * to_float(w[e * C + c]);
    acc = warp_sum(acc);
    if (lane == 0) logits[idx] = acc;
}

/// One thread per row n: scores (N,E), ids (N,k), gates (N,k) from logits (N,E) as
/// model/moe.hpp moe_router_forward with norm_topk and route_scale 1. Softmax: max-subtracted expf,
/// a double sum, one float reciprocal, as the CPU. Top-k: the j-th pick is the largest selection
/// value s + bias strictly after pick j-1 in the order (value descending, expert ascending), so equal
/// values go to the lower expert first, as the CPU's partial_sort comparator. A row whose values are
/// all NaN would pick none: it routes to expert 0 (the CPU rejects such ids later).
__global__ void moe_router_select_kernel(float* scores, int* ids, float* gates, const float* logits,
                                         const float* bias, int N, int E, int k, bool sigmoid) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* l = logits + static_cast<size_t>(n) * E;
    float* s = scores + static_cast<size_t>(n) * E;
    if (!sigmoid) {
        float mx = l[0];
        for (int e = 1; e < E; e++) mx = fmaxf(mx, l[e]);
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            const float v = expf(l[e] - mx);
            s[e] = v;
            sum += v;
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int e = 0; e < E; e++) s[e] *= inv;
    } else {
        for (int e = 0; e < E; e++) s[e] = 1.0f / (1.0f + expf(-l[e]));
    }
    int* id = ids + static_cast<size_t>(n) * k;
    float* g = gates + static_cast<size_t>(n) * k;
    float prev_v = 0.0f;
    int prev_e = -1;
    double sum = 0.0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        float best_v = 0.0f;
        for (int e = 0; e < E; e++) {
            const float v = s[e] + (bias != nullptr ? bias[e] : 0.0f);
            const bool after_prev = prev_e < 0 || v < prev_v || (v == prev_v && e > prev_e);
            if (after_prev && (best < 0 || v > best_v)) {  // strict: an equal later expert loses
                best = e;
                best_v = v;
            }
        }
        if (best < 0) best = 0;
        id[j] = best;
        prev_v = best_v;
        prev_e = best;
        sum += s[best];
    }
    for (int j = 0; j < k; j++) g[j] = static_cast<float>(static_cast<double>(s[id[j]]) / sum);
}

/// One thread per expert e: stats[e] = f_e = (pairs with ids = e) / (N k), stats[E + e] = sum over
/// rows in order of q[n,e] (q = s, or s / row sum for sigmoid, the row sum in double in expert
/// order, recomputed per expert: O(N E) per thread). Grid ceil(E / 64), 64 threads.
__global__ void moe_aux_stats_kernel(double* stats, const float* scores, const int* ids, int N, int E, int k,
                                     bool sigmoid) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    double cnt = 0.0;
    const size_t P = static_cast<size_t>(N) * k;
    for (size_t i = 0; i < P; i++) cnt += ids[i] == e ? 1.0 : 0.0;
    double p = 0.0;
    for (int n = 0; n < N; n++) {
        const float* s = scores + static_cast<size_t>(n) * E;
        double rs = 1.0;
        if (sigmoid) {
            rs = 0.0;
            for (int e2 = 0; e2 < E; e2++) rs += s[e2];
        }
        p += s[e] / rs;
    }
    stats[e] = cnt / (static_cast<double>(N) * k);
    stats[E + e] = p;
}

/// One thread: stats[2E] = alpha E sum_e f_e (P_e / N), experts in order (0 for N = 0).
__global__ void moe_aux_finish_kernel(double* stats, int N, int E, float alpha) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    double loss = 0.0;
    if (N > 0)
        for (int e = 0; e < E; e++) loss += stats[e] * (stats[E + e] / N);
    stats[2 * E] = loss * static_cast<double>(alpha) * E;
}

/// One thread per row n: dscores[n,e] = dq_e = alpha E f_e / N (softmax), or through q = s / S
/// (sigmoid): (dq_e - sum_e' dq_e' q_e') / S, double as the CPU.
__global__ void moe_aux_grad_kernel(float* dscores, const double* stats, const float* scores, int N, int E,
                                    bool sigmoid, float alpha) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* s = scores + static_cast<size_t>(n) * E;
    float* d = dscores + static_cast<size_t>(n) * E;
    const double a = static_cast<double>(alpha) * E / N;
    if (!sigmoid) {
        for (int e = 0; e < E; e++) d[e] = static_cast<float>(a * stats[e]);
        return;
    }
    double rs = 0.0, dot = 0.0;
    for (int e = 0; e < E; e++) rs += s[e];
    for (int e = 0; e < E; e++) dot += a * stats[e] * s[e] / rs;
    for (int e = 0; e < E; e++) d[e] = static_cast<float>((a * stats[e] - dot) / rs);
}

/// d score e of row n: dscores (or 0) plus, when e is selected as slot j, the gate's gradient
/// through g_j = r_j / S: (dg_j - sum_j' dg_j' r_j' / S) / S (dot = sum_j' dg_j' r_j').
__device__ inline double moe_dscore(const float* dscores, const float* dg, const int* id, int k, int e, double S,
                                    double dot) {
    double v = dscores != nullptr ? dscores[e] : 0.0;
    for (int j = 0; j < k; j++)
        if (id[j] == e) v += (dg[j] - dot / S) / S;
    return v;
}

/// One thread per row n: dlogits (N,E) = softmax' (p (ds - sum p ds)) or sigmoid' (ds s (1 - s))
/// of the score gradient ds (moe_dscore), in double as model/cpu/moe.cpp.
__global__ void moe_router_dlogits_kernel(float* dlogits, const float* dscores, const float* dgates,
                                          const float* scores, const int* ids, int N, int E, int k, bool sigmoid) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* s = scores + static_cast<size_t>(n) * E;
    const float* ds = dscores != nullptr ? dscores + static_cast<size_t>(n) * E : nullptr;
    const int* id = ids + static_cast<size_t>(n) * k;
    const float* dg = dgates + static_cast<size_t>(n) * k;
    float* dl = dlogits + static_cast<size_t>(n) * E;
    double S = 0.0, dot = 0.0;
    for (int j = 0; j < k; j++) S += s[id[j]];
    for (int j = 0; j < k; j++) dot += static_cast<double>(dg[j]) * s[id[j]];
    if (!sigmoid) {
        double pd = 0.0;
        for (int e = 0; e < E; e++) pd += static_cast<double>(s[e]) * moe_dscore(ds, dg, id, k, e, S, dot);
        for (int e = 0; e < E; e++) dl[e] = static_cast<float>(s[e] * (moe_dscore(ds, dg, id, k, e, S, dot) - pd));
    } else {
        for (int e = 0; e < E; e++)
            dl[e] = static_cast<float>(moe_dscore(ds, dg, id, k, e, S, dot) * s[e] * (1.0 - s[e]));
    }
}

/// dx (N,C) = sum_j dxg[pos[n k + j]] + dlogits[n] @ w (E,C), one thread per element (grid-stride),
/// fp32 in that order, one rounding to T.
template <typename T>
__global__ void moe_router_dx_kernel(T* dx, const T* dxg, const int* pos, const float* dlogits, const T* w, int N,
                                     int k, int C, int E) {
    const size_t total = static_cast<size_t>(N) * C;
    for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
         x += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t n = x / C, c = x % C;
        float acc = 0.0f;
        for (int j = 0; j < k; j++) acc += to_float(dxg[static_cast<size_t>(pos[n * k + j]) * C + c]);
        for (int e = 0; e < E; e++) acc += dlogits[n * E + e] * to_float(w[static_cast<size_t>(e) * C + c]);
        dx[x] = from_float<T>(acc);
    }
}

/// dw (E,C) += dlogits^T @ x: one thread per (e, c) (grid-stride), fp32 over the N rows in order,
/// added to dw with one rounding.
template <typename T>
__global__ void moe_router_dw_kernel(T* dw, const float* dlogits, const T* x, int N, int C, int E) {
    const size_t total = static_cast<size_t>(E) * C;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const size_t e = i / C, c = i % C;
        float acc = 0.0f;
        for (int n = 0; n < N; n++) acc += dlogits[static_cast<size_t>(n) * E + e] * to_float(x[static_cast<size_t>(n) * C + c]);
        dw[i] = from_float<T>(to_float(dw[i]) + acc);
    }
}

template <typename T>
void moe_router_logits(float* logits, const T* x, const T* w_router, int N, int C, int E, cudaStream_t stream) {
    const size_t warps = static_cast<size_t>(N) * E;
    if (warps == 0) return;
    launch(moe_router_logits_kernel<T>, dim3(static_cast<unsigned>(ceil_div<size_t>(warps, kWarpsPerBlock))),
           dim3(kWarpsPerBlock * kWarpSize), 0, stream, logits, x, w_router, N, C, E);
}

void moe_router_select(float* scores, int* ids, float* gates, const float* logits, const float* bias, int N,
                       int E, int k, bool sigmoid, cudaStream_t stream) {
    if (N == 0) return;
    launch(moe_router_select_kernel, dim3(ceil_div(N, kRowBlock)), dim3(kRowBlock), 0, stream, scores, ids, gates,
           logits, bias, N, E, k, sigmoid);
}

void moe_aux_stats(double* stats, const float* scores, const int* ids, int N, int E, int k, bool sigmoid,
                   float alpha, cudaStream_t stream) {
    launch(moe_aux_stats_kernel, dim3(ceil_div(E, 64)), dim3(64), 0, stream, stats, scores, ids, N, E, k, sigmoid);
    launch(moe_aux_finish_kernel, dim3(1), dim3(32), 0, stream, stats, N, E, alpha);
}

void moe_aux_grad(float* dscores, const double* stats, const float* scores, int N, int E, bool sigmoid,
                  float alpha, cudaStream_t stream) {
    if (N == 0) return;
    launch(moe_aux_grad_kernel, dim3(ceil_div(N, kRowBlock)), dim3(kRowBlock), 0, stream, dscores, stats, scores, N,
           E, sigmoid, alpha);
}

void moe_router_dlogits(float* dlogits, const float* dscores, const float* dgates, const float* scores,
                        const int* ids, int N, int E, int k, bool sigmoid, cudaStream_t stream) {
    if (N == 0) return;
    launch(moe_router_dlogits_kernel, dim3(ceil_div(N, kRowBlock)), dim3(kRowBlock), 0, stream, dlogits, dscores,
           dgates, scores, ids, N, E, k, sigmoid);
}

template <typename T>
void moe_router_dx(T* dx, const T* dxg, const int* pos, const float* dlogits, const T* w_router, int N, int k,
                   int C, int E, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(N) * C;
    if (n == 0) return;
    launch(moe_router_dx_kernel<T>, dim3(elementwise_grid(n, 256)), dim3(256), 0, stream, dx, dxg, pos, dlogits,
           w_router, N, k, C, E);
}

template <typename T>
void moe_router_dw(T* dw_router, const float* dlogits, const T* x, int N, int C, int E, cudaStream_t stream) {
    launch(moe_router_dw_kernel<T>, dim3(elementwise_grid(static_cast<size_t>(E) * C, 256)), dim3(256), 0, stream,
           dw_router, dlogits, x, N, C, E);
}

#define INSTANTIATE(T)                                                                                       \
    template void moe_router_logits<T>(float*, const T*, const T*, int, int, int, cudaStream_t);             \
    template void moe_router_dx<T>(T*, const T*, const int*, const float*, const T*, int, int, int, int,     \
                                   cudaStream_t);                                                            \
    template void moe_router_dw<T>(T*, const float*, const T*, int, int, int, cudaStream_t);
INSTANTIATE(float)
INSTANTIATE(__nv_bfloat16)
#undef INSTANTIATE

}  // namespace llmtrain::cuda
