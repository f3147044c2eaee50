// app/interop/llmc_model.hpp — llm.c's GPT-2 model file (gpt2_124M.bin, gpt2_124M_bf16.bin).
//
// Layout (docs/checkpoints.md "Weight formats"; llm.c train_gpt2.py write_model, train_gpt2.cu
// gpt2_build_from_checkpoint): a header of 256 little-endian int32 — [0] magic 20240326, [1] version
// (3: every tensor fp32; 5: every tensor bf16, LayerNorms included), [2] max_seq_len, [3] vocab_size,
// [4] n_layer, [5] n_head, [6] channels, [7] padded_vocab_size, the rest 0 — then the parameters back to
// back: wte (Vp, C) with rows V.. zero, wpe (maxT, C), then ln1w (L, C), ln1b, qkvw (L, 3C, C), qkvb
// (L, 3C), attprojw (L, C, C), attprojb (L, C), ln2w, ln2b, fcw (L, 4C, C), fcb (L, 4C), fcprojw
// (L, C, 4C), fcprojb (L, C), each stacked over the layers, then lnfw (C), lnfb (C). Weights are
// Linear-style (out, in), as ours.
#pragma once
#include <string>

#include "app/interop/safetensors.hpp"  // InteropError
#include "model/param_layout.hpp"

namespace llmtrain {

constexpr int kLlmcMagic = 20240326;
constexpr int kLlmcVersionF32 = 3;
constexpr int kLlmcVersionBF16 = 5;

/// Writes layout's parameters (params: host fp32, layout.total_numel()) to path as version 3 (fp32)
/// or, with bf16, version 5 (rounded to nearest even). padded_vocab_size is ours (vocab_size rounded
/// up to 128, as llm.c's) and the padded rows are written as zeros. Errors: InteropError naming the
/// path on an I/O failure.
void write_llmc_model(const std::string& path, const ParamLayout& layout, const float* params, bool bf16);

/// Whether path starts with llm.c's model magic (false when it cannot be read).
bool is_llmc_model(const std::string& path);

/// Fills params (host fp32, layout.total_numel(); padding and padded wte rows 0) from an llm.c model
/// file of version 3 or 5. Errors: InteropError naming the file and what differs: bad magic or
/// version, a header field differing from the layout's config (naming the config key), a
/// padded_vocab_size below vocab_size, or a file size other than the header's shapes need (truncated
/// or with trailing bytes; both sizes given).
void read_llmc_model(const std::string& path, const ParamLayout& layout, float* params);

}  // namespace llmtrain
