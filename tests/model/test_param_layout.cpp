// tests/model/test_param_layout.cpp — the flat parameter layout: GPT-2 names and shapes, alignment,
// unit padding for ZeRO groups, the closed-form parameter count, and its errors; the tensor-parallel
// split (local shapes, which rows/columns a rank holds, cut/place round trips, divisibility errors).
#include <algorithm>
#include <numeric>
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

TEST(ParamLayout, TensorParallelShapesAndSplits) {
    const GPTConfig cfg{2, 4, 64, 16, 300};  // Vp 384
    for (int tp : {1, 2, 4}) {
        SCOPED_TRACE("tp " + std::to_string(tp));
        for (int r = 0; r < tp; ++r) {
            ParamLayout L(cfg, 8, tp, r);
            EXPECT_EQ(L.tp(), tp);
            EXPECT_EQ(L.tp_rank(), r);
            const int64_t C = 64, t = tp;
            auto check = [&](const std::string& n, std::vector<int64_t> full, std::vector<int64_t> local, TPSplit s) {
                const ParamTensor& x = L.find(n);
                EXPECT_EQ(x.full_shape, full) << n;
                EXPECT_EQ(x.shape, local) << n;
                EXPECT_EQ(x.split, s) << n << " " << tp_split_name(x.split);
            };
            check("wte", {384, C}, {384 / t, C}, TPSplit::vocab);
            check("wpe", {16, C}, {16, C}, TPSplit::replicated);
            check("h.1.attn.c_attn.weight", {3 * C, C}, {3 * C / t, C}, TPSplit::column);
            check("h.1.attn.c_attn.bias", {3 * C}, {3 * C / t}, TPSplit::column);
            check("h.1.attn.c_proj.weight", {C, C}, {C, C / t}, TPSplit::row);
            check("h.1.attn.c_proj.bias", {C}, {C}, TPSplit::replicated);
            check("h.0.mlp.c_fc.weight", {4 * C, C}, {4 * C / t, C}, TPSplit::column);
            check("h.0.mlp.c_fc.bias", {4 * C}, {4 * C / t}, TPSplit::column);
            check("h.0.mlp.c_proj.weight", {C, 4 * C}, {C, 4 * C / t}, TPSplit::row);
            check("h.0.mlp.c_proj.bias", {C}, {C}, TPSplit::replicated);
            check("h.0.ln_2.weight", {C}, {C}, TPSplit::replicated);
            check("ln_f.bias", {C}, {C}, TPSplit::replicated);
            EXPECT_EQ(L.find("h.0.attn.c_attn.weight").blocks, 3);
            // Units still split evenly over a ZeRO group of 8 on the local layout.
            for (const ParamUnit& u : L.units()) EXPECT_EQ(u.numel % 8, 0u);
            EXPECT_NO_THROW(L.shard(3, 8));
            // Closed form of the local count: wte/t + wpe + per layer (12C^2 + 7C)/t + 6C + ln_f 2C.
            EXPECT_EQ(L.num_parameters(), size_t(384 / t * C + 16 * C + 2 * ((12 * C * C + 7 * C) / t + 6 * C) + 2 * C));
        }
    }
}

TEST(ParamLayout, TensorParallelCutAndPlace) {
    const GPTConfig cfg{2, 4, 64, 16, 300};
    const ParamLayout whole(cfg);
    for (int tp : {2, 4}) {
        SCOPED_TRACE("tp " + std::to_string(tp));
        for (const ParamTensor& ft : whole.tensors()) {
            // full[i] = i: every element names its own position.
            std::vector<float> full(ft.numel);
            std::iota(full.begin(), full.end(), 0.0f);
            std::vector<float> back(ft.numel, -1.0f);
            std::vector<int> hits(ft.numel, 0);
            for (int r = 0; r < tp; ++r) {
                const ParamLayout L(cfg, 1, tp, r);
                const ParamTensor& t = L.find(ft.name);
                std::vector<float> local(t.numel);
                L.cut_local(t, full.data(), local.data());
                // Which full element each local element must be (the split's definition).
                const size_t R = size_t(ft.shape[0]), K = ft.shape.size() > 1 ? size_t(ft.shape[1]) : 1;
                const size_t rows = size_t(t.shape[0]), cols = t.shape.size() > 1 ? size_t(t.shape[1]) : 1;
                for (size_t i = 0; i < rows; ++i)
                    for (size_t k = 0; k < cols; ++k) {
                        size_t fi = i * K + k;
                        if (t.split == TPSplit::column || t.split == TPSplit::vocab) {
                            const size_t rb = R / size_t(t.blocks), part = rb / size_t(tp);
                            fi = ((i / part) * rb + size_t(r) * part + i % part) * K + k;
                        } else if (t.split == TPSplit::row) {
                            fi = i * K + size_t(r) * (K / size_t(tp)) + k;
                        }
                        ASSERT_EQ(local[i * cols + k], float(fi)) << t.name << " rank " << r;
                    }
                if (t.split == TPSplit::replicated) continue;
                std::vector<float> scratch(ft.numel, -1.0f);
                L.place_local(t, local.data(), scratch.data());
                L.place_local(t, local.data(), back.data());
                for (size_t i = 0; i < ft.numel; ++i) hits[i] += scratch[i] != -1.0f;
            }
            if (ft.split == TPSplit::replicated) continue;
            EXPECT_EQ(back, full) << ft.name << ": the ranks' parts put back together";
            EXPECT_TRUE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }))
                << ft.name << ": every element on exactly one rank";
        }
        // The whole-buffer cut equals the per-tensor one, padding left alone.
        std::vector<float> full(whole.total_numel());
        std::iota(full.begin(), full.end(), 1.0f);
        const ParamLayout L(cfg, 8, tp, tp - 1);
        std::vector<float> flat(L.total_numel(), 0.0f);
        L.cut_local_flat(whole, full.data(), flat.data());
        for (const ParamTensor& t : L.tensors()) {
            std::vector<float> want(t.numel);
            L.cut_local(t, full.data() + whole.find(t.name).offset, want.data());
            EXPECT_TRUE(std::equal(want.begin(), want.end(), flat.begin() + t.offset)) << t.name;
        }
        EXPECT_THROW(L.cut_local_flat(L, full.data(), flat.data()), std::invalid_argument);
    }
}

TEST(ParamLayout, TensorParallelRejectsIndivisibleShapes) {
    auto message = [](const GPTConfig& c, int tp) {
        try {
            ParamLayout L(c, 1, tp, 0);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message(GPTConfig{2, 6, 48, 16, 300}, 4).find("n_head"), std::string::npos);  // 6 % 4
    EXPECT_NE(message(GPTConfig{2, 5, 40, 16, 100}, 5).find("Vp"), std::string::npos);      // 128 % 5
    EXPECT_THROW(ParamLayout(GPTConfig{2, 4, 64, 16, 300}, 1, 2, 2), std::invalid_argument);  // rank outside
    EXPECT_THROW(ParamLayout(GPTConfig{2, 4, 64, 16, 300}, 1, 0, 0), std::invalid_argument);
}

}  // namespace
}  // namespace llmtrain::test
