// tests/model/test_param_layout.cpp — the flat parameter layout: GPT-2 names and shapes, alignment,
// unit padding for ZeRO groups, the closed-form parameter count, and its errors.
#include <set>

#include "model/param_layout.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

TEST(ParamLayout, UnitsAlignmentAndCount) {
    const GPTConfig cfg{3, 3, 48, 17, 101};
    for (int shard : {1, 3, 8, 12}) {
        ParamLayout L(cfg, shard);
        const size_t C = 48, Vp = 128;
        // Closed form: wte (Vp,C) + wpe (maxT,C) + per layer 12C^2 + 13C + ln_f 2C.
        EXPECT_EQ(L.num_parameters(), Vp * C + 17 * C + 3 * (12 * C * C + 13 * C) + 2 * C);
        ASSERT_EQ(L.units().size(), 5u);
        size_t pos = 0;
        for (const ParamUnit& u : L.units()) {
            EXPECT_EQ(u.offset, pos);
            EXPECT_EQ(u.numel % shard, 0u) << "unit padded to shard_multiple " << shard;
            EXPECT_EQ(u.offset % 8, 0u);
            pos += u.numel;
        }
        EXPECT_EQ(L.total_numel(), pos);
        size_t end_prev = 0, count = 0;
        std::set<std::string> names;
        for (const ParamTensor& t : L.tensors()) {
            EXPECT_EQ(t.offset % 8, 0u) << t.name;
            EXPECT_GE(t.offset, end_prev) << t.name << " overlaps its predecessor";
            const ParamUnit& u = L.units()[t.unit];
            EXPECT_GE(t.offset, u.offset);
            EXPECT_LE(t.offset + t.numel, u.offset + u.numel) << t.name << " leaves its unit";
            size_t prod = 1;
            for (auto d : t.shape) prod *= static_cast<size_t>(d);
            EXPECT_EQ(prod, t.numel);
            EXPECT_EQ(t.decay, t.shape.size() == 2) << t.name;
            end_prev = t.offset + t.numel;
            count += t.numel;
            names.insert(t.name);
        }
        EXPECT_EQ(count, L.num_parameters());
        EXPECT_EQ(names.size(), 2 + 3 * 12 + 2u);
    }
}

TEST(ParamLayout, Gpt2NamesAndShapes) {
    ParamLayout L(GPTConfig{2, 3, 48, 17, 101});
    EXPECT_EQ(L.find("wte").shape, (std::vector<int64_t>{128, 48}));
    EXPECT_EQ(L.find("wpe").shape, (std::vector<int64_t>{17, 48}));
    EXPECT_EQ(L.find("h.1.attn.c_attn.weight").shape, (std::vector<int64_t>{144, 48}));
    EXPECT_EQ(L.find("h.1.attn.c_attn.bias").shape, (std::vector<int64_t>{144}));
    EXPECT_EQ(L.find("h.0.mlp.c_fc.weight").shape, (std::vector<int64_t>{192, 48}));
    EXPECT_EQ(L.find("h.0.mlp.c_proj.weight").shape, (std::vector<int64_t>{48, 192}));
    EXPECT_EQ(L.find("h.1.ln_2.bias").unit, 2);
    EXPECT_EQ(L.find("ln_f.weight").unit, 3);
    EXPECT_EQ(L.unit_of_layer(1), 2);
    EXPECT_THROW(L.find("h.2.ln_1.weight"), std::out_of_range);
}

TEST(ParamLayout, RejectsBadConfigs) {
    EXPECT_THROW(ParamLayout(GPTConfig{2, 5, 48, 17, 101}), std::invalid_argument);  // 48 % 5
    EXPECT_THROW(ParamLayout(GPTConfig{0, 3, 48, 17, 101}), std::invalid_argument);
    EXPECT_THROW(ParamLayout(GPTConfig{2, 3, 48, 17, 101}, 0), std::invalid_argument);
}

}  // namespace
}  // namespace llmtrain::test
