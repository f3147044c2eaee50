// data/tokenizer.hpp — a SentencePiece tokenizer (Kudo & Richardson 2018) for prep and sampling.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmtrain {

class Tokenizer {
public:
    /// Loads a serialized SentencePiece model (the bytes of a .model file or of /tokenizer).
    /// Errors: DataError ("tokenizer: ..." with the source name) when the bytes don't parse.
    static Tokenizer from_bytes(const std::string& model_bytes, const std::string& source_name);
    /// Loads a .model file. Errors: DataError naming the path.
    static Tokenizer from_file(const std::string& path);
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    std::vector<int32_t> encode(const std::string& text) const;
    std::string decode(const std::vector<int32_t>& ids) const;
    int vocab_size() const;
    int eos_id() const;
    int bos_id() const;
    const std::string& model_bytes() const;

private:
    Tokenizer();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain
