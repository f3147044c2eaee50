// data/tokenizer.cpp — Tokenizer over sentencepiece::SentencePieceProcessor or TiktokenBpe (see
// tokenizer.hpp). Neither adds BOS/EOS by itself: callers append eos_id() where a document ends.
#include "data/tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <fstream>
#include <sstream>

#include "data/gpt2_bpe.hpp"
#include "data/tiktoken_encodings.hpp"
#include "data/tiktoken_file.hpp"
#include "data/token_dataset.hpp"

namespace llmtrain {

struct Tokenizer::Impl {
    std::string kind;
    sentencepiece::SentencePieceProcessor sp;  // kind sentencepiece
    std::unique_ptr<TiktokenBpe> bpe;          // the tiktoken family
    int32_t eos = -1, bos = -1;                // the tiktoken family's
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

struct TokenizerAccess {
    // A named encoding over `ranks` (no hash check): its pattern, specials and eos.
    static void fill_named(Tokenizer& t, const TiktokenEncoding& e, const std::string& ranks, const std::string& source);
};

void TokenizerAccess::fill_named(Tokenizer& t, const TiktokenEncoding& e, const std::string& ranks,
                                 const std::string& source) {
    Tokenizer::Impl& m = *t.impl_;
    const std::string what = e.name == "gpt2" ? "GPT-2 (r50k_base/gpt2.tiktoken)" : e.name;
    m.bpe = std::make_unique<TiktokenBpe>(ranks, source, e.js_pattern, e.specials, e.n_ranks, what);
    m.kind = e.name;
    m.eos = m.bpe->special_id(e.eos);
    m.bytes = ranks;
    m.source = source;
}

Tokenizer Tokenizer::gpt2_from_file(const std::string& ranks_path) {
    Tokenizer t;
    TokenizerAccess::fill_named(t, *find_tiktoken_encoding(kGpt2),
               read_file(ranks_path, "GPT-2 ranks file; tools/fetch_gpt2.sh data/gpt2 fetches it"), ranks_path);
    return t;
}

Tokenizer Tokenizer::tiktoken_named(const std::string& name, const std::string& ranks_path) {
    if (name == kGpt2) return gpt2_from_file(ranks_path);
    const TiktokenEncoding* e = find_tiktoken_encoding(name);
    if (!e) throw DataError("tokenizer: unknown tiktoken encoding '" + name + "' (gpt2, cl100k_base, o200k_base)");
    const std::string ranks =
        read_file(ranks_path, (name + " ranks file; tools/fetch_tiktoken.sh data/tiktoken fetches it").c_str());
    const std::string sum = sha256_hex(ranks);
    if (sum != e->sha256)
        throw DataError("tokenizer: " + ranks_path + " has SHA-256 " + sum + ", not tiktoken's " + name + " (" +
                        e->sha256 + "); for other ranks use --tokenizer tiktoken:PATH");
    Tokenizer t;
    TokenizerAccess::fill_named(t, *e, ranks, ranks_path);
    return t;
}

Tokenizer Tokenizer::tiktoken_from_spec(const TiktokenFileSpec& spec, const std::string& source) {
    const TiktokenEncoding* e = find_tiktoken_encoding(spec.pattern);
    if (!e) throw DataError(source + ": unknown pattern '" + spec.pattern + "'");
    Tokenizer t;
    Impl& m = *t.impl_;
    m.bpe = std::make_unique<TiktokenBpe>(spec.ranks, source, e->js_pattern, spec.specials);
    m.kind = kTiktoken;
    m.eos = m.bpe->special_id(spec.eos);
    m.bos = spec.bos.empty() ? -1 : m.bpe->special_id(spec.bos);
    if (m.eos < 0) throw DataError(source + ": eos '" + spec.eos + "' is not a special token");
    if (!spec.bos.empty() && m.bos < 0) throw DataError(source + ": bos '" + spec.bos + "' is not a special token");
    m.bytes = tiktoken_container_bytes(spec);
    m.source = source;
    return t;
}

Tokenizer Tokenizer::from_dataset(TokenDataset& ds) {
    const DatasetInfo& info = ds.info();
    const std::string source = info.path + ":/tokenizer";
    if (info.tokenizer == kSentencePiece) return from_bytes(ds.tokenizer_bytes(), source);
    if (info.tokenizer == kTiktoken) return tiktoken_from_spec(parse_tiktoken_container(ds.tokenizer_bytes(), source), source);
    const TiktokenEncoding* e = find_tiktoken_encoding(info.tokenizer);
    if (!e) throw DataError(info.path + ": unknown tokenizer '" + info.tokenizer + "'");
    Tokenizer t;
    TokenizerAccess::fill_named(t, *e, ds.tokenizer_bytes(), source);
    return t;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
    if (impl_->bpe) {
        std::vector<int32_t> ids;
        impl_->bpe->encode(text, ids);
        return ids;
    }
    std::vector<int> ids;
    auto status = impl_->sp.Encode(text, &ids);
    if (!status.ok()) throw DataError("tokenizer: " + impl_->source + ": encode failed (" + status.ToString() + ")");
    return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    if (impl_->bpe) return impl_->bpe->decode(ids);
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

int Tokenizer::vocab_size() const { return impl_->bpe ? impl_->bpe->vocab_size() : impl_->sp.GetPieceSize(); }
int Tokenizer::eos_id() const { return impl_->bpe ? impl_->eos : impl_->sp.eos_id(); }
int Tokenizer::bos_id() const { return impl_->bpe ? impl_->bos : impl_->sp.bos_id(); }
const std::string& Tokenizer::kind() const { return impl_->kind; }
const std::string& Tokenizer::model_bytes() const { return impl_->bytes; }

std::vector<std::pair<std::string, int32_t>> Tokenizer::special_tokens() const {
    std::vector<std::pair<std::string, int32_t>> out;
    if (impl_->bpe)
        for (const SpecialToken& s : impl_->bpe->specials()) out.emplace_back(s.text, s.id);
    return out;
}

}  // namespace llmtrain
