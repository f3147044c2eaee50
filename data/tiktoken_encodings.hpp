// data/tiktoken_encodings.hpp — the named encodings of the tiktoken family that llmtrain-prep knows
// (GPT-2's r50k_base, cl100k_base, o200k_base): split pattern, number of ranks, the SHA-256 of the
// official ranks file and the special tokens, as OpenAI's tiktoken (tiktoken_ext/openai_public.py)
// and the npm package js-tiktoken 1.0.21 (its ranks/*.js: pat_str, special_tokens) define them;
// and Llama 3's special tokens (Meta's llama3 tokenizer.py). docs/data.md "Tokenizers of the tiktoken family".
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tiktoken_bpe.hpp"

namespace llmtrain {

struct TiktokenEncoding {
    std::string name;        ///< "gpt2", "cl100k_base", "o200k_base" (the dataset's `tokenizer` kind)
    std::string js_pattern;  ///< js-tiktoken's pat_str (ECMAScript notation; see pcre2_pattern_from_js)
    int n_ranks = 0;         ///< ordinary tokens 0..n_ranks-1
    std::string sha256;      ///< tiktoken's expected_hash of the official .tiktoken ranks file
    std::vector<SpecialToken> specials;
    std::string eos;         ///< the special token that ends a document ("<|endoftext|>")
};

/// The named encoding, or nullptr: "gpt2" (r50k_base's ranks), "cl100k_base", "o200k_base".
const TiktokenEncoding* find_tiktoken_encoding(std::string_view name);

/// cl100k_base's pattern, which Llama 3's tokenizer also uses (tiktoken:PATH files get it).
const std::string& cl100k_pattern();

/// Llama 3's 256 special tokens with ids first_id.. (Meta's Llama 3 tokenizer.py, first_id =
/// 128000, its number of ranks): <|begin_of_text|>, <|end_of_text|>, <|reserved_special_token_0..3|>,
/// <|start_header_id|>, <|end_header_id|>, <|reserved_special_token_4|>, <|eot_id|>, then
/// <|reserved_special_token_5..250|>.
std::vector<SpecialToken> llama3_special_tokens(int32_t first_id);

}  // namespace llmtrain
