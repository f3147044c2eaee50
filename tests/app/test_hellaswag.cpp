// tests/app/test_hellaswag.cpp — app/eval/hellaswag.hpp: the stored validation split, the file checks,
// rows and the scoring rule.
//
// References, independent of the code under test: the stored copy's first and last items as the
// upstream file holds them (klosax/hellaswag_text_data, hellaswag_val_full.txt: read by eye), its
// 10,042 items and a label count computed here from the decompressed text by a separate scan;
// hand-computed argmins for choose_ending; for score_hellaswag a fake forward whose loss at a
// position is a known function of the (input, target) pair there, summed here per ending from the
// rows themselves.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "app/eval/hellaswag.hpp"
#include "data/token_dataset.hpp"
#include "data/tokenizer.hpp"

using namespace llmtrain;

namespace {

std::string tmp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("llmtrain_hellaswag_" + name)).string();
}

std::string write_file(const std::string& name, const std::string& bytes) {
    const std::string p = tmp_path(name);
    std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
    return p;
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

/// Expects f() to throw HellaSwagError whose message holds every one of `parts`.
template <class F>
void expect_error(F f, const std::vector<std::string>& parts) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one mentioning " << parts[0];
    } catch (const HellaSwagError& e) {
        for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
}

const char* kItems =
    "Cooking: A man cracks an egg. he\n2\nsings.\nflies away.\nfries it in a pan.\nsleeps.\n"
    "Running: A woman ties her shoes. she\n0\nstarts to jog.\nswims.\neats a shoe.\nreads.\n";

}  // namespace

TEST(HellaSwag, TheStoredCopyHoldsTheValidationSplit) {
    const auto items = read_hellaswag(hellaswag_default_path(), kHellaSwagValSha256);
    ASSERT_EQ(items.size(), kHellaSwagValItems);
    EXPECT_EQ(items[0].context, "Roof shingle removal: A man is sitting on a roof. he");
    EXPECT_EQ(items[0].label, 3);
    EXPECT_EQ(items[0].endings[0], "is using wrap to wrap a pair of skis.");
    EXPECT_EQ(items[0].endings[3], "starts pulling up roofing on a roof.");
    EXPECT_EQ(items[1].line, 7u);
    EXPECT_EQ(items.back().line, 6 * (kHellaSwagValItems - 1) + 1);
    // Labels counted by an independent scan of every sixth line of the decompressed text.
    gzFile f = gzopen(hellaswag_default_path().c_str(), "rb");
    ASSERT_NE(f, nullptr);
    std::string text;
    char buf[65536];
    for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
    gzclose(f);
    EXPECT_EQ(sha256_hex(text), kHellaSwagValSha256);
    size_t line = 0, count[4] = {0, 0, 0, 0};
    for (size_t pos = 0; pos < text.size(); ++line) {
        const size_t end = text.find('\n', pos);
        if (line % 6 == 1) ++count[text[pos] - '0'];
        pos = end + 1;
    }
    size_t mine[4] = {0, 0, 0, 0};
    for (const auto& it : items) ++mine[it.label];
    for (int k = 0; k < 4; ++k) EXPECT_EQ(mine[k], count[k]) << "label " << k;
    EXPECT_EQ(read_hellaswag(hellaswag_default_path(), "", 5).size(), 5u);  // the first N
}

TEST(HellaSwag, DamagedTruncatedOrDifferentCopiesFailNamingTheFile) {
    const std::string gz = read_bytes(hellaswag_default_path());
    const std::string cut = write_file("cut.txt.gz", gz.substr(0, gz.size() / 2));
    expect_error([&] { read_hellaswag(cut, kHellaSwagValSha256); }, {cut, "truncated"});
    std::string flipped = gz;
    flipped[gz.size() / 2] ^= 0x55;  // inside the deflate stream: a bad block or a CRC mismatch
    const std::string bad = write_file("flipped.txt.gz", flipped);
    expect_error([&] { read_hellaswag(bad, kHellaSwagValSha256); }, {bad});
    const std::string other = write_file("other.txt", kItems);  // a well-formed file, not the split
    expect_error([&] { read_hellaswag(other, kHellaSwagValSha256); }, {other, "SHA-256", kHellaSwagValSha256,
                                                                       sha256_hex(kItems)});
    EXPECT_EQ(read_hellaswag(other, "").size(), 2u);  // no hash asked for: read
    expect_error([&] { read_hellaswag(tmp_path("missing.txt"), ""); }, {"missing.txt", "cannot open"});
}

TEST(HellaSwag, MalformedItemsAreNamed) {
    std::string t = kItems;
    t.replace(t.find("\n0\n"), 3, "\n7\n");
    const std::string p1 = write_file("label.txt", t);
    expect_error([&] { read_hellaswag(p1, ""); }, {"hellaswag item 1", "line 7", p1, "\"7\""});
    const std::string p2 = write_file("short.txt", std::string(kItems) + "Extra: a line\n");
    expect_error([&] { read_hellaswag(p2, ""); }, {p2, "13 lines", "item 2"});
    t = kItems;
    t.replace(t.find("eats a shoe."), 12, "");
    const std::string p3 = write_file("empty.txt", t);
    expect_error([&] { read_hellaswag(p3, ""); }, {"hellaswag item 1", "ending 2", "line 11"});
    const std::string p4 = write_file("crlf.txt", "A: b\r\n1\r\nc\r\nd\r\ne\r\nf\r\n");  // CRLF lines read as LF
    EXPECT_EQ(read_hellaswag(p4, "")[0].endings[3], "f");
}

TEST(HellaSwag, ChooseEndingSumsAndMeans) {
    // sums 4 3 5 6 over 1 1 2 3 tokens: lowest sum ending 1; means 4 3 2.5 2: lowest ending 3.
    HellaSwagChoice c = choose_ending({4, 3, 5, 6}, {1, 1, 2, 3}, 3);
    EXPECT_EQ(c.pred, 1);
    EXPECT_EQ(c.pred_norm, 3);
    c = choose_ending({2, 2, 2, 1.5}, {1, 1, 1, 1}, 0);
    EXPECT_EQ(c.pred, 3);
    c = choose_ending({1, 1, 1, 1}, {2, 1, 1, 2}, 0);  // ties go to the lower index
    EXPECT_EQ(c.pred, 0);
    EXPECT_EQ(c.pred_norm, 0);
    EXPECT_THROW(choose_ending({1, 1, 1, 1}, {1, 0, 1, 1}, 0), std::invalid_argument);
}

TEST(HellaSwag, RowsAreContextThenSpaceEndingAndNeverCut) {
    const Tokenizer tok = [] {
        TokenDataset ds(std::string(TINY_DATA_DIR) + "/train.h5");
        return Tokenizer::from_dataset(ds);
    }();
    const std::string p = write_file("rows.txt", kItems);
    const auto items = read_hellaswag(p, "");
    const HellaSwagRows r = encode_hellaswag(items[0], tok, 1000, 0, p);
    const auto ctx = tok.encode("Cooking: A man cracks an egg. he");
    EXPECT_EQ(r.ctx_len, int(ctx.size()));
    EXPECT_EQ(r.label, 2);
    for (size_t e = 0; e < 4; ++e) {
        auto want = ctx;
        const auto end = tok.encode(" " + items[0].endings[e]);
        want.insert(want.end(), end.begin(), end.end());
        EXPECT_EQ(r.tokens[e], want) << "ending " << e;
    }
    const int longest = int(std::max({r.tokens[0].size(), r.tokens[1].size(), r.tokens[2].size(), r.tokens[3].size()}));
    EXPECT_NO_THROW(encode_hellaswag(items[0], tok, longest, 0, p));
    expect_error([&] { encode_hellaswag(items[0], tok, longest - 1, 4, p); },
                 {"hellaswag item 4", "line 1", p, std::to_string(longest) + " tokens", "seq_len " + std::to_string(longest - 1)});
}

TEST(HellaSwag, ScoringSumsTheEndingPositionsAcrossMicroBatches) {
    // Three synthetic items; rows of different lengths; B = 3 rows per forward (items straddle
    // forwards). The fake loss at position p of a row is 0.01 * target + 0.001 * input + 0.1, so
    // each ending's sum is known from its tokens: sum over j in [ctx_len, len) of
    // 0.01 row[j] + 0.001 row[j-1] + 0.1.
    std::vector<HellaSwagRows> items(3);
    for (int i = 0; i < 3; ++i) {
        items[size_t(i)].ctx_len = 2 + i;
        items[size_t(i)].label = i;
        for (int e = 0; e < 4; ++e)
            for (int k = 0; k < items[size_t(i)].ctx_len + 1 + ((e * 7 + i * 3) % 4); ++k)
                items[size_t(i)].tokens[size_t(e)].push_back((k * 13 + e * 5 + i * 11) % 50);
    }
    const int B = 3, T = 8;
    int calls = 0;
    const auto fake = [&](const int32_t* in, const int32_t* tgt, float* losses) {
        ++calls;
        for (int k = 0; k < B * T; ++k) losses[k] = 0.01f * float(tgt[k]) + 0.001f * float(in[k]) + 0.1f;
        return true;
    };
    const auto ch = score_hellaswag(items, B, T, 6, fake);
    EXPECT_EQ(calls, 6);  // 12 rows need 4 forwards; the 2 asked for beyond them run on padding
    ASSERT_EQ(ch.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
        for (size_t e = 0; e < 4; ++e) {
            const auto& row = items[i].tokens[e];
            double want = 0;
            for (size_t j = size_t(items[i].ctx_len); j < row.size(); ++j)
                want += double(0.01f * float(row[j]) + 0.001f * float(row[j - 1]) + 0.1f);
            EXPECT_NEAR(ch[i].sum[e], want, 1e-9) << "item " << i << " ending " << e;
            EXPECT_EQ(ch[i].n_tokens[e], int(row.size()) - items[i].ctx_len);
        }
    EXPECT_EQ(hellaswag_forwards(3, 3), 4u);
    EXPECT_EQ(score_hellaswag(items, B, T, 0, [](const int32_t*, const int32_t*, float*) { return false; }).size(), 0u);
    const HellaSwagCounts c = count_hellaswag(ch);
    EXPECT_EQ(c.items, 3);
}
