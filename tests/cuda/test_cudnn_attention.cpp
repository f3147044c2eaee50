// tests/cuda/test_cudnn_attention.cpp — cuDNN fused attention (model.attention = "cudnn") on a real
// GPU only (part of test_cuda_gpu; cuDNN cannot run under cuda_emu):
//  1. against the CPU backend's fp32 attention on the same bf16-exact inputs (independent, and far
//     more precise than bf16: its own error is inside the fp32 budget of the bound): out and dqkv
//     element by element within attention_bound.hpp's derived bound (bf16 roundings of P, dS, out
//     and dqkv, which grow with T; a fixed 2^-6 failed at T 256 and 1024 on an H100), lse within
//     2^-7 of (|x| + rms) (fp32 from fp32 scores, as every path: cuda_test_util.hpp's measure);
//  2. its backward is deterministic: three backward calls on the same inputs give bitwise the same
//     dqkv, at a shape where the dQ of a query row gathers many key blocks (T 1024, B 8), where the
//     atomic dQ accumulation it used to select differed from run to run (cudnn_attention.cu);
//  3. grouped-query attention (n_kv_head 4, 2, 1 of n_head 8 or 12, head size 64 and 128, T 256 and
//     1024: each n_kv_head with both T, both head sizes and both n_head) through
//     attention_forward_gqa / attention_backward_gqa: the cuDNN graph that takes K/V with n_kv_head
//     heads ran (attention_reason() says which route: not the expanded copy of gqa.cu), out and dqkv
//     within attention_bound_gqa's bound of the CPU, lse within 2^-7, and the backward bitwise
//     repeatable (also at B 8, T 1024).
// Multi-head and grouped-query calls share run_attention and expect_backward_repeatable (AttnCall).
// The same bound holds for the cublas path under the emulator (test_cublas_attention.cpp), where
// a mutation check shows it catches real errors.
#include <array>
#include <cstdio>
#include <cstring>

#include "tests/cuda/attention_bound.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

struct Shape {
    int B, T, C, NH;
};
/// How gtest (and so ctest's discovered names) prints a Shape: "B 2, T 256, C 768, NH 12".
void PrintTo(const Shape& s, std::ostream* os) {
    *os << "B " << s.B << ", T " << s.T << ", C " << s.C << ", NH " << s.NH;
}

/// The cuDNN backend, or nullptr when the build or the device has no cuDNN attention.
std::unique_ptr<Ops> cudnn_backend() {
    CudaBackendOptions with_cudnn;
    with_cudnn.attention = Attention::cudnn;
    try {
        return make_cuda_backend("bf16", with_cudnn);
    } catch (const std::invalid_argument&) {
        return nullptr;
    }
}

/// One attention call on a backend: multi-head (attention_forward / attention_backward, NKV = NH)
/// or, with `gqa`, grouped-query (attention_forward_gqa / attention_backward_gqa, NKV key/value
/// heads). qkv is (B,T,W) with W = (NH + 2 NKV)*HS; out and dout (B,T,C) with C = NH*HS.
struct AttnCall {
    int B, T, NH, NKV, HS;
    bool gqa;
    size_t N() const { return static_cast<size_t>(B) * T; }
    size_t C() const { return static_cast<size_t>(NH) * HS; }
    size_t W() const { return static_cast<size_t>(NH + 2 * NKV) * HS; }
    void forward(Ops& o, void* out, float* lse, const void* qkv) const {
        if (gqa) o.attention_forward_gqa(out, lse, qkv, B, T, NH, NKV, HS);
        else o.attention_forward(out, lse, qkv, B, T, NH * HS, NH);
    }
    void backward(Ops& o, void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse) const {
        if (gqa) o.attention_backward_gqa(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS);
        else o.attention_backward(dqkv, dout, qkv, out, lse, B, T, NH * HS, NH);
    }
};
AttnCall multi_head(const Shape& s) { return {s.B, s.T, s.NH, s.NH, s.C / s.NH, false}; }

/// out, lse and dqkv of the call's forward and backward on `o` (inputs rounded to its activation dtype).
std::array<std::vector<float>, 3> run_attention(Ops& o, const std::vector<float>& qkv, const std::vector<float>& dout,
                                                const AttnCall& a) {
    const DType dt = o.act_dtype();
    const size_t es = dtype_size(dt), N = a.N(), C = a.C();
    DevBuf dq = upload(o, qkv, dt), dgo = upload(o, dout, dt);
    DevBuf out(o, N * C * es), lse(o, N * a.NH * 4), dqkv(o, qkv.size() * es);
    a.forward(o, out.ptr, lse.as<float>(), dq.ptr);
    a.backward(o, dqkv.ptr, dgo.ptr, dq.ptr, out.ptr, lse.as<float>());
    return {download(o, out.ptr, N * C, dt), download(o, lse.ptr, N * a.NH, DType::f32),
            download(o, dqkv.ptr, qkv.size(), dt)};
}

/// Three backward calls of `a` on the bf16 backend `o` after one forward (qkv from `seed`, dout from
/// seed + 1) give bitwise the same dqkv, every element written each time; failures say `what`.
void expect_backward_repeatable(Ops& o, const AttnCall& a, uint64_t seed, const char* what) {
    const size_t N = a.N(), C = a.C(), W = a.W();
    DevBuf dq = upload(o, random_vec(N * W, seed, true, -2, 2), DType::bf16);
    DevBuf dgo = upload(o, random_vec(N * C, seed + 1, true), DType::bf16);
    DevBuf out(o, N * C * 2), lse(o, N * a.NH * 4), dqkv(o, N * W * 2);
    a.forward(o, out.ptr, lse.as<float>(), dq.ptr);
    std::vector<uint16_t> first, again(N * W);
    for (int run = 0; run < 3; run++) {
        o.memset(dqkv.ptr, 0xff, N * W * 2);  // NaNs: a run that leaves any element unwritten shows
        a.backward(o, dqkv.ptr, dgo.ptr, dq.ptr, out.ptr, lse.as<float>());
        o.memcpy_d2h(again.data(), dqkv.ptr, again.size() * 2);
        o.synchronize();
        if (run == 0) {
            first = again;
            continue;
        }
        size_t differing = 0;
        for (size_t i = 0; i < again.size(); i++) differing += again[i] != first[i];
        EXPECT_EQ(differing, 0u) << what << " " << run + 1
                                 << ": dqkv elements differing in their bits from the first, of " << again.size();
    }
}

class CudnnAttention : public testing::TestWithParam<Shape> {};

TEST_P(CudnnAttention, MatchesCpuWithinTheDerivedBound) {
    const auto [B, T, C, NH] = GetParam();
    auto cudnn = cudnn_backend();
    if (!cudnn) GTEST_SKIP() << "this build has no cuDNN";
    auto cpu = make_cpu_backend();
    const size_t N = static_cast<size_t>(B) * T;
    const auto qkv = random_vec(N * 3 * C, 90, true, -2, 2), dout = random_vec(N * C, 91, true);
    const AttnCall a = multi_head(GetParam());
    const auto got = run_attention(*cudnn, qkv, dout, a), want = run_attention(*cpu, qkv, dout, a);
    const AttentionBound bound = attention_bound(qkv, dout, B, T, C, NH);
    expect_within_bound("cudnn out", got[0], want[0], bound.out);
    expect_close("cudnn lse", got[1], want[1], kTolBf16);
    expect_within_bound("cudnn dqkv", got[2], want[2], bound.dqkv);
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

TEST(CudnnAttentionBackward, IsBitwiseRepeatable) {
    auto cudnn = cudnn_backend();
    if (!cudnn) GTEST_SKIP() << "this build has no cuDNN";
    // GPT-2 124M's attention at micro-batch 8
    expect_backward_repeatable(*cudnn, multi_head(Shape{8, 1024, 768, 12}), 92, "backward");
}

// ---- grouped-query attention on cuDNN's graph with NKV key/value heads ----

struct GqaShape {
    int B, T, NH, NKV, HS;
};
void PrintTo(const GqaShape& s, std::ostream* os) {
    *os << "B " << s.B << ", T " << s.T << ", NH " << s.NH << ", NKV " << s.NKV << ", HS " << s.HS;
}

/// What attention_reason() carries once cuDNN ran a grouped-query call on its graph with NKV heads
/// (cuda_ops.cu's cudnn_gqa_native; the fallback says "grouped-query: expanded K/V copy (...)").
constexpr const char* kNativeGqaRoute = "grouped-query: cuDNN graph with n_kv_head K/V heads";

AttnCall grouped_query(const GqaShape& s) { return {s.B, s.T, s.NH, s.NKV, s.HS, true}; }

/// The worst |got - want| / bound (printed beside each case, as test_flash_attention's).
double worst_of_bound(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& b) {
    double worst = 0;
    for (size_t i = 0; i < got.size() && i < want.size() && i < b.size(); i++)
        worst = std::fmax(worst, std::fabs(double(got[i]) - want[i]) / (b[i] + 1e-30));
    return worst;
}

class CudnnGqa : public testing::TestWithParam<GqaShape> {};

TEST_P(CudnnGqa, MatchesCpuWithinTheDerivedBoundAndRepeats) {
    const GqaShape s = GetParam();
    auto cudnn = cudnn_backend();
    if (!cudnn) GTEST_SKIP() << "this build has no cuDNN";
    auto cpu = make_cpu_backend();
    const size_t N = static_cast<size_t>(s.B) * s.T, W = static_cast<size_t>(s.NH + 2 * s.NKV) * s.HS;
    const auto qkv = random_vec(N * W, 300 + s.NKV, true, -2, 2);
    const auto dout = random_vec(N * s.NH * s.HS, 310 + s.NKV, true);
    const auto got = run_attention(*cudnn, qkv, dout, grouped_query(s));
    const std::string route = cudnn->attention_reason();
    const auto want = run_attention(*cpu, qkv, dout, grouped_query(s));
    const AttentionBound bound = attention_bound_gqa(qkv, dout, s.B, s.T, s.NH, s.NKV, s.HS);
    std::printf("cuDNN GQA NH %d NKV %d HS %d T %d B %d: out %.2f, dqkv %.2f of the bound (%s)\n", s.NH, s.NKV, s.HS,
                s.T, s.B, worst_of_bound(got[0], want[0], bound.out), worst_of_bound(got[2], want[2], bound.dqkv),
                route.c_str());
    // the numbers above are the graph with NKV heads, not the expanded copy's (which stays the fallback)
    EXPECT_NE(route.find(kNativeGqaRoute), std::string::npos) << route;
    expect_within_bound("cudnn gqa out", got[0], want[0], bound.out);
    expect_close("cudnn gqa lse", got[1], want[1], kTolBf16);
    expect_within_bound("cudnn gqa dqkv", got[2], want[2], bound.dqkv);
    expect_backward_repeatable(*cudnn, grouped_query(s), 320 + s.NKV, "grouped-query backward");
}

INSTANTIATE_TEST_SUITE_P(Gpu, CudnnGqa,
                         testing::Values(GqaShape{2, 256, 8, 4, 64},     // Llama-style groups of 2
                                         GqaShape{1, 1024, 12, 4, 64},   // groups of 3
                                         GqaShape{2, 256, 12, 2, 128},   // groups of 6, head size 128
                                         GqaShape{1, 1024, 8, 2, 128},   // groups of 4
                                         GqaShape{2, 256, 8, 1, 128},    // multi-query
                                         GqaShape{1, 1024, 12, 1, 64}),  // multi-query, full context
                         [](const testing::TestParamInfo<GqaShape>& i) {
                             std::string name = "NH";  // appended step by step (GCC 12 -Wrestrict false positive)
                             name += std::to_string(i.param.NH);
                             name += "_KV";
                             name += std::to_string(i.param.NKV);
                             name += "_HS";
                             name += std::to_string(i.param.HS);
                             name += "_T";
                             name += std::to_string(i.param.T);
                             return name;
                         });

/// The grouped-query backward at a training-sized shape (many key blocks per dQ row, as
/// CudnnAttentionBackward.IsBitwiseRepeatable): bitwise the same dqkv three times, on the NKV graph.
TEST(CudnnAttentionBackward, GroupedQueryIsBitwiseRepeatable) {
    auto cudnn = cudnn_backend();
    if (!cudnn) GTEST_SKIP() << "this build has no cuDNN";
    for (const GqaShape s : {GqaShape{8, 1024, 12, 4, 64}, GqaShape{8, 1024, 8, 1, 128}}) {
        SCOPED_TRACE(testing::PrintToString(s));
        expect_backward_repeatable(*cudnn, grouped_query(s), 330 + s.NKV, "grouped-query backward");
    }
    EXPECT_NE(cudnn->attention_reason().find(kNativeGqaRoute), std::string::npos) << cudnn->attention_reason();
}

}  // namespace
}  // namespace llmtrain::cudatest
