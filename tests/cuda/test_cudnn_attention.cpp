// tests/cuda/test_cudnn_attention.cpp — cuDNN fused attention (model.attention = "cudnn") against
// our attention kernels, on a real GPU only (part of test_cuda_gpu; cuDNN cannot run under
// cuda_emu). bf16 inputs; both use fp32 accumulation, so outputs agree to bf16 rounding:
// tolerance 2^-7 of (|native| + rms) for out and lse, 2^-6 for dqkv (two roundings).
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

struct Shape {
    int B, T, C, NH;
};

class CudnnAttention : public testing::TestWithParam<Shape> {};

TEST_P(CudnnAttention, MatchesNativeKernels) {
    const auto [B, T, C, NH] = GetParam();
    CudaBackendOptions with_cudnn;
    with_cudnn.attention = Attention::cudnn;
    std::unique_ptr<Ops> cudnn;
    try {
        cudnn = make_cuda_backend("bf16", with_cudnn);
    } catch (const std::invalid_argument& e) {
        GTEST_SKIP() << e.what();
    }
    auto native = make_cuda_backend("bf16");
    const size_t N = static_cast<size_t>(B) * T;
    const auto qkv = random_vec(N * 3 * C, 90, true, -2, 2), dout = random_vec(N * C, 91, true);
    std::vector<float> res[2][3];
    Ops* backends[2] = {native.get(), cudnn.get()};
    for (int k = 0; k < 2; k++) {
        Ops& o = *backends[k];
        DevBuf dq = upload(o, qkv, DType::bf16), dgo = upload(o, dout, DType::bf16);
        DevBuf out(o, N * C * 2), lse(o, static_cast<size_t>(B) * NH * T * 4), dqkv(o, qkv.size() * 2);
        o.attention_forward(out.ptr, lse.as<float>(), dq.ptr, B, T, C, NH);
        o.attention_backward(dqkv.ptr, dgo.ptr, dq.ptr, out.ptr, lse.as<float>(), B, T, C, NH);
        res[k][0] = download(o, out.ptr, N * C, DType::bf16);
        res[k][1] = download(o, lse.ptr, static_cast<size_t>(B) * NH * T, DType::f32);
        res[k][2] = download(o, dqkv.ptr, qkv.size(), DType::bf16);
    }
    expect_close("cudnn out", res[1][0], res[0][0], kTolBf16);
    expect_close("cudnn lse", res[1][1], res[0][1], kTolBf16);
    expect_close("cudnn dqkv", res[1][2], res[0][2], 2 * kTolBf16);
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudnnAttention,
                         testing::Values(Shape{3, 17, 48, 3},      // the odd sizes of the op tests
                                         Shape{2, 256, 768, 12},   // GPT-2 124M heads
                                         Shape{1, 1024, 1600, 25}  // GPT-2 1.5B heads, full context
                                         ),
                         [](const testing::TestParamInfo<Shape>& i) {
                             std::string name = "T";  // appended step by step (GCC 12 -Wrestrict false positive)
                             name += std::to_string(i.param.T);
                             name += "_C";
                             name += std::to_string(i.param.C);
                             return name;
                         });

}  // namespace
}  // namespace llmtrain::cudatest
