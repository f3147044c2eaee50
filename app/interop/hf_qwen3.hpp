// app/interop/hf_qwen3.hpp — HuggingFace's Qwen3ForCausalLM and Qwen3MoeForCausalLM layouts for
// llmtrain's Llama with QK-norm (model.qk_norm; docs/model.md "Qwen3", docs/checkpoints.md).
//
// Qwen3 (Yang et al. 2025, the Qwen3 technical report; transformers' Qwen3Attention) is a Llama whose
// attention normalizes each q and k head over head_dim with an RMSNorm before the rotation:
// model.layers.<l>.self_attn.q_norm.weight and k_norm.weight, (head_dim) each, shared by the heads;
// head_dim is its own key (q_proj is (num_attention_heads * head_dim, hidden_size)). Our tensors carry
// those names already. Qwen3-MoE's block (Qwen3MoeSparseMoeBlock) is model.layers.<l>.mlp: gate.weight
// (E, C), the router, and per expert j experts.<j>.gate_proj.weight (F, C), up_proj.weight (F, C),
// down_proj.weight (C, F), F = moe_intermediate_size; the router takes softmax over all E logits and the
// top k, renormalized over the k when norm_topk_prob (llmtrain's softmax router always renormalizes:
// norm_topk_prob = false is refused), each expert down(silu(gate x) * up x). Every tensor is one
// contiguous run of ours (mlp.router.weight; the expert's [gate; up] rows of mlp.experts.gate_up_proj;
// its slice of mlp.experts.down_proj); nothing is transposed.
//
// Which HF family a Llama layout is (hf_family): llama (LlamaForCausalLM), mixtral (MoE), qwen3
// (model.qk_norm), qwen3_moe (MoE with model.qk_norm).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "app/interop/hf_moe.hpp"

namespace llmtrain {

/// HF's model_type and architectures[0] for a Llama layout's spec a: ("llama", "LlamaForCausalLM"),
/// ("mixtral", "MixtralForCausalLM"), ("qwen3", "Qwen3ForCausalLM") or ("qwen3_moe",
/// "Qwen3MoeForCausalLM") by a.moe() and a.qk_norm.
std::pair<std::string, std::string> hf_family(const ArchSpec& a);

/// Qwen3-MoE's tensors of MoE block `layer` of layout (a MoE Llama with QK-norm), in HF's state-dict
/// order: mlp.gate.weight (E, C), then per expert gate_proj (F, C) at element j*2F*C of
/// gate_up_proj, up_proj (F, C) at j*2F*C + F*C, down_proj (C, F) at j*C*F of down_proj.
std::vector<HfPiece> qwen3_moe_block_tensors(const ParamLayout& layout, int layer);

/// Throws InteropError(`where` + ": ...") naming the key when Qwen3MoeForCausalLM cannot express g:
/// model.moe.router = "sigmoid", or model.moe.n_shared_experts > 0. g is a MoE Llama.
void check_qwen3_moe_expressible(const GPTConfig& g, const std::string& where);

/// Qwen3Config's / Qwen3MoeConfig's keys beyond a Llama's for a, set in c: attention_bias false,
/// use_sliding_window false, sliding_window null, max_window_layers n_layer, and for a MoE:
/// num_experts, num_experts_per_tok, moe_intermediate_size (the expert width), norm_topk_prob true,
/// decoder_sparse_step 1, mlp_only_layers [], router_aux_loss_coef (model.moe.aux_loss_coef),
/// output_router_logits false (intermediate_size is the caller's).
void set_qwen3_config(nlohmann::ordered_json& c, const ArchSpec& a);

/// Checks a Qwen3 / Qwen3-MoE config.json `c` (read from `file`) against a: use_sliding_window absent
/// or false, and for a MoE num_experts = model.moe.n_experts, num_experts_per_tok = model.moe.top_k,
/// moe_intermediate_size = the expert width, norm_topk_prob true, decoder_sparse_step absent or 1,
/// mlp_only_layers absent or empty. Errors: InteropError naming the file and key.
void check_qwen3_config(const nlohmann::ordered_json& c, const std::string& file, const ArchSpec& a);

/// The keys of a Qwen3 / Qwen3-MoE config.json into g (the Llama keys already read): qk_norm = true,
/// head_dim (default hidden_size / num_attention_heads; 0 when equal), and for qwen3_moe the model.moe
/// keys: n_experts = num_experts, top_k = num_experts_per_tok, expert_ffn = moe_intermediate_size, the
/// softmax router, no shared experts, aux_loss_coef = router_aux_loss_coef (Qwen3MoeConfig's defaults
/// where absent: 128, 8, 768, 0.001). Errors: InteropError naming the file and key when one is not a
/// positive integer.
void qwen3_config(const nlohmann::ordered_json& c, const std::string& file, bool moe, GPTConfig& g);

}  // namespace llmtrain
