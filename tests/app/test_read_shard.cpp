// tests/app/test_read_shard.cpp — read_params_ranges / read_optim_ranges (app/checkpoint/read_shard.cpp):
// a rank's own flat ranges read from a checkpoint written by another layout.
//
// The reference is independent of the range readers: a checkpoint of random whole tensors (tp 1,
// three optimizer parts cutting tensors mid-way) whose expected values for any reading layout come
// from ParamLayout::cut_local_flat (the TP part) and ParamLayout::shard (the ZeRO chunk), copied
// element by element; the readers must give them bit for bit.
#include "tests/app/checkpoint_test_util.hpp"

using namespace ckpt_test;

namespace {

/// The elements of `ranges` of a whole-layout buffer cut into `lay` (padding 0), back to back.
std::vector<float> expected(const ParamLayout& full, const ParamLayout& lay, const std::vector<float>& whole,
                            const std::vector<FlatRange>& ranges) {
    std::vector<float> clean(whole.size(), 0.0f), local(lay.total_numel(), 0.0f), out;
    for (const auto& t : full.tensors()) std::copy_n(whole.begin() + long(t.offset), t.numel, clean.begin() + long(t.offset));
    lay.cut_local_flat(full, clean.data(), local.data());
    for (const FlatRange& r : ranges) out.insert(out.end(), local.begin() + long(r.offset), local.begin() + long(r.offset + r.numel));
    return out;
}

void expect_same(const std::vector<float>& want, const std::vector<float>& got, const char* what) {
    ASSERT_EQ(want.size(), got.size()) << what;
    for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0) << what << " element " << i << ": " << want[i] << " vs " << got[i];
}

}  // namespace

// Written at tp 1 in three parts; read as ZeRO shards (N 3 at tp 1, N 2 at tp 2 on either TP rank).
TEST_F(Ckpt, RangesReadTheirElementsOnlyInAnyLayout) {
    const GPTConfig cfg = tiny();
    const ParamLayout full(cfg);
    const std::vector<float> p = random_flat(full, 1), m = random_flat(full, 2), v = random_flat(full, 3);
    const size_t n = full.total_numel(), a = n / 3 + 5, b = 2 * n / 3 + 3;  // cuts inside tensors
    std::vector<OptimShardView> parts;
    for (auto [lo, hi] : {std::pair{size_t(0), a}, {a, b}, {b, n}}) parts.push_back({lo, hi, m.data() + lo, v.data() + lo});
    const std::string d = save_checkpoint(dir.string(), some_state(1), full, p.data(), parts, 0);
    for (const auto [tp, N] : {std::pair{1, 3}, {2, 2}, {2, 1}})
        for (int t = 0; t < tp; ++t)
            for (int z = 0; z < N; ++z) {
                SCOPED_TRACE("tp " + std::to_string(tp) + " rank " + std::to_string(t) + ", ZeRO " +
                             std::to_string(N) + " index " + std::to_string(z));
                const ParamLayout lay(cfg, N > 1 ? 8 * N : 1, tp, t);
                const std::vector<FlatRange> ranges = lay.shard(z, N);
                size_t total = 0;
                for (const FlatRange& r : ranges) total += r.numel;
                std::vector<float> w2(total, -1.f), m2(total, -1.f), v2(total, -1.f);
                read_params_ranges(d, lay, ranges, w2.data());
                read_optim_ranges(d, lay, ranges, m2.data(), v2.data());
                expect_same(expected(full, lay, p, ranges), w2, "weights");
                expect_same(expected(full, lay, m, ranges), m2, "m");
                expect_same(expected(full, lay, v, ranges), v2, "v");
            }
}

// A model.h5 tensor of another shape is named, as read_params does.
TEST_F(Ckpt, RangesOfAnotherShapeAreRefused) {
    const GPTConfig cfg = tiny();
    const ParamLayout full(cfg);
    const std::vector<float> p = random_flat(full, 4), m = random_flat(full, 5), v = random_flat(full, 6);
    const std::string d = save(full, 1, 0, p, m, v);
    GPTConfig wider = cfg;
    wider.n_embd = 32;
    const ParamLayout other(wider);
    std::vector<float> w2(other.total_numel());
    try {
        read_params_ranges(d, other, {{0, other.total_numel()}}, w2.data());
        FAIL() << "no error";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("tensor wte has shape [128, 16] in the checkpoint but [128, 32]"),
                  std::string::npos) << e.what();
    }
}
