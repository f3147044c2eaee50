// app/interop/gpt2_names.hpp — the order of one transformer layer's tensors in the other tools' files:
// GPT-2's module order (ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj; weight before
// bias), which HuggingFace's state dict follows and llm.c's model file stacks over the layers (ln1w,
// ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw, fcprojb; llm.c train_gpt2.py
// write_tensors). Our own flat layout orders them otherwise (model/param_layout.cpp); names are shared.
#pragma once

namespace llmtrain {

/// Suffixes after "h.<l>." of every tensor of layer l, in GPT-2's module order.
inline constexpr const char* kLayerTensorOrder[12] = {
    "ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",      "ln_2.bias",
    "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};

}  // namespace llmtrain
