// tests/data/test_loader.cpp — DataLoader and WindowOrder. The sample dataset's token at position
// p is p itself (vocab larger than the file), so every batch reveals which window it read: the
// tests check windows against the closed forms in loader.hpp (window w = tokens [w*T, w*T+T+1),
// eval batch k of rank r = windows (k*world + r)*B + i), sharding (ranks disjoint, covering the
// epoch), exact restore (a restored loader continues exactly like an uninterrupted one), restore
// of a position saved at a smaller world (it goes on at the next epoch) and errors.
#include <map>
#include <set>

#include "data/loader.hpp"
#include "data/window_order.hpp"
#include "data_test_util.hpp"

using namespace llmtrain;
using namespace llmtrain::test;

namespace {

constexpr int kVocab = 70000;  // > n_tokens, so token == position

// A file of n_tokens tokens with token[p] = p, in documents of 100.
std::string identity_file(const TempDir& dir, uint64_t n_tokens, const std::string& name = "id.h5") {
    const std::string path = dir.file(name);
    TokenDatasetWriter w(path, kVocab, 2, 1, "tok");
    for (uint64_t p = 0; p < n_tokens; p += 100) {
        std::vector<int32_t> doc;
        for (uint64_t q = p; q < std::min(n_tokens, p + 100); ++q) doc.push_back(static_cast<int32_t>(q));
        w.add_document(doc);
    }
    w.finish();
    return path;
}

LoaderOptions options(const std::string& path, int B, int T, int rank, int world, bool shuffle = true) {
    LoaderOptions o;
    o.path = path;
    o.B = B;
    o.T = T;
    o.rank = rank;
    o.world = world;
    o.shuffle = shuffle;
    o.seed = 42;
    o.vocab_size = kVocab;
    return o;
}

// The next batch as B window indices, after checking each window is contiguous and targets are
// inputs shifted by one.
std::vector<uint64_t> next_windows(DataLoader& dl, int B, int T) {
    std::vector<int32_t> x(B * T), y(B * T);
    dl.next(x.data(), y.data());
    std::vector<uint64_t> ws;
    for (int b = 0; b < B; ++b) {
        EXPECT_EQ(x[b * T] % T, 0) << "window start not a multiple of T";
        for (int t = 0; t < T; ++t) {
            EXPECT_EQ(x[b * T + t], x[b * T] + t);
            EXPECT_EQ(y[b * T + t], x[b * T] + t + 1);
        }
        ws.push_back(x[b * T] / T);
    }
    return ws;
}

}  // namespace

TEST(WindowOrder, PermutationIsPermutationAndDependsOnSeedAndEpoch) {
    auto p = window_permutation(1000, 1, 0);
    std::vector<uint64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
    EXPECT_EQ(p, window_permutation(1000, 1, 0));  // deterministic
    EXPECT_NE(p, window_permutation(1000, 1, 1));
    EXPECT_NE(p, window_permutation(1000, 2, 0));
    EXPECT_NE(window_permutation(1000, 1, 1), window_permutation(1000, 2, 0));
    EXPECT_TRUE(window_permutation(0, 1, 0).empty());
}

// Fisher–Yates with an unbiased generator gives each of the 3! = 6 orders probability 1/6.
// 60000 draws: each count is ~Binomial(60000, 1/6), sd ~91; a 6-sd band fails only on a real bias.
TEST(WindowOrder, AllOrdersOfThreeEquallyLikely) {
    std::map<std::vector<uint64_t>, int> counts;
    for (uint64_t s = 0; s < 60000; ++s) ++counts[window_permutation(3, s, 0)];
    ASSERT_EQ(counts.size(), 6u);
    for (auto& [perm, c] : counts) EXPECT_NEAR(c, 10000, 550);
}

TEST(Loader, EvalOrderIsClosedForm) {
    TempDir dir;
    const int B = 3, T = 16, world = 2;
    const std::string path = identity_file(dir, 1000);  // (1000-1)/16 = 62 windows -> 10 batches/rank
    for (int rank = 0; rank < world; ++rank) {
        DataLoader dl(options(path, B, T, rank, world, /*shuffle=*/false));
        ASSERT_EQ(dl.batches_per_epoch(), 62u / (B * world));
        for (uint64_t k = 0; k < 2 * dl.batches_per_epoch(); ++k) {
            auto ws = next_windows(dl, B, T);
            const uint64_t kk = k % dl.batches_per_epoch();
            for (int i = 0; i < B; ++i) EXPECT_EQ(ws[i], (kk * world + rank) * B + i);
        }
        EXPECT_EQ(dl.state().epoch, 2u);
        EXPECT_EQ(dl.state().batch, 0u);
    }
}

// In every epoch, the ranks' windows are pairwise disjoint, number world*B*batches_per_epoch,
// and every epoch's order differs.
TEST(Loader, ShardingDisjointAndCovering) {
    TempDir dir;
    const int B = 2, T = 8, world = 3;
    const std::string path = identity_file(dir, 1001);  // 125 windows -> 20 batches/rank, 5 left out
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<DataLoader>(options(path, B, T, r, world)));
    const uint64_t bpe = ranks[0]->batches_per_epoch();
    ASSERT_EQ(bpe, 20u);
    std::vector<std::vector<uint64_t>> epoch_orders;
    for (int epoch = 0; epoch < 3; ++epoch) {
        std::set<uint64_t> seen;
        std::vector<uint64_t> order;
        for (uint64_t k = 0; k < bpe; ++k)
            for (int r = 0; r < world; ++r)
                for (uint64_t w : next_windows(*ranks[r], B, T)) {
                    EXPECT_LT(w, 125u);
                    EXPECT_TRUE(seen.insert(w).second) << "window " << w << " read twice in epoch " << epoch;
                    order.push_back(w);
                }
        EXPECT_EQ(seen.size(), static_cast<size_t>(world * B * bpe));
        for (auto& prev : epoch_orders) EXPECT_NE(prev, order);
        epoch_orders.push_back(order);
    }
}

// A loader restored from a saved state yields exactly the batches of an uninterrupted one,
// across an epoch boundary, whether restored into a fresh loader or the same one mid-prefetch.
TEST(Loader, ExactRestore) {
    TempDir dir;
    const int B = 4, T = 8;
    const std::string path = identity_file(dir, 2000);
    const LoaderOptions opt = options(path, B, T, 1, 2);
    DataLoader ref(opt);
    const uint64_t bpe = ref.batches_per_epoch();  // 249 windows / 8 = 31
    std::vector<std::vector<uint64_t>> expected;
    for (uint64_t k = 0; k < 2 * bpe + 5; ++k) expected.push_back(next_windows(ref, B, T));

    for (uint64_t cut : {uint64_t{0}, uint64_t{7}, bpe - 1, bpe, bpe + 3}) {
        LoaderState saved;
        {
            DataLoader first(opt);
            for (uint64_t k = 0; k < cut; ++k) next_windows(first, B, T);
            saved = first.state();
        }
        EXPECT_EQ(saved.epoch * bpe + saved.batch, cut);
        DataLoader resumed(opt);
        next_windows(resumed, B, T);  // move away first: restore must drop the prefetched batch
        resumed.restore(saved);
        EXPECT_EQ(resumed.state().epoch, saved.epoch);
        EXPECT_EQ(resumed.state().batch, saved.batch);
        for (uint64_t k = cut; k < expected.size(); ++k) ASSERT_EQ(next_windows(resumed, B, T), expected[k]) << k;
    }
    // restore() back to the start of the same loader replays it.
    ref.restore(LoaderState{});
    EXPECT_EQ(next_windows(ref, B, T), expected[0]);
}

TEST(Loader, SeedChangesOrder) {
    TempDir dir;
    const std::string path = identity_file(dir, 2000);
    LoaderOptions a = options(path, 4, 8, 0, 1), b = a;
    b.seed = 43;
    DataLoader la(a), lb(b);
    std::vector<uint64_t> wa, wb;
    for (int k = 0; k < 10; ++k) {
        for (auto w : next_windows(la, 4, 8)) wa.push_back(w);
        for (auto w : next_windows(lb, 4, 8)) wb.push_back(w);
    }
    EXPECT_NE(wa, wb);
}

TEST(Loader, OpenErrors) {
    TempDir dir;
    const std::string path = identity_file(dir, 1000);
    LoaderOptions o = options(path, 4, 16, 0, 1);
    o.vocab_size = 1000;  // model smaller than the file's vocab (70000)
    expect_data_error([&] { DataLoader dl(o); }, {path, "vocab_size 70000", "model's vocab_size 1000"});
    o = options(path, 4, 16, 0, 1);
    o.expect_tokenizer_sha256 = sha256_hex("another tokenizer");
    expect_data_error([&] { DataLoader dl(o); }, {path, "tokenizer_sha256", "another tokenizer"});
    o.expect_tokenizer_sha256 = sha256_hex("tok");
    DataLoader fine(o);
    o = options(path, 16, 16, 0, 4);  // 62 windows < 64
    expect_data_error([&] { DataLoader dl(o); }, {path, "62 windows", "fewer than B*world = 64"});
    o = options(path, 4, 16, 4, 4);
    expect_data_error([&] { DataLoader dl(o); }, {"rank 4"});
    expect_data_error([&] { DataLoader dl(options(dir.file("missing.h5"), 4, 16, 0, 1)); },
                      {"missing.h5", "no such dataset file"});
}

// Resuming at a larger dp (finding 7: restore() threw). A state saved at world 1 near the end of an
// epoch has a batch index past that epoch's end at world 3; every rank must go on at the start of
// the next epoch exactly like an uninterrupted world-3 loader that has just finished the epoch, and
// an index that still fits must restore exactly.
TEST(Loader, RestoreSavedAtSmallerWorldGoesOnAtTheNextEpoch) {
    TempDir dir;
    const int B = 2, T = 8;
    const std::string path = identity_file(dir, 1001);  // 125 windows: 62 batches at world 1, 20 at world 3
    LoaderState near_end, early;
    {
        DataLoader one(options(path, B, T, 0, 1));
        ASSERT_EQ(one.batches_per_epoch(), 62u);
        for (int k = 0; k < 62 + 5; ++k) next_windows(one, B, T);
        early = one.state();
        for (int k = 5; k < 60; ++k) next_windows(one, B, T);
        near_end = one.state();
    }
    ASSERT_EQ(early.epoch, 1u);
    ASSERT_EQ(early.batch, 5u);
    ASSERT_EQ(near_end.epoch, 1u);
    ASSERT_EQ(near_end.batch, 60u);
    for (int r = 0; r < 3; ++r) {
        const LoaderOptions opt = options(path, B, T, r, 3);
        DataLoader ref(opt);  // uninterrupted at world 3: batches of epochs 0, 1 and 2
        ASSERT_EQ(ref.batches_per_epoch(), 20u);
        std::vector<std::vector<uint64_t>> expected;
        for (int k = 0; k < 3 * 20; ++k) expected.push_back(next_windows(ref, B, T));

        DataLoader resumed(opt);
        resumed.restore(near_end);
        EXPECT_EQ(resumed.state().epoch, 2u);
        EXPECT_EQ(resumed.state().batch, 0u);
        for (int k = 40; k < 60; ++k)
            ASSERT_EQ(next_windows(resumed, B, T), expected[k]) << "rank " << r << " batch " << k;

        resumed.restore(early);
        EXPECT_EQ(resumed.state().epoch, 1u);
        EXPECT_EQ(resumed.state().batch, 5u);
        for (int k = 25; k < 40; ++k)
            ASSERT_EQ(next_windows(resumed, B, T), expected[k]) << "rank " << r << " batch " << k;
    }
}

// A bad token surfaces from the I/O thread in next(), which keeps its position.
TEST(Loader, ReadErrorRethrownInNext) {
    TempDir dir;
    const std::string path = dir.file("bad.h5");
    TokenDatasetWriter w(path, 100, 2, 1, "tok");
    w.add_document(std::vector<int32_t>(200, 5));
    w.finish();
    set_token(path, 20, 100);  // id 100 >= vocab_size 100, inside windows 2 = [16, 25)
    LoaderOptions o = options(path, 2, 8, 0, 1, /*shuffle=*/false);
    o.vocab_size = 100;
    DataLoader dl(o);
    std::vector<int32_t> x(16), y(16);
    dl.next(x.data(), y.data());  // windows 0, 1
    for (int attempt = 0; attempt < 2; ++attempt) {
        expect_data_error([&] { dl.next(x.data(), y.data()); }, {path, "token id 100", "/tokens[20]"});
        EXPECT_EQ(dl.state().batch, 1u);
    }
    dl.restore(LoaderState{0, 2});  // windows 4, 5 are clean
    dl.next(x.data(), y.data());
    EXPECT_EQ(x[0], 5);
    EXPECT_EQ(dl.state().batch, 3u);
}
