// model/moe.hpp — the pieces of a sparse mixture-of-experts (MoE) feed-forward layer on the CPU:
// the router (scores, top-k, gates), dropless dispatch (a stable grouping of the (token, slot)
// pairs by expert), the experts' SwiGLU FFNs over the grouped rows, the combine, the
// load-balancing auxiliary loss, and every backward. fp32 host arrays, (N,C) row-major, weights
// (OC,C) as in model/ops.hpp: weight gradients are ACCUMULATED (+=), activation gradients are
// OVERWRITTEN unless the function says "+=". The model runs them through CpuOps::moe_forward /
// moe_backward (model/cpu/moe_layer.cpp; docs/model.md "Mixture of experts").
//
// The layer, for x (N,C) the normed residual stream, E experts, k of them per token:
//
//   logits = x @ Wr^T (N,E); scores = softmax(logits) or sigmoid(logits)      moe_router_forward
//   ids (N,k) = top-k of scores (+ bias, sigmoid only); gates (N,k) from the k selected scores
//   plan = counting sort of the N*k (n, j) pairs by ids[n,j]                  moe_dispatch_plan
//   xg (N*k, C): row p = x[n] for the pair (n, j) at grouped position p       moe_permute_forward
//   yg = expert e's SwiGLU FFN on its rows of xg (one block per expert)       moe_experts_forward
//   out[n] += sum_j gates[n,j] * yg[pos(n,j)]                                 moe_combine_forward
//   aux = alpha * E * sum_e f_e * P_e                                         moe_aux_loss
//
// Sources: Shazeer et al. 2017 ("Outrageously Large Neural Networks", the top-k gated MoE); Fedus
// et al. 2021 (Switch Transformer, eq. 4-6: the auxiliary loss); Jiang et al. 2024 (Mixtral, eq. 1-2:
// G(x) = Softmax(TopK(x Wg)), SwiGLU experts); Qwen3-MoE as in HuggingFace transformers'
// Qwen3MoeSparseMoeBlock (softmax over all E, top-k, renormalized when norm_topk_prob); DeepSeek-V3
// (Liu et al. 2024, eq. 12-16: sigmoid affinities, a per-expert bias used for the selection only,
// gates = the selected affinities normalized over the k; eq. 17-20: the sequence-wise balance loss).
#pragma once
#include <cstddef>

namespace llmtrain {

/// The router's score function: softmax over the E logits (Mixtral, Qwen3-MoE, OLMoE) or an
/// elementwise sigmoid (DeepSeek-V3's affinities).
enum class MoeScore { softmax, sigmoid };

/// How the router turns the k selected scores into gates.
struct MoeRouterOptions {
    MoeScore score = MoeScore::softmax;
    /// Gates = the k selected scores divided by their sum. Softmax with it on is Mixtral's
    /// Softmax(TopK(logits)) (the renormalized top-k probabilities are exactly the softmax over the k
    /// selected logits) and Qwen3-MoE's norm_topk_prob = true; softmax with it off is Qwen3-MoE's
    /// norm_topk_prob = false and OLMoE's (gates = the raw top-k probabilities). Sigmoid with it on is
    /// DeepSeek-V3 (eq. 13).
    bool norm_topk = true;
    /// Every gate is multiplied by this (DeepSeek-V3's routed_scaling_factor, 2.5 there; 1 elsewhere).
    float route_scale = 1.0f;
};

/// The router's forward for N rows: logits (N,E) = x (N,C) @ w_router (E,C)^T; scores (N,E) =
/// softmax (per row, max-subtracted) or sigmoid of the logits; ids (N,k) = the k experts with the
/// largest selection value scores[n,e] + bias[e] (bias (E) may be null; DeepSeek-V3's
/// auxiliary-loss-free balancing bias, eq. 16: it steers the selection and never enters a gate or a
/// gradient), in descending order of that value, ties broken toward the lower expert index;
/// gates (N,k) = route_scale * scores[n, ids[n,j]] (divided by the k selected scores' sum when
/// norm_topk). fp32, int32 ids. Deterministic; OpenMP over rows.
/// Throws std::invalid_argument unless N >= 0, C >= 1, 1 <= k <= E, and unless a bias is given only
/// with the sigmoid score (softmax routers in the sources have none).
void moe_router_forward(float* logits, float* scores, int* ids, float* gates, const float* x,
                        const float* w_router, const float* bias, int N, int C, int E, int k,
                        const MoeRouterOptions& opt);

/// The load-balancing auxiliary loss, returned: alpha * E * sum_e f_e * P_e with f_e = (number of
/// (n, j) with ids[n,j] = e) / (N k), the fraction of assignments to e, and P_e = (1/N) sum_n q[n,e]
/// with q = the softmax scores, or for sigmoid the scores normalized per row, s / sum_e s
/// (DeepSeek-V3 eq. 17-20; with k = 1 and softmax it is Switch Transformer's eq. 4-6). It is alpha at
/// perfect balance. HuggingFace's load_balancing_loss_func (Mixtral, Qwen3-MoE) divides the counts
/// by N only, i.e. returns k times this. Over whatever rows are given: per sequence (DeepSeek-V3)
/// by calling it per sequence, per batch otherwise.
/// dscores (N,E), if not null, is OVERWRITTEN with d(aux)/d scores (f_e is counted, not
/// differentiated). fp32; a double sum over the rows in order. Throws std::invalid_argument on an
/// id outside [0, E) or bad sizes.
float moe_aux_loss(float* dscores, const float* scores, const int* ids, int N, int E, int k,
                   MoeScore score, float alpha);

/// moe_aux_loss's gradient with the assignment fractions f (E) given instead of counted from these
/// rows' ids: dscores (N,E) OVERWRITTEN with d(alpha * E * sum_e f_e P_e) / d scores, P_e the mean
/// over these N rows (softmax: alpha E f_e / N; sigmoid through q = s / sum_e s). Context
/// parallelism (model/gpt_moe.cpp) passes the whole window's fractions, all-reduced over the CP
/// group, so each rank's share of the gradient is the one a single rank holding the window computes.
/// fp32 scores, double f; the same arithmetic as moe_aux_loss's. Throws std::invalid_argument on bad sizes.
void moe_aux_grad(float* dscores, const float* scores, const double* f, int N, int E, MoeScore score, float alpha);

/// The router's backward. dlogits (N,E) (OVERWRITTEN) = the Jacobian of the score function applied
/// to dscores_in (N,E) (may be null, e.g. moe_aux_loss's gradient) plus d gates (N,k) taken back
/// through route_scale and the renormalization onto the selected scores; then dx (N,C) += dlogits
/// @ w_router (E,C) (note: +=, the experts' path writes dx first) and dw_router (E,C) += dlogits^T
/// @ x. Softmax: dl = p * (ds - sum(p * ds)); sigmoid: dl = ds * s * (1 - s). fp32.
void moe_router_backward(float* dx, float* dw_router, float* dlogits, const float* dscores_in,
                         const float* dgates, const float* scores, const int* ids, const float* x,
                         const float* w_router, int N, int C, int E, int k,
                         const MoeRouterOptions& opt);

/// The dropless dispatch plan: the N*k pairs (n, j), pair index i = n*k + j, grouped by expert
/// ids[i] with a stable counting sort (within an expert, pairs in order of i, so tokens in order).
/// counts (E): pairs per expert (0 allowed); offsets (E+1): offsets[e] = first grouped position of
/// expert e, offsets[E] = N*k; pair_of (N*k): pair_of[p] = the pair at grouped position p;
/// pos (N*k): pos[i] = the grouped position of pair i (the inverse). Throws std::invalid_argument
/// on an id outside [0, E). Serial (O(N k + E)).
void moe_dispatch_plan(int* counts, int* offsets, int* pair_of, int* pos, const int* ids, int N,
                       int k, int E);

/// The capacity-limited dispatch plan (Switch Transformer, Fedus et al. 2021 §2.2, "expert
/// capacity"; GShard, Lepikhin et al. 2020): as moe_dispatch_plan, but expert e keeps at most
/// `capacity` pairs, the first ones in pair order i = n*k + j (token order, then slot: Switch
/// Transformer's token order for k = 1), and drops the rest. counts (E) and offsets (E+1) cover the
/// KEPT pairs only (offsets[E] = the kept total); the dropped pairs follow at grouped positions
/// [offsets[E], N*k) in pair order, so pair_of and pos still cover all N*k pairs. A dropped pair's
/// row is never run by an expert: the layer zeroes its output row, so its gate contributes nothing
/// (and gets a zero gradient) and the residual carries the token. Returns the number dropped.
/// capacity >= N*k (or <= 0: none) gives moe_dispatch_plan's plan. Serial (O(N k + E)).
/// Throws std::invalid_argument on an id outside [0, E).
int moe_dispatch_plan_capped(int* counts, int* offsets, int* pair_of, int* pos, const int* ids, int N, int k,
                             int E, int capacity);

/// xg (N*k, C): row p = x (N,C) row pair_of[p] / k (each token copied once per slot). OpenMP over p.
void moe_permute_forward(float* xg, const float* x, const int* pair_of, int N, int k, int C);

/// The transpose: dx (N,C) (OVERWRITTEN) row n = sum over j = 0..k-1 (in that order) of dxg row
/// pos[n*k + j]. OpenMP over n.
void moe_permute_backward(float* dx, const float* dxg, const int* pos, int N, int k, int C);

/// out (N,C) += sum over j = 0..k-1 (in order) of gates[n,j] * yg row pos[n*k + j]. ("+=": out is
/// the residual stream, or a shared expert's output.) OpenMP over n.
void moe_combine_forward(float* out, const float* yg, const float* gates, const int* pos, int N,
                         int k, int C);

/// The combine's backward: dyg (N*k, C) (OVERWRITTEN) row pos[n*k+j] = gates[n,j] * dout[n];
/// dgates (N,k) (OVERWRITTEN) = dot(dout[n], yg row pos[n*k+j]) (double accumulation). OpenMP over n.
void moe_combine_backward(float* dyg, float* dgates, const float* dout, const float* yg,
                          const float* gates, const int* pos, int N, int k, int C);

/// The experts' SwiGLU FFNs (Shazeer 2020; Mixtral's w1/w3/w2) over the grouped rows: for expert e
/// with rows [offsets[e], offsets[e+1]) of xg (N*k, C), gu = rows @ w13[e]^T (rows, 2F), with
/// w13 (E, 2F, C) holding per expert [w1 (gate, F rows); w3 (up, F rows)] as the Llama MLP packs
/// [Wgate; Wup]; h (rows, F) = silu(gate) * up; yg rows = h @ w2[e]^T, w2 (E, C, F). gu (N*k, 2F)
/// and h (N*k, F) are kept for the backward. One single-threaded sgemm per expert and matrix,
/// experts spread over OpenMP threads (each expert's rows are computed by one thread, so results
/// do not depend on the thread count). An expert with no rows is skipped.
void moe_experts_forward(float* yg, float* gu, float* h, const float* xg, const float* w13,
                         const float* w2, const int* offsets, int E, int C, int F);

/// The experts' backward: dh = dyg @ w2[e]; dw2[e] (C,F) += dyg^T @ h; dgu = swiglu' (gu) * dh
/// (into the scratch dgu (N*k, 2F), OVERWRITTEN); dw13[e] (2F,C) += dgu^T @ xg; dxg (N*k, C)
/// (OVERWRITTEN) = dgu @ w13[e]. dh reuses h's shape: scratch dh (N*k, F), OVERWRITTEN. fp32.
void moe_experts_backward(float* dxg, float* dw13, float* dw2, float* dgu, float* dh,
                          const float* dyg, const float* xg, const float* gu, const float* h,
                          const float* w13, const float* w2, const int* offsets, int E, int C, int F);

}  // namespace llmtrain
