// tools/prep/tokenizer_choice.hpp — llmtrain-prep's --tokenizer: a SentencePiece .model, or one of
// the tiktoken family (gpt2, cl100k_base, o200k_base, tiktoken:PATH with its special tokens).
#pragma once
#include <string>

#include "data/tiktoken_file.hpp"
#include "data/tokenizer.hpp"

namespace llmtrain::prep {

struct TokenizerChoice {
    std::string tokenizer;     ///< --tokenizer as given ("" = train a SentencePiece model)
    std::string gpt2_ranks;    ///< --gpt2-ranks
    std::string tiktoken_dir;  ///< --tiktoken-dir: holds cl100k_base.tiktoken, o200k_base.tiktoken
    SpecialTokenOptions special;  ///< --special, --special-tokens, --eos, --bos (tiktoken:PATH only)
};

/// True for the tiktoken family: gpt2, cl100k_base, o200k_base, tiktoken:PATH.
bool is_tiktoken_family(const std::string& tokenizer);

/// The tokenizer that `c.tokenizer` names (not "" — that one is trained); `summary` gets a line
/// describing it for prep's report (source file, where the specials came from, eos and bos).
/// Errors: PrepError for --special/--special-tokens/--eos/--bos without tiktoken:PATH or an empty
/// PATH; DataError naming the file (missing, malformed, not the official ranks of a named encoding,
/// an eos that is no special token).
Tokenizer load_tokenizer(const TokenizerChoice& c, std::string& summary);

}  // namespace llmtrain::prep
