// tests/model/test_gpt_torch.cpp — the whole GPT on the CPU backend against PyTorch (float64,
// tests/model/torch_ref.py) at a tiny config with odd sizes: logits, loss, every parameter gradient,
// and the losses, gradient norms and parameters of 3 clipped AdamW steps with a warmup schedule.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "model/backend.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/grad_clip.hpp"
#include "optim/lr_schedule.hpp"
#include "tests/model/tensor_file.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

const GPTConfig kCfg{2, 3, 48, 17, 101};  // Vp = 128: padded logits must not count
constexpr int B = 3, T = 17, N = B * T, kSteps = 3;

std::vector<float> host_copy(Ops& ops, const void* p, size_t n) {
    std::vector<float> v(n);
    ops.memcpy_d2h(v.data(), p, n * 4);
    ops.synchronize();
    return v;
}

/// The slice of a flat host buffer that holds tensor t.
std::vector<float> slice(const std::vector<float>& flat, const ParamTensor& t) {
    return {flat.begin() + t.offset, flat.begin() + t.offset + t.numel};
}

TEST(GptVsTorch, LogitsLossGradsAndThreeAdamWSteps) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    GPTOptions o;
    o.B = B;
    o.T = T;
    GPT gpt(kCfg, o, alloc);
    const ParamLayout& L = gpt.layout();
    gpt.init_params(1234);

    std::vector<int> tokens(kSteps * N), targets(kSteps * N);
    std::mt19937_64 rng(99);
    for (int i = 0; i < kSteps * N; ++i) {
        tokens[i] = static_cast<int>(rng() % kCfg.vocab_size);
        targets[i] = static_cast<int>(rng() % kCfg.vocab_size);
    }
    targets[N - 1] = kCfg.vocab_size - 1;
    // eps 1e-6 rather than 1e-8: the key bias has an exactly zero gradient (softmax is invariant to
    // a shift of every score in a row), which float64 torch sees as ~1e-20 and fp32 as ~1e-11; Adam
    // turns such noise into steps of lr * |g| / (|g| + eps), below 1e-7 only with the larger eps.
    const AdamWConfig acfg{1e-3f, 0.9f, 0.95f, 1e-6f, 0.1f};
    const float grad_clip = 0.5f;
    LRSchedule sched;
    sched.lr = acfg.lr;
    sched.min_lr = 1e-4f;
    sched.warmup_steps = 1;
    sched.decay_steps = 4;
    std::vector<float> lrs;
    for (int s = 0; s < kSteps; ++s) lrs.push_back(sched.at(s));

    char dir_tmpl[] = "/tmp/llmtrain_torch_ref_XXXXXX";
    ASSERT_NE(mkdtemp(dir_tmpl), nullptr);
    const std::string dir = dir_tmpl, in_path = dir + "/in.bin", out_path = dir + "/out.bin";
    {
        TensorWriter w(in_path);
        const int cfg[7] = {kCfg.n_layer, kCfg.n_head, kCfg.n_embd, kCfg.seq_len, kCfg.vocab_size, B, T};
        const float hyper[5] = {acfg.beta1, acfg.beta2, acfg.eps, acfg.weight_decay, grad_clip};
        w.put("config", {7}, cfg);
        w.put("hyper", {5}, hyper);
        w.put("lrs", {kSteps}, lrs.data());
        w.put("tokens", {kSteps, B, T}, tokens.data());
        w.put("targets", {kSteps, B, T}, targets.data());
        const auto params = host_copy(*ops, gpt.params(), L.total_numel());
        for (const ParamTensor& t : L.tensors()) w.put("param." + t.name, t.shape, params.data() + t.offset);
    }
    const std::string cmd = std::string(LLMTRAIN_PYTHON) + " " + TORCH_REF_SCRIPT + " " + in_path + " " + out_path;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "failed: " << cmd;
    auto ref = read_tensors(out_path);
    std::filesystem::remove_all(dir);

    // Batch 0: logits (eval forward), then loss and gradients.
    int* d_tok = static_cast<int*>(alloc.alloc(MemCategory::workspace, N * 4));
    ops->memcpy_h2d(d_tok, tokens.data(), N * 4);
    gpt.forward(d_tok, nullptr, nullptr, 0.0f, false);
    const auto logits = host_copy(*ops, gpt.logits(), static_cast<size_t>(N) * kCfg.padded_vocab_size());
    // fp32 network of depth 2 vs float64: logits are O(1); errors ~1e-6.
    expect_close("logits", logits, ref["logits"].data, 1e-4, 1e-5);
    alloc.release(d_tok);

    gpt.zero_grads();
    gpt.forward_backward(tokens.data(), targets.data(), 1.0f / N);
    const float loss = static_cast<float>(gpt.take_loss_sum());
    EXPECT_NEAR(loss, ref["loss"].data[0], 1e-5);
    const auto grads = host_copy(*ops, gpt.grads(), L.total_numel());
    for (const ParamTensor& t : L.tensors()) {
        const auto& want = ref["grad." + t.name].data;
        // fp32 gradients: relative 1e-4 of each element, plus 1e-4 of the tensor's largest entry
        // for entries that nearly cancel.
        expect_close("grad " + t.name, slice(grads, t), want, 1e-4, 1e-4 * max_abs(want));
    }

    for (int l = 0; l < kCfg.n_layer; ++l) {  // the key bias: zero up to fp32 noise
        const ParamTensor& t = L.find("h." + std::to_string(l) + ".attn.c_attn.bias");
        const std::vector<float> g = slice(grads, t);
        EXPECT_LT(max_abs(std::vector<float>(g.begin() + kCfg.n_embd, g.begin() + 2 * kCfg.n_embd)), 1e-9);
    }

    // Three AdamW steps from the same init: zero grads, one micro-batch, clip, step.
    gpt.init_params(1234);
    AdamW adamw(alloc, L, acfg, false);
    float* scratch = static_cast<float*>(alloc.alloc(MemCategory::workspace, 4));
    bool clipped = false;
    for (int s = 0; s < kSteps; ++s) {
        gpt.zero_grads();
        gpt.forward_backward(tokens.data() + s * N, targets.data() + s * N, 1.0f / N);
        const float l = static_cast<float>(gpt.take_loss_sum());
        const float norm = grad_norm(*ops, gpt.grads(), L.total_numel(), scratch);
        EXPECT_NEAR(l, ref["loss_step" + std::to_string(s)].data[0], 1e-5) << "step " << s;
        const double want_norm = ref["norm_step" + std::to_string(s)].data[0];
        EXPECT_NEAR(norm, want_norm, 1e-4 * want_norm) << "step " << s;
        const float scale = clip_scale(norm, grad_clip);
        clipped |= scale < 1.0f;
        adamw.step(gpt.params(), gpt.grads(), lrs[s], scale);
    }
    EXPECT_TRUE(clipped) << "grad_clip should be active in this test";
    EXPECT_EQ(adamw.t(), kSteps);
    alloc.release(scratch);
    const auto params = host_copy(*ops, gpt.params(), L.total_numel());
    for (const ParamTensor& t : L.tensors()) {
        // Each step moves a weight by about lr = 1e-3 (Adam normalizes); fp32 gradient errors
        // change that by far less than 1e-6 unless a gradient is ~0 (none is, here).
        expect_close("param " + t.name, slice(params, t), ref["param." + t.name].data, 0.0, 1e-6);
    }
}

}  // namespace
}  // namespace llmtrain::test
