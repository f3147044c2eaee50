// app/interop/hf_gpt2.hpp — HuggingFace transformers' GPT2LMHeadModel: model.safetensors + config.json.
//
// docs/checkpoints.md "Weight formats". Names: our tensor "h.3.attn.c_attn.weight" is
// "transformer.h.3.attn.c_attn.weight", "wte" is "transformer.wte.weight" (likewise wpe, ln_f.*).
// HF's GPT-2 keeps OpenAI's Conv1D modules, whose weights are stored (in, out): the four 2-D layer
// weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are the transpose of ours, which are
// Linear-style (out, in). wte is (vocab_size, n_embd): our padded rows are not part of it. lm_head is
// tied to wte and, as save_pretrained does, not stored.
#pragma once
#include <string>

#include "app/interop/safetensors.hpp"
#include "model/param_layout.hpp"

namespace llmtrain {

/// Writes dir/model.safetensors (every parameter, `dtype` "F32" or "BF16", __metadata__ format "pt")
/// and dir/config.json (GPT2LMHeadModel: n_layer, n_head, n_embd, n_positions = seq_len, vocab_size,
/// gelu_new, layer_norm_epsilon 1e-5, no dropout, tied embeddings), creating dir. params: host fp32,
/// layout.total_numel(). Errors: InteropError naming the path on an I/O failure.
void write_hf_gpt2(const std::string& dir, const ParamLayout& layout, const float* params, const std::string& dtype);

/// Fills params (host fp32, layout.total_numel(); padding and padded wte rows 0) from a HuggingFace
/// GPT-2: `path` is its directory or its model.safetensors, with config.json beside it. Tensor names
/// may carry the "transformer." prefix or not (older hub files); the attention-mask buffers
/// (attn.bias, attn.masked_bias) are skipped, and an lm_head.weight must equal wte (tied). Errors:
/// InteropError naming the file and the key or tensor: a config.json value differing from the
/// layout's config (n_layer, n_head, n_embd, n_positions, vocab_size) or describing another model
/// (activation, layer_norm_epsilon, n_inner), a tensor missing, unknown, or of another shape than
/// expected (both shapes given).
void read_hf_gpt2(const std::string& path, const ParamLayout& layout, float* params);

}  // namespace llmtrain
