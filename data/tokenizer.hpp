// data/tokenizer.hpp — the tokenizer a dataset was made with: either a SentencePiece model (Kudo &
// Richardson 2018; trained by llmtrain-prep) or GPT-2's byte-level BPE (gpt2_bpe.hpp), for prep and
// for decoding samples. The kind is stored in a dataset's `tokenizer` attribute (docs/data.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmtrain {

class TokenDataset;

class Tokenizer {
public:
    static constexpr const char* kSentencePiece = "sentencepiece";
    static constexpr const char* kGpt2 = "gpt2";

    /// Loads a serialized SentencePiece model (the bytes of a .model file or of /tokenizer).
    /// Errors: DataError ("tokenizer: ..." with the source name) when the bytes don't parse.
    static Tokenizer from_bytes(const std::string& model_bytes, const std::string& source_name);
    /// Loads a SentencePiece .model file. Errors: DataError naming the path.
    static Tokenizer from_file(const std::string& path);
    /// GPT-2's tokenizer from a tiktoken ranks file (tools/fetch_gpt2.sh writes data/gpt2/gpt2.tiktoken).
    /// Errors: DataError naming the path (missing, or not GPT-2's 50,256 ranks).
    static Tokenizer gpt2_from_file(const std::string& ranks_path);
    /// The tokenizer stored in a dataset: its `tokenizer` kind and /tokenizer bytes.
    /// Errors: DataError naming the file (unknown kind, bytes that don't parse).
    static Tokenizer from_dataset(TokenDataset& ds);
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    /// Ids of `text` without BOS/EOS. SentencePiece normalizes (NFKC, whitespace runs become one
    /// space); GPT-2 keeps every byte. Errors: DataError (GPT-2: invalid UTF-8, with its byte offset).
    std::vector<int32_t> encode(const std::string& text) const;
    /// Errors: DataError for an id outside [0, vocab_size).
    std::string decode(const std::vector<int32_t>& ids) const;
    int vocab_size() const;
    int eos_id() const;
    int bos_id() const;  ///< -1 when there is none (GPT-2)
    /// kSentencePiece or kGpt2: the dataset attribute `tokenizer`.
    const std::string& kind() const;
    /// What a dataset stores in /tokenizer: the .model bytes, or GPT-2's ranks file.
    const std::string& model_bytes() const;

private:
    Tokenizer();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
