// data/tokenizer.cpp — Tokenizer over sentencepiece::SentencePieceProcessor or Gpt2Bpe (see
// tokenizer.hpp). Neither adds BOS/EOS by itself: callers append eos_id() where a document ends.
#include "data/tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <fstream>
#include <sstream>

#include "data/gpt2_bpe.hpp"
#include "data/token_dataset.hpp"

namespace llmtrain {

struct Tokenizer::Impl {
    std::string kind;
    sentencepiece::SentencePieceProcessor sp;  // kind sentencepiece
    std::unique_ptr<Gpt2Bpe> gpt2;             // kind gpt2
    std::string bytes;
    std::string source;
};

namespace {

std::string read_file(const std::string& path, const char* what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw DataError("tokenizer: cannot read " + path + " (missing or unreadable " + what + ")");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::from_bytes(const std::string& model_bytes, const std::string& source_name) {
    Tokenizer t;
    auto status = t.impl_->sp.LoadFromSerializedProto(model_bytes);
    if (!status.ok())
        throw DataError("tokenizer: " + source_name + " is not a SentencePiece model (" + status.ToString() + ")");
    t.impl_->kind = kSentencePiece;
    t.impl_->bytes = model_bytes;
    t.impl_->source = source_name;
    return t;
}

Tokenizer Tokenizer::from_file(const std::string& path) { return from_bytes(read_file(path, ".model file"), path); }

Tokenizer Tokenizer::gpt2_from_file(const std::string& ranks_path) {
    Tokenizer t;
    t.impl_->gpt2 = std::make_unique<Gpt2Bpe>(
        read_file(ranks_path, "GPT-2 ranks file; tools/fetch_gpt2.sh data/gpt2 fetches it"), ranks_path);
    t.impl_->kind = kGpt2;
    t.impl_->bytes = t.impl_->gpt2->ranks_bytes();
    t.impl_->source = ranks_path;
    return t;
}

Tokenizer Tokenizer::from_dataset(TokenDataset& ds) {
    const DatasetInfo& info = ds.info();
    const std::string source = info.path + ":/tokenizer";
    if (info.tokenizer == kSentencePiece) return from_bytes(ds.tokenizer_bytes(), source);
    if (info.tokenizer != kGpt2) throw DataError(info.path + ": unknown tokenizer '" + info.tokenizer + "'");
    Tokenizer t;
    t.impl_->gpt2 = std::make_unique<Gpt2Bpe>(ds.tokenizer_bytes(), source);
    t.impl_->kind = kGpt2;
    t.impl_->bytes = t.impl_->gpt2->ranks_bytes();
    t.impl_->source = source;
    return t;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
    if (impl_->gpt2) {
        std::vector<int32_t> ids;
        impl_->gpt2->encode(text, ids);
        return ids;
    }
    std::vector<int> ids;
    auto status = impl_->sp.Encode(text, &ids);
    if (!status.ok()) throw DataError("tokenizer: " + impl_->source + ": encode failed (" + status.ToString() + ")");
    return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    if (impl_->gpt2) return impl_->gpt2->decode(ids);
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

int Tokenizer::vocab_size() const { return impl_->gpt2 ? Gpt2Bpe::kVocabSize : impl_->sp.GetPieceSize(); }
int Tokenizer::eos_id() const { return impl_->gpt2 ? Gpt2Bpe::kEndOfText : impl_->sp.eos_id(); }
int Tokenizer::bos_id() const { return impl_->gpt2 ? -1 : impl_->sp.bos_id(); }
const std::string& Tokenizer::kind() const { return impl_->kind; }
const std::string& Tokenizer::model_bytes() const { return impl_->bytes; }

}  // namespace llmtrain
