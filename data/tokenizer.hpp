// data/tokenizer.hpp — the tokenizer a dataset was made with: either a SentencePiece model (Kudo &
// Richardson 2018; trained by llmtrain-prep) or a byte-level BPE of the tiktoken family
// (tiktoken_bpe.hpp: GPT-2's, cl100k_base, o200k_base, or a user's tiktoken ranks file such as
// Llama 3's), for prep and for decoding samples. The kind is stored in a dataset's `tokenizer`
// attribute (docs/data.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <utility>

namespace llmtrain {

class TokenDataset;
struct TiktokenFileSpec;

class Tokenizer {
public:
    static constexpr const char* kSentencePiece = "sentencepiece";
    static constexpr const char* kGpt2 = "gpt2";
    static constexpr const char* kCl100k = "cl100k_base";
    static constexpr const char* kO200k = "o200k_base";
    static constexpr const char* kTiktoken = "tiktoken";  ///< a user's ranks file (tiktoken_file.hpp)

    /// Loads a serialized SentencePiece model (the bytes of a .model file or of /tokenizer).
    /// Errors: DataError ("tokenizer: ..." with the source name) when the bytes don't parse.
    static Tokenizer from_bytes(const std::string& model_bytes, const std::string& source_name);
    /// Loads a SentencePiece .model file. Errors: DataError naming the path.
    static Tokenizer from_file(const std::string& path);
    /// GPT-2's tokenizer from a tiktoken ranks file (tools/fetch_gpt2.sh writes data/gpt2/gpt2.tiktoken).
    /// Errors: DataError naming the path (missing, or not GPT-2's 50,256 ranks).
    static Tokenizer gpt2_from_file(const std::string& ranks_path);
    /// A named encoding of the tiktoken family from its ranks file: "gpt2" (as gpt2_from_file),
    /// "cl100k_base" or "o200k_base" (tools/fetch_tiktoken.sh writes data/tiktoken/<name>.tiktoken),
    /// which must be the official file: its SHA-256 is checked against tiktoken's published hash.
    /// eos is <|endoftext|>, no bos. Errors: DataError naming the path (missing, malformed, another
    /// file) or the unknown name.
    static Tokenizer tiktoken_named(const std::string& name, const std::string& ranks_path);
    /// A user's ranks file with its special tokens, eos and bos (tiktoken_file_spec() chooses
    /// them); the kind is "tiktoken" and the dataset stores tiktoken_container_bytes(spec).
    /// Errors: DataError naming `source` (malformed ranks, a special id that is a rank).
    static Tokenizer tiktoken_from_spec(const TiktokenFileSpec& spec, const std::string& source);
    /// The tokenizer stored in a dataset: its `tokenizer` kind and /tokenizer bytes.
    /// Errors: DataError naming the file (unknown kind, bytes that don't parse).
    static Tokenizer from_dataset(TokenDataset& ds);
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    /// Ids of `text` without BOS/EOS. SentencePiece normalizes (NFKC, whitespace runs become one
    /// space); the tiktoken family keeps every byte and encodes special tokens' texts as ordinary
    /// text. Errors: DataError (tiktoken family: invalid UTF-8, with its byte offset).
    std::vector<int32_t> encode(const std::string& text) const;
    /// Errors: DataError for an id outside [0, vocab_size).
    std::string decode(const std::vector<int32_t>& ids) const;
    int vocab_size() const;
    int eos_id() const;
    int bos_id() const;  ///< -1 when there is none (GPT-2, cl100k_base, o200k_base)
    /// One of the k* kinds: the dataset attribute `tokenizer`.
    const std::string& kind() const;
    /// What a dataset stores in /tokenizer: the .model bytes, a named encoding's ranks file, or
    /// (kind tiktoken) the container of tiktoken_file.hpp.
    const std::string& model_bytes() const;
    /// The special tokens of a tiktoken-family tokenizer (empty for SentencePiece).
    std::vector<std::pair<std::string, int32_t>> special_tokens() const;

private:
    Tokenizer();
    friend struct TokenizerAccess;  // tokenizer.cpp's helpers
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
