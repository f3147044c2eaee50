// app/interop/hf_llama.hpp — HuggingFace transformers' LlamaForCausalLM: config.json + safetensors
// (one model.safetensors, or shards with model.safetensors.index.json: app/interop/hf_shards.hpp).
//
// docs/checkpoints.md "Weight formats". Our Llama tensors already carry HF's names (model/arch.hpp):
// model.embed_tokens.weight; model.layers.<l>.self_attn.{q,k,v,o}_proj.weight,
// mlp.{gate,up,down}_proj.weight, input_layernorm.weight, post_attention_layernorm.weight;
// model.norm.weight; lm_head.weight when untied. All are Linear-style (out, in), as HF stores them,
// so nothing is transposed; q|k|v and gate|up, packed back to back in our flat buffer, are separate
// tensors in the file. embed_tokens and lm_head are (vocab_size, n_embd): our padded rows are not
// stored. RoPE: HF's Llama stores q_proj/k_proj with each head's rows in the rotate-half order
// (channel i pairs with i + head_dim/2; the conversion from Meta's interleaved checkpoints permutes
// them so), and ours rotates the same pairs of the same rows, so the rows are copied as they are
// (tests/app/interop_llama_test.py checks it against a float64 PyTorch Llama).
//
// A mixture-of-experts Llama (model.moe) is written and read as HF's MixtralForCausalLM (model_type
// "mixtral"): the same attention, norms and embeddings, each block's experts in Mixtral's names and
// config keys (app/interop/hf_moe.hpp; tests/app/interop_moe_test.py checks it against a float64
// PyTorch Mixtral). A Llama with QK-norm (model.qk_norm) is HF's Qwen3ForCausalLM, with experts
// Qwen3MoeForCausalLM (app/interop/hf_qwen3.hpp; tests/app/interop_qwen3_test.py).
#pragma once
#include <cstdint>
#include <string>

#include "model/param_layout.hpp"

namespace llmtrain {

/// Options of write_hf_llama.
struct HfLlamaOut {
    std::string dtype = "F32";                 ///< "F32" or "BF16" (round to nearest even)
    uint64_t max_shard_bytes = 5000000000ull;  ///< above this, shards + index (HF's default 5GB)
    int bos_id = -1, eos_id = -1;              ///< written when >= 0, else null (unknown)
};

/// Writes dir/config.json (LlamaConfig's keys: architectures ["LlamaForCausalLM"], model_type llama,
/// hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, num_hidden_layers,
/// head_dim, rms_norm_eps, rope_theta, vocab_size, max_position_embeddings = seq_len,
/// tie_word_embeddings, hidden_act silu, no biases, no rope_scaling, torch_dtype, bos/eos_token_id)
/// and the weights (hf_shards.hpp: model.safetensors, or shards and the index above
/// o.max_shard_bytes), creating dir. params: host fp32, layout.total_numel(), layout a Llama.
/// A MoE Llama is written as MixtralForCausalLM (model_type mixtral, intermediate_size = the expert
/// width, MixtralConfig's expert keys; no attention_bias, mlp_bias, pretraining_tp, rope_scaling);
/// with model.qk_norm as Qwen3ForCausalLM / Qwen3MoeForCausalLM (hf_qwen3.hpp's keys).
/// Errors: InteropError naming the path on an I/O failure, when layout is not a Llama, or (naming
/// the key) when Mixtral or Qwen3-MoE cannot hold its experts (a sigmoid router, shared experts).
void write_hf_llama(const std::string& dir, const ParamLayout& layout, const float* params, const HfLlamaOut& o);

/// Fills params (host fp32, layout.total_numel(); padding and padded rows 0) from a HuggingFace
/// Llama, or for a MoE layout a Mixtral (model_type "mixtral", hf_moe.hpp's names and keys), or with
/// model.qk_norm a Qwen3 / Qwen3-MoE (model_type "qwen3" / "qwen3_moe", hf_qwen3.hpp's):
/// `path` is its directory, its index.json or its model.safetensors, config.json beside it.
/// A stored lm_head.weight of a tied model must equal embed_tokens (some tied hub files store it);
/// rotary_emb.inv_freq buffers (older files) are skipped. Errors: InteropError naming the file and the
/// key or tensor: config.json not the layout's family (model_type: llama, mixtral, qwen3, qwen3_moe by
/// model.moe and model.qk_norm), a shape key or an expert key (num_local_experts, num_experts_per_tok) differing from the layout's config
/// (num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size, intermediate_size,
/// vocab_size, head_dim, both values), another network (hidden_act, rms_norm_eps, rope_theta,
/// tie_word_embeddings, attention_bias, mlp_bias, rope_scaling), a tensor missing, unknown, of
/// another shape (both shapes) or dtype (F32, BF16, F16 are read).
void read_hf_llama(const std::string& path, const ParamLayout& layout, float* params);

/// The GPTConfig of a HuggingFace Llama, Mixtral, Qwen3 or Qwen3-MoE (`path` as read_hf_llama's) from
/// its config.json: the shape keys, head_dim (hf_qwen3.hpp qwen3_config: qk_norm and a Qwen3-MoE's
/// experts; hf_moe.hpp mixtral_moe_config: a Mixtral's), num_key_value_heads (default num_attention_heads), max_position_embeddings as seq_len
/// (default 2048), rms_norm_eps, rope_theta and tie_word_embeddings (LlamaConfig's defaults where
/// absent). Errors: InteropError naming config.json and the key: a shape key missing or not a
/// positive integer, or what read_hf_llama's config check refuses (model_type, head_dim, hidden_act,
/// biases, rope_scaling, sliding_window, Qwen3-MoE's norm_topk_prob), or a shape ArchSpec rejects.
GPTConfig hf_llama_config(const std::string& path);

/// config.json's model_type in `dir` ("gpt2", "llama", "mixtral", ...), else derived from "architectures"
/// (GPT2LMHeadModel -> gpt2, LlamaForCausalLM -> llama, MixtralForCausalLM -> mixtral,
/// Qwen3ForCausalLM -> qwen3, Qwen3MoeForCausalLM -> qwen3_moe), else "" (no file, no such keys).
/// Errors: InteropError naming the file when it exists but is not a JSON object.
std::string hf_model_type(const std::string& dir);

}  // namespace llmtrain
