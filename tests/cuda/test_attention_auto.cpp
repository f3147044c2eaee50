// tests/cuda/test_attention_auto.cpp — model.attention = "auto" on the CUDA backend: the backend
// names the path it resolved (Ops::attention_name / attention_reason), and one GPT forward + backward
// on it is bitwise the same as on that path named explicitly. Under cuda_emu (no cuDNN in emulated
// builds, an sm_90 device) auto must be native (FlashAttention-2 on tensor cores) in bf16 at head size
// 64, and cublas in fp32 and at head size 16. In test_cuda_gpu on a GPU it is whatever the build and
// device give (cudnn in bf16 with cuDNN 9 on sm_80/sm_90), and the bitwise comparison then also
// checks cuDNN's deterministic backward across two backends. Reference: the explicit path; no
// tolerance (the same kernels in the same order must give the same bits). The resolution rules
// themselves are unit-tested in tests/model/test_allocator_backend.cpp.
// Emulator only (CUDA_EMU_SMEM_OPTIN): on a device whose opt-in shared memory per block is below
// FlashAttention-2's need (flash_attention_smem_bytes; sm_86/89/120 allow 99 KiB), auto does not
// choose native and an explicit native fails at make_cuda_backend naming the key, the head size,
// the need and the limit; and flash_attention_smem_bytes is exactly the kernels' need: they run on
// a device that allows that many bytes and fail on one that allows a byte less.
#include <cstdlib>

#include "model/allocator.hpp"
#include "model/cuda/flash_attention.hpp"
#include "model/gpt.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

constexpr int kB = 3, kT = 17;

/// One case: the precision and the head size (n_embd = 48 at head size 16, n_head 3; 128 at 64, n_head 2).
struct Case {
    std::string precision;
    int head_size;
};
void PrintTo(const Case& k, std::ostream* os) { *os << k.precision << ", head size " << k.head_size; }

/// The loss and the gradients (as fp32) of one forward + backward of a 2-layer GPT of head size hs on
/// `ops`, from init seed 42 and a fixed batch.
std::pair<float, std::vector<float>> gpt_step(std::unique_ptr<Ops> ops, int hs) {
    GPTConfig c;
    c.n_layer = 2;
    c.n_head = hs == 16 ? 3 : 2;
    c.n_embd = c.n_head * hs;
    c.seq_len = kT;
    c.vocab_size = 101;
    Allocator alloc(*ops);
    GPTOptions go;
    go.B = kB;
    go.T = kT;
    GPT gpt(c, go, alloc);
    gpt.init_params(42);
    std::vector<int> inp(kB * kT), tgt(kB * kT);
    for (int i = 0; i < kB * kT; i++) {
        inp[i] = (i * 7 + 3) % 101;
        tgt[i] = (i * 5 + 1) % 101;
    }
    gpt.zero_grads();
    gpt.forward_backward(inp.data(), tgt.data(), 1.0f / (kB * kT));
    const float loss = static_cast<float>(gpt.take_loss_sum());
    return {loss, download(*ops, gpt.grads(), gpt.layout().total_numel(), ops->act_dtype())};
}

std::unique_ptr<Ops> backend(const Case& k, Attention a) {
    CudaBackendOptions opt;
    opt.attention = a;
    opt.head_size = k.head_size;
    return make_cuda_backend(k.precision, opt);
}

class AttentionAuto : public testing::TestWithParam<Case> {};

TEST_P(AttentionAuto, NamesItsPathAndComputesBitwiseLikeIt) {
    const Case k = GetParam();
    auto automatic = backend(k, Attention::automatic);
    const std::string name = automatic->attention_name(), why = automatic->attention_reason();
    EXPECT_EQ(why.rfind("auto: ", 0), 0u) << why;
#ifndef LLMTRAIN_REAL_GPU
    EXPECT_EQ(name, k.precision == "bf16" && k.head_size == 64 ? "native" : "cublas");
    EXPECT_NE(why.find("this build has no cuDNN"), std::string::npos) << why;
#endif
    auto explicit_path = backend(k, parse_attention(name));
    EXPECT_STREQ(explicit_path->attention_name(), name.c_str());
    EXPECT_EQ(explicit_path->attention_reason(), "set in the config");
    const auto [loss_auto, grads_auto] = gpt_step(std::move(automatic), k.head_size);
    const auto [loss, grads] = gpt_step(std::move(explicit_path), k.head_size);
    EXPECT_EQ(loss_auto, loss) << name;
    // Bitwise: memcmp of the fp32 values (both sides were downloaded the same way).
    ASSERT_EQ(grads_auto.size(), grads.size());
    size_t differing = 0;
    for (size_t i = 0; i < grads.size(); i++) differing += std::memcmp(&grads_auto[i], &grads[i], sizeof(float)) != 0;
    EXPECT_EQ(differing, 0u) << name << ": gradients differing in their bits, of " << grads.size();
}

INSTANTIATE_TEST_SUITE_P(Cuda, AttentionAuto,
                         testing::Values(Case{"fp32", 16}, Case{"bf16", 16}, Case{"fp32", 64}, Case{"bf16", 64}),
                         [](const testing::TestParamInfo<Case>& i) {
                             return i.param.precision + "_hs" + std::to_string(i.param.head_size);
                         });

#ifndef LLMTRAIN_REAL_GPU
/// Sets the emulated device's opt-in shared memory per block (CUDA_EMU_SMEM_OPTIN) for a scope.
struct ScopedSmemOptin {
    explicit ScopedSmemOptin(size_t bytes) { setenv("CUDA_EMU_SMEM_OPTIN", std::to_string(bytes).c_str(), 1); }
    ~ScopedSmemOptin() { unsetenv("CUDA_EMU_SMEM_OPTIN"); }
};

constexpr size_t k99KiB = 101376;  // sm_86, sm_89, sm_120

/// A device that allows a byte less than FlashAttention-2 needs at head size 128: auto there is
/// cublas, saying why, while head size 64 (less need) stays native when it fits; an explicit native
/// fails at start-up; fp32 native (attention.cu) is unaffected. On a 99 KiB device auto is native
/// exactly where the need fits.
TEST(AttentionSmallSmem, AutoSkipsNativeThatDoesNotFitAndNativeFailsClearly) {
    const size_t need = cuda::flash_attention_smem_bytes(128);
    {
        ScopedSmemOptin small(need - 1);
        auto hs128 = backend(Case{"bf16", 128}, Attention::automatic);
        EXPECT_STREQ(hs128->attention_name(), "cublas") << hs128->attention_reason();
        const std::string why = hs128->attention_reason();
        for (const std::string& part : {std::string("head size 128"), std::to_string(need), std::to_string(need - 1)})
            EXPECT_NE(why.find(part), std::string::npos) << "'" << part << "' not in: " << why;
        if (cuda::flash_attention_smem_bytes(64) < need) {
            EXPECT_STREQ(backend(Case{"bf16", 64}, Attention::automatic)->attention_name(), "native");
        }
        EXPECT_STREQ(backend(Case{"fp32", 128}, Attention::native)->attention_name(), "native");  // attention.cu
        try {
            backend(Case{"bf16", 128}, Attention::native);
            ADD_FAILURE() << "native at head size 128 accepted on a device that allows " << need - 1 << " B";
        } catch (const std::invalid_argument& e) {
            const std::string msg = e.what();
            for (const std::string& part : {std::string("model.attention = \"native\""), std::string("head size 128"),
                                            std::to_string(need), std::to_string(need - 1)})
                EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
        }
    }
    ScopedSmemOptin sm86(k99KiB);
    for (int hs : {64, 128})
        EXPECT_STREQ(backend(Case{"bf16", hs}, Attention::automatic)->attention_name(),
                     cuda::flash_attention_smem_bytes(hs) <= k99KiB ? "native" : "cublas")
            << "head size " << hs;
}

/// One bf16 attention forward + backward of `ops` at head size hs (B 1, T 20, one head): whether it ran.
bool flash_runs(int hs) {
    CudaBackendOptions opt;
    opt.attention = Attention::native;  // head_size left 0: no start-up check, the kernels' own launch decides
    auto o = make_cuda_backend("bf16", opt);
    const int T = 20, C = hs;
    DevBuf qkv(*o, size_t(T) * 3 * C * 2), out(*o, size_t(T) * C * 2), lse(*o, size_t(T) * 4),
        dqkv(*o, size_t(T) * 3 * C * 2), dout(*o, size_t(T) * C * 2);
    o->memset(qkv.ptr, 0, size_t(T) * 3 * C * 2);
    o->memset(dout.ptr, 0, size_t(T) * C * 2);
    try {
        o->attention_forward(out.ptr, lse.as<float>(), qkv.ptr, 1, T, C, 1);
        o->attention_backward(dqkv.ptr, dout.ptr, qkv.ptr, out.ptr, lse.as<float>(), 1, T, C, 1);
        o->synchronize();
        return true;
    } catch (const std::exception&) {
        (void)cudaGetLastError();  // the refused cudaFuncSetAttribute is not sticky
        return false;
    }
}

TEST(FlashSmem, NeedIsExactlyTheKernelsLimit) {
    for (int hs : {64, 128}) {
        const size_t need = cuda::flash_attention_smem_bytes(hs);
        {
            ScopedSmemOptin exact(need);
            EXPECT_TRUE(flash_runs(hs)) << "head size " << hs << " at " << need << " B";
        }
        ScopedSmemOptin less(need - 1);
        EXPECT_FALSE(flash_runs(hs)) << "head size " << hs << " at " << need - 1 << " B";
    }
}
#endif

}  // namespace
}  // namespace llmtrain::cudatest
