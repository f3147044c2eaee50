// data/tiktoken_bpe.hpp — byte-level BPE of the tiktoken family (GPT-2's r50k_base, cl100k_base,
// o200k_base, Llama 3's tokenizer.model), as OpenAI's tiktoken and the npm package js-tiktoken run
// it: the text is split into pieces by the encoding's regular expression (through PCRE2), each
// piece's UTF-8 bytes are looked up whole in the ranks and otherwise merged pair by pair, always
// the adjacent pair whose concatenation has the lowest rank (leftmost on ties), until no pair is a
// token. Special tokens get ids of their own; text is encoded like tiktoken's encode_ordinary (a
// special token's text in the input is ordinary text). docs/data.md "Tokenizers of the tiktoken family".
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llmtrain {

/// A special token: its text (e.g. "<|endoftext|>") and its id, outside the ranks.
struct SpecialToken {
    std::string text;
    int32_t id = -1;
};

/// The split pattern `js_pattern`, written in ECMAScript notation as js-tiktoken ships it (its
/// `pat_str`, run with the "u" flag), rewritten for PCRE2 with PCRE2_UTF | PCRE2_UCP: `\s` and
/// `\S` become ECMAScript's white space set written out (TAB VT FF SP NBSP U+1680 U+2000-U+200A
/// U+2028 U+2029 U+202F U+205F U+3000 U+FEFF LF CR), because PCRE2's \s differs at U+0085, U+180E
/// and U+FEFF. Everything else (\p{..}, classes, groups, lookahead) means the same in both.
/// Errors: DataError for `\S` inside a character class (no pattern of the family has one).
std::string pcre2_pattern_from_js(const std::string& js_pattern);

class TiktokenBpe {
public:
    /// Parses a tiktoken ranks file ("base64(token bytes) rank" per line; the ranks must be 0..N-1,
    /// each once, every single byte among the tokens) and compiles `js_pattern` (ECMAScript
    /// notation, see pcre2_pattern_from_js). `expected_ranks` > 0 also requires N == expected_ranks
    /// (`encoding` names what was expected in that error). `specials` must have distinct texts
    /// and ids >= N. Errors: DataError naming `source` and the line, or the pattern and PCRE2's
    /// message if it does not compile.
    TiktokenBpe(const std::string& ranks_bytes, const std::string& source, const std::string& js_pattern,
                std::vector<SpecialToken> specials, int expected_ranks = 0, const std::string& encoding = "");
    ~TiktokenBpe();
    TiktokenBpe(const TiktokenBpe&) = delete;
    TiktokenBpe& operator=(const TiktokenBpe&) = delete;

    /// Appends the ids of `text` (UTF-8) to `out`, like tiktoken's encode_ordinary: special tokens'
    /// texts are ordinary text, no special id is added. Thread-safe (const). Errors: DataError
    /// "invalid UTF-8 at byte offset N (<PCRE2's reason>)"; nothing is appended then.
    void encode(std::string_view text, std::vector<int32_t>& out) const;
    /// The bytes of `ids` concatenated (a special id gives its text). Errors: DataError for an id
    /// that is neither a rank nor a special token.
    std::string decode(const std::vector<int32_t>& ids) const;
    /// The number of ranks N (ordinary tokens 0..N-1).
    int n_ranks() const;
    /// max(N, largest special id + 1): the ids a model must have rows for.
    int vocab_size() const;
    /// The id of the special token with this text, or -1.
    int32_t special_id(std::string_view text) const;
    const std::vector<SpecialToken>& specials() const;
    /// The ranks file as given to the constructor.
    const std::string& ranks_bytes() const;
    /// The pattern as PCRE2 compiled it (after pcre2_pattern_from_js).
    const std::string& pcre2_pattern() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
