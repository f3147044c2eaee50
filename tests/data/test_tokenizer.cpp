// tests/data/test_tokenizer.cpp — long-line splitting (checked against its definition: pieces fit,
// cuts at whitespace or UTF-8 boundaries, nothing lost), SentencePiece BPE training through the
// C++ API (ids, byte fallback, EOS), encode/decode round trips and the tokenizer's errors.
// Agreement with Python's sentencepiece is checked end to end in test_prep.py.
#include <fstream>

#include "data/tokenizer.hpp"
#include "data/tokenizer_trainer.hpp"
#include "data_test_util.hpp"

using namespace llmtrain;
using namespace llmtrain::test;

namespace {

bool valid_utf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
        unsigned char c = s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += n;
    }
    return true;
}

// A small English-like corpus: 400 lines over a 60-word vocabulary.
std::vector<std::string> corpus_lines() {
    const char* words[] = {"the", "jury", "said", "election", "county", "city", "report", "court", "judge",
                           "vote", "grand", "primary", "mayor", "state", "law", "public", "office", "new",
                           "house", "bill", "tax", "school", "money", "year", "week", "member", "party",
                           "of", "and", "to", "in", "a", "was", "for", "that", "on", "by", "with", "it",
                           "as", "at", "he", "his", "is", "be", "had", "not", "are", "but", "from", "or",
                           "have", "an", "they", "which", "one", "you", "were", "her", "all"};
    std::vector<std::string> lines;
    uint64_t x = 12345;
    for (int l = 0; l < 400; ++l) {
        std::string line;
        for (int w = 0; w < 12; ++w) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            if (w) line += ' ';
            line += words[(x >> 33) % 60];
        }
        lines.push_back(line + ".");
    }
    return lines;
}

std::string train(int vocab, TokenizerTrainStats* stats, std::vector<std::string> lines = corpus_lines()) {
    size_t i = 0;
    TokenizerTrainOptions opt;
    opt.vocab_size = vocab;
    opt.num_threads = 2;
    return train_bpe_tokenizer(opt, [&](std::string& line) {
        if (i == lines.size()) return false;
        line = lines[i++];
        return true;
    }, stats);
}

}  // namespace

TEST(SplitLongLine, CutsAtWhitespaceAndKeepsAllText) {
    std::string line;
    for (int i = 0; line.size() < 20000; ++i) line += "word" + std::to_string(i * 7919 % 1000) + (i % 5 ? " " : "\t");
    auto pieces = split_long_line(line, 4192);
    ASSERT_GT(pieces.size(), 4u);
    std::string joined;
    for (size_t i = 0; i < pieces.size(); ++i) {
        EXPECT_LE(pieces[i].size(), 4192u);
        EXPECT_FALSE(pieces[i].empty());
        joined += pieces[i];
        if (i + 1 < pieces.size()) joined += line[joined.size()];  // the dropped space or tab
    }
    EXPECT_EQ(joined, line);
    EXPECT_EQ(split_long_line("short line", 4192), std::vector<std::string>{"short line"});
}

TEST(SplitLongLine, NoWhitespaceCutsAtUtf8Boundaries) {
    std::string line;
    while (line.size() < 10000) line += "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";  // a, é, €, 😀: 1-4 bytes
    for (size_t max : {4192u, 7u, 5u}) {
        auto pieces = split_long_line(line, max);
        std::string joined;
        for (auto& p : pieces) {
            EXPECT_LE(p.size(), max);
            EXPECT_TRUE(valid_utf8(p));
            joined += p;
        }
        EXPECT_EQ(joined, line) << max;
    }
}

TEST(TokenizerTrainer, TrainsBpeWithByteFallbackAndFixedIds) {
    TokenizerTrainStats stats;
    std::vector<std::string> lines = corpus_lines();
    lines.push_back("");
    lines.push_back("   ");
    std::string longline;
    while (longline.size() < 9000) longline += "the grand jury said ";
    lines.push_back(longline);
    Tokenizer tok = Tokenizer::from_bytes(train(400, &stats, lines), "test");
    EXPECT_EQ(stats.split_lines, 1u);
    EXPECT_EQ(stats.sentences, 400u + 3u);  // blank lines skipped; the long one becomes 3
    EXPECT_EQ(tok.vocab_size(), 400);
    EXPECT_EQ(tok.eos_id(), 2);
    EXPECT_EQ(tok.bos_id(), 1);
    // Text the corpus never saw (digits, accents, emoji) survives through byte pieces.
    const std::string text = "The jury said 1961: caf\xc3\xa9 \xf0\x9f\x98\x80 grand election.";
    auto ids = tok.encode(text);
    for (int32_t id : ids) {
        EXPECT_GE(id, 0);
        EXPECT_LT(id, 400);
        EXPECT_NE(id, 0) << "<unk> despite byte_fallback";
    }
    EXPECT_EQ(tok.decode(ids), text);
    // Learned merges: the corpus takes fewer tokens than bytes (~140 merges over 60 words).
    size_t n_bytes = 0, n_tokens = 0;
    for (const auto& l : corpus_lines()) {
        n_bytes += l.size();
        n_tokens += tok.encode(l).size();
    }
    EXPECT_LT(n_tokens * 2, n_bytes);
    // Same inputs, same model.
    EXPECT_EQ(train(320, nullptr), train(320, nullptr));
}

TEST(TokenizerTrainer, Errors) {
    expect_data_error([] { train(259, nullptr); }, {"vocab_size 259", "at least 260"});
    std::vector<std::string> blank{"", "  ", "\t"};
    expect_data_error([&] { train(300, nullptr, blank); }, {"no non-blank lines"});
    // SentencePiece's own refusal (more required pieces than vocab) comes back as a DataError.
    std::vector<std::string> wide;
    for (int c = 0x4E00; c < 0x4E00 + 400; ++c) {  // 400 distinct CJK characters
        std::string s = {char(0xE0 | (c >> 12)), char(0x80 | ((c >> 6) & 0x3F)), char(0x80 | (c & 0x3F))};
        wide.push_back(s + s + s);
    }
    expect_data_error([&] { train(270, nullptr, wide); }, {"tokenizer training"});
}

TEST(Tokenizer, LoadErrors) {
    TempDir dir;
    expect_data_error([&] { Tokenizer::from_file(dir.file("none.model")); }, {"none.model", "missing"});
    std::ofstream(dir.file("junk.model")) << "not a protobuf";
    expect_data_error([&] { Tokenizer::from_file(dir.file("junk.model")); },
                      {"junk.model", "not a SentencePiece model"});
    Tokenizer tok = Tokenizer::from_bytes(train(300, nullptr), "mem");
    expect_data_error([&] { tok.decode({5, 300}); }, {"id 300"});
    std::ofstream(dir.file("ok.model"), std::ios::binary) << tok.model_bytes();
    EXPECT_EQ(Tokenizer::from_file(dir.file("ok.model")).encode("the jury"), tok.encode("the jury"));
}
