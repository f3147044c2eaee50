// tests/model/test_moe_model.cpp — the mixture-of-experts Llama (model.moe; docs/model.md "Mixture of
// experts") as a model, beyond its numerics (those are test_llama_torch's MoE cases against PyTorch):
//  - the dry run's counting backend allocates exactly what the CPU model does, per memory category,
//    with and without recomputation (the planner and --dry-run read these numbers);
//  - recomputed layers give the same losses, balance losses and gradients, bit for bit;
//  - the parameter count against its closed form, and the FLOPs per token counting ACTIVE parameters
//    (top_k of n_experts) against the dense Llama of the same active width;
//  - what it refuses yet (training.fp8, a layer range), naming model.moe.
#include <cstring>

#include "model/arch.hpp"
#include "model/backend.hpp"
#include "model/dry_ops.hpp"
#include "model/gpt.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

GPTConfig moe_config(int shared) {
    GPTConfig c{2, 4, 32, 16, 100};
    c.arch = Arch::llama;
    c.n_kv_head = 2;
    c.intermediate_size = 48;
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_shared_experts = shared, c.moe_expert_ffn = 24;
    c.moe_aux_loss_coef = 0.05f;
    return c;
}

GPTOptions options(float ratio) {
    GPTOptions o;
    o.B = 2;
    o.T = 16;
    o.checkpoint_ratio = ratio;
    return o;
}

TEST(MoeModel, DryRunCountsWhatTheModelAllocates) {
    for (int shared : {0, 1})
        for (float ratio : {0.0f, 0.5f}) {
            auto cpu = make_backend("cpu", "fp32");
            auto dry = make_dry_ops(DType::f32);
            Allocator a(*cpu), b(*dry);
            GPT m(moe_config(shared), options(ratio), a), d(moe_config(shared), options(ratio), b);
            for (int c = 0; c < static_cast<int>(MemCategory::count); ++c) {
                const auto cat = static_cast<MemCategory>(c);
                EXPECT_EQ(a.current(cat), b.current(cat)) << "category " << c << " shared " << shared << " ratio " << ratio;
                EXPECT_EQ(a.peak(cat), b.peak(cat)) << "category " << c;
            }
            EXPECT_GT(a.current(MemCategory::activations), 0u);
        }
}

struct TrainRun {
    double loss = 0, aux = 0;
    std::vector<float> grads;
};

TrainRun train_once(const GPTConfig& cfg, float ratio) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    const GPTOptions o = options(ratio);
    GPT gpt(cfg, o, alloc);
    gpt.init_params(7);
    const int N = o.B * o.T;
    std::vector<int> in(N), tgt(N);
    for (int i = 0; i < N; ++i) in[i] = (i * 37 + 11) % cfg.vocab_size, tgt[i] = (i * 53 + 5) % cfg.vocab_size;
    gpt.zero_grads();
    gpt.forward_backward(in.data(), tgt.data(), 1.0f / N);
    TrainRun r;
    r.loss = gpt.take_loss_sum();
    r.aux = gpt.take_moe_aux_sum();
    r.grads.resize(gpt.layout().total_numel());
    ops->memcpy_d2h(r.grads.data(), gpt.grads(), r.grads.size() * 4);
    ops->synchronize();
    return r;
}

TEST(MoeModel, RecomputedLayersGiveTheSameBits) {
    for (int shared : {0, 1}) {
        const TrainRun a = train_once(moe_config(shared), 0.0f), b = train_once(moe_config(shared), 1.0f);
        EXPECT_EQ(a.loss, b.loss);
        EXPECT_EQ(a.aux, b.aux);
        EXPECT_GT(a.aux, 0.0);
        ASSERT_EQ(a.grads.size(), b.grads.size());
        EXPECT_EQ(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * 4), 0) << "shared " << shared;
    }
}

TEST(MoeModel, ParametersAndActiveFlops) {
    const GPTConfig c = moe_config(1);
    const ParamLayout L(c);
    // Closed form: table Vp*C; per layer q (C,C), k and v (C/2 each: 2 of 4 heads, C), o (C,C), router
    // (E,C), experts E*3*Fe*C, shared 3*(1*Fe)*C, two norms; the final norm.
    const int64_t C = 32, Vp = 128, E = 4, Fe = 24, kv = 16;
    const int64_t layer = C * C + 2 * kv * C + C * C + E * C + E * 3 * Fe * C + 3 * Fe * C + 2 * C;
    EXPECT_EQ(int64_t(L.num_parameters()), Vp * C + 2 * layer + C);
    // Active per token: top_k = 2 of the 4 experts, so the FLOPs are those of a model with 2 experts.
    GPTConfig two = c;
    two.moe_experts = 2;
    const ParamLayout L2(two);
    const ArchSpec s(c), s2(two);
    EXPECT_EQ(s.flops_per_token(L.num_parameters(), 16),
              s2.flops_per_token(L2.num_parameters(), 16) + 6.0 * 2 * 2 * C);  // + the 2 extra router rows x 2 layers
    EXPECT_EQ(s.flop_free_params(), 2 * (E - 2) * 3 * Fe * C);
}

TEST(MoeModel, RefusesWhatItDoesNotRunYet) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    auto message = [&](GPTOptions o) {
        try {
            GPT g(moe_config(0), o, alloc);
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    GPTOptions fp8 = options(0.0f);
    fp8.fp8 = Fp8Recipe::tensorwise;
    EXPECT_NE(message(fp8).find("model.moe: mixture of experts does not run with training.fp8"), std::string::npos)
        << message(fp8);
    GPTOptions range = options(0.0f);  // a pipeline stage's layer range builds (issue 45)
    range.l1 = 1;
    EXPECT_EQ(message(range), "no error");
    GPTConfig gpt2 = moe_config(0);
    gpt2.arch = Arch::gpt2, gpt2.n_kv_head = 0, gpt2.intermediate_size = 0;
    try {
        ArchSpec s(gpt2);
        ADD_FAILURE() << "gpt2 with MoE accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("model.moe.n_experts"), std::string::npos) << e.what();
    }
    GPTConfig k5 = moe_config(0);
    k5.moe_top_k = 5;
    try {
        ArchSpec s(k5);
        ADD_FAILURE() << "top_k 5 of 4 accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("model.moe.top_k"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace llmtrain::test
