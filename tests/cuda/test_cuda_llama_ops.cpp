// tests/cuda/test_cuda_llama_ops.cpp — the CUDA backend's Llama ops (rmsnorm.cu, qk_norm.cu, rope.cu, swiglu.cu,
// gqa.cu, grouped-query attention on the native, cublas and FlashAttention-2 paths, the encoder
// without positions), run under cuda_emu against the CPU backend on the same inputs, at odd sizes:
// B 3, T 17, n_embd 48 for the row ops; B 2, T 9, n_head 4, head size 8 and n_kv_head 4, 2, 1 for attention. Each test
// runs in fp32 and bf16 and under forward, reverse and random thread orders. Tolerances
// (cuda_test_util.hpp's relative form |cuda - cpu| <= tol (|cpu| + rms(cpu))): fp32 1e-5, bf16 2^-7
// per op; attention's dqkv in bf16 2^-6 on the native paths, as the multi-head test (the backward
// reads the bf16 forward output), and out 2^-6, dqkv 2^-5 on the cublas path, as test_cublas_attention.
// RoPE's cos/sin table (rope_table.hpp) is checked on its own against the closed form in double.
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "model/cuda/cuda_backend.hpp"
#include "model/cuda/flash_attention.hpp"
#include "model/cuda/rope_table.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

constexpr int B = 3, T = 17, C = 48, N = B * T, F = 40;
constexpr float kEps = 1e-5f;

using LlamaOpsTest = CudaVsCpu;

/// RMSNorm (Zhang & Sennrich 2019), plain and fused with the residual add: out, rstd, residual.
TEST_P(LlamaOpsTest, RmsNormForwardAndFusedResidual) {
    const auto a = rnd(static_cast<size_t>(N) * C, 110, -2, 2), b = rnd(a.size(), 111);
    const auto w = rnd(C, 112, 0.5f, 1.5f);
    std::vector<float> res[2][5];
    Ops* backends[2] = {cpu.get(), cuda.get()};
    for (int k = 0; k < 2; k++) {
        Ops& o = *backends[k];
        const DType dt = o.act_dtype();
        const size_t bytes = a.size() * dtype_size(dt);
        DevBuf da = upload(o, a, dt), db = upload(o, b, dt), dw = upload(o, w, dt);
        DevBuf out(o, bytes), out2(o, bytes), resid(o, bytes), rstd(o, N * 4), rstd2(o, N * 4);
        o.rmsnorm_forward(out.ptr, rstd.as<float>(), da.ptr, dw.ptr, N, C, kEps);
        o.fused_residual_rmsnorm_forward(resid.ptr, out2.ptr, rstd2.as<float>(), da.ptr, db.ptr, dw.ptr, N, C, kEps);
        res[k][0] = download(o, out.ptr, a.size(), dt);
        res[k][1] = download(o, rstd.ptr, N, DType::f32);
        res[k][2] = download(o, resid.ptr, a.size(), dt);
        res[k][3] = download(o, out2.ptr, a.size(), dt);
        res[k][4] = download(o, rstd2.ptr, N, DType::f32);
    }
    if (bf16) {  // the CUDA residual is rounded to bf16 and normalized as stored: give the CPU the same
        std::vector<float> r(a.size());
        for (size_t i = 0; i < r.size(); i++) r[i] = bf16_round(a[i] + b[i]);
        DevBuf dr = upload(*cpu, r, DType::f32), dw = upload(*cpu, w, DType::f32);
        DevBuf out(*cpu, r.size() * 4), rstd(*cpu, N * 4);
        cpu->rmsnorm_forward(out.ptr, rstd.as<float>(), dr.ptr, dw.ptr, N, C, kEps);
        res[0][3] = download(*cpu, out.ptr, r.size(), DType::f32);
        res[0][4] = download(*cpu, rstd.ptr, N, DType::f32);
    }
    expect_close("rms out", res[1][0], res[0][0], tol);
    expect_close("rms rstd", res[1][1], res[0][1], kTolF32);  // fp32 statistics of identical inputs
    expect_close("residual", res[1][2], res[0][2], tol);
    expect_close("fused rms out", res[1][3], res[0][3], tol);
    expect_close("fused rms rstd", res[1][4], res[0][4], kTolF32);
}

/// dinp and dweight accumulate (+=) onto random starting values.
TEST_P(LlamaOpsTest, RmsNormBackward) {
    const auto x = rnd(static_cast<size_t>(N) * C, 120, -2, 2), dout = rnd(x.size(), 121);
    const auto w = rnd(C, 122, 0.5f, 1.5f), dinp0 = rnd(x.size(), 123), dw0 = rnd(C, 124);
    DevBuf cx = upload(*cpu, x, DType::f32), cw = upload(*cpu, w, DType::f32), cout(*cpu, x.size() * 4),
           crstd(*cpu, N * 4);
    cpu->rmsnorm_forward(cout.ptr, crstd.as<float>(), cx.ptr, cw.ptr, N, C, kEps);
    const auto rstd = download(*cpu, crstd.ptr, N, DType::f32);  // both backwards see the same rstd
    std::vector<float> res[2][2];
    Ops* backends[2] = {cpu.get(), cuda.get()};
    for (int k = 0; k < 2; k++) {
        Ops& o = *backends[k];
        const DType dt = o.act_dtype();
        DevBuf dx = upload(o, x, dt), dw = upload(o, w, dt), dgo = upload(o, dout, dt), dr = upload(o, rstd, DType::f32);
        DevBuf dinp = upload(o, dinp0, dt), gw = upload(o, dw0, dt);
        o.rmsnorm_backward(dinp.ptr, gw.ptr, dgo.ptr, dx.ptr, dw.ptr, dr.as<float>(), N, C);
        res[k][0] = download(o, dinp.ptr, x.size(), dt);
        res[k][1] = download(o, gw.ptr, C, dt);
    }
    expect_close("rms dinp", res[1][0], res[0][0], tol);
    expect_close("rms dweight", res[1][1], res[0][1], tol);
}

/// Qwen3's QK-norm (qk_norm.cu) in place on a GQA qkv at NH 4, NKV 2 and head size 40 (more than a
/// warp's lanes, not a multiple of the pack): the whole qkv (v untouched), pre (bitwise: a copy) and
/// rstd (fp32 statistics of identical inputs: 1e-5); then the backward from the CPU's pre and rstd,
/// d qkv in place and dwq, dwk accumulated (+=) onto random starting values. Tolerances as the RMSNorm
/// tests': 1e-5 in fp32; 2^-7 in bf16, where the CUDA outputs are rounded to bf16 (2^-9 relative) and
/// the weights' gradients are sums of 204 q-head (102 k-head) terms in fp32 added to a bf16 value.
TEST_P(LlamaOpsTest, QkNormForwardBackward) {
    const int NH = 4, NKV = 2, HS = 40, H = NH + NKV;
    const size_t n = static_cast<size_t>(N) * (NH + 2 * NKV) * HS, npre = static_cast<size_t>(N) * H * HS;
    const auto x = rnd(n, 150, -2, 2), g = rnd(n, 151), wq = rnd(HS, 152, 0.5f, 1.5f), wk = rnd(HS, 153, 0.5f, 1.5f);
    const auto dwq0 = rnd(HS, 154), dwk0 = rnd(HS, 155);
    std::vector<float> res[2][3];
    Ops* backends[2] = {cpu.get(), cuda.get()};
    for (int k = 0; k < 2; k++) {
        Ops& o = *backends[k];
        const DType dt = o.act_dtype();
        DevBuf dx = upload(o, x, dt), dq = upload(o, wq, dt), dk = upload(o, wk, dt);
        DevBuf pre(o, npre * dtype_size(dt)), rstd(o, static_cast<size_t>(N) * H * 4);
        o.qk_norm_forward(dx.ptr, pre.ptr, rstd.as<float>(), dq.ptr, dk.ptr, N, NH, NKV, HS, kEps);
        res[k][0] = download(o, dx.ptr, n, dt);
        res[k][1] = download(o, pre.ptr, npre, dt);
        res[k][2] = download(o, rstd.ptr, static_cast<size_t>(N) * H, DType::f32);
    }
    expect_close("qk_norm qkv", res[1][0], res[0][0], tol);
    expect_close("qk_norm pre", res[1][1], res[0][1], 0.0);
    expect_close("qk_norm rstd", res[1][2], res[0][2], kTolF32);
    const std::vector<float> pre = res[0][1], rstd = res[0][2];  // both backwards see the CPU's
    std::vector<float> back[2][3];
    for (int k = 0; k < 2; k++) {
        Ops& o = *backends[k];
        const DType dt = o.act_dtype();
        DevBuf dg = upload(o, g, dt), dp = upload(o, pre, dt), dr = upload(o, rstd, DType::f32);
        DevBuf dq = upload(o, wq, dt), dk = upload(o, wk, dt), gq = upload(o, dwq0, dt), gk = upload(o, dwk0, dt);
        o.qk_norm_backward(dg.ptr, gq.ptr, gk.ptr, dp.ptr, dq.ptr, dk.ptr, dr.as<float>(), N, NH, NKV, HS);
        back[k][0] = download(o, dg.ptr, n, dt);
        back[k][1] = download(o, gq.ptr, HS, dt);
        back[k][2] = download(o, gk.ptr, HS, dt);
    }
    expect_close("qk_norm dqkv", back[1][0], back[0][0], tol);
    expect_close("qk_norm dwq", back[1][1], back[0][1], tol);
    expect_close("qk_norm dwk", back[1][2], back[0][2], tol);
}

/// The RoPE table the CUDA kernels read (rope_table.hpp) against the closed form in double:
/// cos and sin of a = t * theta^(-2i/HS) at T 2048, head size 128, theta 500000 (Llama 3's), and T 17,
/// head size 8, theta 10000. Tolerance 2^-24 absolute: the fp32 rounding of a value in [-1, 1] (half
/// an ulp, 2^-25 below 1) with room for the device's double cos/sin being off by an ulp of double
/// where that flips the rounding.
TEST(RopeTable, EqualsTheClosedFormInDouble) {
    for (const auto& [T_, HS, theta] : {std::tuple{2048, 128, 500000.0f}, std::tuple{17, 8, 10000.0f}}) {
        SCOPED_TRACE("T " + std::to_string(T_) + " head size " + std::to_string(HS));
        const size_t bytes = cuda::rope_table_bytes(T_, HS);
        ASSERT_EQ(bytes, static_cast<size_t>(T_) * HS * 4);
        float* dev = nullptr;
        ASSERT_EQ(cudaMalloc(&dev, bytes), cudaSuccess);
        cuda::rope_table(dev, T_, HS, theta, nullptr);
        std::vector<float> got(bytes / sizeof(float));
        ASSERT_EQ(cudaMemcpy(got.data(), dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
        cudaFree(dev);
        double worst = 0;
        for (int t = 0; t < T_; t++)
            for (int i = 0; i < HS / 2; i++) {
                const double a = t * std::pow(static_cast<double>(theta), -2.0 * i / HS);
                const size_t k = (static_cast<size_t>(t) * (HS / 2) + i) * 2;
                worst = std::fmax(worst, std::fmax(std::fabs(got[k] - std::cos(a)), std::fabs(got[k + 1] - std::sin(a))));
            }
        EXPECT_LE(worst, std::ldexp(1.0, -24)) << "worst |table - closed form|";
    }
    EXPECT_THROW(cuda::rope_table(nullptr, 8, 7, 10000.0f, nullptr), std::invalid_argument);
}

/// RoPE (Su et al. 2021) in place on q and k of a GQA qkv (NH 4, NKV 2, HS 8; v untouched), then
/// the backward on a gradient; theta 500000 as Llama 3's.
TEST_P(LlamaOpsTest, RopeForwardBackward) {
    const int NH = 4, NKV = 2, HS = 8;
    const size_t n = static_cast<size_t>(N) * (NH + 2 * NKV) * HS;
    const auto x = rnd(n, 130, -2, 2), g = rnd(n, 131);
    std::vector<float> res[2][2];
    Ops* backends[2] = {cpu.get(), cuda.get()};
    for (int k = 0; k < 2; k++) {
        Ops& o = *backends[k];
        const DType dt = o.act_dtype();
        DevBuf dx = upload(o, x, dt), dg = upload(o, g, dt);
        o.rope_forward(dx.ptr, B, T, NH, NKV, HS, 500000.0f);
        o.rope_backward(dg.ptr, B, T, NH, NKV, HS, 500000.0f);
        res[k][0] = download(o, dx.ptr, n, dt);
        res[k][1] = download(o, dg.ptr, n, dt);
    }
    expect_close("rope forward", res[1][0], res[0][0], tol);
    expect_close("rope backward", res[1][1], res[0][1], tol);
}

/// SwiGLU (Shazeer 2020) forward and backward, F 40 (not a multiple of the pack).
TEST_P(LlamaOpsTest, SwigluForwardBackward) {
    const auto inp = rnd(static_cast<size_t>(N) * 2 * F, 140, -4, 4), dout = rnd(static_cast<size_t>(N) * F, 141);
    std::vector<float> res[2][2];
    Ops* backends[2] = {cpu.get(), cuda.get()};
    for (int k = 0; k < 2; k++) {
        Ops& o = *backends[k];
        const DType dt = o.act_dtype();
        DevBuf di = upload(o, inp, dt), dgo = upload(o, dout, dt);
        DevBuf out(o, dout.size() * dtype_size(dt)), dinp(o, inp.size() * dtype_size(dt));
        o.swiglu_forward(out.ptr, di.ptr, N, F);
        o.swiglu_backward(dinp.ptr, dgo.ptr, di.ptr, N, F);
        res[k][0] = download(o, out.ptr, dout.size(), dt);
        res[k][1] = download(o, dinp.ptr, inp.size(), dt);
    }
    expect_close("swiglu out", res[1][0], res[0][0], tol);
    expect_close("swiglu dinp", res[1][1], res[0][1], tol);
}

/// The encoder without learned positions (wpe and dwpe null): out = wte[inp], dwte += scatter.
TEST_P(LlamaOpsTest, EncoderWithoutPositions) {
    constexpr int Vp = 128;
    std::vector<int> tok(N);
    for (int i = 0; i < N; i++) tok[i] = (i * 7 + 3) % 13;
    const auto wte = rnd(static_cast<size_t>(Vp) * C, 150), dout = rnd(static_cast<size_t>(N) * C, 151);
    const auto dwte0 = rnd(wte.size(), 152);
    std::vector<float> res[2][2];
    Ops* backends[2] = {cpu.get(), cuda.get()};
    for (int k = 0; k < 2; k++) {
        Ops& o = *backends[k];
        const DType dt = o.act_dtype();
        DevBuf itok = upload_ints(o, tok), wte_d = upload(o, wte, dt), dgo = upload(o, dout, dt),
               dwte = upload(o, dwte0, dt), out(o, static_cast<size_t>(N) * C * dtype_size(dt));
        o.encoder_forward(out.ptr, itok.as<int>(), wte_d.ptr, nullptr, B, T, C);
        o.encoder_backward(dwte.ptr, nullptr, dgo.ptr, itok.as<int>(), B, T, C);
        res[k][0] = download(o, out.ptr, static_cast<size_t>(N) * C, dt);
        res[k][1] = download(o, dwte.ptr, wte.size(), dt);
    }
    expect_close("encoder out", res[1][0], res[0][0], tol);
    expect_close("dwte", res[1][1], res[0][1], tol);
}

/// Grouped-query attention (Ainslie et al. 2023) forward + backward on one backend: out, lse, dqkv.
std::array<std::vector<float>, 3> run_gqa(Ops& o, const std::vector<float>& qkv, const std::vector<float>& dout, int Bq,
                                          int Tq, int NH, int NKV, int HS) {
    const DType dt = o.act_dtype();
    const size_t es = dtype_size(dt), n_out = static_cast<size_t>(Bq) * Tq * NH * HS;
    DevBuf dq = upload(o, qkv, dt), dgo = upload(o, dout, dt);
    DevBuf out(o, n_out * es), lse(o, static_cast<size_t>(Bq) * NH * Tq * 4), dqkv(o, qkv.size() * es);
    o.attention_forward_gqa(out.ptr, lse.as<float>(), dq.ptr, Bq, Tq, NH, NKV, HS);
    o.attention_backward_gqa(dqkv.ptr, dgo.ptr, dq.ptr, out.ptr, lse.as<float>(), Bq, Tq, NH, NKV, HS);
    return {download(o, out.ptr, n_out, dt), download(o, lse.ptr, static_cast<size_t>(Bq) * NH * Tq, DType::f32),
            download(o, dqkv.ptr, qkv.size(), dt)};
}

/// n_kv_head 4 (multi-head), 2 and 1 (multi-query) at n_head 4, head size 8, on the native path
/// (attention.cu around gqa.cu's expand/reduce) and the cublas path (heads mapped in its split).
TEST_P(LlamaOpsTest, GroupedQueryAttentionNativeAndCublas) {
    const int Bq = 2, Tq = 9, NH = 4, HS = 8;
    for (Attention path : {Attention::native, Attention::cublas}) {
        CudaBackendOptions opt;
        opt.attention = path;
        auto dev = make_cuda_backend(GetParam().precision, opt);
        for (int NKV : {4, 2, 1}) {
            SCOPED_TRACE(std::string(attention_name(path)) + " n_kv_head " + std::to_string(NKV));
            const size_t W = static_cast<size_t>(NH + 2 * NKV) * HS;
            const auto qkv = rnd(static_cast<size_t>(Bq) * Tq * W, 160 + NKV, -2, 2);
            const auto dout = rnd(static_cast<size_t>(Bq) * Tq * NH * HS, 170 + NKV);
            const auto got = run_gqa(*dev, qkv, dout, Bq, Tq, NH, NKV, HS);
            const auto want = run_gqa(*cpu, qkv, dout, Bq, Tq, NH, NKV, HS);
            // bf16 cublas: out 2^-6, dqkv 2^-5, as test_cublas_attention.cpp (its GEMMs read P and dS in bf16).
            const double wide = path == Attention::cublas ? 2.0 : 1.0;
            expect_close("gqa out", got[0], want[0], bf16 ? wide * kTolBf16 : kTolF32);
            expect_close("gqa lse", got[1], want[1], tol);
            expect_close("gqa dqkv", got[2], want[2], bf16 ? 2 * wide * kTolBf16 : kTolF32);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Cuda, LlamaOpsTest, testing::ValuesIn(all_modes()), mode_name);

/// FlashAttention-2 (bf16, head size 64) at n_head 4 with n_kv_head 4, 2 and 1: key/value head
/// h / (NH/NKV) read in the tile loads, dK/dV summed over the group in the key kernel, against the
/// CPU under three thread orders. Tolerance: out and lse 2^-7, dqkv 2^-6 (the multi-head flash test's).
class LlamaFlash : public testing::TestWithParam<std::string> {
protected:
    void SetUp() override { set_emu_order(GetParam()); }
    void TearDown() override { reset_emu_order(); }
};

TEST_P(LlamaFlash, GroupedQueryAttentionMatchesCpu) {
    const int Bq = 1, Tq = 20, NH = 4, HS = 64;
    ASSERT_TRUE(cuda::flash_attention_supported(NH * HS, NH));
    auto cpu = make_cpu_backend();
    auto dev = make_cuda_backend("bf16");
    for (int NKV : {4, 2, 1}) {
        SCOPED_TRACE("n_kv_head " + std::to_string(NKV));
        const size_t W = static_cast<size_t>(NH + 2 * NKV) * HS;
        const auto qkv = random_vec(static_cast<size_t>(Bq) * Tq * W, 180 + NKV, true, -2, 2);
        const auto dout = random_vec(static_cast<size_t>(Bq) * Tq * NH * HS, 190 + NKV, true, -1, 1);
        const auto got = run_gqa(*dev, qkv, dout, Bq, Tq, NH, NKV, HS);
        const auto want = run_gqa(*cpu, qkv, dout, Bq, Tq, NH, NKV, HS);
        expect_close("flash gqa out", got[0], want[0], kTolBf16);
        expect_close("flash gqa lse", got[1], want[1], kTolBf16);
        expect_close("flash gqa dqkv", got[2], want[2], 2 * kTolBf16);
    }
}

INSTANTIATE_TEST_SUITE_P(Cuda, LlamaFlash, testing::Values("forward", "reverse", "random"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace llmtrain::cudatest
