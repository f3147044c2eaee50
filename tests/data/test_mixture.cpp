// tests/data/test_mixture.cpp — mixtures of sources and sharded sources (data/mixture.hpp,
// data/sharded_dataset.hpp, DataLoader with LoaderOptions::sources). Every source file holds the
// tokens base_k + p at position p (vocab larger than them), so every window read reveals its source
// and its window. Checked: one path gives the windows the loader gave before mixtures existed
// (a golden list), the draw against Megatron-LM's rule computed in doubles and its proportions
// against the weights (binomial bound), each source's samples against its own closed-form stream,
// exact resume of a mixture mid-stream into another layout against an unbroken stream, a new
// weight set at resume, a glob of shards against the concatenated file, and the errors.
#include <cmath>
#include <set>

#include "data/loader.hpp"
#include "data/mixture.hpp"
#include "data/sharded_dataset.hpp"
#include "data/window_order.hpp"
#include "data_test_util.hpp"

using namespace llmtrain;
using namespace llmtrain::test;

namespace {

constexpr int kVocab = 70000;

// Tokens [lo, hi) of the sequence base + p, in documents of 100, written to dir/name.
std::string ramp_file(const TempDir& dir, const std::string& name, uint64_t lo, uint64_t hi, int32_t base = 0) {
    const std::string path = dir.file(name);
    TokenDatasetWriter w(path, kVocab, 2, 1, "tok");
    for (uint64_t p = lo; p < hi; p += 100) {
        std::vector<int32_t> doc;
        for (uint64_t q = p; q < std::min(hi, p + 100); ++q) doc.push_back(base + static_cast<int32_t>(q));
        w.add_document(doc);
    }
    w.finish();
    return path;
}

LoaderOptions mix_options(const std::vector<SourceSpec>& sources, int B, int T, int rank, int world) {
    LoaderOptions o;
    o.sources = sources;
    o.B = B;
    o.T = T;
    o.rank = rank;
    o.world = world;
    o.seed = 42;
    o.vocab_size = kVocab;
    return o;
}

// The first token of each window of the next micro-batch (B of them).
std::vector<int32_t> next_firsts(DataLoader& dl, int B, int T) {
    std::vector<int32_t> x(size_t(B) * T), y(size_t(B) * T), out;
    dl.next(x.data(), y.data());
    for (int b = 0; b < B; ++b) out.push_back(x[size_t(b) * T]);
    return out;
}

// The windows llmtrain's loader read before mixtures (commit d37c781): a file of 5000 tokens
// token[p] = p, T 16, B 3, rank 1 of world 2, seed 42, 120 micro-batches (2.3 epochs of 312 windows).
const std::vector<uint64_t> kGoldenWindows = {
    128, 104, 233, 112, 142, 284, 116, 137, 105, 85, 39, 309, 5, 8, 60, 132, 205, 280, 87, 283, 100, 291,
    170, 25, 129, 248, 166, 43, 206, 127, 119, 201, 88, 67, 13, 24, 179, 75, 35, 252, 59, 147, 28, 279, 238,
    253, 37, 141, 121, 203, 245, 308, 122, 290, 213, 171, 36, 236, 297, 69, 267, 295, 265, 168, 136, 208,
    304, 130, 78, 211, 277, 46, 99, 261, 306, 131, 239, 186, 14, 209, 200, 62, 103, 57, 138, 18, 45, 177,
    10, 192, 70, 289, 180, 114, 266, 202, 292, 303, 154, 22, 169, 219, 108, 300, 220, 148, 42, 256, 165,
    301, 274, 82, 302, 226, 38, 107, 270, 223, 157, 135, 222, 259, 251, 247, 224, 275, 17, 207, 30, 287, 19,
    29, 217, 263, 34, 134, 33, 86, 31, 172, 311, 113, 125, 288, 299, 221, 83, 159, 185, 215, 278, 246, 118,
    63, 139, 191, 176, 162, 269, 257, 25, 83, 198, 112, 292, 72, 270, 139, 96, 66, 43, 226, 272, 90, 88,
    157, 73, 287, 158, 28, 242, 193, 182, 220, 213, 311, 264, 84, 67, 63, 108, 185, 306, 191, 305, 64, 127,
    65, 173, 95, 197, 260, 21, 308, 300, 69, 245, 285, 107, 160, 235, 20, 47, 201, 236, 195, 218, 256, 119,
    24, 169, 142, 161, 258, 168, 224, 9, 252, 61, 111, 273, 219, 196, 45, 159, 282, 81, 140, 36, 58, 114,
    91, 233, 174, 290, 40, 122, 216, 253, 19, 296, 255, 60, 175, 42, 187, 200, 277, 16, 101, 238, 223, 237,
    130, 275, 259, 51, 14, 286, 172, 141, 268, 8, 102, 103, 261, 33, 307, 132, 302, 123, 1, 188, 301, 254,
    144, 113, 134, 115, 131, 125, 124, 228, 240, 99, 212, 288, 145, 265, 170, 74, 204, 149, 93, 57, 232, 13,
    150, 32, 37, 303, 30, 172, 195, 188, 45, 105, 194, 269, 289, 104, 168, 3, 290, 196, 216, 221, 50, 237,
    32, 197, 52, 246, 305, 242, 156, 149, 272, 241, 62, 24, 282, 106, 39, 118, 86, 280, 124, 236, 161, 265,
    261, 51, 43, 132, 244, 150, 98, 56, 208
};

}  // namespace

TEST(Mixture, OnePathReadsTheWindowsOfBefore) {
    TempDir dir;
    LoaderOptions o;
    o.path = ramp_file(dir, "id.h5", 0, 5000);
    o.B = 3;
    o.T = 16;
    o.rank = 1;
    o.world = 2;
    o.seed = 42;
    o.vocab_size = kVocab;
    DataLoader dl(o);
    std::vector<uint64_t> got;
    for (int m = 0; m < 120; ++m)
        for (int32_t first : next_firsts(dl, 3, 16)) got.push_back(uint64_t(first) / 16);
    EXPECT_EQ(got, kGoldenWindows);
    EXPECT_TRUE(dl.state().sources.empty());  // state.toml of a one-path run is as before
}

// With dyadic weights the rule in doubles is exact: the integer draw must pick what it picks.
TEST(Mixture, DrawIsMegatronsRule) {
    const std::vector<double> w = {0.5, 0.125, 0.375};
    MixtureDraw draw({4, 1, 3});  // any scale: the same shares
    std::vector<uint64_t> c(3, 0);
    std::vector<double> cd(3, 0);
    for (int n = 0; n < 20000; ++n) {
        size_t ref = 0;
        double best = -1e300;
        for (size_t k = 0; k < 3; ++k)
            if (double e = w[k] * (n + 1) - cd[k]; e > best) best = e, ref = k;
        const size_t k = draw.pick(c);
        ASSERT_EQ(k, ref) << "sample " << n;
        ++c[k];
        ++cd[k];
    }
}

// Over n draws a random draw by weight would give counts ~ Binomial(n, p_k); the blending rule must
// stay within 3 standard deviations of n p_k at every prefix (it does far better: within S = 4
// samples, checked too), for weights that are no binary fractions.
TEST(Mixture, ProportionsMatchTheWeights) {
    const std::vector<double> w = {0.55, 0.3, 0.1, 0.05};
    MixtureDraw draw({55, 30, 10, 5});
    std::vector<uint64_t> c(4, 0);
    double worst = 0;
    for (uint64_t n = 1; n <= 200000; ++n) {
        ++c[draw.pick(c)];
        for (size_t k = 0; k < 4; ++k) {
            const double dev = std::fabs(double(c[k]) - double(n) * w[k]);
            worst = std::max(worst, dev);
            if (n % 1000 == 0) {
                ASSERT_LE(dev, 3 * std::sqrt(double(n) * w[k] * (1 - w[k])) + 1) << n << " " << k;
            }
        }
    }
    EXPECT_LT(worst, 4.0);
    EXPECT_THROW(MixtureDraw({1, 0}), std::invalid_argument);
    EXPECT_THROW(MixtureDraw({}), std::invalid_argument);
}

// Three sources of different sizes: the k-th sample drawn from source s is window
// perm(seed ^ fnv1a(name), k div n_s)[k mod n_s] of that source, whatever the other sources do, and
// every rank's batches together are the draw's order.
TEST(Mixture, EachSourceIsItsOwnClosedFormStream) {
    TempDir dir;
    const int T = 8, B = 3, world = 2;
    const std::vector<SourceSpec> src = {{"web", ramp_file(dir, "web.h5", 0, 801, 0), 5},
                                         {"code", ramp_file(dir, "code.h5", 0, 161, 10000), 3},
                                         {"math", ramp_file(dir, "math.h5", 0, 97, 20000), 2}};
    const std::vector<uint64_t> n = {100, 20, 12};  // (tokens - 1) / T
    auto fnv = [](const std::string& s) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
        return h;
    };
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<DataLoader>(mix_options(src, B, T, r, world)));
    MixtureDraw draw({5, 3, 2});
    std::vector<uint64_t> c(3, 0);
    for (int m = 0; m < 200; ++m) {  // 1200 samples: sources 1 and 2 go through many epochs
        for (int r = 0; r < world; ++r) {
            for (int32_t first : next_firsts(*ranks[r], B, T)) {
                const size_t k = draw.pick(c);
                const uint64_t j = c[k]++;
                const uint64_t win = window_permutation(n[k], 42 ^ fnv(src[k].name), j / n[k])[j % n[k]];
                ASSERT_EQ(first, int32_t(10000 * k + win * T)) << "micro-batch " << m << " rank " << r;
            }
        }
    }
    const LoaderState st = ranks[0]->state();
    EXPECT_EQ(st.sample, 1200u);
    ASSERT_EQ(st.sources.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
        EXPECT_EQ(st.sources[k].name, src[k].name);
        EXPECT_EQ(st.sources[k].position, c[k]);
        EXPECT_EQ(st.sources[k].drawn, c[k]);
    }
    EXPECT_EQ(c[0] + c[1] + c[2], 1200u);
    EXPECT_EQ(c[0], 600u);  // 1200 is a multiple of the period 10: exact shares
    EXPECT_EQ(c[1], 360u);
    EXPECT_EQ(c[2], 240u);
}

// Stopped after any micro-batch in one layout (B 2, dp 3) and restored into another (B 3, dp 2),
// a mixture goes on with exactly the samples of the unbroken stream.
TEST(Mixture, ResumeMidStreamContinuesTheUnbrokenStream) {
    TempDir dir;
    const int T = 8;
    const std::vector<SourceSpec> src = {{"a", ramp_file(dir, "a.h5", 0, 401, 0), 0.7},
                                         {"b", ramp_file(dir, "b.h5", 0, 201, 10000), 0.2},
                                         {"c", ramp_file(dir, "c.h5", 0, 121, 20000), 0.1}};
    DataLoader ref(mix_options(src, 6, T, 0, 1));  // the unbroken stream, 6 samples per micro-batch
    std::vector<int32_t> stream;
    for (int m = 0; m < 60; ++m)
        for (int32_t f : next_firsts(ref, 6, T)) stream.push_back(f);
    for (int cut : {0, 1, 7, 23}) {  // micro-batches of B 2 x dp 3 = 6 samples before the stop
        LoaderState saved;
        {
            std::vector<std::unique_ptr<DataLoader>> first;
            for (int r = 0; r < 3; ++r) first.push_back(std::make_unique<DataLoader>(mix_options(src, 2, T, r, 3)));
            for (int m = 0; m < cut; ++m)
                for (int r = 0; r < 3; ++r) {
                    const auto f = next_firsts(*first[r], 2, T);
                    for (int i = 0; i < 2; ++i) ASSERT_EQ(f[i], stream[size_t(m * 6 + r * 2 + i)]);
                }
            saved = first[1]->state();
            EXPECT_EQ(saved, first[0]->state());  // every rank reports the same position
        }
        std::vector<std::unique_ptr<DataLoader>> second;
        for (int r = 0; r < 2; ++r) {
            second.push_back(std::make_unique<DataLoader>(mix_options(src, 3, T, r, 2)));
            next_firsts(*second[r], 3, T);  // a prefetched batch restore() must drop
            second[r]->restore(saved);
        }
        for (int m = cut; m < 60; ++m)
            for (int r = 0; r < 2; ++r) {
                const auto f = next_firsts(*second[r], 3, T);
                for (int i = 0; i < 3; ++i) ASSERT_EQ(f[i], stream[size_t(m * 6 + r * 3 + i)]) << cut << " " << m;
            }
    }
}

// Resumed with other weights, the draw starts afresh with them from the saved sample (counts since
// then follow the new shares) while every source goes on in its own stream where it stopped.
TEST(Mixture, NewWeightsAtResumeKeepEachSourcesPosition) {
    TempDir dir;
    const int T = 8, B = 4;
    std::vector<SourceSpec> src = {{"a", ramp_file(dir, "a.h5", 0, 401, 0), 1},
                                   {"b", ramp_file(dir, "b.h5", 0, 401, 10000), 1}};
    DataLoader first(mix_options(src, B, T, 0, 1));
    for (int m = 0; m < 5; ++m) next_firsts(first, B, T);
    const LoaderState saved = first.state();
    ASSERT_EQ(saved.sources[0].position, 10u);
    src[0].weight = 3;  // a: 3/4 from now on
    DataLoader second(mix_options(src, B, T, 0, 1));
    second.restore(saved);
    EXPECT_EQ(second.state().sources[0].drawn, 0u);
    EXPECT_EQ(second.state().sources[0].position, 10u);
    for (int m = 0; m < 10; ++m) next_firsts(second, B, T);
    const LoaderState after = second.state();
    EXPECT_EQ(after.sample, 60u);
    EXPECT_EQ(after.sources[0].drawn, 30u);  // 40 samples at 3:1
    EXPECT_EQ(after.sources[1].drawn, 10u);
    EXPECT_EQ(after.sources[0].position, 40u);
    EXPECT_EQ(after.sources[1].position, 20u);
    // A state without sources (a one-path run's checkpoint) starts every source at 0.
    second.restore(LoaderState{100, 42, {}});
    EXPECT_EQ(second.state().sources[1].position, 0u);
    EXPECT_EQ(second.state().sample, 100u);
}

// Shards of a file's tokens, split at uneven places (one shard shorter than a window), read through
// a glob exactly like the file itself: every window, shuffled over three epochs, and windows that
// span two or three shards.
TEST(Mixture, GlobOfShardsReadsLikeTheConcatenatedFile) {
    TempDir dir;
    const std::string whole = ramp_file(dir, "whole.h5", 0, 5000);
    const std::vector<uint64_t> cuts = {0, 1234, 1240, 2500, 3999, 5000};
    for (size_t s = 0; s + 1 < cuts.size(); ++s)
        ramp_file(dir, "shard_" + std::to_string(s) + ".h5", cuts[s], cuts[s + 1]);
    const std::string glob = dir.file("shard_*.h5");
    ShardedDataset sharded(glob);
    EXPECT_EQ(sharded.files().size(), 5u);
    EXPECT_EQ(sharded.info().n_tokens, 5000u);
    std::vector<int32_t> out(3 * 20);
    sharded.read_windows({1230, 1225, 4990 - 10}, 20, out.data(), kVocab);  // across 2, 3 shards; the end
    for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(out[i], 1230 + i);
        EXPECT_EQ(out[20 + i], 1225 + i);
        EXPECT_EQ(out[40 + i], 4980 + i);
    }
    EXPECT_THROW(sharded.read_windows({4990}, 20, out.data(), kVocab), DataError);
    const int B = 4, T = 16;
    LoaderOptions o = mix_options({}, B, T, 0, 1);
    o.path = whole;
    DataLoader a(o);
    o.path = glob;
    DataLoader b(o);
    EXPECT_EQ(a.batches_per_epoch(), b.batches_per_epoch());
    std::vector<int32_t> xa(B * T), ya(B * T), xb(B * T), yb(B * T);
    for (uint64_t m = 0; m < 3 * a.batches_per_epoch(); ++m) {
        a.next(xa.data(), ya.data());
        b.next(xb.data(), yb.data());
        ASSERT_EQ(xa, xb) << m;
        ASSERT_EQ(ya, yb) << m;
    }
    EXPECT_THROW(ShardedDataset(dir.file("none_*.h5")), DataError);
}

TEST(Mixture, Errors) {
    TempDir dir;
    const std::string a = ramp_file(dir, "a.h5", 0, 401);
    auto message = [&](const std::vector<SourceSpec>& src) -> std::string {
        try {
            DataLoader dl(mix_options(src, 2, 8, 0, 1));
        } catch (const DataError& e) {
            return e.what();
        }
        return "";
    };
    EXPECT_NE(message({{"x", a, 1}, {"x", a, 1}}).find("a second source named 'x'"), std::string::npos);
    EXPECT_NE(message({{"x", a, 1}, {"y", a, 0}}).find("data source 'y'"), std::string::npos);
    EXPECT_NE(message({{"x", a, 1}, {"y", dir.file("no_*.h5"), 1}}).find("no file matches"), std::string::npos);
    {
        TokenDatasetWriter w(dir.file("other.h5"), kVocab, 2, 1, "another tokenizer");
        w.add_document(std::vector<int32_t>(50, 7));
        w.finish();
    }
    const std::string other_msg = message({{"x", a, 1}, {"y", dir.file("other.h5"), 1}});
    EXPECT_NE(other_msg.find("every source must use the same tokenizer"), std::string::npos) << other_msg;
    EXPECT_NE(message({{"x", a, 1}, {"tiny", ramp_file(dir, "t.h5", 0, 5), 1}}).find("windows of seq_len 8, none"),
              std::string::npos);
}
