// tests/cuda/test_cuda_llama_gpt.cpp — the whole Llama model (model.arch = "llama": RMSNorm, RoPE,
// SwiGLU, grouped-query attention, untied head) on the emulated CUDA backend against the CPU
// backend: one forward/backward's loss and gradients tensor by tensor, on the native and cublas
// attention paths; and the Allocator's byte count against the emulator's live device memory, and
// its activations/params/grads against the dry run's (the counting backend --dry-run builds on).
// Config: n_layer 2, n_head 4, n_kv_head 2, n_embd 64 (head size 16), intermediate_size 48,
// seq_len 17, vocab 101 (padded 128), B 3, T 17. In bf16 the CPU starts from the bf16-rounded
// weights. Tolerances are test_cuda_gpt.cpp's GPT-2 ones: loss 1e-5 (fp32) / 1e-3 (bf16) relative;
// gradients per tensor |cuda - cpu| <= tol (|cpu| + rms(tensor)), fp32 2e-5, bf16 2^-4.
#include <cuda_runtime.h>

#include <random>

#include "model/allocator.hpp"
#include "model/cuda/cuda_backend.hpp"
#include "model/dry_ops.hpp"
#include "model/gpt.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

constexpr int kB = 3, kT = 17, kN = kB * kT;

GPTConfig llama_config() {
    GPTConfig c;
    c.arch = Arch::llama;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.n_embd = 64;
    c.intermediate_size = 48;
    c.seq_len = kT;
    c.vocab_size = 101;
    c.tie_embeddings = false;
    return c;
}

/// Inputs and next-token targets: a noisy arithmetic pattern.
void batch(std::vector<int>& inp, std::vector<int>& tgt) {
    std::mt19937 rng(77);
    inp.resize(kN + 1);
    for (int i = 0; i <= kN; i++) inp[i] = static_cast<int>((i * 3 + 7 + rng() % 2) % 101);
    tgt.assign(inp.begin() + 1, inp.end());
    inp.resize(kN);
}

struct LlamaModel {
    std::unique_ptr<Ops> ops;
    std::unique_ptr<Allocator> alloc;
    std::unique_ptr<GPT> gpt;
    /// init: draw the weights (not on the dry run's counting backend, which computes nothing).
    LlamaModel(std::unique_ptr<Ops> o, float ckpt_ratio, bool init = true) : ops(std::move(o)) {
        alloc = std::make_unique<Allocator>(*ops);
        GPTOptions go;
        go.B = kB;
        go.T = kT;
        go.checkpoint_ratio = ckpt_ratio;
        gpt = std::make_unique<GPT>(llama_config(), go, *alloc);
        if (init) gpt->init_params(42);
    }
    size_t numel() const { return gpt->layout().total_numel(); }
    std::vector<float> params() { return download(*ops, gpt->params(), numel(), ops->act_dtype()); }
    std::vector<float> grads() { return download(*ops, gpt->grads(), numel(), ops->act_dtype()); }
    float forward_backward() {
        std::vector<int> inp, tgt;
        batch(inp, tgt);
        gpt->zero_grads();
        gpt->forward_backward(inp.data(), tgt.data(), 1.0f / kN);
        const float loss = static_cast<float>(gpt->take_loss_sum());
        ops->synchronize();
        return loss;
    }
};

class LlamaGptTest : public testing::TestWithParam<std::string> {
protected:
    bool bf16() const { return GetParam() == "bf16"; }
};

TEST_P(LlamaGptTest, LossAndGradientsMatchCpu) {
    for (Attention path : {Attention::native, Attention::cublas}) {
        SCOPED_TRACE(attention_name(path));
        CudaBackendOptions opt;
        opt.attention = path;
        LlamaModel cpu(make_cpu_backend(), 0.0f), cuda(make_cuda_backend(GetParam(), opt), 0.5f);
        auto p = cpu.params();
        if (bf16()) {
            for (float& x : p) x = bf16_round(x);
            DevBuf d = upload(*cpu.ops, p, DType::f32);
            cpu.ops->memcpy_d2d(cpu.gpt->params(), d.ptr, p.size() * 4);
        }
        expect_close("initial params", cuda.params(), p, 0.0);
        const float l_cpu = cpu.forward_backward(), l_cuda = cuda.forward_backward();
        EXPECT_NEAR(l_cuda, l_cpu, (bf16() ? 1e-3 : 1e-5) * l_cpu) << "loss";
        const auto g_cpu = cpu.grads(), g_cuda = cuda.grads();
        const double grad_tol = bf16() ? 1.0 / 16 : 2e-5;
        for (const ParamTensor& pt : cuda.gpt->layout().tensors()) {
            const auto slice = [&](const std::vector<float>& v) {
                return std::vector<float>(v.begin() + pt.offset, v.begin() + pt.offset + pt.numel);
            };
            expect_close("grad " + pt.name, slice(g_cuda), slice(g_cpu), grad_tol);
        }
    }
}

/// Every device byte is the Allocator's (the expanded key/value heads of grouped-query attention
/// included, as workspace), and the model's own categories equal what the dry run counts.
TEST_P(LlamaGptTest, AllocatorAccountsEveryDeviceByte) {
#ifdef LLMTRAIN_REAL_GPU
    GTEST_SKIP() << "exact byte counts need the emulator (a GPU rounds allocations up)";
#endif
    size_t free_before = 0, total = 0, free_after = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
    {
        LlamaModel m(make_cuda_backend(GetParam()), 0.5f);
        m.forward_backward();
        ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
        EXPECT_EQ(free_before - free_after, m.alloc->current_total());
        EXPECT_GE(m.alloc->current(MemCategory::workspace), m.ops->internal_bytes());
        LlamaModel dry(make_dry_ops(m.ops->act_dtype()), 0.5f, false);
        for (MemCategory c : {MemCategory::params, MemCategory::grads, MemCategory::activations})
            EXPECT_EQ(m.alloc->current(c), dry.alloc->current(c)) << static_cast<int>(c);
        EXPECT_EQ(m.alloc->current(MemCategory::workspace) - m.ops->internal_bytes(),
                  dry.alloc->current(MemCategory::workspace) - dry.ops->internal_bytes());
    }
}

INSTANTIATE_TEST_SUITE_P(Cuda, LlamaGptTest, testing::Values("fp32", "bf16"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace llmtrain::cudatest
