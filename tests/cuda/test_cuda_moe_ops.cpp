// tests/cuda/test_cuda_moe_ops.cpp — the CUDA backend's mixture-of-experts ops (cuda_ops_moe.cu,
// moe_router.cu, moe_permute.cu) under cuda_emu against the CPU backend's (model/cpu/moe*.cpp) on
// the same inputs: one layer's moe_forward + moe_backward (every step of both ways), at N 51 rows of
// C 48, expert width F 40, in fp32 and bf16 and the emulator's thread orders. Cases: a softmax
// top-2 router over 8 experts with the balance loss; exact ties (dyadic inputs, so every logit is
// exact in any summation order and equal logits are equal bits on both backends) under softmax top-3
// of 6; DeepSeek-V3's sigmoid scores with a selection bias (ties again); Switch Transformer's expert
// capacity with pairs dropped. Then the experts' grouped GEMM (moe_grouped_gemm.cu) alone, through
// moe_ffn_forward / moe_ffn_backward, at uneven rows per expert (empty experts, counts off the tile)
// against the CPU's per-expert loops, and bitwise repeatable.
//
// Exact: the routing (ids), the plan (offsets, pos) and the grouped rows xg (a copy). fp32 router
// outputs (scores, gates, the balance loss): 1e-5 (kTolF32; fp32 logits of the same inputs, summed in
// another order). Activations and gradients (cuda_test_util.hpp's relative form): fp32 1e-5 (the GEMMs'
// order); bf16 2^-7 for gu (one GEMM of bf16 inputs, one rounding), 2^-6 for h, yg, out, the
// combine's dgates (each one more bf16 rounding of an operand: gu, then h), 2^-5 for the backward's
// gradients (dh, dgu, dxg, dx, the weight gradients: bf16 dout and dyg through two more rounded
// GEMM operands). Measured worst over the cases and orders (emulator): fp32 1.5e-6 (dx); bf16 gu
// 2^-8.6, h 2^-7.1, yg 2^-6.4, out 2^-8.6, dx 2^-6.3, dw13 2^-7.5, dw2 2^-7.0, dw_router 2^-8.1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "model/moe_layer.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

constexpr int N = 51, C = 48, F = 40;

struct MoeCase {
    int E = 8, k = 2;
    MoeScore score = MoeScore::softmax;
    float aux = 0.01f;
    int capacity = 0;
    bool bias = false;
    bool dyadic = false;  ///< inputs on a coarse dyadic grid: exact logits, many exact ties
};

/// Everything one layer's forward and backward leave, as fp32 (int32 values converted).
struct MoeOut {
    std::vector<float> scores, ids, gates, offsets, pos, xg, gu, h, yg, out, dx, dwr, dw13, dw2;
    float loss = 0.0f;
};

std::vector<float> ints(Ops& o, const void* p, size_t n) {
    std::vector<int> v(n);
    o.memcpy_d2h(v.data(), p, n * 4);
    o.synchronize();
    return std::vector<float>(v.begin(), v.end());
}

/// Values in [lo, hi) on a grid of 1/8 (dyadic: products and sums of a few are exact in fp32).
std::vector<float> grid_vec(size_t n, uint64_t seed, float lo, float hi) {
    auto v = random_vec(n, seed, false, lo, hi);
    for (float& x : v) x = std::round(x * 8.0f) / 8.0f;
    return v;
}

/// One layer forward + backward on o; inputs rounded to bf16 when b16 (both backends then see the
/// same values; the CPU computes in fp32 on them).
MoeOut run_layer(Ops& o, const MoeCase& mc, bool b16) {
    const DType dt = o.act_dtype();
    const int E = mc.E, k = mc.k, P = N * k;
    const size_t es = dtype_size(dt);
    auto in = [&](size_t n, uint64_t seed, float lo, float hi) {
        return mc.dyadic ? grid_vec(n, seed, lo, hi) : random_vec(n, seed, b16, lo, hi);
    };
    const auto x = in(size_t(N) * C, 300, -1, 1);
    auto wr = in(size_t(E) * C, 301, -0.25f, 0.25f);
    if (mc.dyadic)  // experts e and e + E/2 share a router row: their logits tie exactly on every row
        std::copy_n(wr.begin(), size_t(E / 2) * C, wr.begin() + size_t(E - E / 2) * C);
    const auto w13 = random_vec(size_t(E) * 2 * F * C, 302, b16, -0.2f, 0.2f);
    const auto w2 = random_vec(size_t(E) * C * F, 303, b16, -0.2f, 0.2f);
    const auto out0 = random_vec(size_t(N) * C, 304, b16), dout = random_vec(size_t(N) * C, 305, b16);
    const auto dwr0 = random_vec(wr.size(), 306, b16), dw130 = random_vec(w13.size(), 307, b16);
    const auto dw20 = random_vec(w2.size(), 308, b16);
    std::vector<float> bias(size_t(E), 0.0f);
    for (int e = 0; e < E; e++) bias[size_t(e)] = 0.25f * float(e % 3 == 1) - 0.125f * float(e % 4 == 2);

    DevBuf dx_in = upload(o, x, dt), dwr = upload(o, wr, dt), dw13 = upload(o, w13, dt), dw2 = upload(o, w2, dt);
    DevBuf dout_b = upload(o, dout, dt), out = upload(o, out0, dt), gwr = upload(o, dwr0, dt);
    DevBuf gw13 = upload(o, dw130, dt), gw2 = upload(o, dw20, dt), dbias = upload(o, bias, DType::f32);
    DevBuf scores(o, size_t(N) * E * 4), ids(o, size_t(P) * 4), gates(o, size_t(P) * 4), offsets(o, size_t(E + 1) * 4);
    DevBuf pos(o, size_t(P) * 4), xg(o, size_t(P) * C * es), gu(o, size_t(P) * 2 * F * es), h(o, size_t(P) * F * es);
    DevBuf yg(o, size_t(P) * C * es), logits(o, size_t(N) * E * 4), counts(o, size_t(E) * 4), pair_of(o, size_t(P) * 4);
    DevBuf dgates(o, size_t(P) * 4), dscores(o, size_t(N) * E * 4), dyg(o, size_t(P) * C * es);
    DevBuf dxg(o, size_t(P) * C * es), dgu(o, size_t(P) * 2 * F * es), dh(o, size_t(P) * F * es);
    DevBuf dx(o, size_t(N) * C * es);
    o.memset(dx.ptr, 0xff, size_t(N) * C * es);  // overwritten: NaN shows an element left unwritten

    MoeShape s;
    s.N = N, s.C = C, s.E = E, s.k = k, s.F = F, s.score = mc.score, s.aux_coef = mc.aux, s.capacity = mc.capacity;
    s.bias = mc.bias ? dbias.as<float>() : nullptr;
    MoeActs a;
    a.scores = scores.as<float>(), a.ids = ids.as<int>(), a.gates = gates.as<float>(), a.offsets = offsets.as<int>();
    a.pos = pos.as<int>(), a.xg = xg.ptr, a.gu = gu.ptr, a.h = h.ptr, a.yg = yg.ptr;
    MoeWork w;
    w.logits = logits.as<float>(), w.counts = counts.as<int>(), w.pair_of = pair_of.as<int>();
    w.dgates = dgates.as<float>(), w.dscores = dscores.as<float>(), w.dyg = dyg.ptr, w.dxg = dxg.ptr;
    w.dgu = dgu.ptr, w.dh = dh.ptr;

    MoeOut r;
    r.loss = o.moe_forward(s, a, w, out.ptr, dx_in.ptr, dwr.ptr, dw13.ptr, dw2.ptr, true);
    o.synchronize();
    r.scores = download(o, scores.ptr, size_t(N) * E, DType::f32);
    r.ids = ints(o, ids.ptr, size_t(P));
    r.gates = download(o, gates.ptr, size_t(P), DType::f32);
    r.offsets = ints(o, offsets.ptr, size_t(E + 1));
    r.pos = ints(o, pos.ptr, size_t(P));
    r.xg = download(o, xg.ptr, size_t(P) * C, dt);
    const size_t kept = size_t(r.offsets[size_t(E)]);  // gu and h: the kept rows only (no expert runs the rest)
    r.gu = download(o, gu.ptr, kept * 2 * F, dt);
    r.h = download(o, h.ptr, kept * F, dt);
    r.yg = download(o, yg.ptr, size_t(P) * C, dt);
    r.out = download(o, out.ptr, size_t(N) * C, dt);
    o.moe_backward(s, a, w, dx.ptr, gwr.ptr, gw13.ptr, gw2.ptr, dout_b.ptr, dx_in.ptr, dwr.ptr, dw13.ptr, dw2.ptr,
                   mc.aux * 4.0f);
    o.synchronize();
    r.dx = download(o, dx.ptr, size_t(N) * C, dt);
    r.dwr = download(o, gwr.ptr, wr.size(), dt);
    r.dw13 = download(o, gw13.ptr, w13.size(), dt);
    r.dw2 = download(o, gw2.ptr, w2.size(), dt);
    return r;
}

using MoeOpsTest = CudaVsCpu;

void compare(const MoeOut& got, const MoeOut& want, bool bf16) {
    EXPECT_EQ(got.ids, want.ids) << "routing (top-k ids)";
    EXPECT_EQ(got.offsets, want.offsets) << "dispatch offsets";
    EXPECT_EQ(got.pos, want.pos) << "dispatch positions";
    expect_close("scores", got.scores, want.scores, kTolF32);
    expect_close("gates", got.gates, want.gates, kTolF32);
    EXPECT_NEAR(got.loss, want.loss, kTolF32 * (std::fabs(want.loss) + 1e-30)) << "balance loss";
    EXPECT_EQ(got.xg, want.xg) << "grouped rows (a copy)";
    const double t1 = bf16 ? kTolBf16 : kTolF32, t2 = bf16 ? 2 * kTolBf16 : kTolF32, t4 = bf16 ? 4 * kTolBf16 : kTolF32;
    expect_close("gu", got.gu, want.gu, t1);
    expect_close("h", got.h, want.h, t2);
    expect_close("yg", got.yg, want.yg, t2);
    expect_close("out", got.out, want.out, t2);
    expect_close("dx", got.dx, want.dx, t4);
    expect_close("dw_router", got.dwr, want.dwr, t4);
    expect_close("dw13", got.dw13, want.dw13, t4);
    expect_close("dw2", got.dw2, want.dw2, t4);
}

/// Mixtral / Qwen3-MoE: softmax over 8, top-2, renormalized; the balance loss and its gradient.
TEST_P(MoeOpsTest, SoftmaxTop2WithBalanceLoss) {
    MoeCase mc;
    compare(run_layer(*cuda, mc, bf16), run_layer(*cpu, mc, bf16), bf16);
}

/// Exact ties: equal logits (dyadic inputs) must go to the lower expert first, as the CPU's order.
TEST_P(MoeOpsTest, SoftmaxTiesGoToTheLowerExpert) {
    MoeCase mc;
    mc.E = 6, mc.k = 3, mc.dyadic = true;
    const MoeOut want = run_layer(*cpu, mc, bf16);
    int ties = 0;  // the case must hold ties among the selected and the next expert
    for (int n = 0; n < N; n++)
        for (int e = 0; e < mc.E; e++)
            for (int e2 = e + 1; e2 < mc.E; e2++)
                ties += want.scores[size_t(n) * mc.E + e] == want.scores[size_t(n) * mc.E + e2];
    EXPECT_GT(ties, N / 2) << "the dyadic inputs should tie";
    compare(run_layer(*cuda, mc, bf16), want, bf16);
}

/// DeepSeek-V3: sigmoid scores, a selection bias steering the top-k (not the gates), ties included.
TEST_P(MoeOpsTest, SigmoidWithSelectionBias) {
    MoeCase mc;
    mc.score = MoeScore::sigmoid, mc.bias = true, mc.dyadic = true, mc.aux = 0.003f;
    compare(run_layer(*cuda, mc, bf16), run_layer(*cpu, mc, bf16), bf16);
}

/// Switch Transformer's capacity: at most 9 rows an expert (of ~25 routed), the rest dropped in pair
/// order; the dropped rows' outputs and gradients are zero on both backends.
TEST_P(MoeOpsTest, CapacityDropsPairs) {
    MoeCase mc;
    mc.E = 4, mc.capacity = 9;
    const MoeOut want = run_layer(*cpu, mc, bf16);
    EXPECT_LT(want.offsets.back(), float(N * mc.k)) << "the case must drop pairs";
    compare(run_layer(*cuda, mc, bf16), want, bf16);
}

/// The experts' FFN tensors of moe_ffn_forward + moe_ffn_backward (as fp32).
struct FfnOut {
    std::vector<float> gu, h, yg, dh, dgu, dxg, dw13, dw2;
};

/// Expert row counts of the grouped-GEMM cases: experts without rows (first, middle, last), single
/// rows, counts below, at and past the kernel's 64-row tile and not multiples of it.
constexpr int kGroupRows[] = {0, 70, 1, 0, 33, 129, 64, 0};
constexpr int kGE = 8, kGC = 44, kGF = 36;  // K and Nout not multiples of the 32 / 64 tiles, nor of 16

/// moe_ffn_forward, then moe_ffn_backward from independent inputs (gu, h given: both backends see the
/// same bits) on o, at the offsets of kGroupRows; inputs rounded to bf16 when b16 (for both backends).
/// Overwritten outputs are NaN-filled first.
FfnOut run_ffn(Ops& o, bool b16) {
    const DType dt = o.act_dtype();
    const size_t es = dtype_size(dt);
    std::vector<int> off(1, 0);
    for (int r : kGroupRows) off.push_back(off.back() + r);
    const size_t R = size_t(off.back()), C = kGC, F = kGF, E = kGE;
    DevBuf offsets = upload_ints(o, off);
    auto in = [&](size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
        return upload(o, random_vec(n, seed, b16, lo, hi), dt);
    };
    DevBuf xg = in(R * C, 400), w13 = in(E * 2 * F * C, 401, -0.3f, 0.3f), w2 = in(E * C * F, 402, -0.3f, 0.3f);
    DevBuf dyg = in(R * C, 403), gu_in = in(R * 2 * F, 404, -2, 2), h_in = in(R * F, 405);
    DevBuf dw13 = in(E * 2 * F * C, 406), dw2 = in(E * C * F, 407);
    auto nan_buf = [&](size_t n) {  // overwritten: NaN shows an element left unwritten
        DevBuf b(o, n * es);
        o.memset(b.ptr, 0xff, n * es);
        return b;
    };
    DevBuf gu = nan_buf(R * 2 * F), h = nan_buf(R * F), yg = nan_buf(R * C), dh = nan_buf(R * F);
    DevBuf dgu = nan_buf(R * 2 * F), dxg = nan_buf(R * C);
    o.moe_ffn_forward(yg.ptr, gu.ptr, h.ptr, xg.ptr, w13.ptr, w2.ptr, offsets.as<int>(), kGE, kGC, kGF);
    o.moe_ffn_backward(dxg.ptr, dw13.ptr, dw2.ptr, dgu.ptr, dh.ptr, dyg.ptr, xg.ptr, gu_in.ptr, h_in.ptr, w13.ptr,
                       w2.ptr, offsets.as<int>(), kGE, kGC, kGF);
    o.synchronize();
    return {download(o, gu.ptr, R * 2 * F, dt),   download(o, h.ptr, R * F, dt),
            download(o, yg.ptr, R * C, dt),       download(o, dh.ptr, R * F, dt),
            download(o, dgu.ptr, R * 2 * F, dt),  download(o, dxg.ptr, R * C, dt),
            download(o, dw13.ptr, E * 2 * F * C, dt), download(o, dw2.ptr, E * C * F, dt)};
}

/// The grouped GEMM (moe_grouped_gemm.cu) against the CPU's per-expert loops at uneven row counts:
/// fp32 1e-5; bf16 2^-7 for one GEMM of exact inputs (gu, dh, dw2: one rounding of an fp32 sum),
/// 2^-6 one rounded operand later (h, yg, dgu), 2^-5 two (dxg, dw13). A second run is bitwise equal
/// (no atomics; the random order also shuffles the blocks).
TEST_P(MoeOpsTest, GroupedGemmUnevenExpertsDeterministic) {
    const FfnOut want = run_ffn(*cpu, bf16), got = run_ffn(*cuda, bf16);
    const double t1 = bf16 ? kTolBf16 : kTolF32, t2 = bf16 ? 2 * kTolBf16 : kTolF32, t4 = bf16 ? 4 * kTolBf16 : kTolF32;
    expect_close("gu", got.gu, want.gu, t1);
    expect_close("h", got.h, want.h, t2);
    expect_close("yg", got.yg, want.yg, t2);
    expect_close("dh", got.dh, want.dh, t1);
    expect_close("dw2", got.dw2, want.dw2, t1);
    expect_close("dgu", got.dgu, want.dgu, t2);
    expect_close("dxg", got.dxg, want.dxg, t4);
    expect_close("dw13", got.dw13, want.dw13, t4);
    const FfnOut again = run_ffn(*cuda, bf16);
    for (auto m : {&FfnOut::gu, &FfnOut::h, &FfnOut::yg, &FfnOut::dh, &FfnOut::dgu, &FfnOut::dxg, &FfnOut::dw13,
                   &FfnOut::dw2})
        EXPECT_EQ(std::memcmp((again.*m).data(), (got.*m).data(), (got.*m).size() * 4), 0) << "not bitwise repeatable";
}

INSTANTIATE_TEST_SUITE_P(Cuda, MoeOpsTest, testing::ValuesIn(all_modes()), mode_name);

}  // namespace
}  // namespace llmtrain::cudatest
