// model/moe_layer.hpp — the shapes and buffers of one mixture-of-experts layer as the model runs it
// through the backend (Ops::moe_forward / Ops::moe_backward; docs/model.md "Mixture of experts").
// The pieces and their sources are model/moe.hpp's (Shazeer et al. 2017, Fedus et al. 2021 Switch
// Transformer, Jiang et al. 2024 Mixtral, Liu et al. 2024 DeepSeek-V3); this header only names what a
// layer keeps for its backward and what it borrows as scratch. Dropless routing: every token goes
// to its k experts, so every buffer's size is fixed by (N, C, E, k, F) and known before a step (the
// dry run counts them).
#pragma once
#include "model/moe.hpp"

namespace llmtrain {

/// One MoE layer's shape: N rows of width C, E experts of width F (SwiGLU: 2F gate|up columns), k
/// experts per token, the router's score function, and alpha, the load-balancing loss coefficient.
struct MoeShape {
    int N = 0, C = 0, E = 0, k = 0, F = 0;
    MoeScore score = MoeScore::softmax;
    float aux_coef = 0.0f;
    /// (E) fp32 in the backend's memory, or null: the layer's selection bias (DeepSeek-V3's
    /// auxiliary-loss-free balancing, sigmoid only; moe_router_forward's bias). It steers the top-k
    /// only; the model sets it per layer (GPT::set_moe_bias).
    const float* bias = nullptr;
    /// Rows an expert takes at most (model/moe.hpp moe_dispatch_plan_capped: the first in pair
    /// order, the rest dropped); 0 = dropless (every buffer is still sized for N*k rows).
    int capacity = 0;
    /// (E) host doubles, or null: the balance loss's assignment fractions f_e counted over a token
    /// set larger than these N rows (context parallelism: the whole window's, all-reduced over the
    /// CP group; model/gpt_moe.cpp). The backward's balance-loss gradient then takes them in place
    /// of the N rows' own counts (model/moe.hpp moe_aux_grad); the forward's returned loss is still
    /// these rows' own. Only backends with Ops::implements_moe_aux_fractions take it.
    const double* aux_f = nullptr;
};

/// What a layer keeps from its forward for its backward (activations; act dtype unless noted).
struct MoeActs {
    float* scores = nullptr;  ///< (N,E) fp32 router scores (softmax or sigmoid)
    int* ids = nullptr;       ///< (N,k) int32 selected experts
    float* gates = nullptr;   ///< (N,k) fp32 gates
    int* offsets = nullptr;   ///< (E+1) int32 first grouped row of each expert
    int* pos = nullptr;       ///< (N*k) int32 grouped row of pair n*k+j
    void* xg = nullptr;       ///< (N*k,C) the input rows grouped by expert
    void* gu = nullptr;       ///< (N*k,2F) the experts' [gate | up]
    void* h = nullptr;        ///< (N*k,F) silu(gate) * up
    void* yg = nullptr;       ///< (N*k,C) the experts' outputs, grouped
};

/// Scratch shared by every layer (workspace; act dtype unless noted).
struct MoeWork {
    float* logits = nullptr;  ///< (N,E) fp32 router logits (forward), then d logits (backward)
    int* counts = nullptr;    ///< (E) int32 rows per expert
    int* pair_of = nullptr;   ///< (N*k) int32 the pair at each grouped row
    float* dgates = nullptr;  ///< (N,k) fp32
    float* dscores = nullptr; ///< (N,E) fp32 the balance loss's gradient
    void* dyg = nullptr;      ///< (N*k,C)
    void* dxg = nullptr;      ///< (N*k,C)
    void* dgu = nullptr;      ///< (N*k,2F)
    void* dh = nullptr;       ///< (N*k,F)
};

}  // namespace llmtrain
