// tests/data/test_loader.cpp — DataLoader and WindowOrder. The sample dataset's token at position
// p is p itself (vocab larger than the file), so every batch reveals which window it read: the
// tests check windows against the closed forms in loader.hpp and window_order.hpp (window w =
// tokens [w*T, w*T+T+1); global sample i = window perm(seed, i div n)[i mod n]; micro-batch m of
// rank r = samples (m*world + r)*B + j), sharding (ranks disjoint, each epoch every window once),
// that every layout (B, world, grad_accum_steps) of one global batch reads the same windows per
// step as one rank, exact restore (also into another layout, and of the older epoch/batch
// positions), and errors.
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
        for (uint64_t k = 0; k < 2 * dl.batches_per_epoch() + 3; ++k) {  // past the first pass: wraps at 62
            auto ws = next_windows(dl, B, T);
            for (int i = 0; i < B; ++i) EXPECT_EQ(ws[i], ((k * world + rank) * B + i) % 62) << k;
        }
        EXPECT_EQ(dl.state().sample, (2 * 10 + 3) * uint64_t(B * world));
        EXPECT_EQ(dl.state().seed, 42u);
    }
}

// The stream in closed form: micro-batch m of rank r holds samples (m*world + r)*B + j, and sample
// i is window window_permutation(n, seed, i / n)[i % n]. So in every epoch the ranks' windows are
// pairwise disjoint and cover all n windows once (n = 125 is no multiple of B*world = 6: micro-
// batches straddle the epochs), and every epoch's order differs.
TEST(Loader, ShardingIsTheClosedFormStream) {
    TempDir dir;
    const int B = 2, T = 8, world = 3;
    const uint64_t n = 125;
    const std::string path = identity_file(dir, 1001);  // (1001-1)/8 = 125 windows
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(std::make_unique<DataLoader>(options(path, B, T, r, world)));
    std::vector<uint64_t> stream(3 * n + 1);  // sample -> window, from the loaders
    for (uint64_t m = 0; m * B * world < stream.size(); ++m)
        for (int r = 0; r < world; ++r) {
            auto ws = next_windows(*ranks[r], B, T);
            for (int j = 0; j < B; ++j) {
                const uint64_t i = first_sample_of(0, m, B, r, world) + j;
                if (i < stream.size()) stream[i] = ws[j];
                EXPECT_EQ(ws[j], window_permutation(n, 42, i / n)[i % n]) << "sample " << i;
            }
        }
    for (int e = 0; e < 3; ++e) {
        std::vector<uint64_t> epoch(stream.begin() + e * n, stream.begin() + (e + 1) * n), sorted = epoch;
        std::sort(sorted.begin(), sorted.end());
        for (uint64_t w = 0; w < n; ++w) ASSERT_EQ(sorted[w], w) << "epoch " << e << " is not a permutation";
        if (e > 0) {
            EXPECT_NE(epoch, std::vector<uint64_t>(stream.begin() + (e - 1) * n, stream.begin() + e * n));
        }
    }
    // ceil(376 / 6) = 63 micro-batches each: the same position on every rank.
    for (auto& r : ranks) EXPECT_EQ(r->state().sample, 63u * B * world);
}

// Every layout of a global batch of G = 12 — (micro_batch_size B, dp world, grad_accum_steps A)
// with B*world*A = G — reads in optimizer step s exactly the windows of samples [s*G, (s+1)*G) that
// one rank with B = 12 reads, over 3 epochs of 125 windows (steps straddle the epochs).
struct Layout {
    int B, world, accum;
};
constexpr int kG = 12;
const Layout kLayouts[] = {{12, 1, 1}, {1, 1, 12}, {2, 1, 6}, {3, 2, 2}, {2, 3, 2}, {1, 4, 3}, {6, 2, 1}, {3, 4, 1}};

// The windows of `steps` optimizer steps of layout l, restored to `from` first if given: for each
// step the sorted windows of all ranks' micro-batches; checks each micro-batch against the closed form.
std::vector<std::vector<uint64_t>> steps_of(const std::string& path, const Layout& l, int steps,
                                            const LoaderState* from = nullptr) {
    const int T = 8;
    const uint64_t n = 125;
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < l.world; ++r) {
        ranks.push_back(std::make_unique<DataLoader>(options(path, l.B, T, r, l.world)));
        if (from) ranks.back()->restore(*from);
    }
    const LoaderState start = ranks[0]->state();
    std::vector<std::vector<uint64_t>> out;
    for (int s = 0; s < steps; ++s) {
        std::vector<uint64_t> ws;
        for (int a = 0; a < l.accum; ++a)
            for (int r = 0; r < l.world; ++r) {
                auto mb = next_windows(*ranks[r], l.B, T);
                for (int j = 0; j < l.B; ++j) {
                    const uint64_t i = first_sample_of(start.sample, uint64_t(s) * l.accum + a, l.B, r, l.world) + j;
                    EXPECT_EQ(mb[j], window_permutation(n, start.seed, i / n)[i % n]) << "sample " << i;
                }
                ws.insert(ws.end(), mb.begin(), mb.end());
            }
        std::sort(ws.begin(), ws.end());
        out.push_back(ws);
        for (auto& r : ranks)
            EXPECT_EQ(r->state().sample, start.sample + uint64_t(s + 1) * kG) << "B " << l.B << " world " << l.world;
    }
    return out;
}

TEST(Loader, EveryLayoutReadsTheSameWindowsPerStep) {
    TempDir dir;
    const std::string path = identity_file(dir, 1001);  // 125 windows
    const int steps = 3 * 125 / kG + 1;
    const auto ref = steps_of(path, kLayouts[0], steps);
    for (const Layout& l : kLayouts)
        EXPECT_EQ(steps_of(path, l, steps), ref) << "B " << l.B << " world " << l.world << " accum " << l.accum;
}

// A position saved in one layout goes on in any other exactly as one rank would have: the state is
// the same on every rank, and restore() takes the saved seed over the loader's own.
TEST(Loader, RestoreIntoAnotherLayoutContinuesTheStream) {
    TempDir dir;
    const std::string path = identity_file(dir, 1001);
    const auto ref = steps_of(path, kLayouts[0], 25);
    for (int cut : {0, 7, 10, 11}) {  // 11 steps = 132 samples: just past the first epoch
        LoaderState saved;
        {
            std::vector<std::unique_ptr<DataLoader>> ranks;
            for (int r = 0; r < 4; ++r) ranks.push_back(std::make_unique<DataLoader>(options(path, 1, 8, r, 4)));
            for (int k = 0; k < cut * 3; ++k)
                for (auto& rk : ranks) next_windows(*rk, 1, 8);
            saved = ranks[0]->state();
            for (auto& rk : ranks) EXPECT_EQ(rk->state().sample, saved.sample);
        }
        EXPECT_EQ(saved.sample, uint64_t(cut) * kG);
        for (const Layout& l : kLayouts) {
            const auto got = steps_of(path, l, 25 - cut, &saved);
            EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin() + cut))
                << "cut " << cut << " B " << l.B << " world " << l.world << " accum " << l.accum;
        }
    }
    // Another seed's position reads that seed's stream (the checkpoint's), not the loader's.
    LoaderState other{30, 43};
    DataLoader dl(options(path, 3, 8, 1, 2));
    dl.restore(other);
    const auto ws = next_windows(dl, 3, 8);
    for (int j = 0; j < 3; ++j) EXPECT_EQ(ws[j], window_permutation(125, 43, 0)[30 + 3 + j]);
    EXPECT_EQ(dl.state().seed, 43u);
}

// A position saved before stream positions — {epoch, batch}: rank r's micro-batch `batch` of
// `epoch` read entries (batch*world + r)*B + j of that epoch's permutation, an epoch being
// batches_per_epoch() micro-batches — continues there in the layout it was saved in.
TEST(Loader, LegacyEpochBatchPositionsContinueWhereTheyWere) {
    TempDir dir;
    const std::string path = identity_file(dir, 1001);  // 125 windows: 20 batches of 2*3 per epoch
    const int B = 2, world = 3;
    for (int r = 0; r < world; ++r) {
        DataLoader dl(options(path, B, 8, r, world));
        const LoaderState at = dl.legacy_position(2, 19);
        EXPECT_EQ(at.sample, 2u * 125 + 19 * B * world);
        EXPECT_EQ(at.seed, 42u);
        dl.restore(at);
        const auto ws = next_windows(dl, B, 8);
        for (int j = 0; j < B; ++j) EXPECT_EQ(ws[j], window_permutation(125, 42, 2)[(19 * world + r) * B + j]);
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
        EXPECT_EQ(saved.sample, cut * B * 2);
        DataLoader resumed(opt);
        next_windows(resumed, B, T);  // move away first: restore must drop the prefetched batch
        resumed.restore(saved);
        EXPECT_EQ(resumed.state().sample, saved.sample);
        EXPECT_EQ(resumed.state().seed, saved.seed);
        for (uint64_t k = cut; k < expected.size(); ++k) ASSERT_EQ(next_windows(resumed, B, T), expected[k]) << k;
    }
    // restore() back to the start of the same loader replays it.
    ref.restore(LoaderState{0, 42});
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
        EXPECT_EQ(dl.state().sample, 2u);
    }
    dl.restore(LoaderState{4, 42});  // windows 4, 5 are clean
    dl.next(x.data(), y.data());
    EXPECT_EQ(x[0], 5);
    EXPECT_EQ(dl.state().sample, 6u);
}
