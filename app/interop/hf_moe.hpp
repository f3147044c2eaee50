// app/interop/hf_moe.hpp — HuggingFace's MixtralForCausalLM layout for llmtrain's mixture-of-experts
// Llama (model.moe; docs/model.md "Mixture of experts", docs/checkpoints.md "Weight formats").
//
// Mixtral (Jiang et al. 2024; transformers' MixtralSparseMoeBlock) is a Llama whose MLP is
// model.layers.<l>.block_sparse_moe: gate.weight (E, C), the router, and per expert e
// experts.<e>.w1.weight (F, C) (gate), w3.weight (F, C) (up), w2.weight (C, F) (down); the router
// takes softmax over all E logits, the top k, renormalized over the k (G(x) = Softmax(TopK(x Wg))),
// and each expert is w2(silu(w1 x) * w3 x). That is exactly llmtrain's softmax router (model/moe.hpp:
// norm_topk always on) without shared experts. Ours stacks the experts: mlp.router.weight (E, C),
// mlp.experts.gate_up_proj (E, 2F, C) with each expert's rows [w1; w3], mlp.experts.down_proj
// (E, C, F), so every Mixtral tensor is one contiguous run of one of ours; nothing is transposed.
// config.json: intermediate_size is the expert width F, num_local_experts E, num_experts_per_tok k.
//
// What Mixtral cannot hold is refused: a sigmoid router (DeepSeek-V3's) and shared experts. A MoE
// Llama with QK-norm (model.qk_norm) is Qwen3-MoE's instead (app/interop/hf_qwen3.hpp).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "model/arch.hpp"
#include "model/param_layout.hpp"

namespace llmtrain {

/// One tensor as HF stores it: HF's name and shape, and where its values lie in ours: `count`
/// contiguous fp32 values from element `offset` of tensor `ours` (row-major, the same order).
struct HfPiece {
    std::string name;
    std::vector<int64_t> shape;
    const ParamTensor* ours = nullptr;
    int64_t offset = 0;
};

/// Mixtral's tensors of MoE block `layer` of layout (a MoE Llama), in HF's state-dict order:
/// block_sparse_moe.gate.weight (E, C), then per expert w1 (F, C), w2 (C, F), w3 (F, C) (w1 at
/// element e*2F*C of gate_up_proj, w3 at e*2F*C + F*C, w2 at e*C*F of down_proj).
std::vector<HfPiece> mixtral_block_tensors(const ParamLayout& layout, int layer);

/// Throws InteropError(`where` + ": ...") naming the key when MixtralForCausalLM cannot express g:
/// model.moe.router = "sigmoid", or model.moe.n_shared_experts > 0. g is a MoE Llama.
void check_mixtral_expressible(const GPTConfig& g, const std::string& where);

/// MixtralConfig's keys beyond a Llama's for a (a MoE Llama): num_local_experts, num_experts_per_tok,
/// router_aux_loss_coef (model.moe.aux_loss_coef), output_router_logits false, router_jitter_noise 0,
/// sliding_window null, set in c (intermediate_size is the caller's: the expert width).
void set_mixtral_config(nlohmann::ordered_json& c, const ArchSpec& a);

/// Checks config.json `c` (read from `file`) against a's experts: num_local_experts =
/// model.moe.n_experts, num_experts_per_tok = model.moe.top_k, sliding_window null or >= seq_len
/// (then it never masks), router_jitter_noise absent or 0. Errors: InteropError naming the file and key.
void check_mixtral_config(const nlohmann::ordered_json& c, const std::string& file, const ArchSpec& a);

/// The model.moe keys of a Mixtral config.json into g: n_experts, top_k, expert_ffn =
/// intermediate_size, no shared experts, the softmax router, aux_loss_coef = router_aux_loss_coef
/// (MixtralConfig's defaults where absent: 8 experts, 2 per token, 0.001). Errors: InteropError naming
/// the file and key when num_local_experts or num_experts_per_tok is not a positive integer.
void mixtral_moe_config(const nlohmann::ordered_json& c, const std::string& file, GPTConfig& g);

}  // namespace llmtrain
