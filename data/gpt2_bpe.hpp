// data/gpt2_bpe.hpp — GPT-2's byte-level BPE tokenizer (Radford et al. 2019, "Language Models are
// Unsupervised Multitask Learners" §2.2), as OpenAI's tiktoken and the npm package js-tiktoken run it:
// the text is split into pieces by GPT-2's regular expression (through PCRE2), each piece's UTF-8
// bytes are looked up whole in the ranks and otherwise merged pair by pair, always the adjacent pair
// whose concatenation has the lowest rank (leftmost on ties), until no pair is a token.
// The ranks are tiktoken's r50k_base/"gpt2" file (tools/fetch_gpt2.sh); docs/data.md "GPT-2's tokenizer".
// A TiktokenBpe (tiktoken_bpe.hpp) with GPT-2's pattern, 50,256 ranks and <|endoftext|> = 50256.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tiktoken_bpe.hpp"

namespace llmtrain {

class Gpt2Bpe {
public:
    static constexpr int kNumRanks = 50256;   ///< ordinary tokens 0..50255
    static constexpr int kEndOfText = 50256;  ///< <|endoftext|>, the one special token
    static constexpr int kVocabSize = 50257;

    /// Parses a tiktoken ranks file ("base64(token bytes) rank" per line, ranks 0..50255 each once,
    /// every single byte among them) and compiles the split pattern. Errors: DataError naming
    /// `source` and the line, or PCRE2's message if the pattern does not compile.
    Gpt2Bpe(const std::string& ranks_bytes, const std::string& source);
    ~Gpt2Bpe();
    Gpt2Bpe(const Gpt2Bpe&) = delete;
    Gpt2Bpe& operator=(const Gpt2Bpe&) = delete;

    /// Appends the ids of `text` (UTF-8) to `out`, like tiktoken's encode_ordinary: the string
    /// "<|endoftext|>" in the text is ordinary text, no special id is added. Thread-safe (const).
    /// Errors: DataError "invalid UTF-8 at byte offset N (<PCRE2's reason>)" when `text` is not
    /// valid UTF-8; nothing is appended then.
    void encode(std::string_view text, std::vector<int32_t>& out) const;
    /// The bytes of `ids` concatenated (kEndOfText gives "<|endoftext|>"). Errors: DataError for an
    /// id outside [0, kVocabSize).
    std::string decode(const std::vector<int32_t>& ids) const;
    /// The ranks file as given to the constructor (stored in a dataset's /tokenizer).
    const std::string& ranks_bytes() const;
    /// The underlying tiktoken-family encoder.
    const TiktokenBpe& core() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
