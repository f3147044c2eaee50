// tests/cuda/test_flash_long.cpp — FlashAttention-2's backward with its dQ workspace bounded in T
// (model/cuda/flash_attention.hpp "the backward's dQ workspace", flash_backward.cu): where one batch
// row's dQ partials exceed flash_dq_workspace_cap, the backward runs in row chunks (one query head
// of each group of a few key/value heads over a range of query rows per launch, dK and dV carried
// in fp32 between launches) and must give the bits of the uncapped backward, which sums every dQ
// element and accumulates every dK/dV element in the same order. Checked here: the split's sizes
// (host only: the partial-row arithmetic against a count, every split within the cap, Llama 3 8B's
// shapes), and on the emulated device dqkv bitwise equal, on one forward's outputs, with the cap
// forced tiny (flash_dq_workspace_cap, the tests' hook) at T 4096 (one head of 64: 16 query
// chunks) and at T 300 (grouped-query, 4 query heads on 2 key/value heads in separate chunks, B 2,
// head size 64 and 128, both backward tiles).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "model/cuda/flash_attention.hpp"
#include "tests/cuda/cuda_test_util.hpp"
#include "tests/cuda/flash_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

constexpr double kMiB = 1048576.0;

/// Sets flash_dq_workspace_cap for a scope (the tests' hook), then restores the default.
class ScopedDqCap {
public:
    explicit ScopedDqCap(size_t bytes) { cuda::flash_dq_workspace_cap = bytes; }
    ~ScopedDqCap() { cuda::flash_dq_workspace_cap = cuda::kFlashDqWorkspaceCap; }
    ScopedDqCap(const ScopedDqCap&) = delete;
    ScopedDqCap& operator=(const ScopedDqCap&) = delete;
};

/// The partial rows of a launch over query rows [qa, qb), counted one key block at a time: key
/// block k (keys k*keys ..) holds the rows from max(k keys, qa) to qb.
size_t count_rows(int keys, int qa, int qb) {
    size_t rows = 0;
    for (int k = 0; k * keys < qb; k++) rows += qb - std::max(k * keys, qa);
    return rows;
}

TEST(FlashRowChunks, PartialRowsMatchACount) {
    for (int keys : {64, 128})
        for (int T : {1, 63, 64, 65, 300, 4096, 8191})
            for (int w : {keys, 2 * keys, 5 * keys})
                for (int qa = 0; qa < T; qa += w) {
                    const int qb = std::min(T, qa + w);
                    ASSERT_EQ(cuda::flash_dq_chunk_rows(keys, qa, qb), count_rows(keys, qa, qb))
                        << "keys " << keys << " T " << T << " [" << qa << ", " << qb << ")";
                    for (int kb = 0; kb * keys < qb; kb++)
                        ASSERT_EQ(cuda::flash_dq_rows_before(kb + 1, keys, qa, qb) -
                                      cuda::flash_dq_rows_before(kb, keys, qa, qb),
                                  static_cast<size_t>(qb - std::max(kb * keys, qa)));
                }
}

/// Llama 3 8B (32 heads of 128, 8 key/value heads) at T 8192 and 32768 in either tile: one batch
/// row's partials are 4,160 / 8,256 MiB at T 8192 (128 / 64 keys); the backward runs in row
/// chunks whose carry and partials stay within the cap, and its scratch is D + the cap.
TEST(FlashRowChunks, Llama3At8kAnd32kStayWithinTheCap) {
    const int NH = 32, NKV = 8, HS = 128, C = NH * HS;
    EXPECT_EQ(cuda::flash_dq_partial_bytes_per_batch(8192, C, NH, 128), size_t{4160} << 20);
    EXPECT_EQ(cuda::flash_dq_partial_bytes_per_batch(8192, C, NH, 64), size_t{8256} << 20);
    for (int T : {8192, 32768, 131072})
        for (int keys : {64, 128}) {
            ASSERT_TRUE(cuda::flash_backward_splits_rows(T, C, NH, keys));
            const cuda::FlashRowSplit s = cuda::flash_backward_row_split(T, HS, NKV, keys);
            const size_t bytes = cuda::flash_backward_row_split_bytes(T, HS, keys, s);
            std::printf("T %d, %d keys: %d kv heads x %d query rows a launch, %.1f MiB (carry %.1f MiB)\n", T, keys,
                        s.kv_heads, s.query_rows, bytes / kMiB,
                        s.kv_heads * cuda::flash_dkv_carry_bytes(T, HS, keys) / kMiB);
            EXPECT_EQ(s.query_rows % keys, 0);
            EXPECT_LE(bytes, cuda::kFlashDqWorkspaceCap);
            const size_t delta = static_cast<size_t>(NH) * T * sizeof(float);
            EXPECT_EQ(cuda::flash_attention_backward_scratch_bytes(1, T, C, NH, keys), delta + cuda::kFlashDqWorkspaceCap);
        }
    // GPT-2 124M at T 1024 keeps its batch chunks (13.5 MiB a row).
    EXPECT_FALSE(cuda::flash_backward_splits_rows(1024, 768, 12, 128));
}

/// Every split of NKV dividing NH fits the scratch flash_attention_backward_scratch_bytes asks
/// (which knows no NKV), at caps from tiny (the smallest split) to the default.
TEST(FlashRowChunks, EverySplitFitsTheScratch) {
    for (size_t cap : {size_t{1} << 20, size_t{4} << 20, size_t{64} << 20, cuda::kFlashDqWorkspaceCap}) {
        ScopedDqCap scoped(cap);
        for (int T : {300, 4096, 32768})
            for (int HS : {64, 128})
                for (int keys : {64, 128})
                    for (int NKV : {1, 2, 8, 32}) {
                        const int NH = 32, C = NH * HS;
                        if (!cuda::flash_backward_splits_rows(T, C, NH, keys)) continue;
                        const cuda::FlashRowSplit s = cuda::flash_backward_row_split(T, HS, NKV, keys);
                        ASSERT_GE(s.kv_heads, 1);
                        ASSERT_LE(s.kv_heads, NKV);
                        ASSERT_GE(s.query_rows, keys);
                        const size_t delta = (static_cast<size_t>(NH) * T * 4 + 255) / 256 * 256;
                        ASSERT_LE(delta + cuda::flash_backward_row_split_bytes(T, HS, keys, s),
                                  cuda::flash_attention_backward_scratch_bytes(1, T, C, NH, keys))
                            << "cap " << cap << " T " << T << " HS " << HS << " keys " << keys << " NKV " << NKV;
                    }
    }
}

/// The backward at (B, T, NH, NKV, HS) with the default cap (batch chunks) and with `cap` (row
/// chunks, the split printed), on one forward's out and lse, gives the same bits of dqkv.
void row_chunks_agree(int B, int T, int NH, int NKV, int HS, size_t cap) {
    const int keys = cuda::flash_backward_tile_on_device(HS).keys, C = NH * HS;
    SCOPED_TRACE("B " + std::to_string(B) + " T " + std::to_string(T) + " NH " + std::to_string(NH) + " NKV " +
                 std::to_string(NKV) + " HS " + std::to_string(HS) + ", backward " + tile_name(HS));
    const size_t n = static_cast<size_t>(B) * T * (NH + 2 * NKV) * HS, n_out = static_cast<size_t>(B) * T * C;
    const auto qkv = random_vec(n, 41, true, -2, 2), dout = random_vec(n_out, 42, true, -1, 1);
    ASSERT_FALSE(cuda::flash_backward_splits_rows(T, C, NH, keys));
    auto o = make_native_bf16();
    const DType dt = o->act_dtype();
    const size_t es = dtype_size(dt);
    DevBuf dq = upload(*o, qkv, dt), dgo = upload(*o, dout, dt);
    DevBuf out(*o, n_out * es), lse(*o, static_cast<size_t>(B) * NH * T * 4), dqkv(*o, n * es);
    o->attention_forward_gqa(out.ptr, lse.as<float>(), dq.ptr, B, T, NH, NKV, HS);
    auto backward = [&] {
        o->memset(dqkv.ptr, 0xff, n * es);
        o->attention_backward_gqa(dqkv.ptr, dgo.ptr, dq.ptr, out.ptr, lse.as<float>(), B, T, NH, NKV, HS);
        return download(*o, dqkv.ptr, n, dt);
    };
    const auto t0 = std::chrono::steady_clock::now();
    const auto whole = backward();
    const auto t1 = std::chrono::steady_clock::now();
    ScopedDqCap scoped(cap);
    ASSERT_TRUE(cuda::flash_backward_splits_rows(T, C, NH, keys));
    const cuda::FlashRowSplit s = cuda::flash_backward_row_split(T, HS, NKV, keys);
    ASSERT_LT(s.query_rows, T);  // several query chunks
    const auto chunked = backward();
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("T %d HS %d NH %d NKV %d, %s: cap %.2f MiB, %d kv heads x %d query rows a launch; backward %.1f s "
                "uncapped, %.1f s capped\n",
                T, HS, NH, NKV, tile_name(HS).c_str(), cap / kMiB, s.kv_heads, s.query_rows,
                std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count());
    EXPECT_TRUE(same_bits(chunked, whole)) << "dqkv differs in row chunks";
}

/// T 4096, the length for the check, at the smallest shape the kernels take: one head of
/// 64, cap 4 MiB (the head's carry is 2 MiB: 256 query rows a launch, 16 chunks).
TEST(FlashRowChunks, TinyCapAtT4096IsBitwiseTheUncapped) { row_chunks_agree(1, 4096, 1, 1, 64, size_t{4} << 20); }

/// T 300 at both head sizes (and on the emulator both tiles): 4 query heads on 2 key/value heads,
/// B 2, a cap so small that each launch covers one key/value head and one key block's rows.
TEST(FlashRowChunks, TinyCapAtT300IsBitwiseTheUncapped) {
    for (int HS : {64, 128}) row_chunks_agree(2, 300, 4, 2, HS, 1);
#ifndef LLMTRAIN_REAL_GPU
    ScopedSmemOptin sm86(k99KiB);
    for (int HS : {64, 128}) row_chunks_agree(2, 300, 4, 2, HS, 1);
#endif
}

}  // namespace
}  // namespace llmtrain::cudatest
