// tests/data/test_tiktoken.cpp — the tiktoken family's pieces on hand-made inputs whose result is
// known by construction: the ECMAScript-to-PCRE2 pattern rewrite, ranks of any count with special
// tokens (decode, vocab_size, errors), the "tiktoken" container round trip and its errors, the
// special-token choice for a user's file (HuggingFace JSON forms, errors), and a dataset of kind
// tiktoken with ids above 65,535 written, read back as uint32 and decoded through
// Tokenizer::from_dataset. Agreement with js-tiktoken is tested end to end in test_tiktoken_tokenizer.py.
#include <openssl/evp.h>

#include <fstream>

#include "data/tiktoken_bpe.hpp"
#include "data/tiktoken_encodings.hpp"
#include "data/tiktoken_file.hpp"
#include "data/tokenizer.hpp"
#include "data_test_util.hpp"

using namespace llmtrain;
using namespace llmtrain::test;

namespace {

std::string b64(const std::string& bytes) {
    std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
    int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
    out.resize(n);
    return out;
}

// The 256 bytes (rank = byte value), then `merges` (ranks 256..).
std::string small_ranks(const std::vector<std::string>& merges) {
    std::string s;
    for (int b = 0; b < 256; ++b) s += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
    for (size_t i = 0; i < merges.size(); ++i) s += b64(merges[i]) + " " + std::to_string(256 + i) + "\n";
    return s;
}

void write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

}  // namespace

TEST(Tiktoken, PatternRewriteWritesOutJavaScriptSpace) {
    const std::string in = pcre2_pattern_from_js(R"(\s+(?!\S)|[^\s\p{L}]|a\\s)");
    EXPECT_NE(in.find("|a\\\\s"), std::string::npos);  // an escaped backslash then "s" stays as it is
    EXPECT_NE(in.find("[\\t\\n"), std::string::npos);
    EXPECT_NE(in.find("(?![^\\t\\n"), std::string::npos);
    EXPECT_NE(in.find("[^\\t\\n\\x0b\\f\\r \\x{a0}"), std::string::npos);  // inside a class: its members
    EXPECT_NE(in.find("\\x{feff}\\p{L}]"), std::string::npos);
    expect_data_error([] { pcre2_pattern_from_js("[^\\S]"); }, {"\\S inside a character class"});
}

// With cl100k's pattern, merges "ab" (256), "abc" (257), specials at 260 and 300.
TEST(Tiktoken, RanksOfAnyCountWithSpecials) {
    TiktokenBpe bpe(small_ranks({"ab", "abc", "12", "123"}), "r", cl100k_pattern(), {{"<|a|>", 260}, {"<|b|>", 300}});
    EXPECT_EQ(bpe.n_ranks(), 260);
    EXPECT_EQ(bpe.vocab_size(), 301);
    EXPECT_EQ(bpe.special_id("<|b|>"), 300);
    EXPECT_EQ(bpe.special_id("<|c|>"), -1);
    std::vector<int32_t> ids;
    bpe.encode("abc 12345", ids);  // digits in groups of 3: "123" "45"; " " is its own piece before digits
    EXPECT_EQ(ids, (std::vector<int32_t>{257, ' ', 259, '4', '5'}));
    ids.clear();
    bpe.encode("<|a|>", ids);  // a special token's text is ordinary text
    for (int32_t id : ids) EXPECT_LT(id, 256);
    EXPECT_EQ(bpe.decode({256, 260, 'c', 300}), "ab<|a|>c<|b|>");
    expect_data_error([&] { bpe.decode({261}); }, {"cannot decode id 261", "vocab_size 301"});
    expect_data_error([&] { TiktokenBpe b(small_ranks({}), "r", cl100k_pattern(), {{"<|a|>", 255}}); },
                      {"'<|a|>' has id 255", "rank"});
    expect_data_error([&] { TiktokenBpe b(small_ranks({}), "r", cl100k_pattern(), {{"<|a|>", 256}, {"<|a|>", 257}}); },
                      {"given twice"});
    expect_data_error([&] { TiktokenBpe b(small_ranks({}), "r", cl100k_pattern(), {{"<|a|>", 256}, {"<|b|>", 256}}); },
                      {"another special's"});
    std::string gap = small_ranks({"ab"}) + b64("xy") + " 258\n" + b64("xyz") + " 260\n";
    expect_data_error([&] { TiktokenBpe b(gap, "gap.tiktoken", cl100k_pattern(), {}); },
                      {"gap.tiktoken", "rank 257 is missing"});
}

TEST(Tiktoken, ContainerRoundTripAndErrors) {
    TiktokenFileSpec spec;
    spec.specials = {{"<|end|>", 257}, {"<|begin|>", 256}};
    spec.eos = "<|end|>";
    spec.bos = "<|begin|>";
    spec.ranks = small_ranks({});
    const std::string bytes = tiktoken_container_bytes(spec);
    EXPECT_EQ(bytes.rfind("llmtrain-tiktoken 1\npattern cl100k_base\neos <|end|>\nbos <|begin|>\nspecial 256 <|begin|>\n"
                          "special 257 <|end|>\nranks\n",
                          0),
              0u);
    const TiktokenFileSpec back = parse_tiktoken_container(bytes, "f.h5:/tokenizer");
    EXPECT_EQ(back.ranks, spec.ranks);
    EXPECT_EQ(back.eos, "<|end|>");
    EXPECT_EQ(back.bos, "<|begin|>");
    ASSERT_EQ(back.specials.size(), 2u);
    EXPECT_EQ(back.specials[0].text, "<|begin|>");
    EXPECT_EQ(back.specials[0].id, 256);
    expect_data_error([] { parse_tiktoken_container("something else\n", "x"); }, {"x: line 1"});
    expect_data_error([] { parse_tiktoken_container("llmtrain-tiktoken 1\nfoo bar\nranks\n", "x"); },
                      {"line 2", "unknown key 'foo'"});
    expect_data_error([] { parse_tiktoken_container("llmtrain-tiktoken 1\neos <|e|>\n", "x"); }, {"before its 'ranks'"});
    expect_data_error([] { parse_tiktoken_container("llmtrain-tiktoken 1\neos <|e|>\nranks\n", "x"); },
                      {"eos '<|e|>' is not a special token"});
}

TEST(Tiktoken, SpecialTokensOfAUserFile) {
    TempDir dir;
    const std::string ranks = dir.file("tokenizer.model");
    write(ranks, small_ranks({"ab"}));
    // No flags, no JSON: Llama 3's 256 after the last rank (257 ranks here).
    TiktokenFileSpec s = tiktoken_file_spec(ranks, {});
    ASSERT_EQ(s.specials.size(), 256u);
    EXPECT_EQ(s.specials[0].id, 257);
    EXPECT_EQ(s.specials[9].text, "<|eot_id|>");
    EXPECT_EQ(s.specials[255].text, "<|reserved_special_token_250|>");
    EXPECT_EQ(s.eos, "<|end_of_text|>");
    EXPECT_EQ(s.bos, "<|begin_of_text|>");
    // --special and --eos by id, --bos none.
    s = tiktoken_file_spec(ranks, {{"<|x|>=300", "a=b=301"}, "", "301", "none"});
    ASSERT_EQ(s.specials.size(), 2u);
    EXPECT_EQ(s.specials[1].text, "a=b");  // split at the last '='
    EXPECT_EQ(s.eos, "a=b");
    EXPECT_EQ(s.bos, "");
    // tokenizer.json's added_tokens, with an AddedToken object as eos_token.
    write(dir.file("tok.json"), R"({"added_tokens": [{"id": 257, "content": "<|s|>"}, {"id": 258, "content": "<|e|>"}],
                                    "eos_token": {"content": "<|e|>"}})");
    s = tiktoken_file_spec(ranks, {{}, dir.file("tok.json"), "", ""});
    EXPECT_EQ(s.eos, "<|e|>");
    EXPECT_EQ(s.origin, dir.file("tok.json"));
    write(dir.file("bad.json"), "{not json");
    expect_data_error([&] { tiktoken_file_spec(ranks, {{}, dir.file("bad.json"), "", ""}); }, {"bad.json", "not JSON"});
    write(dir.file("empty.json"), "{}");
    expect_data_error([&] { tiktoken_file_spec(ranks, {{}, dir.file("empty.json"), "", ""}); },
                      {"empty.json", "added_tokens"});
    expect_data_error([&] { tiktoken_file_spec(ranks, {{"<|x|>=300"}, "", "", ""}); }, {"<|endoftext|>", "--eos"});
    expect_data_error([&] { tiktoken_file_spec(ranks, {{"<|x|>"}, "", "", ""}); }, {"--special '<|x|>'", "TEXT=ID"});
    expect_data_error([&] { tiktoken_file_spec(ranks, {{}, "", "", "<|nope|>"}); }, {"bos '<|nope|>'"});
    expect_data_error([&] { tiktoken_file_spec(dir.file("missing.model"), {}); }, {"missing.model", "cannot read"});
}

// A kind-tiktoken dataset with a special token at 70000: uint32 on disk, ids read back whole, the
// tokenizer rebuilt from /tokenizer decodes them.
TEST(Tiktoken, DatasetAbove65536RoundTrip) {
    TempDir dir;
    TiktokenFileSpec spec;
    spec.specials = {{"<|begin_of_text|>", 69999}, {"<|end_of_text|>", 70000}};
    spec.eos = "<|end_of_text|>";
    spec.bos = "<|begin_of_text|>";
    spec.ranks = small_ranks({"ab", "abc"});
    const Tokenizer tok = Tokenizer::tiktoken_from_spec(spec, "spec");
    EXPECT_EQ(tok.kind(), "tiktoken");
    EXPECT_EQ(tok.vocab_size(), 70001);
    EXPECT_EQ(tok.eos_id(), 70000);
    EXPECT_EQ(tok.bos_id(), 69999);
    std::vector<int32_t> ids = tok.encode("abc ab");
    EXPECT_EQ(ids, (std::vector<int32_t>{257, ' ', 256}));
    ids.insert(ids.begin(), tok.bos_id());
    ids.push_back(tok.eos_id());
    const std::string path = dir.file("t.h5");
    TokenDatasetWriter w(path, tok.vocab_size(), tok.eos_id(), tok.bos_id(), tok.model_bytes(), tok.kind());
    w.add_document(ids);
    w.add_document(ids);
    w.finish();
    TokenDataset ds(path);
    EXPECT_EQ(ds.info().tokenizer, "tiktoken");
    EXPECT_EQ(ds.info().token_bytes, 4);
    EXPECT_EQ(ds.info().tokenizer_sha256, sha256_hex(tok.model_bytes()));
    std::vector<int32_t> got(ids.size() * 2);
    ds.read_windows({0}, static_cast<int>(got.size()), got.data(), tok.vocab_size());
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + ids.size()), ids);
    const Tokenizer back = Tokenizer::from_dataset(ds);
    EXPECT_EQ(back.eos_id(), 70000);
    EXPECT_EQ(back.bos_id(), 69999);
    EXPECT_EQ(back.decode(got), "<|begin_of_text|>abc ab<|end_of_text|><|begin_of_text|>abc ab<|end_of_text|>");
    // The named encodings refuse ranks that are not the official file.
    write(dir.file("cl100k_base.tiktoken"), spec.ranks);
    expect_data_error([&] { Tokenizer::tiktoken_named("cl100k_base", dir.file("cl100k_base.tiktoken")); },
                      {"cl100k_base.tiktoken", "SHA-256", "not tiktoken's cl100k_base"});
    expect_data_error([&] { Tokenizer::tiktoken_named("p50k_base", dir.file("x")); }, {"unknown tiktoken encoding"});
}
