// tests/model/test_gpt_structure.cpp — properties of the GPT beyond single ops: activation
// checkpointing gives bitwise the same losses and gradients as none and saves the documented
// bytes; two layer ranges chained equal the whole model; init statistics; the helpers; errors.
#include <cmath>
#include <omp.h>

#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "tests/model/structure_test_util.hpp"

namespace llmtrain::test {
namespace {

const GPTConfig kCfg{4, 3, 48, 17, 101};
/// N token ids of kCfg's vocabulary from seed.
std::vector<int> tokens(uint64_t seed) { return test::tokens(seed, kCfg.vocab_size); }

struct TrainResult {
    float loss;
    std::vector<float> grads;
    size_t act_peak, ws_peak;
};

TrainResult train_once(float ratio) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = B;
    o.T = T;
    o.checkpoint_ratio = ratio;
    GPT gpt(kCfg, o, alloc);
    EXPECT_EQ(gpt.num_checkpointed_layers(), static_cast<int>(std::floor(ratio * 4)));
    gpt.init_params(7);
    gpt.zero_grads();
    const auto in = tokens(1), tgt = tokens(2);
    TrainResult r;
    gpt.forward_backward(in.data(), tgt.data(), 1.0f / N);
    gpt.forward_backward(tgt.data(), in.data(), 1.0f / N);  // a second micro-batch accumulates
    r.loss = static_cast<float>(gpt.take_loss_sum());
    r.grads = host_copy(*ops, gpt.grads(), gpt.layout().total_numel());
    r.act_peak = alloc.peak(MemCategory::activations);
    r.ws_peak = alloc.peak(MemCategory::workspace);
    return r;
}

size_t a256(size_t b) { return (b + 255) / 256 * 256; }

TEST(GptCheckpointing, SameGradientsAsNoneAndDocumentedBytes) {
    const TrainResult full = train_once(0.0f);
    // Bytes a non-checkpointed layer keeps (fp32): ln1, atty, res2, ln2 (N,C); qkv (N,3C);
    // fch_pre, fch (N,4C); 4 LayerNorm stats (N); lse (B,NH,T); each block 256-byte aligned.
    const size_t C = 48, per_layer = 4 * a256(N * C * 4) + a256(N * 3 * C * 4) + 2 * a256(N * 4 * C * 4) +
                                     4 * a256(N * 4) + a256(B * 3 * T * 4);
    for (float ratio : {0.25f, 0.5f, 1.0f}) {
        const TrainResult ck = train_once(ratio);
        const size_t k = static_cast<size_t>(std::floor(ratio * 4));
        EXPECT_EQ(ck.loss, full.loss) << "ratio " << ratio;
        EXPECT_EQ(ck.grads, full.grads) << "ratio " << ratio << ": gradients must be bitwise equal";
        EXPECT_EQ(full.act_peak - ck.act_peak, k * per_layer) << "ratio " << ratio;
        EXPECT_EQ(ck.ws_peak - full.ws_peak, per_layer) << "one shared recompute set";
    }
}

TEST(GptDeterminism, RepeatableBitsForAFixedThreadCount) {
    // Every reduction has a fixed order (static splits, no atomics), so repeating a run with the
    // same thread count gives the same bits; 3 threads split rows and heads unevenly.
    // (Across thread counts OpenBLAS may pick other kernels for the smaller slices.)
    const int saved = omp_get_max_threads();
    for (int threads : {2, 3}) {
        omp_set_num_threads(threads);
        const TrainResult a = train_once(0.5f), b = train_once(0.5f);
        EXPECT_EQ(a.loss, b.loss) << threads << " threads";
        EXPECT_EQ(a.grads, b.grads) << threads << " threads";
    }
    omp_set_num_threads(saved);
}

TEST(GptLayerRange, TwoStagesEqualTheWholeModel) {
    expect_two_stages_equal_whole(kCfg, [](GPTOptions& o) { o.checkpoint_ratio = 0.5f; }, "wte");
}

TEST(GptContexts, MicroBatchesInFlightTogetherEqualOneAtATime) {
    // 1F1B keeps several micro-batches between forward and backward: F0 F1 F2 B0 F3 B1 B2 B3 over 3
    // contexts (checkpointing half the layers) against F0 B0 F1 B1 ... in one context. Backwards run
    // in the same order, so the gradients sum alike: bitwise equal, and each context's loss too.
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = B;
    o.T = T;
    o.checkpoint_ratio = 0.5f;
    GPT one(kCfg, o, alloc);
    o.contexts = 3;
    GPT three(kCfg, o, alloc);
    EXPECT_EQ(three.num_contexts(), 3);
    for (GPT* g : {&one, &three}) {
        g->init_params(13);
        g->zero_grads();
    }
    std::vector<int*> d_in, d_tgt;
    for (int k = 0; k < 4; ++k) {
        d_in.push_back(static_cast<int*>(alloc.alloc(MemCategory::workspace, N * 4)));
        d_tgt.push_back(static_cast<int*>(alloc.alloc(MemCategory::workspace, N * 4)));
        ops->memcpy_h2d(d_in[k], tokens(10 + k).data(), N * 4);
        ops->memcpy_h2d(d_tgt[k], tokens(20 + k).data(), N * 4);
    }
    std::vector<std::vector<float>> l1, l3(4);
    for (int k = 0; k < 4; ++k) {
        one.forward(d_in[k], nullptr, d_tgt[k], 1.0f / N, true);
        l1.push_back(host_copy(*ops, one.losses(), N));
        one.backward(nullptr, nullptr);
    }
    int ctx_of[4];
    auto fwd = [&](int k, int ctx) {
        ctx_of[k] = ctx;
        three.forward(d_in[k], nullptr, d_tgt[k], 1.0f / N, true, ctx);
    };
    auto bwd = [&](int k) {
        l3[k] = host_copy(*ops, three.losses(ctx_of[k]), N);
        three.backward(nullptr, nullptr, ctx_of[k]);
    };
    fwd(0, 0), fwd(1, 1), fwd(2, 2), bwd(0), fwd(3, 0), bwd(1), bwd(2), bwd(3);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(l1[k], l3[k]) << "micro-batch " << k;
    const size_t n = one.layout().total_numel();
    EXPECT_EQ(host_copy(*ops, one.grads(), n), host_copy(*ops, three.grads(), n));
    EXPECT_THROW(three.forward(d_in[0], nullptr, d_tgt[0], 1.0f, true, 3), std::out_of_range);
    for (int k = 0; k < 4; ++k) {
        alloc.release(d_in[k]);
        alloc.release(d_tgt[k]);
    }
}

TEST(GptInit, Gpt2InitStatisticsAndDeterminism) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = 1;
    o.T = 4;
    GPT a(kCfg, o, alloc), b(kCfg, o, alloc);
    a.init_params(5);
    b.init_params(5);
    const size_t n = a.layout().total_numel();
    const auto pa = host_copy(*ops, a.params(), n), pb = host_copy(*ops, b.params(), n);
    EXPECT_EQ(pa, pb);
    b.init_params(6);
    EXPECT_NE(pa, host_copy(*ops, b.params(), n));
    std::vector<bool> covered(n, false);
    for (const ParamTensor& t : a.layout().tensors()) {
        for (size_t i = 0; i < t.numel; ++i) covered[t.offset + i] = true;
        const float* w = pa.data() + t.offset;
        if (t.shape.size() == 1) {
            const float want = t.name.find("ln_") != std::string::npos && t.name.ends_with(".weight") ? 1.0f : 0.0f;
            for (size_t i = 0; i < t.numel; ++i) ASSERT_EQ(w[i], want) << t.name;
            continue;
        }
        size_t real = t.name == "wte" ? 101 * 48 : t.numel;
        for (size_t i = real; i < t.numel; ++i) ASSERT_EQ(w[i], 0.0f) << "padded wte row";
        double s = 0, s2 = 0;
        for (size_t i = 0; i < real; ++i) s += w[i], s2 += static_cast<double>(w[i]) * w[i];
        const double mean = s / real, sd = std::sqrt(s2 / real - mean * mean);
        const double want = t.name.ends_with("c_proj.weight") ? 0.02 / std::sqrt(8.0) : 0.02;
        // Sample std of n >= 816 normals: relative standard error 1/sqrt(2n) < 2.5%; allow 4 sigma.
        EXPECT_NEAR(sd, want, 4 * want / std::sqrt(2.0 * real)) << t.name;
        EXPECT_NEAR(mean, 0.0, 4 * want / std::sqrt(static_cast<double>(real))) << t.name;
    }
    for (size_t i = 0; i < n; ++i) {
        if (covered[i]) continue;
        ASSERT_EQ(pa[i], 0.0f) << "padding element " << i;
    }
}

TEST(GptHelpers, EvaluateLogitsAtAndErrors) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = B;
    o.T = T;
    GPT gpt(kCfg, o, alloc);
    gpt.init_params(3);
    gpt.zero_grads();
    const auto in = tokens(5), tgt = tokens(6);
    EXPECT_THROW(gpt.backward(nullptr, nullptr), std::logic_error);  // no training forward yet
    const float ev = gpt.evaluate(in.data(), tgt.data());
    // Same forward; the two classifier paths may sum the row in another vector order.
    gpt.forward_backward(in.data(), tgt.data(), 1.0f / N);
    EXPECT_NEAR(ev, gpt.take_loss_sum(), 1e-6);
    const auto row = gpt.logits_at(in.data(), 5);
    const auto all = host_copy(*ops, gpt.logits(), static_cast<size_t>(N) * 128);
    ASSERT_EQ(row.size(), 101u);
    for (int j = 0; j < 101; ++j) EXPECT_EQ(row[j], all[5 * 128 + j]);
    // Initial loss of a GPT-2 init is close to ln(V) (near-uniform predictions).
    EXPECT_NEAR(ev, std::log(101.0), 0.1);

    GPTOptions bad = o;
    bad.T = 18;  // > seq_len
    EXPECT_THROW(GPT(kCfg, bad, alloc), std::invalid_argument);
    bad = o;
    bad.checkpoint_ratio = 1.5f;
    EXPECT_THROW(GPT(kCfg, bad, alloc), std::invalid_argument);
    bad = o;
    bad.l0 = 3, bad.l1 = 3;
    EXPECT_THROW(GPT(kCfg, bad, alloc), std::invalid_argument);
}

TEST(GptFlops, TinyConfigMatchesReference) {
    // docs/reference.md "Throughput anchors": 4 layers, width 256, seq_len 256, vocab 8192 need ~35 MFLOP per token.
    const GPTConfig tiny{4, 4, 256, 256, 8192};
    ParamLayout L(tiny);
    const double f = flops_per_token(tiny, L.num_parameters(), 256);
    EXPECT_EQ(f, 6.0 * L.num_parameters() + 6.0 * 4 * 256 * 256);
    EXPECT_NEAR(f, 35e6, 0.05 * 35e6);
}

}  // namespace
}  // namespace llmtrain::test
