// tests/optim/test_adamw.cpp — the AdamW class over the flat buffer against a double-precision loop
// that applies decay per tensor from the layout: 2-D weights decay, 1-D tensors do not, padding and
// elements outside [begin, end) stay untouched, master weights follow the same path.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/backend.hpp"
#include "optim/adamw.hpp"

namespace llmtrain {
namespace {

// n_embd 12 leaves gaps between tensors (8-element alignment) and shard_multiple 7 pads units.
const GPTConfig kCfg{2, 2, 12, 5, 10};

std::vector<float> randu(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

/// Reference: two steps of AdamW in double on the elements of `ranges` that belong to a tensor.
std::vector<double> reference(const ParamLayout& L, const AdamWConfig& c, std::vector<float> p0,
                              const std::vector<float>& g, const float lrs[2], const float scales[2],
                              const std::vector<FlatRange>& ranges) {
    std::vector<double> p(p0.begin(), p0.end()), m(p.size(), 0.0), v(p.size(), 0.0);
    for (int t = 1; t <= 2; ++t)
        for (const FlatRange& r : ranges)
            for (const ParamTensor& T : L.tensors())
                for (size_t i = std::max(r.offset, T.offset); i < std::min(r.offset + r.numel, T.offset + T.numel); ++i) {
                    const double gi = static_cast<double>(g[i]) * scales[t - 1], lr = lrs[t - 1];
                    m[i] = c.beta1 * m[i] + (1 - c.beta1) * gi;
                    v[i] = c.beta2 * v[i] + (1 - c.beta2) * gi * gi;
                    const double mh = m[i] / (1 - std::pow(c.beta1, t)), vh = v[i] / (1 - std::pow(c.beta2, t));
                    p[i] -= lr * (T.decay ? c.weight_decay : 0.0) * p[i] + lr * mh / (std::sqrt(vh) + c.eps);
                }
    return p;
}

/// Two steps over `ranges` (empty: the whole buffer) on shard-local copies of p and g, scattered
/// back into the flat buffer and compared with the double reference everywhere.
void check_steps(bool master, std::vector<FlatRange> ranges) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    ParamLayout L(kCfg, 7);
    const size_t n = L.total_numel();
    ASSERT_GT(n, L.num_parameters()) << "the layout must contain padding for this test";
    const AdamWConfig cfg{1e-2f, 0.9f, 0.95f, 1e-8f, 0.5f};
    auto p = randu(n, 1), g = randu(n, 2);  // padding holds junk: it must stay as it is
    const float lrs[2] = {1e-2f, 5e-3f}, scales[2] = {1.0f, 0.25f};
    const std::vector<FlatRange> used = ranges.empty() ? std::vector<FlatRange>{{0, n}} : ranges;
    const auto want = reference(L, cfg, p, g, lrs, scales, used);
    AdamW opt(alloc, L, cfg, master, ranges);
    std::vector<float> ps, gs;  // shard-local
    for (const FlatRange& r : used) {
        ps.insert(ps.end(), p.begin() + r.offset, p.begin() + r.offset + r.numel);
        gs.insert(gs.end(), g.begin() + r.offset, g.begin() + r.offset + r.numel);
    }
    EXPECT_EQ(opt.numel(), ps.size());
    EXPECT_EQ(alloc.current(MemCategory::optimizer), ps.size() * 4 * (master ? 3 : 2));
    opt.init_state(ps.data());
    opt.step(ps.data(), gs.data(), lrs[0], scales[0]);
    opt.step(ps.data(), gs.data(), lrs[1], scales[1]);
    EXPECT_EQ(opt.t(), 2);
    size_t k = 0;
    for (const FlatRange& r : used)
        for (size_t i = 0; i < r.numel; ++i) p[r.offset + i] = ps[k++];
    for (size_t i = 0; i < n; ++i)  // fp32 vs double after two steps of size ~lr: a few ulps
        ASSERT_NEAR(p[i], want[i], 1e-6 + 1e-6 * std::fabs(want[i])) << "element " << i;
}

TEST(AdamW, WholeBufferDecaysOnly2DWeightsAndSkipsPadding) { check_steps(false, {}); }
TEST(AdamW, MasterWeightsGiveTheSameUpdate) { check_steps(true, {}); }
TEST(AdamW, ShardRangeTouchesOnlyItsElements) {
    ParamLayout L(kCfg, 7);
    const size_t a = L.units()[1].offset + 5, b = L.units()[2].offset + 11;
    check_steps(false, {{a, b - a}});  // cuts tensors in two
}
TEST(AdamW, ZeroShardOfEveryUnit) {
    // Rank 1 of 3: chunk 1 of every unit, back to back (ParamLayout::shard), with master weights.
    ParamLayout L(kCfg, 3 * 8);
    auto shard = L.shard(1, 3);
    ASSERT_EQ(shard.size(), L.units().size());
    check_steps(true, shard);
}

TEST(AdamW, RejectsEmptyOrOutOfRangeShards) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    ParamLayout L(kCfg);
    EXPECT_THROW(AdamW(alloc, L, AdamWConfig{}, false, {{10, 0}}), std::invalid_argument);
    EXPECT_THROW(AdamW(alloc, L, AdamWConfig{}, false, {{0, L.total_numel() + 1}}), std::invalid_argument);
    EXPECT_THROW(AdamW(alloc, L, AdamWConfig{}, false, {{20, 5}, {10, 5}}), std::invalid_argument);
}

}  // namespace
}  // namespace llmtrain
