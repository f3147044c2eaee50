// data/tiktoken_encodings.cpp — the named encodings' facts (see tiktoken_encodings.hpp). The
// patterns are js-tiktoken 1.0.21's pat_str strings verbatim (its JavaScript cannot write
// tiktoken's (?i:'s|'t|...) so it lists the contractions' case variants); the test
// data_tiktoken_tokenizer checks them against the package's own strings.
#include "data/tiktoken_encodings.hpp"

namespace llmtrain {

namespace {

const char* const kContractions = "'s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D";

std::vector<TiktokenEncoding> make_encodings() {
    const std::string c = kContractions;
    std::vector<TiktokenEncoding> e;
    e.push_back({"gpt2", R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)re", 50256,
                 "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930", {{"<|endoftext|>", 50256}},
                 "<|endoftext|>"});
    e.push_back({"cl100k_base",
                 "(" + c + R"re()|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
                 100256,
                 "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
                 {{"<|endoftext|>", 100257},
                  {"<|fim_prefix|>", 100258},
                  {"<|fim_middle|>", 100259},
                  {"<|fim_suffix|>", 100260},
                  {"<|endofprompt|>", 100276}},
                 "<|endoftext|>"});
    const std::string upper = R"re([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])re", lower = R"re([\p{Ll}\p{Lm}\p{Lo}\p{M}])re";
    const std::string lead = R"re([^\r\n\p{L}\p{N}]?)re";
    e.push_back({"o200k_base",
                 lead + upper + "*" + lower + "+(" + c + ")?|" + lead + upper + "+" + lower + "*(" + c + ")?|" +
                     R"re(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
                 199998,
                 "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
                 {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}},
                 "<|endoftext|>"});
    return e;
}

}  // namespace

const TiktokenEncoding* find_tiktoken_encoding(std::string_view name) {
    static const std::vector<TiktokenEncoding> encodings = make_encodings();
    for (const TiktokenEncoding& e : encodings)
        if (e.name == name) return &e;
    return nullptr;
}

const std::string& cl100k_pattern() { return find_tiktoken_encoding("cl100k_base")->js_pattern; }

std::vector<SpecialToken> llama3_special_tokens(int32_t first_id) {
    std::vector<std::string> names = {"<|begin_of_text|>",
                                      "<|end_of_text|>",
                                      "<|reserved_special_token_0|>",
                                      "<|reserved_special_token_1|>",
                                      "<|reserved_special_token_2|>",
                                      "<|reserved_special_token_3|>",
                                      "<|start_header_id|>",
                                      "<|end_header_id|>",
                                      "<|reserved_special_token_4|>",
                                      "<|eot_id|>"};
    for (int i = 5; i < 251; ++i) names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
    std::vector<SpecialToken> out;
    for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], first_id + static_cast<int32_t>(i)});
    return out;
}

}  // namespace llmtrain
