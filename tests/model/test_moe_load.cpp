// tests/model/test_moe_load.cpp — GPT::take_moe_load, the tokens routed to each expert of each layer
// (docs/model.md "Mixture of experts": the trainer logs them, app/trainer_moe.cpp). References, all
// closed forms, exact (integer counts):
//  - every layer's counts sum to (micro-batches queued) * B*T*top_k: each (token, slot) pair once;
//  - a router of zeros gives equal scores, and top-k breaks ties toward the lower expert index
//    (model/moe.hpp), so every token goes to experts 0..k-1: counts (M*N, M*N, 0, 0) per layer;
//  - an evaluate() between does not count; a second take without a step gives zeros; recomputed
//    layers (checkpoint_ratio 1) give the same counts as stored ones.
#include <cstring>
#include <numeric>

#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

GPTConfig moe_config() {
    GPTConfig c{2, 4, 32, 16, 100};
    c.arch = Arch::llama;
    c.n_kv_head = 2;
    c.intermediate_size = 48;
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_shared_experts = 0, c.moe_expert_ffn = 24;
    c.moe_aux_loss_coef = 0.05f;
    return c;
}

/// Counts after `steps` forward_backward calls (an evaluate between them), router weights zeroed
/// when zero_router; `second` gets a take with nothing queued.
std::vector<int64_t> loads(float ratio, bool zero_router, int steps, std::vector<int64_t>* second = nullptr) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = 2, o.T = 16, o.checkpoint_ratio = ratio;
    const GPTConfig cfg = moe_config();
    GPT gpt(cfg, o, alloc);
    gpt.init_params(7);
    if (zero_router)
        for (int l = 0; l < cfg.n_layer; ++l) {
            const ParamTensor& t = gpt.layout().find("model.layers." + std::to_string(l) + ".mlp.router.weight");
            std::memset(static_cast<float*>(gpt.params()) + t.offset, 0, t.numel * 4);  // CPU: host memory
        }
    const int N = o.B * o.T;
    std::vector<int> in(N), tgt(N);
    for (int i = 0; i < N; ++i) in[i] = (i * 37 + 11) % cfg.vocab_size, tgt[i] = (i * 53 + 5) % cfg.vocab_size;
    gpt.zero_grads();
    for (int s = 0; s < steps; ++s) {
        gpt.forward_backward(in.data(), tgt.data(), 1.0f / N);
        in[s] = (in[s] + 1) % cfg.vocab_size;  // another batch
        gpt.evaluate(in.data(), tgt.data());   // not counted
    }
    std::vector<int64_t> c;
    gpt.take_moe_load(c);
    if (second) gpt.take_moe_load(*second);
    return c;
}

TEST(MoeLoad, EachLayerCountsEveryPairOnce) {
    const int E = 4, k = 2, N = 32, M = 3;
    std::vector<int64_t> again;
    const std::vector<int64_t> c = loads(0.0f, false, M, &again);
    ASSERT_EQ(c.size(), size_t(2 * E));
    for (int l = 0; l < 2; ++l) {
        EXPECT_EQ(std::accumulate(c.begin() + l * E, c.begin() + (l + 1) * E, int64_t(0)), int64_t(M) * N * k) << l;
        for (int e = 0; e < E; ++e) EXPECT_GE(c[size_t(l * E + e)], 0);
    }
    EXPECT_EQ(again, std::vector<int64_t>(size_t(2 * E), 0));  // nothing queued since
    EXPECT_EQ(loads(1.0f, false, M), c);                       // recomputed layers: the same routing
}

TEST(MoeLoad, AZeroRouterSendsEveryTokenToTheFirstKExperts) {
    const int N = 32, M = 2;
    const std::vector<int64_t> want = {M * N, M * N, 0, 0, M * N, M * N, 0, 0};
    EXPECT_EQ(loads(0.0f, true, M), want);
}

TEST(MoeLoad, ADenseModelHasNone) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = 1, o.T = 8;
    GPT gpt(GPTConfig{1, 2, 16, 8, 50}, o, alloc);
    std::vector<int64_t> c = {1, 2};
    gpt.take_moe_load(c);
    EXPECT_TRUE(c.empty());
}

}  // namespace
}  // namespace llmtrain::test
