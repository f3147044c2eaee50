// data/tiktoken_file.hpp — a user's tiktoken-format ranks file (e.g. Llama 3's tokenizer.model) as
// a tokenizer: its special tokens (given, read from a HuggingFace JSON file beside it, or Llama 3's
// default set after the last rank), which of them ends a document (eos) and starts one (bos), and
// the "tiktoken" container that a dataset stores in /tokenizer so that it is self-contained.
// docs/data.md "Tokenizers of the tiktoken family".
#pragma once
#include <string>
#include <vector>

#include "data/tiktoken_bpe.hpp"

namespace llmtrain {

/// Everything that identifies a tokenizer of kind "tiktoken".
struct TiktokenFileSpec {
    std::string pattern = "cl100k_base";  ///< the named encoding whose split pattern applies
    std::vector<SpecialToken> specials;
    std::string eos;                      ///< text of the special token appended after each document
    std::string bos;                      ///< text of the begin-of-text special token, "" if none
    std::string ranks;                    ///< the ranks file's bytes (tiktoken format)
    std::string origin;                   ///< where the specials came from (for the prep summary; not stored)
};

/// The container stored in a "tiktoken" dataset's /tokenizer, text lines then the ranks verbatim:
///   llmtrain-tiktoken 1
///   pattern cl100k_base
///   eos <|end_of_text|>
///   bos <|begin_of_text|>          (absent when there is none)
///   special 128000 <|begin_of_text|>   (one line per special token, in id order)
///   ranks
///   <the ranks file>
std::string tiktoken_container_bytes(const TiktokenFileSpec& spec);

/// Parses tiktoken_container_bytes' output. Errors: DataError naming `source` and the line.
TiktokenFileSpec parse_tiktoken_container(const std::string& bytes, const std::string& source);

/// How the special tokens of a user's ranks file are chosen (llmtrain-prep's flags).
struct SpecialTokenOptions {
    std::vector<std::string> specials;  ///< "TEXT=ID" each (--special); when given, exactly these
    std::string file;                   ///< --special-tokens: a HuggingFace tokenizer_config.json or tokenizer.json
    std::string eos;                    ///< --eos: a special token's text or id; "" = the default
    std::string bos;                    ///< --bos: text or id, "none", or "" = the default
};

/// Reads `ranks_path` and chooses its special tokens, first match wins: opt.specials; opt.file;
/// tokenizer_config.json beside the ranks file (or in its parent directory when the file sits in
/// HuggingFace's original/ folder): its added_tokens_decoder, eos_token and bos_token; otherwise
/// Llama 3's 256 special tokens numbered from the number of ranks (llama3_special_tokens). eos is
/// opt.eos, else the JSON's eos_token, else <|end_of_text|>, else <|endoftext|>; bos is opt.bos,
/// else the JSON's bos_token, else <|begin_of_text|> if present, else none. The pattern is
/// cl100k_base's (Llama 3's). Errors: DataError naming the file or flag: unreadable, malformed
/// JSON or TEXT=ID, an eos/bos that is not a special token, no eos found.
TiktokenFileSpec tiktoken_file_spec(const std::string& ranks_path, const SpecialTokenOptions& opt);

}  // namespace llmtrain
