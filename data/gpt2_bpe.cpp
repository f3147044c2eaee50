// data/gpt2_bpe.cpp — GPT-2's byte-level BPE (see gpt2_bpe.hpp): the tiktoken-family encoder
// (tiktoken_bpe.cpp) with the "gpt2" encoding's facts (tiktoken_encodings.cpp): GPT-2's pattern
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (\s as ECMAScript's white space), exactly 50,256 ranks, <|endoftext|> = 50256.
#include "data/gpt2_bpe.hpp"

#include "data/tiktoken_encodings.hpp"

namespace llmtrain {

struct Gpt2Bpe::Impl {
    std::unique_ptr<TiktokenBpe> bpe;
};

Gpt2Bpe::Gpt2Bpe(const std::string& ranks_bytes, const std::string& source) : impl_(std::make_unique<Impl>()) {
    const TiktokenEncoding& e = *find_tiktoken_encoding("gpt2");
    impl_->bpe = std::make_unique<TiktokenBpe>(ranks_bytes, source, e.js_pattern, e.specials, kNumRanks,
                                               "GPT-2 (r50k_base/gpt2.tiktoken)");
}

Gpt2Bpe::~Gpt2Bpe() = default;

void Gpt2Bpe::encode(std::string_view text, std::vector<int32_t>& out) const { impl_->bpe->encode(text, out); }

std::string Gpt2Bpe::decode(const std::vector<int32_t>& ids) const { return impl_->bpe->decode(ids); }

const std::string& Gpt2Bpe::ranks_bytes() const { return impl_->bpe->ranks_bytes(); }

const TiktokenBpe& Gpt2Bpe::core() const { return *impl_->bpe; }

}  // namespace llmtrain
