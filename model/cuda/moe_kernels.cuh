// model/cuda/moe_kernels.cuh — the host-side launchers of the CUDA backend's mixture-of-experts
// kernels (docs/cuda.md "Mixture of experts"), for CudaOps's MoE ops (cuda_ops_moe.cu).
//
// The math and its sources are model/moe.hpp's (Shazeer et al. 2017; Fedus et al. 2021 Switch
// Transformer; Jiang et al. 2024 Mixtral; Qwen3-MoE; Liu et al. 2024 DeepSeek-V3): these kernels
// compute what the CPU pieces there compute, in the same orders where an order decides a result
// (the top-k ties, the dispatch plan), so the routing, the plan and the grouped rows are the CPU's.
// Shapes: N rows of width C, E experts, k per token, P = N*k (token, slot) pairs, pair i = n*k + j.
// T is the activation type (float or __nv_bfloat16); router logits, scores, gates and their
// gradients are fp32, ids / offsets / pos / pair_of int32, all device memory. Each launcher queues
// its kernels on `stream` and returns at once.
#pragma once
#include "model/cuda/common.cuh"

namespace llmtrain::cuda {

// ---- moe_router.cu ----
/// logits (N,E) fp32 = x (N,C) T @ w_router (E,C) T ^T, fp32 sums (one warp per logit).
template <typename T>
void moe_router_logits(float* logits, const T* x, const T* w_router, int N, int C, int E, cudaStream_t stream);
/// Per row: scores (N,E) fp32 = softmax (max-subtracted, double sum) or sigmoid of logits; ids (N,k)
/// = the k largest scores + bias (bias (E) fp32 or null), descending, ties toward the lower expert;
/// gates (N,k) = the selected scores over their sum (norm_topk, always on in the layer).
void moe_router_select(float* scores, int* ids, float* gates, const float* logits, const float* bias, int N,
                       int E, int k, bool sigmoid, cudaStream_t stream);
/// The balance loss's statistics into stats (2E + 1 doubles): f_e = assignments to e / (N k),
/// P_e = mean over rows of q[n,e] (q: softmax scores, or sigmoid scores over their row sum), and
/// stats[2E] = alpha E sum_e f_e P_e (model/moe.hpp moe_aux_loss). Double sums in row order.
void moe_aux_stats(double* stats, const float* scores, const int* ids, int N, int E, int k, bool sigmoid,
                   float alpha, cudaStream_t stream);
/// dscores (N,E) fp32 OVERWRITTEN = d(alpha E sum f_e P_e)/d scores, f from moe_aux_stats's stats.
void moe_aux_grad(float* dscores, const double* stats, const float* scores, int N, int E, bool sigmoid,
                  float alpha, cudaStream_t stream);
/// dlogits (N,E) fp32 OVERWRITTEN = the score function's Jacobian applied to dscores (may be null)
/// plus dgates (N,k) taken back through the renormalization (model/moe.hpp moe_router_backward).
void moe_router_dlogits(float* dlogits, const float* dscores, const float* dgates, const float* scores,
                        const int* ids, int N, int E, int k, bool sigmoid, cudaStream_t stream);
/// dx (N,C) T OVERWRITTEN = sum_j dxg row pos[n*k+j] (j in order) + dlogits (N,E) @ w_router (E,C):
/// the permute's backward and the router's input gradient in one rounding.
template <typename T>
void moe_router_dx(T* dx, const T* dxg, const int* pos, const float* dlogits, const T* w_router, int N, int k,
                   int C, int E, cudaStream_t stream);
/// dw_router (E,C) T += dlogits (N,E)^T @ x (N,C), fp32 sums over the rows in order.
template <typename T>
void moe_router_dw(T* dw_router, const float* dlogits, const T* x, int N, int C, int E, cudaStream_t stream);

// ---- moe_permute.cu ----
/// The dispatch plan of model/moe.hpp moe_dispatch_plan_capped (capacity <= 0 or >= N*k: dropless,
/// moe_dispatch_plan): counts (E), offsets (E+1), pair_of (P), pos (P), stable in pair order, the
/// dropped pairs after offsets[E] in pair order.
void moe_dispatch_plan(int* counts, int* offsets, int* pair_of, int* pos, const int* ids, int N, int k, int E,
                       int capacity, cudaStream_t stream);
/// xg (P,C) row p = x (N,C) row pair_of[p] / k.
template <typename T>
void moe_permute_forward(T* xg, const T* x, const int* pair_of, int N, int k, int C, cudaStream_t stream);
/// Rows [offsets[E], P) of rows (P,C) = 0 (the dropped pairs'; offsets read on the device).
template <typename T>
void moe_zero_dropped(T* rows, const int* offsets, int E, int P, int C, cudaStream_t stream);
/// out (N,C) += sum_j gates[n,j] * yg row pos[n*k+j] (j in order, fp32, one rounding).
template <typename T>
void moe_combine_forward(T* out, const T* yg, const float* gates, const int* pos, int N, int k, int C,
                         cudaStream_t stream);
/// dyg (P,C) row pos[n*k+j] OVERWRITTEN = gates[n,j] dout[n]; dgates (N,k) fp32 OVERWRITTEN =
/// dot(dout[n], yg row pos[n*k+j]) (fp32, a fixed warp order).
template <typename T>
void moe_combine_backward(T* dyg, float* dgates, const T* dout, const T* yg, const float* gates, const int* pos,
                          int N, int k, int C, cudaStream_t stream);

// ---- moe_grouped_gemm.cu ----
/// Which product moe_grouped_gemm computes per expert e over e's rows [offsets[e], offsets[e+1]).
enum class MoeGemm {
    forward,  ///< out rows (rows,Nout) OVERWRITTEN = a rows (rows,K) @ b[e]^T, b (E,Nout,K): x W^T
    dinp,     ///< out rows (rows,Nout) OVERWRITTEN = a rows (rows,K) @ b[e], b (E,K,Nout): dY W
    dweight,  ///< out[e] (E,K,Nout) += (a rows (rows,K))^T @ b rows (rows,Nout): dY^T X
};
/// The experts' GEMMs in one launch, the row ranges read from offsets (E+1, device int32) on the
/// device (no host wait); rows = a host bound on offsets[E] (the grid's size: N*k at ep 1), rows of
/// a / out past offsets[E] untouched. fp32 accumulation, one rounding to T per output (dweight: of
/// the old value plus the sum); deterministic (fixed orders, no atomics). bf16 on tensor cores
/// (mma.sync m16n8k16), fp32 on CUDA cores. Errors: std::invalid_argument unless E, K, Nout >= 1.
template <typename T>
void moe_grouped_gemm(MoeGemm kind, T* out, const T* a, const T* b, const int* offsets, int E, int rows, int K,
                      int Nout, cudaStream_t stream);

}  // namespace llmtrain::cuda
