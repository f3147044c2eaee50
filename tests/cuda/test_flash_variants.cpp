// tests/cuda/test_flash_variants.cpp — which FlashAttention-2 kernels run (model.attention = "native"
// in bf16; model/cuda/flash_attention.hpp): the backward tile each device gets from its opt-in
// shared memory per block (the large, 128 keys x 128 or 64 rows, where it fits; else the small),
// that the launched one is it (NaN planted where only one tile reads: K rows 64-127 for queries
// 0-63 when a block holds 128 keys, query rows 0-63 for keys 64-127 when a step holds 128 rows),
// that flash_attention_backward_tiled (attention_bench's native-99k) runs the tile it names, that
// head size 64's two tiles give the same bits; where a warp stages its dQ partial (its own rows, no
// bank conflicts); and the shapes the path takes or refuses by name.
// Emulated, both devices (CUDA_EMU_SMEM_OPTIN); on a GPU (test_cuda_gpu) its own. Tolerances as
// test_flash_attention.cpp's: attention_bound.hpp's derived per-element bound of the CPU backend.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "model/cuda/flash_attention.hpp"
#include "tests/cuda/attention_bound.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "tests/cuda/flash_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

using cuda::FlashBackwardTile;
constexpr FlashBackwardTile kLarge64{128, 128}, kSmall64{128, 64}, kLarge128{128, 64}, kSmall128{64, 32};

/// flash_dq_stage_slot for one tile: every piece of each warp's 16 x kDq fp32 dQ tile lands at its
/// own address, in the data bytes of a row the warp's own threads copy into (copy_rows' mapping,
/// rebuilt here: thread t fills row t / (HS/8) + k threads / (HS/8) of Q and of dO), and the warp's
/// accesses hit no shared-memory bank twice in one wavefront: a half-warp's float2 stores (lane l:
/// row l/4 + 8r, columns n*8 + 2(l%4) and + 1) 16 different 8-byte bank pairs of 128 bytes, a
/// quarter-warp's float4 loads (lane l reads piece l of the tile's row-major pieces) 8 different
/// 16-byte groups. Addresses are byte offsets from the dynamic shared memory's base (K, V, two Q
/// stages, two dO stages), for both stages, so the stage bases' alignment counts too.
template <int HS, int ROWS, int THREADS>
void expect_dq_staging_sound(int keys) {
    constexpr int kChunks = HS / 8, kLd = HS + 8, kDq = 2 * HS * ROWS / THREADS, kPieces = kDq / 4;
    SCOPED_TRACE("head size " + std::to_string(HS) + ", " + std::to_string(keys) + " keys x " + std::to_string(ROWS) + " rows");
    for (int st = 0; st < 2; st++)
        for (int w = 0; w < THREADS / 32; w++) {
            std::vector<int> own;  // rows this warp's threads copy into
            for (int t = 32 * w; t < 32 * w + 32; t++)
                for (int r = t / kChunks; r < ROWS; r += THREADS / kChunks) own.push_back(r);
            auto addr = [&](int rr, int p) {
                const cuda::FlashStagePiece s = cuda::flash_dq_stage_slot<HS, ROWS, THREADS>(w, rr, p);
                EXPECT_TRUE(s.tile == 0 || s.tile == 1);
                EXPECT_TRUE(s.piece >= 0 && s.piece < kChunks) << "piece " << s.piece;
                EXPECT_NE(std::find(own.begin(), own.end(), s.row), own.end()) << "warp " << w << " row " << s.row;
                const long q0 = 2L * 2 * keys * kLd;  // bytes before the first Q stage (K, V)
                return q0 + (s.tile * 2L + st) * ROWS * kLd * 2 + long(s.row) * kLd * 2 + 16L * s.piece;
            };
            std::vector<long> all;
            for (int rr = 0; rr < 16; rr++)
                for (int p = 0; p < kPieces; p++) all.push_back(addr(rr, p));
            std::sort(all.begin(), all.end());
            EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "two pieces at one address";
            for (int n = 0; n < kDq / 8; n++)
                for (int r = 0; r < 2; r++)
                    for (int half = 0; half < 2; half++) {
                        std::vector<long> banks;  // 8-byte bank pairs of the 16 lanes' float2 stores
                        for (int l = 16 * half; l < 16 * half + 16; l++)
                            banks.push_back((addr(l / 4 + 8 * r, 2 * n + l % 4 / 2) + 8 * (l % 2)) % 128 / 8);
                        std::sort(banks.begin(), banks.end());
                        EXPECT_EQ(std::adjacent_find(banks.begin(), banks.end()), banks.end())
                            << "store conflict: warp " << w << " n " << n << " r " << r << " half " << half;
                    }
            for (int c0 = 0; c0 < 16 * kPieces; c0 += 8) {
                std::vector<long> groups;  // 16-byte bank groups of 8 lanes' float4 loads
                for (int c = c0; c < c0 + 8; c++) groups.push_back(addr(c / kPieces, c % kPieces) % 128 / 16);
                std::sort(groups.begin(), groups.end());
                EXPECT_EQ(std::adjacent_find(groups.begin(), groups.end()), groups.end())
                    << "load conflict: warp " << w << " pieces " << c0;
            }
        }
}

/// The fused backward stages each warp's dQ partial in the dead Q/dO stage for 16-byte stores
/// (flash_dq_stage_slot): sound in all four tiles (expect_dq_staging_sound).
TEST(FlashAttentionBackwardTile, DqStagingOwnRowsNoBankConflicts) {
    expect_dq_staging_sound<64, 128, 256>(128);  // large, head size 64
    expect_dq_staging_sound<64, 64, 256>(128);   // small
    expect_dq_staging_sound<128, 64, 256>(128);  // large, head size 128
    expect_dq_staging_sound<128, 32, 128>(64);   // small
}

/// The backward tile by the device's opt-in shared memory per block (flash_backward_tile): the large
/// one where its bytes fit (head size 64: 128 keys x 128 rows, 147,456 B; 128: 128 x 64, 158,720 B;
/// sm_90's 227 KiB, sm_80's 163 KiB, a device allowing exactly that), else the small one (128 x 64,
/// 93,184 B; 64 keys x 32, 75,264 B: the 99 KiB of sm_86/89/120), which is also what "auto"
/// requires of a device (flash_attention_smem_bytes). Byte counts from the layout
/// (flash_backward_kernel's comment), not from the function under test. Emulated:
/// flash_backward_tile_on_device reads the device's limit (CUDA_EMU_SMEM_OPTIN), and each head
/// size's backward runs a byte either side of its large tile's need (a tile over the device's limit
/// fails its launch).
TEST(FlashAttentionBackwardTile, ChosenByTheDevicesSharedMemory) {
    EXPECT_EQ(cuda::flash_backward_tile_large(64), kLarge64);
    EXPECT_EQ(cuda::flash_backward_tile_small(64), kSmall64);
    EXPECT_EQ(cuda::flash_backward_tile_large(128), kLarge128);
    EXPECT_EQ(cuda::flash_backward_tile_small(128), kSmall128);
    // K, V + two stages of Q, dO (bf16, rows of HS + 8) + dS^T (keys x (rows + 8) bf16) + lse, D stages.
    auto bytes = [](int hs, FlashBackwardTile t) {
        return size_t(2) * (hs + 8) * (2 * t.keys + 4 * t.rows) + 2 * t.keys * (t.rows + 8) + 16 * t.rows;
    };
    EXPECT_EQ(bytes(64, kLarge64), 147456u);
    for (const auto& [hs, large, small] : {std::tuple{64, kLarge64, kSmall64}, std::tuple{128, kLarge128, kSmall128}}) {
        SCOPED_TRACE("head size " + std::to_string(hs));
        const size_t need = cuda::flash_backward_smem_bytes(hs, large);
        EXPECT_EQ(need, bytes(hs, large));
        EXPECT_EQ(cuda::flash_backward_smem_bytes(hs, small), bytes(hs, small));
        EXPECT_EQ(cuda::flash_backward_tile(hs, need), large);
        EXPECT_EQ(cuda::flash_backward_tile(hs, need - 1), small);
        EXPECT_EQ(cuda::flash_backward_tile(hs, 101376), small);   // sm_86/89/120
        EXPECT_EQ(cuda::flash_backward_tile(hs, 166912), large);   // sm_80
        EXPECT_EQ(cuda::flash_backward_tile(hs, 232448), large);   // sm_90
        EXPECT_EQ(cuda::flash_attention_smem_bytes(hs), bytes(hs, small));
        EXPECT_LE(bytes(hs, small), 101376u);
    }
    // The 4-argument scratch serves either tile: the larger need.
    for (const Shape& s : {Shape{8, 2048, 1536, 12}, Shape{8, 2048, 2048, 16}, Shape{3, 100, 256, 2}})
        EXPECT_EQ(cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH),
                  std::max(cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH, 64),
                           cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH, 128)));
#ifndef LLMTRAIN_REAL_GPU
    const size_t need64 = bytes(64, kLarge64), need128 = bytes(128, kLarge128);
    for (const auto& [optin, t64, t128] :
         {std::tuple{k99KiB, kSmall64, kSmall128}, std::tuple{k227KiB, kLarge64, kLarge128},
          std::tuple{need64, kLarge64, kSmall128}, std::tuple{need64 - 1, kSmall64, kSmall128},
          std::tuple{need128, kLarge64, kLarge128}, std::tuple{need128 - 1, kLarge64, kSmall128}}) {
        SCOPED_TRACE("a device allowing " + std::to_string(optin) + " B per block");
        ScopedSmemOptin device(optin);
        EXPECT_EQ(cuda::flash_backward_tile_on_device(64), t64);
        EXPECT_EQ(cuda::flash_backward_tile_on_device(128), t128);
        for (const auto& [need, s] : {std::pair{need64, Shape{1, 20, 128, 2}}, std::pair{need128, Shape{1, 20, 256, 2}}})
            if (optin == need || optin == need - 1) {  // runs a byte either side (the kernel's own limit)
                const auto [qkv, dout] = inputs(s, 60);
                EXPECT_NO_THROW(run_attention(*make_native_bf16(), qkv, dout, s));
            }
    }
#endif
}

/// Over rows [t0, t1) (below T) and columns [c0, c1) of dqkv, every batch row: how many elements
/// are NaN and how many differ from clean's bits. The witnesses: dQ (columns 0 .. C) of queries
/// 0-63 (with 128 keys a block its partial dS K runs over keys 64-127) and dK (columns C .. 2C) of
/// keys 64-127 (with 128 rows a step, the warps of keys 64-127 multiply the masked zeros of dS^T by
/// query rows 0-63).
struct Witness {
    size_t total = 0, nan = 0, changed = 0;
};
Witness witness(const std::vector<float>& got, const std::vector<float>& clean, const Shape& s, int t0, int t1,
                int c0, int c1) {
    const size_t W = 3 * static_cast<size_t>(s.C);
    Witness w;
    for (int b = 0; b < s.B; b++)
        for (int t = t0; t < t1 && t < s.T; t++)
            for (int c = c0; c < c1; c++) {
                const size_t i = (static_cast<size_t>(b) * s.T + t) * W + c;
                w.total++;
                w.nan += std::isnan(got[i]);
                w.changed += std::memcmp(&got[i], &clean[i], sizeof(float)) != 0;
            }
    return w;
}

/// qkv with the queries of rows 0-63 (all heads) set to NaN.
std::vector<float> nan_queries_0_63(std::vector<float> qkv, const Shape& s) {
    const size_t W = 3 * static_cast<size_t>(s.C);
    for (int b = 0; b < s.B; b++)
        for (int t = 0; t < 64; t++)
            for (int c = 0; c < s.C; c++) qkv[(static_cast<size_t>(b) * s.T + t) * W + c] = NAN;
    return qkv;
}

/// The tile launched is the one flash_backward_tile_on_device names, seen through NaN.
/// Keys (head size 128, T 150, B 2): keys and values from 64 on set to NaN. The forward's rows 0-63
/// skip key block 1 (out, lse unchanged), and dQ of queries 0-63 sums key block 0's partial only.
/// With 64 keys that block holds keys 0-63: dQ rows 0-63 bitwise unchanged. With 128 keys its
/// partial dS K runs over keys 0-127: the zeros of dS at keys 64-127 (past the queries, masked)
/// times K's NaN rows make every dQ element of rows 0-63 NaN.
/// Rows (head size 64, T 150, B 2; both tiles 128 keys): queries of rows 0-63 set to NaN. dK of
/// keys 64-127 sums dS_ij q_i over queries i >= 64 only. With 64 rows a step the warps of keys
/// 64-127 skip the step of rows 0-63 (no live key): dK bitwise unchanged. With 128 rows a step they
/// run it, masked, and the zeros of dS there times the NaN queries make all of it NaN.
/// On the emulator both devices (99 KiB: the small tiles, 227 KiB: the large), on a GPU its own.
TEST(FlashAttentionBackwardTile, TheLaunchedTileIsTheDevicesChoice) {
    auto check = [&] {
        {
            const Shape s = kHs128T150;
            const FlashBackwardTile t = cuda::flash_backward_tile_on_device(128);
            SCOPED_TRACE("head size 128, backward " + tile_name(128));
            const auto [qkv, dout] = inputs(s, 64);
            auto dev = make_native_bf16();
            const auto clean = run_attention(*dev, qkv, dout, s);
            const auto got = run_attention(*dev, nan_kv_from(qkv, s, 64), dout, s);
            EXPECT_EQ(std::memcmp(got[0].data(), clean[0].data(), 64 * s.C * sizeof(float)), 0)
                << "the forward's rows 0-63 read keys past them";
            const Witness w = witness(got[2], clean[2], s, 0, 64, 0, s.C);  // dQ of queries 0-63
            if (t.keys == 64) EXPECT_EQ(w.changed, 0u) << "dQ of queries 0-63 read keys 64 on: not 64-key blocks";
            else EXPECT_EQ(w.nan, w.total) << "dQ of queries 0-63 did not run over keys 64-127: not 128-key blocks";
        }
        {
            const Shape s = kHs64;
            const FlashBackwardTile t = cuda::flash_backward_tile_on_device(64);
            SCOPED_TRACE("head size 64, backward " + tile_name(64));
            const auto [qkv, dout] = inputs(s, 65);
            auto dev = make_native_bf16();
            const Witness w = witness(run_attention(*dev, nan_queries_0_63(qkv, s), dout, s)[2],
                                      run_attention(*dev, qkv, dout, s)[2], s, 64, 128, s.C, 2 * s.C);  // dK
            if (t.rows == 64) EXPECT_EQ(w.changed, 0u) << "dK of keys 64-127 read queries 0-63: not 64-row steps";
            else EXPECT_EQ(w.nan, w.total) << "dK of keys 64-127 did not run over queries 0-63: not 128-row steps";
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

/// dqkv (as fp32) of flash_attention_backward_tiled with `tile` after o's forward (native, bf16) on
/// qkv, on the default stream (o's), with scratch of the 5-argument size for tile.keys (of the
/// 4-argument one for tiles the call must reject: the 5-argument one divides by their keys).
std::vector<float> backward_with_tile(Ops& o, const std::vector<float>& qkv, const std::vector<float>& dout,
                                      const Shape& s, FlashBackwardTile tile) {
    const size_t N = static_cast<size_t>(s.B) * s.T;
    const int hs = s.C / s.NH;
    const bool known = tile == cuda::flash_backward_tile_large(hs) || tile == cuda::flash_backward_tile_small(hs);
    DevBuf dq = upload(o, qkv, DType::bf16), dgo = upload(o, dout, DType::bf16);
    DevBuf out(o, N * s.C * 2), lse(o, N * s.NH * 4), dqkv(o, qkv.size() * 2),
        scratch(o, known ? cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH, tile.keys)
                         : cuda::flash_attention_backward_scratch_bytes(s.B, s.T, s.C, s.NH));
    o.attention_forward(out.ptr, lse.as<float>(), dq.ptr, s.B, s.T, s.C, s.NH);
    cuda::flash_attention_backward_tiled(dqkv.as<__nv_bfloat16>(), dgo.as<__nv_bfloat16>(), dq.as<__nv_bfloat16>(),
                                         out.as<__nv_bfloat16>(), lse.as<float>(), s.B, s.T, s.C, s.NH, s.NH, tile,
                                         scratch.as<float>(), nullptr);
    return download(o, dqkv.ptr, qkv.size(), DType::bf16);
}

/// flash_attention_backward_tiled, the entry point of a named tile (attention_bench's native-99k),
/// at head size 128, T 150, B 2 with keys and values from 64 on NaN (as
/// TheLaunchedTileIsTheDevicesChoice: dQ of queries 0-63 is NaN with 128 keys a block, clean with
/// 64, so the tiles' bits differ). Emulated: the small tile on a 227 KiB device gives the bits of
/// the device's own backward on a 99 KiB device, the large one those of the 227 KiB device's own.
/// Everywhere: the device's choice gives its own bits, and the small tile at head size 128 on clean
/// inputs stays within the bound of the CPU backend's. Tiles other than the head size's two (the
/// former 128 x 32 at head size 128, 64 x 64 at 64) and (emulated) the large one on a 99 KiB device
/// throw std::invalid_argument naming the tile.
TEST(FlashAttentionBackwardTile, NamedTileEntryPoint) {
    const Shape s = kHs128T150;
    const auto [qkv, dout] = inputs(s, 66);
    const auto poisoned = nan_kv_from(qkv, s, 64);
    auto throws_naming = [&](Ops& o, const Shape& sh, FlashBackwardTile t, const std::string& also) {
        const auto [q, d] = inputs(sh, 67);
        const std::string name = "tile of " + std::to_string(t.keys) + " keys x " + std::to_string(t.rows) + " rows";
        try {
            backward_with_tile(o, q, d, sh, t);
            ADD_FAILURE() << name << " at head size " << sh.C / sh.NH << " did not throw";
        } catch (const std::invalid_argument& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(name), std::string::npos) << msg;
            EXPECT_NE(msg.find(also), std::string::npos) << msg;
        }
    };
#ifndef LLMTRAIN_REAL_GPU
    std::vector<float> own_small, own_large;
    {
        ScopedSmemOptin sm86(k99KiB);
        ASSERT_EQ(cuda::flash_backward_tile_on_device(128), kSmall128);
        auto dev = make_native_bf16();
        own_small = run_attention(*dev, poisoned, dout, s)[2];
        EXPECT_TRUE(same_bits(backward_with_tile(*dev, poisoned, dout, s, kSmall128), own_small)) << "small, 99 KiB";
        throws_naming(*dev, s, kLarge128, "the device allows 101376");
    }
    {
        ScopedSmemOptin h100(k227KiB);
        ASSERT_EQ(cuda::flash_backward_tile_on_device(128), kLarge128);
        auto dev = make_native_bf16();
        own_large = run_attention(*dev, poisoned, dout, s)[2];
        ASSERT_FALSE(same_bits(own_small, own_large)) << "the tiles gave the same bits: no test of which one ran";
        EXPECT_TRUE(same_bits(backward_with_tile(*dev, poisoned, dout, s, kSmall128), own_small)) << "small, 227 KiB";
        EXPECT_TRUE(same_bits(backward_with_tile(*dev, poisoned, dout, s, kLarge128), own_large)) << "large, 227 KiB";
    }
#endif
    auto dev = make_native_bf16();
    const FlashBackwardTile t = cuda::flash_backward_tile_on_device(128);
    EXPECT_TRUE(same_bits(backward_with_tile(*dev, poisoned, dout, s, t), run_attention(*dev, poisoned, dout, s)[2]))
        << "the device's choice, " << tile_name(128);
    const auto want = run_attention(*make_cpu_backend(), qkv, dout, s);
    expect_within_bound("flash dqkv, small tile", backward_with_tile(*dev, qkv, dout, s, kSmall128), want[2],
                        attention_bound(qkv, dout, s.B, s.T, s.C, s.NH).dqkv);
    for (const FlashBackwardTile bad : {FlashBackwardTile{128, 32}, FlashBackwardTile{0, 0}, FlashBackwardTile{256, 64}})
        throws_naming(*dev, s, bad, "is not one of head size 128's");
    throws_naming(*dev, kHs64, FlashBackwardTile{64, 64}, "is not one of head size 64's");
}

/// Head size 64's two tiles (128 keys x 128 or 64 rows a step) give the same bits: a step's rows are
/// the next of the same walk over the query rows, so dK and dV add the same 16-row products in the
/// same order, and each dQ partial is the same sum over the block's keys; the large tile only adds
/// the exact zeros of masked rows (+0 to a sum leaves its bits) where the small one's warps skip a
/// step. T 1, 65 (one partial step), 129, 150, 300 (a 128-row step ending past T; several key
/// blocks), B 1-2, through flash_attention_backward_tiled on the same device; the device's own
/// backward (large on an H100, the emulator's default) gives them too.
TEST(FlashAttentionBackwardTile, HeadSize64TilesGiveTheSameBits) {
#ifdef LLMTRAIN_REAL_GPU
    if (cuda::flash_backward_tile_on_device(64) != kLarge64) GTEST_SKIP() << "the device holds only the small tile";
#endif
    auto dev = make_native_bf16();
    for (const Shape& s : {Shape{1, 1, 128, 2}, Shape{1, 65, 128, 2}, kHs64T129, kHs64, kHs64T300}) {
        SCOPED_TRACE("T " + std::to_string(s.T) + ", B " + std::to_string(s.B));
        const auto [qkv, dout] = inputs(s, 69);
        const auto large = backward_with_tile(*dev, qkv, dout, s, kLarge64);
        EXPECT_TRUE(same_bits(backward_with_tile(*dev, qkv, dout, s, kSmall64), large));
        EXPECT_TRUE(same_bits(run_attention(*dev, qkv, dout, s)[2], large));
    }
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
        cuda::flash_attention_backward_tiled(p, p, p, p, dummy, 1, 1 << 20, 1024, 8, 8, {128, 128}, dummy, nullptr);
        ADD_FAILURE() << "no error";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("seq_len 1048576 x 3072 qkv columns"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace llmtrain::cudatest
