// tools/prep/tokenizer_choice.cpp — --tokenizer's choices (see tokenizer_choice.hpp).
#include "tools/prep/tokenizer_choice.hpp"

#include "data/tiktoken_encodings.hpp"
#include "tools/prep/corpus.hpp"

namespace llmtrain::prep {

namespace {
constexpr const char* kFilePrefix = "tiktoken:";

bool has_file_prefix(const std::string& t) { return t.rfind(kFilePrefix, 0) == 0; }

std::string special_name(const Tokenizer& tok, int id) {
    if (id < 0) return "none";
    for (const auto& [text, sid] : tok.special_tokens())
        if (sid == id) return text + " = " + std::to_string(id);
    return std::to_string(id);
}
}  // namespace

bool is_tiktoken_family(const std::string& t) {
    return t == Tokenizer::kGpt2 || t == Tokenizer::kCl100k || t == Tokenizer::kO200k || has_file_prefix(t);
}

Tokenizer load_tokenizer(const TokenizerChoice& c, std::string& summary) {
    const SpecialTokenOptions& sp = c.special;
    const bool file = has_file_prefix(c.tokenizer);
    if (!file && (!sp.specials.empty() || !sp.file.empty() || !sp.eos.empty() || !sp.bos.empty()))
        throw PrepError("--special, --special-tokens, --eos and --bos apply to --tokenizer tiktoken:PATH only (got --tokenizer '" +
                        c.tokenizer + "')");
    if (file) {
        const std::string path = c.tokenizer.substr(std::string(kFilePrefix).size());
        if (path.empty()) throw PrepError("--tokenizer tiktoken:PATH needs a PATH (a tiktoken ranks file)");
        const TiktokenFileSpec spec = tiktoken_file_spec(path, sp);
        Tokenizer tok = Tokenizer::tiktoken_from_spec(spec, path);
        summary = "tiktoken ranks file " + path + " (cl100k_base's split pattern), " +
                  std::to_string(spec.specials.size()) + " special tokens (from " + spec.origin + "), vocab_size " +
                  std::to_string(tok.vocab_size()) + ", eos " + special_name(tok, tok.eos_id()) + ", bos " +
                  special_name(tok, tok.bos_id()) + " (not added to documents)";
        return tok;
    }
    if (c.tokenizer == Tokenizer::kGpt2) {
        Tokenizer tok = Tokenizer::gpt2_from_file(c.gpt2_ranks);
        summary = "GPT-2 byte-level BPE from " + c.gpt2_ranks + ", vocab_size " + std::to_string(tok.vocab_size()) +
                  ", end-of-text " + std::to_string(tok.eos_id());
        return tok;
    }
    if (c.tokenizer == Tokenizer::kCl100k || c.tokenizer == Tokenizer::kO200k) {
        const std::string path = c.tiktoken_dir + "/" + c.tokenizer + ".tiktoken";
        Tokenizer tok = Tokenizer::tiktoken_named(c.tokenizer, path);
        summary = c.tokenizer + " from " + path + ", vocab_size " + std::to_string(tok.vocab_size()) + ", eos " +
                  special_name(tok, tok.eos_id());
        return tok;
    }
    Tokenizer tok = Tokenizer::from_file(c.tokenizer);
    summary = "loaded " + c.tokenizer + ", vocab_size " + std::to_string(tok.vocab_size());
    return tok;
}

}  // namespace llmtrain::prep
