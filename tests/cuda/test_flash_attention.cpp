// tests/cuda/test_flash_attention.cpp — model.attention = "native" in bf16 at head sizes 64 and 128:
// the FlashAttention-2 kernels on tensor cores (model/cuda/flash_forward.cu, flash_backward.cu: mma.sync m16n8k16,
// ldmatrix, cp.async through model/cuda/ptx.cuh, a fused backward with dQ partials summed in a fixed
// order) against the CPU backend's fp32 attention on the same bf16-exact inputs, forward (out, lse)
// and backward (dqkv), under the emulator's three thread orders, with T a multiple of the blocks
// or not (forward 128 query rows, 64-key steps; backward 128 keys x 64 queries a step at HS 64,
// at HS 128 128 or 64 keys x 32 queries): T 1, 64, 65, 100, 128, 129, 150, 300; grouped-query
// attention at T 150; causal skipping (keys past a block's or a warp's rows never read, query
// blocks before a key block's diagonal never read: NaN planted there changes no bit of the rows
// that must not see it); the backward in batch chunks; and bitwise repeatable: the same bits under
// every thread order, block order and made-up wmma layout (the fused backward's dQ included).
// Both backward variants at HS 128 (flash_attention.hpp): the emulated device is an H100 (227 KiB
// of opt-in shared memory per block: 128 keys) unless CUDA_EMU_SMEM_OPTIN says otherwise; the
// HS 128 cases also run on a 99 KiB device (sm_86/89/120: 64 keys), and FlashAttentionKeyBlock.*
// checks which variant each device gets and that the launched one is it (its dQ reads K rows
// 64-127 for queries 0-63 exactly when a block holds 128 keys), and that
// flash_attention_backward_keys (attention_bench's native-bc64) runs the variant it names.
// Tolerances: out and dqkv within attention_bound.hpp's derived per-element bound (the roundings
// this path makes: P and dS to bf16 where they enter the mma, the bf16 outputs, D from the rounded
// out — the bound test_cublas_attention.cpp and test_cudnn_attention.cpp use); lse 2^-7 of
// (|x| + rms) (fp32 from fp32 scores of bf16-exact inputs, as the other paths). Each case prints the
// worst fraction of the bound it used. Grouped-query: the bound of the expanded heads (dK, dV: summed
// over the group).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "model/cuda/flash_attention.hpp"
#include "tests/cuda/attention_bound.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

struct Shape {
    int B, T, C, NH;
};
constexpr Shape kHs64{2, 150, 128, 2};      // forward blocks of 128 + 22 rows, key blocks 64, 64, 22
constexpr Shape kHs128{1, 100, 256, 2};     // one partial forward block; key blocks 64 + 36
constexpr Shape kHs64T100{2, 100, 128, 2};  // one partial forward block; key blocks 64 + 36
constexpr Shape kHs64T129{1, 129, 128, 2};  // a forward block of one row; a key block of one key
constexpr Shape kHs64T300{1, 300, 128, 2};  // 3 forward blocks, 5 key blocks (causal skipping)
constexpr Shape kHs128T150{2, 150, 256, 2};  // forward blocks of 128 + 22 rows; backward steps of 32
constexpr Shape kHs128T129{1, 129, 256, 2};  // a forward block of one row
constexpr Shape kHs128T300{1, 300, 256, 2};  // 3 forward blocks, 5 key blocks (causal skipping)

std::unique_ptr<Ops> make_native_bf16() {
    CudaBackendOptions opt;
    opt.attention = Attention::native;
    return make_cuda_backend("bf16", opt);
}

#ifndef LLMTRAIN_REAL_GPU
constexpr size_t k99KiB = 101376;   // sm_86, sm_89, sm_120: the 64-key backward at head size 128
constexpr size_t k227KiB = 232448;  // sm_90 (the emulator's default): 128 keys

/// Sets the emulated device's opt-in shared memory per block (CUDA_EMU_SMEM_OPTIN, read at each
/// call) for a scope, then restores the former setting (so a run with it set stays on its device).
class ScopedSmemOptin {
public:
    explicit ScopedSmemOptin(size_t bytes) {
        if (const char* v = std::getenv("CUDA_EMU_SMEM_OPTIN")) saved_ = v, had_ = true;
        setenv("CUDA_EMU_SMEM_OPTIN", std::to_string(bytes).c_str(), 1);
    }
    ~ScopedSmemOptin() {
        if (had_) setenv("CUDA_EMU_SMEM_OPTIN", saved_.c_str(), 1);
        else unsetenv("CUDA_EMU_SMEM_OPTIN");
    }
    ScopedSmemOptin(const ScopedSmemOptin&) = delete;
    ScopedSmemOptin& operator=(const ScopedSmemOptin&) = delete;

private:
    std::string saved_;
    bool had_ = false;
};
#endif

/// out, lse and dqkv (as fp32) of one backend's attention forward + backward on qkv and dout.
std::array<std::vector<float>, 3> run_attention(Ops& o, const std::vector<float>& qkv, const std::vector<float>& dout,
                                                const Shape& s) {
    const DType dt = o.act_dtype();
    const size_t es = dtype_size(dt), N = static_cast<size_t>(s.B) * s.T, stats = N * s.NH;
    DevBuf dq = upload(o, qkv, dt), dgo = upload(o, dout, dt);
    DevBuf out(o, N * s.C * es), lse(o, stats * 4), dqkv(o, qkv.size() * es);
    o.attention_forward(out.ptr, lse.as<float>(), dq.ptr, s.B, s.T, s.C, s.NH);
    o.attention_backward(dqkv.ptr, dgo.ptr, dq.ptr, out.ptr, lse.as<float>(), s.B, s.T, s.C, s.NH);
    return {download(o, out.ptr, N * s.C, dt), download(o, lse.ptr, stats, DType::f32),
            download(o, dqkv.ptr, qkv.size(), dt)};
}

/// Random qkv in [-2, 2) and dout in [-1, 1), bf16-exact.
std::pair<std::vector<float>, std::vector<float>> inputs(const Shape& s, uint64_t seed) {
    const size_t N = static_cast<size_t>(s.B) * s.T;
    return {random_vec(N * 3 * s.C, seed, true, -2, 2), random_vec(N * s.C, seed + 1, true)};
}

/// qkv (B, T, 3C) with every key and value from position `from` on set to NaN (queries kept).
std::vector<float> nan_kv_from(std::vector<float> qkv, const Shape& s, int from) {
    const size_t W = 3 * static_cast<size_t>(s.C);
    for (int b = 0; b < s.B; b++)
        for (int t = from; t < s.T; t++)
            for (size_t c = s.C; c < W; c++) qkv[(static_cast<size_t>(b) * s.T + t) * W + c] = NAN;
    return qkv;
}

/// The worst |got - want| / bound over the elements (printed beside each case).
double bound_fraction(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& bound) {
    double worst = 0;
    for (size_t i = 0; i < got.size() && i < want.size() && i < bound.size(); i++)
        worst = std::fmax(worst, std::fabs(double(got[i]) - want[i]) / (bound[i] + 1e-30));
    return worst;
}

class FlashAttention : public testing::TestWithParam<std::string> {
protected:
    void SetUp() override { set_emu_order(GetParam()); }
    void TearDown() override { reset_emu_order(); }
    void matches_cpu(const Shape& s, uint64_t seed) {
        ASSERT_TRUE(cuda::flash_attention_supported(s.C, s.NH));  // the tensor-core path, not attention.cu
        const auto [qkv, dout] = inputs(s, seed);
        const auto got = run_attention(*make_native_bf16(), qkv, dout, s);
        const auto want = run_attention(*make_cpu_backend(), qkv, dout, s);
        const AttentionBound bound = attention_bound(qkv, dout, s.B, s.T, s.C, s.NH);
        expect_within_bound("flash out", got[0], want[0], bound.out);
        expect_close("flash lse", got[1], want[1], kTolBf16);
        expect_within_bound("flash dqkv", got[2], want[2], bound.dqkv);
        std::printf("HS %d T %d B %d, backward %d keys: out %.2f, dqkv %.2f of the bound\n", s.C / s.NH, s.T, s.B,
                    cuda::flash_backward_keys_on_device(s.C / s.NH), bound_fraction(got[0], want[0], bound.out),
                    bound_fraction(got[2], want[2], bound.dqkv));
    }
};

TEST_P(FlashAttention, HeadSize64MatchesCpu) { matches_cpu(kHs64, 70); }
TEST_P(FlashAttention, HeadSize128MatchesCpu) { matches_cpu(kHs128, 80); }
TEST_P(FlashAttention, HeadSize64PartialBlocksMatchCpu) {
    matches_cpu(kHs64T100, 71);
    matches_cpu(kHs64T129, 72);
}
TEST_P(FlashAttention, HeadSize64ManyBlocksMatchesCpu) { matches_cpu(kHs64T300, 73); }
TEST_P(FlashAttention, EdgeLengthsMatchCpu) {  // one row; exact multiples of the key and query blocks
    for (int T : {1, 64, 128}) matches_cpu(Shape{1, T, 128, 2}, 74 + T);
    for (int T : {1, 65}) matches_cpu(Shape{1, T, 256, 2}, 84 + T);
}
TEST_P(FlashAttention, HeadSize128PartialBlocksMatchCpu) {
    matches_cpu(kHs128T150, 81);
    matches_cpu(kHs128T129, 82);
}
/// Head size 128's forward holds one K and one V buffer, refilled between its two barriers per key
/// block while warps whose rows end before the block skip it: 5 key blocks of 3 forward blocks.
TEST_P(FlashAttention, HeadSize128ManyBlocksMatchesCpu) { matches_cpu(kHs128T300, 83); }
#ifndef LLMTRAIN_REAL_GPU
/// The head-size-128 cases above on a 99 KiB device: the 64-key backward (4 warps), where the
/// default device runs the 128-key one (8 warps).
TEST_P(FlashAttention, HeadSize128On99KiBDeviceMatchesCpu) {
    ScopedSmemOptin sm86(k99KiB);
    ASSERT_EQ(cuda::flash_backward_keys_on_device(128), 64);
    matches_cpu(kHs128, 80);
    matches_cpu(kHs128T150, 81);
    matches_cpu(kHs128T129, 82);
    matches_cpu(kHs128T300, 83);
    for (int T : {1, 65}) matches_cpu(Shape{1, T, 256, 2}, 84 + T);
}
#endif

/// out, lse and dqkv of the grouped-query op (qkv (B,T,(NH + 2 NKV)*HS)).
std::array<std::vector<float>, 3> run_gqa(Ops& o, const std::vector<float>& qkv, const std::vector<float>& dout, int B,
                                          int T, int NH, int NKV, int HS) {
    const DType dt = o.act_dtype();
    const size_t es = dtype_size(dt), n_out = static_cast<size_t>(B) * T * NH * HS;
    DevBuf dq = upload(o, qkv, dt), dgo = upload(o, dout, dt);
    DevBuf out(o, n_out * es), lse(o, static_cast<size_t>(B) * NH * T * 4), dqkv(o, qkv.size() * es);
    o.attention_forward_gqa(out.ptr, lse.as<float>(), dq.ptr, B, T, NH, NKV, HS);
    o.attention_backward_gqa(dqkv.ptr, dgo.ptr, dq.ptr, out.ptr, lse.as<float>(), B, T, NH, NKV, HS);
    return {download(o, out.ptr, n_out, dt), download(o, lse.ptr, static_cast<size_t>(B) * NH * T, DType::f32),
            download(o, dqkv.ptr, qkv.size(), dt)};
}

/// Grouped-query attention over several blocks at n_head 4, T 150 (the backward's key blocks walk
/// two or four query heads, each from its diagonal), against the CPU within the bound of the
/// expanded multi-head problem (key/value head h / (NH/NKV) copied into query head h): out and dQ as
/// for head h, dK and dV of key/value head g within the sum of its query heads' bounds (the CPU sums
/// the same per-head gradients). Head size 64 with n_kv_head 2 and 1; head size 128 with 2 on the
/// device's backward variant (emulated: 128 keys) and, emulated, on a 99 KiB device (64 keys).
void gqa_matches_cpu(int HS, int NKV) {
    const int B = 1, T = 150, NH = 4, C = NH * HS;
    auto cpu = make_cpu_backend();
    auto dev = make_native_bf16();
    SCOPED_TRACE("head size " + std::to_string(HS) + ", n_kv_head " + std::to_string(NKV));
    const size_t W = static_cast<size_t>(NH + 2 * NKV) * HS, W3 = 3 * static_cast<size_t>(C);
    const auto qkv = random_vec(static_cast<size_t>(B) * T * W, 280 + NKV, true, -2, 2);
    const auto dout = random_vec(static_cast<size_t>(B) * T * C, 290 + NKV, true, -1, 1);
    const auto got = run_gqa(*dev, qkv, dout, B, T, NH, NKV, HS);
    const auto want = run_gqa(*cpu, qkv, dout, B, T, NH, NKV, HS);
    std::vector<float> q3(static_cast<size_t>(B) * T * W3);
    for (int t = 0; t < B * T; t++)
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HS; d++) {
                const int g = h / (NH / NKV);
                q3[t * W3 + h * HS + d] = qkv[t * W + h * HS + d];
                q3[t * W3 + C + h * HS + d] = qkv[t * W + C + g * HS + d];
                q3[t * W3 + 2 * C + h * HS + d] = qkv[t * W + C + (NKV + g) * HS + d];
            }
    const AttentionBound b3 = attention_bound(q3, dout, B, T, C, NH);
    std::vector<double> bound(got[2].size(), 0.0);
    for (int t = 0; t < B * T; t++)
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HS; d++) {
                const int g = h / (NH / NKV);
                bound[t * W + h * HS + d] = b3.dqkv[t * W3 + h * HS + d];
                bound[t * W + C + g * HS + d] += b3.dqkv[t * W3 + C + h * HS + d];
                bound[t * W + C + (NKV + g) * HS + d] += b3.dqkv[t * W3 + 2 * C + h * HS + d];
            }
    expect_within_bound("flash gqa out", got[0], want[0], b3.out);
    expect_close("flash gqa lse", got[1], want[1], kTolBf16);
    expect_within_bound("flash gqa dqkv", got[2], want[2], bound);
    std::printf("GQA HS %d NH %d NKV %d T %d, backward %d keys: out %.2f, dqkv %.2f of the bound\n", HS, NH, NKV,
                T, cuda::flash_backward_keys_on_device(HS), bound_fraction(got[0], want[0], b3.out),
                bound_fraction(got[2], want[2], bound));
}
TEST_P(FlashAttention, GroupedQueryManyBlocksMatchesCpu) {
    for (int NKV : {2, 1}) gqa_matches_cpu(64, NKV);
    gqa_matches_cpu(128, 2);
#ifndef LLMTRAIN_REAL_GPU
    ScopedSmemOptin sm86(k99KiB);
    gqa_matches_cpu(128, 2);
#endif
}

INSTANTIATE_TEST_SUITE_P(Cuda, FlashAttention, testing::Values("forward", "reverse", "random"),
                         [](const auto& info) { return info.param; });

/// Same inputs, same bits: across runs, and (emulator) across thread orders, which a kernel racing
/// in shared memory would not survive, and made-up wmma layouts (which the mma.sync kernels, on
/// PTX's documented layout, must not notice). No atomics and fixed reduction orders make this hold
/// on a GPU too.
TEST(FlashAttentionRepeat, BitwiseAcrossRunsOrdersAndLayouts) {
    const auto [qkv, dout] = inputs(kHs64, 90);
    const auto first = run_attention(*make_native_bf16(), qkv, dout, kHs64);
#ifndef LLMTRAIN_REAL_GPU
    const uint64_t layout = emu::wmma_layout();
#endif
    for (const auto& [order, seed] : {std::pair{"reverse", 7}, std::pair{"random", 8}}) {
        set_emu_order(order);
#ifndef LLMTRAIN_REAL_GPU
        emu::set_wmma_layout(seed);
#else
        (void)seed;
#endif
        const auto again = run_attention(*make_native_bf16(), qkv, dout, kHs64);
        for (int k = 0; k < 3; k++) EXPECT_EQ(again[k], first[k]) << "output " << k << " under " << order;
    }
    reset_emu_order();
#ifndef LLMTRAIN_REAL_GPU
    emu::set_wmma_layout(layout);
#endif
}

/// Bitwise: the same inputs at both head sizes (at 128 in both backward variants: 128 keys on the
/// default device, 64 on a 99 KiB one) and with grouped-query heads give the same bits under other
/// thread orders and shuffled block orders (the fused backward writes each dQ partial once and sums
/// them in key-block order; dK/dV are owned by one block each).
TEST(FlashAttentionRepeat, FusedBackwardIsBitwiseRepeatable) {
    auto dev = make_native_bf16();
    auto repeatable = [&](const Shape& s) {
        SCOPED_TRACE("head size " + std::to_string(s.C / s.NH) + ", backward " +
                     std::to_string(cuda::flash_backward_keys_on_device(s.C / s.NH)) + " keys");
        const auto [qkv, dout] = inputs(s, 95);
        const auto first = run_attention(*dev, qkv, dout, s);
        for (const char* order : {"reverse", "random"}) {
            set_emu_order(order);
            const auto again = run_attention(*make_native_bf16(), qkv, dout, s);
            for (int k = 0; k < 3; k++) EXPECT_EQ(again[k], first[k]) << "output " << k << " under " << order;
            reset_emu_order();
        }
    };
    for (const Shape& s : {kHs128T150, kHs64T300}) repeatable(s);
#ifndef LLMTRAIN_REAL_GPU
    {
        ScopedSmemOptin sm86(k99KiB);
        repeatable(kHs128T150);
    }
#endif
    const int B = 1, T = 150, NH = 4, NKV = 2, HS = 64;
    const auto qkv = random_vec(static_cast<size_t>(B) * T * (NH + 2 * NKV) * HS, 96, true, -2, 2);
    const auto dout = random_vec(static_cast<size_t>(B) * T * NH * HS, 97, true, -1, 1);
    const auto first = run_gqa(*dev, qkv, dout, B, T, NH, NKV, HS);
    set_emu_order("random");
    const auto again = run_gqa(*make_native_bf16(), qkv, dout, B, T, NH, NKV, HS);
    reset_emu_order();
    for (int k = 0; k < 3; k++) EXPECT_EQ(again[k], first[k]) << "grouped-query output " << k;
}

/// The backward in batch chunks (the dQ partials of as many batch rows as fit
/// flash_dq_workspace_cap, several fused-kernel and sum launches on one workspace) gives the same
/// bits as in one launch: B 3 at a cap of one row's partials of the device's variant, and of two
/// rows (chunks 2 + 1); at head size 64, and at 128 in both variants (on the emulator).
TEST(FlashAttentionChunks, BatchChunksGiveTheSameBits) {
    auto chunks_agree = [](const Shape& s) {
        const int keys = cuda::flash_backward_keys_on_device(s.C / s.NH);
        SCOPED_TRACE("head size " + std::to_string(s.C / s.NH) + ", backward " + std::to_string(keys) + " keys");
        const auto [qkv, dout] = inputs(s, 98);
        const auto whole = run_attention(*make_native_bf16(), qkv, dout, s);
        ASSERT_EQ(cuda::flash_backward_batch_chunk(s.B, s.T, s.C, s.NH, keys), s.B);
        const size_t saved = cuda::flash_dq_workspace_cap,
                     per = cuda::flash_dq_partial_bytes_per_batch(s.T, s.C, s.NH, keys);
        for (size_t rows : {1, 2}) {
            cuda::flash_dq_workspace_cap = rows * per + per / 2;
            EXPECT_EQ(cuda::flash_backward_batch_chunk(s.B, s.T, s.C, s.NH, keys), static_cast<int>(rows));
            // The scratch (the larger variant's) holds this variant's chunks.
            EXPECT_GE(cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH),
                      cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH, keys));
            const auto chunked = run_attention(*make_native_bf16(), qkv, dout, s);
            for (int k = 0; k < 3; k++) EXPECT_EQ(chunked[k], whole[k]) << "output " << k << ", chunks of " << rows;
        }
        cuda::flash_dq_workspace_cap = saved;
    };
    chunks_agree(Shape{3, 150, 128, 2});
    chunks_agree(Shape{3, 100, 256, 2});
#ifndef LLMTRAIN_REAL_GPU
    ScopedSmemOptin sm86(k99KiB);
    chunks_agree(Shape{3, 100, 256, 2});
#endif
}

/// The checks of FlashAttentionCausal.BlocksPastTheDiagonalAreNeverRead (below) at one shape (B 1, T 300).
void never_read_past_the_diagonal(const Shape& s) {
    SCOPED_TRACE("head size " + std::to_string(s.C / s.NH) + ", backward " +
                 std::to_string(cuda::flash_backward_keys_on_device(s.C / s.NH)) + " keys");
    const auto [qkv, dout] = inputs(s, 77);
    auto dev = make_native_bf16();
    const auto clean = run_attention(*dev, qkv, dout, s);
    const size_t W = 3 * static_cast<size_t>(s.C);
    auto rows_equal = [&](const std::vector<float>& a, const std::vector<float>& b, size_t width, int r0, int r1,
                          const char* what) {
        for (int r = r0; r < r1; r++)
            for (size_t c = 0; c < width; c++)
                if (std::memcmp(&a[r * width + c], &b[r * width + c], sizeof(float)) != 0) {
                    ADD_FAILURE() << what << ": row " << r << " column " << c << ": " << a[r * width + c] << " vs "
                                  << b[r * width + c];
                    return;
                }
    };
    for (int from : {128, 64}) {
        SCOPED_TRACE("keys and values NaN from " + std::to_string(from));
        auto poisoned = qkv;
        for (int t = from; t < s.T; t++)
            for (size_t c = s.C; c < W; c++) poisoned[t * W + c] = NAN;
        const auto got = run_attention(*dev, poisoned, dout, s);
        rows_equal(got[0], clean[0], s.C, 0, from, "out");
        for (int h = 0; h < s.NH; h++)  // lse (B = 1, NH, T)
            rows_equal(got[1], clean[1], 1, h * s.T, h * s.T + from, "lse");
    }
    auto poisoned_q = qkv, poisoned_dout = dout;
    for (int t = 0; t < 128; t++) {
        for (int c = 0; c < s.C; c++) poisoned_q[t * W + c] = NAN;
        for (int c = 0; c < s.C; c++) poisoned_dout[t * s.C + c] = NAN;
    }
    const auto got = run_attention(*dev, poisoned_q, poisoned_dout, s);
    rows_equal(got[0], clean[0], s.C, 128, s.T, "out after NaN queries");
    rows_equal(got[2], clean[2], W, 128, s.T, "dqkv after NaN queries and dO");
}

/// Causal skipping, observed through NaN (which any product with it would spread): T 300 at head
/// sizes 64 and 128 (forward blocks of 128 rows, 32 per warp; key steps of 64), at 128 in both
/// backward variants. Keys and values from 128 on set to NaN leave rows
/// 0-127 (forward block 0 never loads key blocks 2-4) bitwise unchanged, and from 64 on rows 0-63
/// (the warps of rows 0-63 skip key block 1, past their rows); queries and dO of rows 0-127 set to
/// NaN leave out, lse and dqkv of rows 128 on unchanged (the backward's key blocks from key 128 on,
/// of 128 keys or 64, start at their diagonal, and dQ of a row sums only its own partials).
TEST(FlashAttentionCausal, BlocksPastTheDiagonalAreNeverRead) {
    never_read_past_the_diagonal(kHs64T300);
    never_read_past_the_diagonal(kHs128T300);
#ifndef LLMTRAIN_REAL_GPU
    ScopedSmemOptin sm86(k99KiB);
    never_read_past_the_diagonal(kHs128T300);
#endif
}

/// The backward's key block by the device's opt-in shared memory per block (flash_backward_keys):
/// 128 keys at head size 64 on every device that runs the path; at head size 128, 128 keys where
/// their 115,328 B fit (sm_90's 227 KiB, sm_80's 163 KiB; a device allowing exactly that), else 64
/// (75,392 B: the 99 KiB of sm_86/89/120), which is also what "auto" requires of a device
/// (flash_attention_smem_bytes). Emulated: flash_backward_keys_on_device reads the device's limit
/// (CUDA_EMU_SMEM_OPTIN), and both variants run a byte either side of the 128-key need.
TEST(FlashAttentionKeyBlock, ChosenByTheDevicesSharedMemory) {
    EXPECT_EQ(cuda::flash_backward_keys(64, 101376), 128);
    EXPECT_EQ(cuda::flash_backward_keys(128, 101376), 64);
    EXPECT_EQ(cuda::flash_backward_keys(128, 166912), 128);
    EXPECT_EQ(cuda::flash_backward_keys(128, 232448), 128);
    const size_t need128 = cuda::flash_backward_smem_bytes(128, 128);
    EXPECT_EQ(need128, 115328u);
    EXPECT_EQ(cuda::flash_backward_keys(128, need128), 128);
    EXPECT_EQ(cuda::flash_backward_keys(128, need128 - 1), 64);
    EXPECT_EQ(cuda::flash_attention_smem_bytes(128), cuda::flash_backward_smem_bytes(128, 64));
    EXPECT_EQ(cuda::flash_attention_smem_bytes(64), cuda::flash_backward_smem_bytes(64, 128));
    // The 4-argument scratch serves either variant: the larger need.
    for (const Shape& s : {Shape{8, 2048, 1536, 12}, Shape{8, 2048, 2048, 16}, Shape{3, 100, 256, 2}})
        EXPECT_EQ(cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH),
                  std::max(cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH, 64),
                           cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH, 128)));
#ifndef LLMTRAIN_REAL_GPU
    for (const auto& [optin, keys] : {std::pair{k99KiB, 64}, std::pair{k227KiB, 128}, std::pair{need128, 128},
                                      std::pair{need128 - 1, 64}}) {
        SCOPED_TRACE("a device allowing " + std::to_string(optin) + " B per block");
        ScopedSmemOptin device(optin);
        EXPECT_EQ(cuda::flash_backward_keys_on_device(64), 128);
        EXPECT_EQ(cuda::flash_backward_keys_on_device(128), keys);
        if (optin == need128 || optin == need128 - 1) {  // runs a byte either side (the kernel's own limit)
            const auto [qkv, dout] = inputs(Shape{1, 20, 128, 1}, 60);
            EXPECT_NO_THROW(run_attention(*make_native_bf16(), qkv, dout, Shape{1, 20, 128, 1}));
        }
    }
#endif
}

/// The variant launched is the one flash_backward_keys_on_device names, seen through NaN (head size
/// 128, T 150, B 2): keys and values from 64 on set to NaN. The forward's rows 0-63 skip key
/// block 1 (out, lse unchanged), and dQ of queries 0-63 sums key block 0's partial only. With 64
/// keys that block holds keys 0-63: dQ rows 0-63 bitwise unchanged. With 128 keys it holds keys
/// 0-127 and its partial dS K runs over all of them: the zeros of dS at keys 64-127 (past the
/// queries, masked) times K's NaN rows make every dQ element of rows 0-63 NaN. On the emulator
/// both devices (99 KiB: 64 keys, 227 KiB: 128), on a GPU its own.
TEST(FlashAttentionKeyBlock, TheLaunchedVariantIsTheDevicesChoice) {
    const Shape s = kHs128T150;
    const auto [qkv, dout] = inputs(s, 64);
    const size_t W = 3 * static_cast<size_t>(s.C);
    const auto poisoned = nan_kv_from(qkv, s, 64);
    auto check = [&] {
        const int keys = cuda::flash_backward_keys_on_device(128);
        SCOPED_TRACE("backward " + std::to_string(keys) + " keys");
        auto dev = make_native_bf16();
        const auto clean = run_attention(*dev, qkv, dout, s);
        const auto got = run_attention(*dev, poisoned, dout, s);
        size_t total = 0, nan = 0, changed = 0, out_changed = 0;
        for (int b = 0; b < s.B; b++)
            for (int t = 0; t < 64; t++) {
                const size_t row = static_cast<size_t>(b) * s.T + t;
                for (int c = 0; c < s.C; c++) {  // dQ: columns 0 .. C of dqkv
                    const size_t i = row * W + c;
                    total++;
                    nan += std::isnan(got[2][i]);
                    changed += std::memcmp(&got[2][i], &clean[2][i], sizeof(float)) != 0;
                    out_changed += std::memcmp(&got[0][row * s.C + c], &clean[0][row * s.C + c], sizeof(float)) != 0;
                }
            }
        EXPECT_EQ(out_changed, 0u) << "the forward's rows 0-63 read keys past them";
        if (keys == 64) {
            EXPECT_EQ(changed, 0u) << "dQ of queries 0-63 read keys 64 on: not 64-key blocks";
        } else {
            ASSERT_EQ(keys, 128);
            EXPECT_EQ(nan, total) << "dQ of queries 0-63 did not run over keys 64-127: not 128-key blocks";
        }
    };
#ifndef LLMTRAIN_REAL_GPU
    for (size_t optin : {k99KiB, k227KiB}) {
        ScopedSmemOptin device(optin);
        check();
    }
#else
    check();
#endif
}

/// dqkv (as fp32) of flash_attention_backward_keys with `keys` keys per block after o's forward
/// (native, bf16) on qkv, on the default stream (o's), with scratch of the 5-argument size (of the
/// 4-argument one for keys the call must reject: the 5-argument one divides by them).
std::vector<float> backward_with_keys(Ops& o, const std::vector<float>& qkv, const std::vector<float>& dout,
                                      const Shape& s, int keys) {
    const size_t N = static_cast<size_t>(s.B) * s.T;
    DevBuf dq = upload(o, qkv, DType::bf16), dgo = upload(o, dout, DType::bf16);
    DevBuf out(o, N * s.C * 2), lse(o, N * s.NH * 4), dqkv(o, qkv.size() * 2),
        scratch(o, keys == 64 || keys == 128 ? cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH, keys)
                                             : cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH));
    o.attention_forward(out.ptr, lse.as<float>(), dq.ptr, s.B, s.T, s.C, s.NH);
    cuda::flash_attention_backward_keys(dqkv.as<__nv_bfloat16>(), dgo.as<__nv_bfloat16>(), dq.as<__nv_bfloat16>(),
                                        out.as<__nv_bfloat16>(), lse.as<float>(), s.B, s.T, s.C, s.NH, s.NH, keys,
                                        scratch.as<float>(), nullptr);
    return download(o, dqkv.ptr, qkv.size(), DType::bf16);
}

/// True when a and b hold the same bits (NaN included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// flash_attention_backward_keys, the entry point of a named backward variant (attention_bench's
/// native-bc64), at head size 128, T 150, B 2 with keys and values from 64 on NaN (as
/// TheLaunchedVariantIsTheDevicesChoice: dQ of queries 0-63 is NaN with 128 keys a block, clean
/// with 64, so the variants' bits differ). Emulated: 64 keys on a 227 KiB device give the bits of
/// the device's own backward on a 99 KiB device (the 64-key variant), 128 keys those of the 227 KiB
/// device's own. Everywhere: the device's choice gives its own bits, 128 keys at head size 64 too,
/// and 64 keys at head size 128 on clean inputs stay within the bound of the CPU backend's. Keys
/// other than 64 and 128, 64 at head size 64, and (emulated) 128 on a 99 KiB device throw
/// std::invalid_argument naming the value.
TEST(FlashAttentionKeyBlock, NamedVariantEntryPoint) {
    const Shape s = kHs128T150;
    const auto [qkv, dout] = inputs(s, 66);
    const auto poisoned = nan_kv_from(qkv, s, 64);
    auto throws_naming = [&](Ops& o, const Shape& sh, int keys, const std::string& also) {
        const auto [q, d] = inputs(sh, 67);
        try {
            backward_with_keys(o, q, d, sh, keys);
            ADD_FAILURE() << "keys " << keys << " at head size " << sh.C / sh.NH << " did not throw";
        } catch (const std::invalid_argument& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find("keys " + std::to_string(keys)), std::string::npos) << msg;
            EXPECT_NE(msg.find(also), std::string::npos) << msg;
        }
    };
#ifndef LLMTRAIN_REAL_GPU
    std::vector<float> own64, own128;
    {
        ScopedSmemOptin sm86(k99KiB);
        ASSERT_EQ(cuda::flash_backward_keys_on_device(128), 64);
        auto dev = make_native_bf16();
        own64 = run_attention(*dev, poisoned, dout, s)[2];
        EXPECT_TRUE(same_bits(backward_with_keys(*dev, poisoned, dout, s, 64), own64)) << "64 keys on a 99 KiB device";
        throws_naming(*dev, s, 128, "the device allows 101376");
    }
    {
        ScopedSmemOptin h100(k227KiB);
        ASSERT_EQ(cuda::flash_backward_keys_on_device(128), 128);
        auto dev = make_native_bf16();
        own128 = run_attention(*dev, poisoned, dout, s)[2];
        ASSERT_FALSE(same_bits(own64, own128)) << "the variants gave the same bits: no test of which one ran";
        EXPECT_TRUE(same_bits(backward_with_keys(*dev, poisoned, dout, s, 64), own64)) << "64 keys on a 227 KiB device";
        EXPECT_TRUE(same_bits(backward_with_keys(*dev, poisoned, dout, s, 128), own128)) << "128 keys, 227 KiB";
    }
#endif
    auto dev = make_native_bf16();
    const int keys = cuda::flash_backward_keys_on_device(128);
    EXPECT_TRUE(same_bits(backward_with_keys(*dev, poisoned, dout, s, keys), run_attention(*dev, poisoned, dout, s)[2]))
        << "the device's choice, " << keys << " keys";
    const auto want = run_attention(*make_cpu_backend(), qkv, dout, s);
    expect_within_bound("flash dqkv, 64 keys", backward_with_keys(*dev, qkv, dout, s, 64), want[2],
                        attention_bound(qkv, dout, s.B, s.T, s.C, s.NH).dqkv);
    const auto [q64, d64] = inputs(kHs64, 68);
    EXPECT_TRUE(same_bits(backward_with_keys(*dev, q64, d64, kHs64, 128), run_attention(*dev, q64, d64, kHs64)[2]))
        << "head size 64, 128 keys";
    throws_naming(*dev, kHs64, 64, "head size 64");
    for (int bad : {0, 32, 96, 256, -64}) throws_naming(*dev, s, bad, "must be 64 or 128");
}

/// Head sizes the tensor-core kernels do not take stay on attention.cu's CUDA-core kernels.
TEST(FlashAttentionShapes, SupportsHeadSizes64And128Only) {
    EXPECT_TRUE(cuda::flash_attention_supported(768, 12));
    EXPECT_TRUE(cuda::flash_attention_supported(1600, 25));
    EXPECT_TRUE(cuda::flash_attention_supported(256, 2));
    EXPECT_FALSE(cuda::flash_attention_supported(48, 3));
    EXPECT_FALSE(cuda::flash_attention_supported(96, 3));
    EXPECT_FALSE(cuda::flash_attention_supported(100, 3));
}

/// The kernels' tile copies address a batch row of qkv in 32 bits: a row of 2^31 elements or more
/// (T x (C + 2 NKV HS)) is refused by name before anything is launched or read (the pointers here
/// are never dereferenced). T 2^20 at C 1024, 8 heads: 3,221,225,472 elements.
TEST(FlashAttentionShapes, RefusesBatchRowsOf2To31Elements) {
    alignas(16) static float dummy[4];
    auto* p = reinterpret_cast<__nv_bfloat16*>(dummy);
    try {
        cuda::flash_attention_backward_keys(p, p, p, p, dummy, 1, 1 << 20, 1024, 8, 8, 128, dummy, nullptr);
        ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("seq_len 1048576 x 3072 qkv columns"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace llmtrain::cudatest
