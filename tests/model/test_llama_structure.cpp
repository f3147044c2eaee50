// tests/model/test_llama_structure.cpp — the Llama architecture's layout and model properties:
// HuggingFace-like names, shapes, packing and TP splits from the description (model/arch.hpp);
// errors naming the key; activation checkpointing bitwise equal to none with the documented bytes
// per layer; two layer ranges chained equal the whole model (tied and untied heads); the FLOPs per
// token; the init's scales; Qwen3's QK-norm and free head size (layout, init, FLOPs, recomputation).
// GPT-2's side of each is in test_param_layout.cpp / test_gpt_structure.cpp.
#include <cmath>

#include "model/arch.hpp"
#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "tests/model/structure_test_util.hpp"

namespace llmtrain::test {
namespace {

GPTConfig llama(int n_kv_head = 2, bool tied = true) {
    GPTConfig c{4, 4, 48, 17, 101};  // head size 12, Vp 128
    c.arch = Arch::llama;
    c.n_kv_head = n_kv_head;
    c.intermediate_size = 72;
    c.tie_embeddings = tied;
    return c;
}
/// N token ids of the tiny Llama's vocabulary (101) from seed.
std::vector<int> tokens(uint64_t seed) { return test::tokens(seed, 101); }

TEST(LlamaLayout, NamesShapesPackingAndSplits) {
    const ParamLayout L(llama(2, false));
    // 1 embedding unit, 4 layers, the final unit (norm + untied head).
    ASSERT_EQ(L.units().size(), 6u);
    const ParamTensor& q = L.find("model.layers.1.self_attn.q_proj.weight");
    const ParamTensor& k = L.find("model.layers.1.self_attn.k_proj.weight");
    const ParamTensor& v = L.find("model.layers.1.self_attn.v_proj.weight");
    EXPECT_EQ(q.shape, (std::vector<int64_t>{48, 48}));
    EXPECT_EQ(k.shape, (std::vector<int64_t>{24, 48}));  // 2 key/value heads of 12
    EXPECT_EQ(k.offset, q.offset + q.numel);              // packed: one (96, 48) matrix
    EXPECT_EQ(v.offset, k.offset + k.numel);
    EXPECT_EQ(L.find("model.layers.1.mlp.up_proj.weight").offset,
              L.find("model.layers.1.mlp.gate_proj.weight").offset + 72 * 48);
    EXPECT_EQ(L.find("model.layers.1.mlp.down_proj.weight").shape, (std::vector<int64_t>{48, 72}));
    EXPECT_EQ(L.find("model.layers.3.post_attention_layernorm.weight").shape, (std::vector<int64_t>{48}));
    EXPECT_EQ(L.find("lm_head.weight").unit, 5);
    EXPECT_EQ(L.find("model.embed_tokens.weight").shape, (std::vector<int64_t>{128, 48}));
    EXPECT_THROW(L.find("wpe"), std::out_of_range);  // no learned positions, no biases
    EXPECT_THROW(L.find("model.layers.0.self_attn.q_proj.bias"), std::out_of_range);
    // Parameters: embed + head (Vp C each) + norm C + per layer q,o (C^2 each), k,v (24 C each), 3 F C, 2 C.
    const size_t C = 48, F = 72, Vp = 128, layer = 2 * C * C + 2 * 24 * C + 3 * F * C + 2 * C;
    EXPECT_EQ(L.num_parameters(), 2 * Vp * C + C + 4 * layer);
    EXPECT_EQ(size_t(ArchSpec(llama(2, false)).layer_params()), layer);
    // Tied: no lm_head; the final unit holds the norm alone.
    EXPECT_THROW(ParamLayout(llama()).find("lm_head.weight"), std::out_of_range);
    // tp 2: q, k, v, gate, up by rows (heads / columns), o and down by columns, the vocabulary by rows.
    const ParamLayout L2(llama(2, false), 1, 2, 1);
    EXPECT_EQ(L2.find("model.layers.0.self_attn.k_proj.weight").shape, (std::vector<int64_t>{12, 48}));
    EXPECT_EQ(L2.find("model.layers.0.self_attn.o_proj.weight").shape, (std::vector<int64_t>{48, 24}));
    EXPECT_EQ(L2.find("model.layers.0.mlp.down_proj.weight").split, TPSplit::row);
    EXPECT_EQ(L2.find("lm_head.weight").split, TPSplit::vocab);
    EXPECT_EQ(L2.find("model.layers.0.self_attn.v_proj.weight").offset,
              L2.find("model.layers.0.self_attn.k_proj.weight").offset + 12 * 48);
}

TEST(LlamaLayout, ErrorsNameTheKey) {
    auto message = [](GPTConfig c, int tp = 1) {
        try {
            ParamLayout L(c, 1, tp, 0);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    GPTConfig c = llama(3);
    EXPECT_NE(message(c).find("model.n_kv_head: expected a divisor of model.n_head (4)"), std::string::npos);
    c = llama();
    c.n_head = 8;  // head size 6: even, fine; 16 heads of 3 is odd
    EXPECT_EQ(message(c), "no error");
    c.n_head = 16;
    c.n_kv_head = 4;
    EXPECT_NE(message(c).find("model.n_head: rotary positions"), std::string::npos);
    EXPECT_NE(message(llama(2), 4).find("must divide n_kv_head (2)"), std::string::npos);
    GPTConfig g{2, 4, 48, 17, 101};
    g.tie_embeddings = false;
    EXPECT_NE(message(g).find("model.tie_embeddings"), std::string::npos);
    g = GPTConfig{2, 4, 48, 17, 101};
    g.n_kv_head = 2;
    EXPECT_NE(message(g).find("model.n_kv_head: expected 0 or model.n_head"), std::string::npos);
    EXPECT_EQ(default_intermediate_size(4096, 256), 11008);  // Llama 2 7B's width
    EXPECT_EQ(default_intermediate_size(48, 24), 144);
}

struct LlamaRun {
    float loss;
    std::vector<float> grads;
    size_t act_peak, ws_peak;
};

LlamaRun train_once(const GPTConfig& cfg, int ckpt_layers) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = B;
    o.T = T;
    o.checkpoint_layers = ckpt_layers;
    GPT gpt(cfg, o, alloc);
    gpt.init_params(7);
    gpt.zero_grads();
    const auto in = tokens(1), tgt = tokens(2);
    gpt.forward_backward(in.data(), tgt.data(), 1.0f / N);
    gpt.forward_backward(tgt.data(), in.data(), 1.0f / N);  // a second micro-batch accumulates
    LlamaRun r;
    r.loss = static_cast<float>(gpt.take_loss_sum());
    r.grads = host_copy(*ops, gpt.grads(), gpt.layout().total_numel());
    r.act_peak = alloc.peak(MemCategory::activations);
    r.ws_peak = alloc.peak(MemCategory::workspace);
    return r;
}

size_t a256(size_t b) { return (b + 255) / 256 * 256; }

TEST(LlamaGpt, CheckpointingIsBitwiseAndSavesTheDocumentedBytes) {
    const GPTConfig cfg = llama();
    const LlamaRun full = train_once(cfg, 0);
    // Bytes a non-checkpointed layer keeps (fp32): ln1, res2, ln2, atty (N,C); qkv (N,(NH+2NKV)HS)
    // = (N,96); [gate | up] (N,2F) and silu(gate)*up (N,F); 2 RMSNorm rstd (N); lse (B,NH,T).
    const size_t C = 48, F = 72, per_layer = 4 * a256(N * C * 4) + a256(N * 96 * 4) + a256(N * 2 * F * 4) +
                                           a256(N * F * 4) + 2 * a256(N * 4) + a256(B * 4 * T * 4);
    for (int k : {1, 4}) {
        const LlamaRun ck = train_once(cfg, k);
        EXPECT_EQ(ck.loss, full.loss);
        EXPECT_EQ(ck.grads, full.grads) << k << " checkpointed layers: gradients must be bitwise equal";
        EXPECT_EQ(full.act_peak - ck.act_peak, size_t(k) * per_layer);
        EXPECT_EQ(ck.ws_peak - full.ws_peak, per_layer) << "one shared recompute set";
    }
    EXPECT_TRUE(std::isfinite(full.loss));
    EXPECT_NEAR(full.loss, 2 * std::log(101.0), 0.1);  // two micro-batches near the uniform loss at init
}

TEST(LlamaGpt, TwoStagesEqualTheWholeModelTiedAndUntied) {
    for (bool tied : {true, false}) {
        SCOPED_TRACE(tied ? "tied" : "untied");
        expect_two_stages_equal_whole(llama(1, tied), [](GPTOptions& o) { o.checkpoint_layers = 1; },
                                      tied ? "model.embed_tokens.weight" : "");
    }
}

TEST(LlamaGpt, FlopsPerTokenAndInitScales) {
    // 6 N + 6 L T C; an untied model leaves its input table (a lookup) out of N.
    const GPTConfig tied = llama(), untied = llama(2, false);
    const size_t nt = ParamLayout(tied).num_parameters(), nu = ParamLayout(untied).num_parameters();
    EXPECT_EQ(flops_per_token(tied, nt, 17), 6.0 * nt + 6.0 * 4 * 17 * 48);
    EXPECT_EQ(flops_per_token(untied, nu, 17), 6.0 * (nu - 128 * 48) + 6.0 * 4 * 17 * 48);
    EXPECT_EQ(nu - nt, 128u * 48);
    // Init: norms 1, matrices N(0, 0.02), o_proj and down_proj N(0, 0.02/sqrt(2 L)), padded vocab rows 0.
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = 1;
    o.T = 4;
    GPT gpt(untied, o, alloc);
    gpt.init_params(5);
    const auto p = host_copy(*ops, gpt.params(), gpt.layout().total_numel());
    auto rms = [&](const std::string& name, size_t rows = 0) {
        const ParamTensor& t = gpt.layout().find(name);
        const size_t n = rows ? rows * 48 : t.numel;
        double s = 0;
        for (size_t i = 0; i < n; ++i) s += double(p[t.offset + i]) * p[t.offset + i];
        return std::sqrt(s / double(n));
    };
    EXPECT_EQ(rms("model.layers.2.input_layernorm.weight"), 1.0);
    EXPECT_NEAR(rms("model.layers.0.mlp.gate_proj.weight"), 0.02, 0.002);
    EXPECT_NEAR(rms("model.layers.0.mlp.down_proj.weight"), 0.02 / std::sqrt(8.0), 0.0008);
    EXPECT_NEAR(rms("model.layers.0.self_attn.o_proj.weight"), 0.02 / std::sqrt(8.0), 0.0008);
    EXPECT_NEAR(rms("lm_head.weight", 101), 0.02, 0.002);
    const ParamTensor& head = gpt.layout().find("lm_head.weight");
    for (size_t i = 101 * 48; i < head.numel; ++i) ASSERT_EQ(p[head.offset + i], 0.0f);
}

TEST(LlamaGpt, Qwen3QkNormHeadDimLayoutInitFlopsAndCheckpointing) {
    // model.qk_norm with head_dim 16 (4 heads: 64 attention channels on a width of 48).
    GPTConfig c = llama();
    c.qk_norm = true;
    c.head_dim = 16;
    const ParamLayout L(c);
    EXPECT_EQ(L.find("model.layers.1.self_attn.q_proj.weight").shape, (std::vector<int64_t>{64, 48}));
    EXPECT_EQ(L.find("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{32, 48}));
    EXPECT_EQ(L.find("model.layers.1.self_attn.o_proj.weight").shape, (std::vector<int64_t>{48, 64}));
    for (const char* n : {"model.layers.3.self_attn.q_norm.weight", "model.layers.3.self_attn.k_norm.weight"}) {
        EXPECT_EQ(L.find(n).shape, (std::vector<int64_t>{16}));
        EXPECT_FALSE(L.find(n).decay);
    }
    const int64_t layer = 64 * 48 + 2 * 32 * 48 + 48 * 64 + 3 * 72 * 48 + 2 * 48 + 2 * 16;
    EXPECT_EQ(ArchSpec(c).layer_params(), layer);
    const size_t n = L.num_parameters();
    EXPECT_EQ(flops_per_token(c, n, 17), 6.0 * n + 6.0 * 4 * 17 * 64);  // scores over NH * head_dim
    {  // the norms' weights start at 1
        auto ops = make_backend("cpu", "fp32");
        Allocator alloc(*ops);
        GPTOptions o;
        o.B = 1;
        o.T = 4;
        GPT gpt(c, o, alloc);
        gpt.init_params(5);
        const auto p = host_copy(*ops, gpt.params(), gpt.layout().total_numel());
        const ParamTensor& k = gpt.layout().find("model.layers.0.self_attn.k_norm.weight");
        for (size_t i = 0; i < k.numel; ++i) ASSERT_EQ(p[k.offset + i], 1.0f);
    }
    // Recomputing every layer (q|k before the norm and its 1/rms rebuilt) is bitwise the same.
    const LlamaRun none = train_once(c, 0), all = train_once(c, 4);
    EXPECT_EQ(none.loss, all.loss);
    EXPECT_EQ(none.grads, all.grads);
    EXPECT_LT(all.act_peak, none.act_peak);
}

}  // namespace
}  // namespace llmtrain::test
