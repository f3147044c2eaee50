// tests/cuda/test_flash_variants.cpp — which FlashAttention-2 kernels run (model.attention = "native"
// in bf16; model/cuda/flash_attention.hpp): the backward's key-block variant each device gets from
// its opt-in shared memory per block (128 keys of 8 warps, or at head size 128 on a 99 KiB device
// 64 of 4), that the launched one is it (its dQ reads K rows 64-127 for queries 0-63 exactly when
// a block holds 128 keys: NaN planted there shows which ran), that
// flash_attention_backward_keys (attention_bench's native-bc64) runs the variant it names, the
// 64-key variant at head size 64 too; and the shapes the path takes or refuses by name. Emulated,
// both devices (CUDA_EMU_SMEM_OPTIN); on a GPU (test_cuda_gpu) its own. Tolerances as
// test_flash_attention.cpp's: attention_bound.hpp's derived per-element bound of the CPU backend.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/cuda/flash_attention.hpp"
#include "tests/cuda/attention_bound.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "tests/cuda/flash_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

/// The backward's key block by the device's opt-in shared memory per block (flash_backward_keys):
/// 128 keys at head size 64 on every device that runs the path; at head size 128, 128 keys where
/// their 115,200 B fit (sm_90's 227 KiB, sm_80's 163 KiB; a device allowing exactly that), else 64
/// (75,264 B: the 99 KiB of sm_86/89/120), which is also what "auto" requires of a device
/// (flash_attention_smem_bytes). Emulated: flash_backward_keys_on_device reads the device's limit
/// (CUDA_EMU_SMEM_OPTIN), and both variants run a byte either side of the 128-key need.
TEST(FlashAttentionKeyBlock, ChosenByTheDevicesSharedMemory) {
    EXPECT_EQ(cuda::flash_backward_keys(64, 101376), 128);
    EXPECT_EQ(cuda::flash_backward_keys(128, 101376), 64);
    EXPECT_EQ(cuda::flash_backward_keys(128, 166912), 128);
    EXPECT_EQ(cuda::flash_backward_keys(128, 232448), 128);
    const size_t need128 = cuda::flash_backward_smem_bytes(128, 128);
    EXPECT_EQ(need128, 115200u);
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

/// flash_attention_backward_keys, the entry point of a named backward variant (attention_bench's
/// native-bc64), at head size 128, T 150, B 2 with keys and values from 64 on NaN (as
/// TheLaunchedVariantIsTheDevicesChoice: dQ of queries 0-63 is NaN with 128 keys a block, clean
/// with 64, so the variants' bits differ). Emulated: 64 keys on a 227 KiB device give the bits of
/// the device's own backward on a 99 KiB device (the 64-key variant), 128 keys those of the 227 KiB
/// device's own. Everywhere: the device's choice gives its own bits, 128 keys at head size 64 too,
/// and 64 keys at head size 128 on clean inputs stay within the bound of the CPU backend's. Keys
/// other than 64 and 128 and (emulated) 128 on a 99 KiB device throw std::invalid_argument naming
/// the value.
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
    for (int bad : {0, 32, 96, 256, -64}) throws_naming(*dev, s, bad, "must be 64 or 128");
}

/// At head size 64 every device takes 128 keys; the 64-key variant (4 warps, 65,536 B) runs only
/// through flash_attention_backward_keys (attention_bench's native-bc64, to time two blocks of 4
/// warps per SM against one of 8). T 150, B 2: on clean inputs within the CPU backend's bound; with
/// keys and values from 64 on NaN (the witness of TheLaunchedVariantIsTheDevicesChoice) dQ of
/// queries 0-63 is bitwise the clean run's with 64 keys a block and NaN with the device's 128.
TEST(FlashAttentionKeyBlock, SixtyFourKeysAtHeadSize64RunByName) {
    const Shape s = kHs64;
    ASSERT_EQ(cuda::flash_backward_keys_on_device(64), 128);
    const auto [qkv, dout] = inputs(s, 69);
    auto dev = make_native_bf16();
    const auto want = run_attention(*make_cpu_backend(), qkv, dout, s);
    const auto clean = backward_with_keys(*dev, qkv, dout, s, 64);
    expect_within_bound("flash dqkv, head size 64, 64 keys", clean, want[2],
                        attention_bound(qkv, dout, s.B, s.T, s.C, s.NH).dqkv);
    std::printf("HS 64 T %d B %d, backward 64 keys: dqkv %.2f of the bound\n", s.T, s.B,
                bound_fraction(clean, want[2], attention_bound(qkv, dout, s.B, s.T, s.C, s.NH).dqkv));
    const auto poisoned = nan_kv_from(qkv, s, 64);
    const auto got64 = backward_with_keys(*dev, poisoned, dout, s, 64);
    const auto got128 = run_attention(*dev, poisoned, dout, s)[2];
    const size_t W = 3 * static_cast<size_t>(s.C);
    size_t changed = 0, nan128 = 0, total = 0;
    for (int b = 0; b < s.B; b++)
        for (int t = 0; t < 64; t++)
            for (int c = 0; c < s.C; c++) {  // dQ: columns 0 .. C of dqkv
                const size_t i = (static_cast<size_t>(b) * s.T + t) * W + c;
                total++;
                changed += std::memcmp(&got64[i], &clean[i], sizeof(float)) != 0;
                nan128 += std::isnan(got128[i]);
            }
    EXPECT_EQ(changed, 0u) << "dQ of queries 0-63 read keys 64 on: not 64-key blocks";
    EXPECT_EQ(nan128, total) << "the device's backward did not run 128-key blocks";
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
