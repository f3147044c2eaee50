// data/tokenizer.cpp — Tokenizer over sentencepiece::SentencePieceProcessor (see tokenizer.hpp).
// SentencePiece normalizes input (NFKC, whitespace runs and newlines become one space) and adds
// no BOS/EOS by itself: callers append eos_id() where a document ends.
#include "data/tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <fstream>
#include <sstream>

#include "data/token_dataset.hpp"

namespace llmtrain {

struct Tokenizer::Impl {
    sentencepiece::SentencePieceProcessor sp;
    std::string bytes;
    std::string source;
};

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::from_bytes(const std::string& model_bytes, const std::string& source_name) {
    Tokenizer t;
    auto status = t.impl_->sp.LoadFromSerializedProto(model_bytes);
    if (!status.ok())
        throw DataError("tokenizer: " + source_name + " is not a SentencePiece model (" + status.ToString() + ")");
    t.impl_->bytes = model_bytes;
    t.impl_->source = source_name;
    return t;
}

Tokenizer Tokenizer::from_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw DataError("tokenizer: cannot read " + path + " (missing or unreadable .model file)");
    std::ostringstream ss;
    ss << in.rdbuf();
    return from_bytes(ss.str(), path);
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
    std::vector<int> ids;
    auto status = impl_->sp.Encode(text, &ids);
    if (!status.ok()) throw DataError("tokenizer: " + impl_->source + ": encode failed (" + status.ToString() + ")");
    return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    const int n = vocab_size();
    for (int32_t id : ids)
        if (id < 0 || id >= n)
            throw DataError("tokenizer: " + impl_->source + ": cannot decode id " + std::to_string(id) +
                            ", outside [0, vocab_size " + std::to_string(n) + ")");
    std::string text;
    auto status = impl_->sp.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!status.ok()) throw DataError("tokenizer: " + impl_->source + ": decode failed (" + status.ToString() + ")");
    return text;
}

int Tokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
int Tokenizer::eos_id() const { return impl_->sp.eos_id(); }
int Tokenizer::bos_id() const { return impl_->sp.bos_id(); }
const std::string& Tokenizer::model_bytes() const { return impl_->bytes; }

}  // namespace llmtrain
