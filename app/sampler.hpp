// app/sampler.hpp — text samples during training: top-k sampling with temperature
// (Fan et al. 2018, "Hierarchical Neural Story Generation"), from a fresh document.
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "model/gpt.hpp"

namespace llmtrain {

/// Draws one token id from logits (V fp32): keeps the k largest (k <= 0 or k >= V: all), softmax of
/// logit / temperature over them, one draw from rng. temperature <= 0 picks the argmax. Ties between
/// equal logits go to the lower id. The uniform draw is (rng() >> 11) * 2^-53, so the sequence
/// depends only on the rng state (saved in checkpoints), not on the standard library.
int sample_top_k(const std::vector<float>& logits, int k, float temperature, std::mt19937_64& rng);

/// The fp32 logits (V) at position pos of row 0 after a forward of inputs (B,T) host int32.
using LogitsAt = std::function<std::vector<float>(const int* inputs, int pos)>;

/// Generates n_tokens after the prompt {eos_id} (the start of a new document). The context is the
/// last T tokens; each step runs one forward of (B,T) rows (row 0 holds the context) through
/// logits_at and samples from it. Returns the generated ids (without the prompt), stopping early
/// after an EOS.
std::vector<int32_t> generate(const LogitsAt& logits_at, int B, int T, int eos_id, int n_tokens, int top_k,
                              float temperature, std::mt19937_64& rng);
/// generate() with the model's whole layer range (GPT::logits_at) on (B, GPT::window_length()) rows;
/// with context parallelism collective over the CP group.
std::vector<int32_t> generate(GPT& gpt, int eos_id, int n_tokens, int top_k, float temperature,
                              std::mt19937_64& rng);

}  // namespace llmtrain
