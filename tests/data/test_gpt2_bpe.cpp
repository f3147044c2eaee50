// tests/data/test_gpt2_bpe.cpp — Gpt2Bpe on hand-made ranks where the BPE result is known in closed
// form (the lowest-rank pair first, leftmost on ties, whole-piece lookup), its ranks-file errors,
// decode, and the UTF-8 check. Agreement with GPT-2's real ranks and js-tiktoken is tested end to
// end in test_gpt2_tokenizer.py.
#include "data/gpt2_bpe.hpp"

#include <openssl/evp.h>

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

// Ranks: the 256 bytes (rank = byte value), then `merges` in order, then filler pairs of bytes
// and triples of bytes >= 0x80 (which ASCII text never forms) up to 50,256 ranks.
std::string make_ranks(const std::vector<std::string>& merges) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const auto& m : merges) tokens.push_back(m);
    for (int a = 0x80; a < 0x100 && tokens.size() < Gpt2Bpe::kNumRanks; ++a)
        for (int b = 0x80; b < 0x100 && tokens.size() < Gpt2Bpe::kNumRanks; ++b)
            tokens.push_back(std::string{static_cast<char>(a), static_cast<char>(b)});
    for (int c = 0x80; c < 0x84; ++c)
        for (int a = 0x80; a < 0x100 && tokens.size() < Gpt2Bpe::kNumRanks; ++a)
            for (int b = 0x80; b < 0x100 && tokens.size() < Gpt2Bpe::kNumRanks; ++b)
                tokens.push_back(std::string{static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
    std::string s;
    for (size_t r = 0; r < tokens.size(); ++r) s += b64(tokens[r]) + " " + std::to_string(r) + "\n";
    return s;
}

std::vector<int32_t> enc(const Gpt2Bpe& bpe, const std::string& text) {
    std::vector<int32_t> ids;
    bpe.encode(text, ids);
    return ids;
}

}  // namespace

// With merges "bc" (256) < "ab" (257) < "abc" (258) < "xx" (259) < " xx" (260): "abc" is a token
// itself; "abcd" is not, so pairs merge: bc (256) before ab (257) gives a|bc|d, then a+bc = "abc"
// (258) gives abc|d. "aab": only ab applies, a|ab. Ties: "xxx" merges the leftmost pair, xx|x.
TEST(Gpt2Bpe, MergesLowestRankFirstLeftmostOnTies) {
    Gpt2Bpe bpe(make_ranks({"bc", "ab", "abc", "xx", " xx"}), "test ranks");
    EXPECT_EQ(enc(bpe, "abc"), (std::vector<int32_t>{258}));
    EXPECT_EQ(enc(bpe, "abcd"), (std::vector<int32_t>{258, 'd'}));
    EXPECT_EQ(enc(bpe, "aab"), (std::vector<int32_t>{'a', 257}));
    EXPECT_EQ(enc(bpe, "xxx"), (std::vector<int32_t>{259, 'x'}));
    EXPECT_EQ(enc(bpe, "xxxx"), (std::vector<int32_t>{259, 259}));
    // " xxx" is one piece ( ?\p{L}+): " x"+"x" is not a token, "xx" is (259), then " "+"xx" (260).
    EXPECT_EQ(enc(bpe, " xxx"), (std::vector<int32_t>{260, 'x'}));
    // The split: contractions, letters, digits, other, spaces; each piece merged on its own.
    EXPECT_EQ(enc(bpe, "ab's 12"), (std::vector<int32_t>{257, '\'', 's', ' ', '1', '2'}));
    EXPECT_EQ(enc(bpe, ""), std::vector<int32_t>{});
    // A long piece goes through the heap: 10,001 x's = 5,000 "xx" then "x".
    std::vector<int32_t> want(5000, 259);
    want.push_back('x');
    EXPECT_EQ(enc(bpe, std::string(10001, 'x')), want);
}

TEST(Gpt2Bpe, DecodeAndEndOfText) {
    Gpt2Bpe bpe(make_ranks({"ab"}), "test ranks");
    EXPECT_EQ(bpe.decode({256, 'c', Gpt2Bpe::kEndOfText}), "abc<|endoftext|>");
    // "<|endoftext|>" in the text is ordinary text: no id 50256.
    for (int32_t id : enc(bpe, "<|endoftext|>")) EXPECT_NE(id, Gpt2Bpe::kEndOfText);
    EXPECT_EQ(bpe.decode(enc(bpe, "<|endoftext|> x\n\n  y")), "<|endoftext|> x\n\n  y");
    expect_data_error([&] { bpe.decode({Gpt2Bpe::kVocabSize}); }, {"cannot decode id 50257"});
    expect_data_error([&] { bpe.decode({-1}); }, {"cannot decode id -1"});
}

TEST(Gpt2Bpe, InvalidUtf8NamesTheOffset) {
    Gpt2Bpe bpe(make_ranks({}), "test ranks");
    std::vector<int32_t> ids{7};
    expect_data_error([&] { bpe.encode("hello \xff world", ids); }, {"invalid UTF-8 at byte offset 6"});
    EXPECT_EQ(ids, std::vector<int32_t>{7});  // nothing appended
    expect_data_error([&] { bpe.encode("ab\xe2\x82", ids); }, {"invalid UTF-8 at byte offset 2"});
}

TEST(Gpt2Bpe, RanksFileErrors) {
    const std::string good = make_ranks({});
    auto with_line = [&](int line, const std::string& text) {  // replaces 1-based line `line`
        size_t at = 0;
        for (int i = 1; i < line; ++i) at = good.find('\n', at) + 1;
        return good.substr(0, at) + text + good.substr(good.find('\n', at));
    };
    expect_data_error([&] { Gpt2Bpe b(with_line(3, "Ag=="), "r.tiktoken"); }, {"r.tiktoken: line 3", "expected"});
    expect_data_error([&] { Gpt2Bpe b(with_line(3, "Ag== x"), "r.tiktoken"); }, {"line 3", "rank 'x'"});
    expect_data_error([&] { Gpt2Bpe b(with_line(3, "Ag== 1"), "r.tiktoken"); }, {"line 3", "rank '1'"});  // repeated rank
    expect_data_error([&] { Gpt2Bpe b(with_line(3, "AQ== 2"), "r.tiktoken"); }, {"line 3", "repeated"});  // byte 1 again
    expect_data_error([&] { Gpt2Bpe b(with_line(3, "A*== 2"), "r.tiktoken"); }, {"line 3", "not base64"});
    expect_data_error([&] { Gpt2Bpe b(good.substr(0, good.rfind('\n', good.size() - 2) + 1), "r.tiktoken"); },
                      {"r.tiktoken", "holds 50255 ranks", "50256"});
    // Byte 0x41 replaced by a two-byte token: 50,256 ranks but not every byte.
    expect_data_error([&] { Gpt2Bpe b(with_line(0x42, b64("zz") + " 65"), "r.tiktoken"); }, {"byte 65 has no rank"});
}
