// app/interop/pretrained.hpp — model.init_from: a run's first weights from another tool's file.
#pragma once
#include <string>

#include "model/param_layout.hpp"

namespace llmtrain {

/// Fills params (host fp32, layout.total_numel(); padding 0) from `path`, recognised by its contents:
/// a file starting with llm.c's magic is an llm.c model file (read_llmc_model, GPT-2 only); a
/// directory, a safetensors file or a model.safetensors.index.json a HuggingFace model, read by the
/// layout's architecture (read_hf_gpt2: model.safetensors and config.json; read_hf_llama: also
/// sharded, and a Mixtral for a mixture-of-experts layout). Errors: InteropError naming the path: missing, neither format (giving its first int32
/// against llm.c's magic), config.json's model_type not the config's model.arch (both named), an
/// llm.c file for a Llama, or as those readers (shape, dtype or config mismatch, bad file).
void load_pretrained(const std::string& path, const ParamLayout& layout, float* params);

}  // namespace llmtrain
