// tests/model/test_llama_torch.cpp — the Llama GPT on the CPU backend against an independent
// PyTorch Llama (tests/model/llama_ref.py: float64, written from HuggingFace's documented
// semantics) at tiny configs with odd sizes: logits, loss and every parameter gradient. Two shapes:
// grouped-query attention (4 query heads over 2 key/value heads) with a tied head and the default
// MLP width, and multi-query attention (1 key/value head) with an untied lm_head, another rotary
// base and norm epsilon. And the mixture-of-experts Llama (model.moe): each block's MLP replaced by
// routed SwiGLU experts (softmax top-2 of 4, shared experts; sigmoid top-1 of 3) against the MoE
// layer of tests/model/moe_ref.py inside llama_ref.py: the cross-entropy, the balance losses' sum and
// the gradients of their sum. And Qwen3's attention (model.qk_norm, model.head_dim): each q and k head
// RMS-normalized before the rotation, a head size other than n_embd / n_head, dense and with experts.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "model/arch.hpp"
#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "tests/model/tensor_file.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

std::vector<float> host_copy(Ops& ops, const void* p, size_t n) {
    std::vector<float> v(n);
    ops.memcpy_d2h(v.data(), p, n * 4);
    ops.synchronize();
    return v;
}

std::vector<float> slice(const std::vector<float>& flat, const ParamTensor& t) {
    return {flat.begin() + t.offset, flat.begin() + t.offset + t.numel};
}

GPTConfig llama(int n_kv_head, bool tied, float eps, float theta) {
    GPTConfig c{2, 4, 48, 17, 101};  // head size 12, Vp = 128: padded logits must not count
    c.arch = Arch::llama;
    c.n_kv_head = n_kv_head;
    c.multiple_of = 24;  // default width: floor(8*48/3) = 128 rounded up to 144
    c.norm_eps = eps;
    c.rope_theta = theta;
    c.tie_embeddings = tied;
    return c;
}

void check_against_torch(const GPTConfig& cfg, uint64_t seed) {
    constexpr int B = 3, T = 17, N = B * T;
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = B;
    o.T = T;
    GPT gpt(cfg, o, alloc);
    const ParamLayout& L = gpt.layout();
    gpt.init_params(seed);
    std::vector<int> tokens(N), targets(N);
    std::mt19937_64 rng(seed + 1);
    for (int i = 0; i < N; ++i) {
        tokens[i] = static_cast<int>(rng() % cfg.vocab_size);
        targets[i] = static_cast<int>(rng() % cfg.vocab_size);
    }
    // Larger weights than the init's 0.02 so attention and the MLP are far from linear: the norm
    // weights and every matrix scaled up (the same values go to both sides).
    auto params = host_copy(*ops, gpt.params(), L.total_numel());
    for (const ParamTensor& t : L.tensors())
        for (size_t i = 0; i < t.numel; ++i)
            params[t.offset + i] = t.shape.size() == 1 ? 1.0f + 0.5f * std::sin(float(i)) : params[t.offset + i] * 15.0f;
    gpt.store().load_params(params.data());

    char dir_tmpl[] = "/tmp/llmtrain_llama_ref_XXXXXX";
    ASSERT_NE(mkdtemp(dir_tmpl), nullptr);
    const std::string dir = dir_tmpl, in_path = dir + "/in.bin", out_path = dir + "/out.bin";
    {
        TensorWriter w(in_path);
        const int c[8] = {cfg.n_layer, cfg.n_head, cfg.n_kv_head, cfg.n_embd, cfg.vocab_size, cfg.tie_embeddings, B, T};
        const float hyper[2] = {cfg.norm_eps, cfg.rope_theta};
        w.put("config", {8}, c);
        w.put("hyper", {2}, hyper);
        if (cfg.moe_experts > 0) {
            const int moe[5] = {cfg.moe_experts, cfg.moe_top_k, cfg.moe_shared_experts, ArchSpec(cfg).Fe,
                                cfg.moe_sigmoid};
            w.put("moe", {5}, moe);
            w.put("moe_hyper", {1}, &cfg.moe_aux_loss_coef);
        }
        if (cfg.qk_norm || cfg.head_dim > 0) {
            const int qk[2] = {cfg.head_dim, cfg.qk_norm};
            w.put("qk", {2}, qk);
        }
        w.put("tokens", {B, T}, tokens.data());
        w.put("targets", {B, T}, targets.data());
        for (const ParamTensor& t : L.tensors()) w.put("param." + t.name, t.shape, params.data() + t.offset);
    }
    const std::string cmd =
        std::string(LLMTRAIN_PYTHON) + " " + LLAMA_REF_SCRIPT + " " + in_path + " " + out_path;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "failed: " << cmd;
    auto ref = read_tensors(out_path);
    std::filesystem::remove_all(dir);

    gpt.zero_grads();
    gpt.forward_backward(tokens.data(), targets.data(), 1.0f / N);
    const double loss = gpt.take_loss_sum();
    const double want_loss = ref["loss"].data[0];
    EXPECT_LE(std::fabs(loss - want_loss), 1e-5 * std::fabs(want_loss)) << "loss " << loss << " want " << want_loss;
    const double aux = gpt.moe_aux_loss(), want_aux = ref["aux"].data[0];  // MoE's balance losses (0 without)
    EXPECT_LE(std::fabs(aux - want_aux), 1e-6 * std::max(1.0, std::fabs(want_aux))) << "aux " << aux << " want " << want_aux;
    std::printf("loss %.9g (torch %.9g), aux %.9g (torch %.9g)\n", loss, want_loss, aux, want_aux);
    // Logits within 1e-5 of the largest one (fp32 through 2 layers against float64); the forward
    // without targets leaves them in place.
    int* d_tok = static_cast<int*>(alloc.alloc(MemCategory::workspace, N * 4));
    ops->memcpy_h2d(d_tok, tokens.data(), N * 4);
    gpt.forward(d_tok, nullptr, nullptr, 0.0f, false);
    const auto logits = host_copy(*ops, gpt.logits(), static_cast<size_t>(N) * cfg.padded_vocab_size());
    alloc.release(d_tok);
    const auto& want_logits = ref["logits"].data;
    expect_close("logits", logits, want_logits, 0.0, 1e-5 * max_abs(want_logits));
    const auto grads = host_copy(*ops, gpt.grads(), L.total_numel());
    double worst = 0.0;
    for (const ParamTensor& t : L.tensors()) {
        const auto& want = ref["grad." + t.name].data;
        ASSERT_EQ(want.size(), t.numel) << t.name;
        // fp32 gradients: 1e-4 relative per element, plus 1e-4 of the tensor's largest entry for
        // entries that nearly cancel (the same tolerance as the GPT-2 test).
        expect_close("grad " + t.name, slice(grads, t), want, 1e-4, 1e-4 * max_abs(want));
        const auto got = slice(grads, t);
        for (size_t i = 0; i < got.size(); ++i)  // the measured error, printed for the docs
            worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / std::max(max_abs(want), 1e-30));
    }
    std::printf("largest gradient error: %.3g of its tensor's largest entry\n", worst);
}

TEST(LlamaVsTorch, GroupedQueryTiedLogitsLossAndGrads) { check_against_torch(llama(2, true, 1e-5f, 10000.0f), 1234); }

TEST(LlamaVsTorch, MultiQueryUntiedLogitsLossAndGrads) { check_against_torch(llama(1, false, 1e-6f, 500.0f), 4321); }

GPTConfig moe(int experts, int top_k, int shared, int expert_ffn, bool sigmoid, float alpha) {
    GPTConfig c = llama(2, true, 1e-5f, 10000.0f);
    c.moe_experts = experts, c.moe_top_k = top_k, c.moe_shared_experts = shared, c.moe_expert_ffn = expert_ffn;
    c.moe_sigmoid = sigmoid, c.moe_aux_loss_coef = alpha;
    return c;
}

// Mixtral-style softmax top-2 of 4 experts of width 40 with one shared expert (DeepSeek-V3's), alpha 0.1.
TEST(LlamaVsTorch, MoeSoftmaxTop2SharedLossAuxAndGrads) { check_against_torch(moe(4, 2, 1, 40, false, 0.1f), 77); }

// DeepSeek-V3-style sigmoid scores, top-1 of 3 experts of the dense width (expert_ffn 0), no shared.
TEST(LlamaVsTorch, MoeSigmoidTop1LossAuxAndGrads) { check_against_torch(moe(3, 1, 0, 0, true, 0.05f), 78); }

GPTConfig qwen3(int head_dim, int experts) {
    GPTConfig c = moe(experts, 2, 0, 40, false, 0.1f);
    c.qk_norm = true;
    c.head_dim = head_dim;
    c.tie_embeddings = experts == 0;
    return c;
}

// Qwen3 dense: QK-norm with head size 16 (q_proj (64, 48): wider than n_embd), tied.
TEST(LlamaVsTorch, Qwen3QkNormHeadDim16LogitsLossAndGrads) { check_against_torch(qwen3(16, 0), 91); }

// Qwen3-MoE: QK-norm, head size 8 (narrower), softmax top-2 of 4 experts, untied.
TEST(LlamaVsTorch, Qwen3MoeQkNormHeadDim8LossAuxAndGrads) { check_against_torch(qwen3(8, 4), 92); }

}  // namespace
}  // namespace llmtrain::test
