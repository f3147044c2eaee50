// tests/cuda/test_flash_attention.cpp — model.attention = "native" in bf16 at head sizes 64 and 128:
// the FlashAttention-2 kernels on tensor cores (model/cuda/flash_forward.cu, flash_backward.cu:
// mma.sync m16n8k16, ldmatrix, cp.async through model/cuda/ptx.cuh, a fused backward with dQ
// partials summed in a fixed order) against the CPU backend's fp32 attention on the same bf16-exact
// inputs, forward (out, lse) and backward (dqkv), under the emulator's three thread orders, with T a
// multiple of the blocks or not (forward 128 query rows, 64-key steps; backward tiles of 128 keys x
// 128 or 64 queries a step at HS 64, 128 x 64 or 64 x 32 at HS 128): T 1, 64, 65, 100, 128, 129, 150,
// 300; grouped-query attention at T 150; causal skipping (keys past a block's or a warp's rows
// never read, query blocks before a key block's diagonal never read: NaN planted there changes no
// bit of the rows that must not see it); the backward in batch chunks; and bitwise repeatable: the
// same bits under every thread order, block order and made-up wmma layout (the fused backward's dQ
// included); every ldmatrix free of bank conflicts. The emulated device is an H100 (227 KiB of opt-in shared memory per block: the large
// backward tiles) unless CUDA_EMU_SMEM_OPTIN says otherwise; the cases also run on a 99 KiB device
// (sm_86/89/120: the small tiles). Which tile runs where, and the shapes the path takes:
// test_flash_variants.cpp. Shared helpers: flash_test_util.hpp.
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
#include "tests/cuda/flash_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

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
        std::printf("HS %d T %d B %d, backward %s: out %.2f, dqkv %.2f of the bound\n", s.C / s.NH, s.T, s.B,
                    tile_name(s.C / s.NH).c_str(), bound_fraction(got[0], want[0], bound.out),
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
/// The cases above on a 99 KiB device: the small backward tiles (head size 64: 128 keys x 64 rows;
/// 128: 64 keys of 4 warps x 32 rows), where the default device runs the large ones.
TEST_P(FlashAttention, On99KiBDeviceMatchesCpu) {
    ScopedSmemOptin sm86(k99KiB);
    ASSERT_EQ(cuda::flash_backward_tile_on_device(64), cuda::flash_backward_tile_small(64));
    ASSERT_EQ(cuda::flash_backward_tile_on_device(128), cuda::flash_backward_tile_small(128));
    matches_cpu(kHs64, 70);
    matches_cpu(kHs64T300, 76);
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
/// device's backward tile (emulated: the large one) and, emulated, on a 99 KiB device (the small).
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
    std::printf("GQA HS %d NH %d NKV %d T %d, backward %s: out %.2f, dqkv %.2f of the bound\n", HS, NH, NKV, T,
                tile_name(HS).c_str(), bound_fraction(got[0], want[0], b3.out),
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

/// Bitwise: the same inputs at both head sizes (in both backward tiles: the large on the default
/// device, the small on a 99 KiB one) and with grouped-query heads give the same bits under other
/// thread orders and shuffled block orders (the fused backward writes each dQ partial once and sums
/// them in key-block order; dK/dV are owned by one block each).
TEST(FlashAttentionRepeat, FusedBackwardIsBitwiseRepeatable) {
    auto repeatable = [&](const Shape& s) {  // a backend per device: it reads the device's limit once
        SCOPED_TRACE("head size " + std::to_string(s.C / s.NH) + ", backward " + tile_name(s.C / s.NH));
        const auto [qkv, dout] = inputs(s, 95);
        const auto first = run_attention(*make_native_bf16(), qkv, dout, s);
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
        repeatable(kHs64T300);
    }
#endif
    const int B = 1, T = 150, NH = 4, NKV = 2, HS = 64;
    const auto qkv = random_vec(static_cast<size_t>(B) * T * (NH + 2 * NKV) * HS, 96, true, -2, 2);
    const auto dout = random_vec(static_cast<size_t>(B) * T * NH * HS, 97, true, -1, 1);
    const auto first = run_gqa(*make_native_bf16(), qkv, dout, B, T, NH, NKV, HS);
    set_emu_order("random");
    const auto again = run_gqa(*make_native_bf16(), qkv, dout, B, T, NH, NKV, HS);
    reset_emu_order();
    for (int k = 0; k < 3; k++) EXPECT_EQ(again[k], first[k]) << "grouped-query output " << k;
}

#ifndef LLMTRAIN_REAL_GPU
/// The kernels' padded tiles (bf16 rows of HS + 8, dS^T rows of ROWS + 8) keep every ldmatrix free
/// of bank conflicts: each 8x8 matrix's 8 rows in 8 different 4-bank groups, as the emulator's PTX
/// model counts them (emu::ldmatrix_banks, by offset in dynamic shared memory) over a forward and
/// backward at both head sizes in both backward tiles. Rows without the padding (a multiple of 128
/// bytes apart) would cost 7 wavefronts more per matrix (PtxBanks.LdmatrixCountsTheBusiestBank).
TEST(FlashAttentionBanks, LdmatrixReadsAreConflictFree) {
    auto conflict_free = [](const Shape& s) {
        SCOPED_TRACE("head size " + std::to_string(s.C / s.NH) + ", backward " + tile_name(s.C / s.NH));
        const auto [qkv, dout] = inputs(s, 7);
        auto ops = make_native_bf16();
        emu::reset_ldmatrix_banks();
        run_attention(*ops, qkv, dout, s);
        const emu::LdmatrixBanks b = emu::ldmatrix_banks();
        EXPECT_GT(b.matrices, 0u);
        EXPECT_EQ(b.extra_wavefronts, 0u) << "extra wavefronts over " << b.matrices << " matrices";
    };
    conflict_free(kHs64T300);
    conflict_free(kHs128T300);
    ScopedSmemOptin sm86(k99KiB);
    conflict_free(kHs64T300);
    conflict_free(kHs128T300);
}
#endif

/// The backward in batch chunks (the dQ partials of as many batch rows as fit
/// flash_dq_workspace_cap, several fused-kernel and sum launches on one workspace) gives the same
/// bits as in one launch: B 3 at a cap of one row's partials of the device's tile, and of two rows
/// (chunks 2 + 1); at head size 64, and at 128 in both tiles (on the emulator).
TEST(FlashAttentionChunks, BatchChunksGiveTheSameBits) {
    auto chunks_agree = [](const Shape& s) {
        const int keys = cuda::flash_backward_tile_on_device(s.C / s.NH).keys;
        SCOPED_TRACE("head size " + std::to_string(s.C / s.NH) + ", backward " + tile_name(s.C / s.NH));
        const auto [qkv, dout] = inputs(s, 98);
        const auto whole = run_attention(*make_native_bf16(), qkv, dout, s);
        ASSERT_EQ(cuda::flash_backward_batch_chunk(s.B, s.T, s.C, s.NH, keys), s.B);
        const size_t saved = cuda::flash_dq_workspace_cap,
                     per = cuda::flash_dq_partial_bytes_per_batch(s.T, s.C, s.NH, keys);
        for (size_t rows : {1, 2}) {
            cuda::flash_dq_workspace_cap = rows * per + per / 2;
            EXPECT_EQ(cuda::flash_backward_batch_chunk(s.B, s.T, s.C, s.NH, keys), static_cast<int>(rows));
            // The scratch (the larger tile's) holds this tile's chunks.
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
    SCOPED_TRACE("head size " + std::to_string(s.C / s.NH) + ", backward " + tile_name(s.C / s.NH));
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
/// sizes 64 and 128 (forward blocks of 128 rows, 32 per warp; key steps of 64), in both backward
/// tiles. Keys and values from 128 on set to NaN leave rows
/// 0-127 (forward block 0 never loads key blocks 2-4) bitwise unchanged, and from 64 on rows 0-63
/// (the warps of rows 0-63 skip key block 1, past their rows); queries and dO of rows 0-127 set to
/// NaN leave out, lse and dqkv of rows 128 on unchanged (the backward's key blocks from key 128 on,
/// of 128 keys or 64, start at their diagonal, and dQ of a row sums only its own partials).
TEST(FlashAttentionCausal, BlocksPastTheDiagonalAreNeverRead) {
    never_read_past_the_diagonal(kHs64T300);
    never_read_past_the_diagonal(kHs128T300);
#ifndef LLMTRAIN_REAL_GPU
    ScopedSmemOptin sm86(k99KiB);
    never_read_past_the_diagonal(kHs64T300);
    never_read_past_the_diagonal(kHs128T300);
#endif
}

}  // namespace
}  // namespace llmtrain::cudatest
