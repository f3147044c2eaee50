// tests/cuda/test_flash_racecheck.cu — the FlashAttention-2 kernels under the emulator's racecheck:
// linked with llmtrain_cuda_emu_racecheck, every shared-memory access (plain loads and stores too,
// through -fsanitize=thread's instrumentation: emu/racecheck_hooks.cpp) is checked for
// a hazard between warps with no __syncthreads between (read after write, write after read, write
// after write: emu/shared_hazards.hpp), whatever order the emulator runs the warps in.
// A GPU runs warps in an order of its own, so such a hazard is a bug there even where the
// emulator's order gave the right bits. This file is instrumented too (the planted kernel).
//
// - The checker itself: a kernel with each hazard planted (between warps, and between two lanes of
//   one warp) faults in every thread order, the same kernel with a barrier does not (so the
//   racecheck can fail).
// - Between blocks: a global word stored by two blocks of one launch faults in every block order;
//   bf16 halves of one word stored by two blocks do not.
// - The kernels: forward and backward (both backward tiles at both head sizes, grouped-query too)
//   at shapes with partial, diagonal and skipped blocks run without a fault, in batch chunks and in
//   row chunks (the dQ workspace cap forced to 1 byte), and so do attention.cu's fp32 kernels;
//   with document masking too (skipped key blocks, shortened walks, rows with no key in a block);
//   their results are test_flash_attention's, test_flash_long's and test_cuda_ops' to check.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "model/cuda/flash_attention.hpp"
#include "model/cuda/kernels.cuh"
#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;
namespace cuda = llmtrain::cuda;

namespace {

/// 64 threads, two warps, on 64 floats of dynamic shared memory, set before a first barrier; the
/// hazard planted with no barrier between its two accesses, one there with `mode | 16`:
///   0: warp 0 stores s[0..31], then warp 1 loads them (read after write)
///   1: warp 0 loads s[32..63], then warp 1 stores them (write after read)
///   2: threads 0 and 32 store s[0] (write after write)
///   3: lane 0 of warp 0 stores s[0], then lane 1 loads it (read after write within a warp: the
///      barrier there is a __syncwarp)
///   4: every lane of warp 0 loads s[0], then lane 0 stores it (write after read within a warp,
///      barrier __syncwarp; in the reverse order lane 0 is the last to load it, so a check against
///      the last reader alone would miss it there)
/// ("then": in program order and in the emulator's forward order; the reverse order runs warp 1
/// (lane 1) first, so there 0 and 1 (3) meet as each other's hazard.)
__global__ void planted_kernel(float* out, int mode) {
    EXTERN_SHARED(float, s);
    const int i = static_cast<int>(threadIdx.x);
    const bool warp0 = i < 32;
    s[i] = static_cast<float>(i);
    __syncthreads();
    float v = 0.0f;
    switch (mode & 15) {
        case 0:
            if (warp0) s[i] = -1.0f;
            if (mode & 16) __syncthreads();
            if (!warp0) v = s[i - 32];
            break;
        case 1:
            if (warp0) v = s[i + 32];
            if (mode & 16) __syncthreads();
            if (!warp0) s[i] = -1.0f;
            break;
        case 2:
            if (i == 0) s[0] = -1.0f;
            if (mode & 16) __syncthreads();
            if (i == 32) s[0] = -2.0f;
            break;
        case 3:
            if (i == 0) s[0] = -1.0f;
            if (mode & 16) __syncwarp();
            if (i == 1) v = s[0];
            break;
        case 4:
            if (warp0) v = s[0];
            if (mode & 16) __syncwarp();
            if (i == 0) s[0] = -1.0f;
            break;
    }
    out[i] = v;
}

/// Two blocks of 32 threads on global memory: mode 0, thread 0 of each stores out[0] (write after
/// write between blocks); mode 1, thread 0 of block b stores element b of a bf16 pair (the two
/// halves of one 4-byte word: no hazard, as on a GPU).
__global__ void planted_global_kernel(float* out, __nv_bfloat16* pair, int mode) {
    if (threadIdx.x != 0) return;
    if (mode == 0) out[0] = static_cast<float>(blockIdx.x);
    else pair[blockIdx.x] = __float2bfloat16(static_cast<float>(blockIdx.x));
}

std::vector<__nv_bfloat16> random_bf16(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<__nv_bfloat16> v(n);
    for (auto& x : v) x = __float2bfloat16(u(rng));
    return v;
}

/// Forward, then backward with `tile`, at (B, T, NH query heads, NKV key/value heads, head size
/// HS), block-causal over the documents starting at `starts` (in every batch row) when given; fails
/// on any kernel fault (a hazard's report included).
void run_flash(int B, int T, int NH, int NKV, int HS, cuda::FlashBackwardTile tile, std::vector<int> starts = {}) {
    SCOPED_TRACE("B " + std::to_string(B) + " T " + std::to_string(T) + " NH " + std::to_string(NH) + " NKV " +
                 std::to_string(NKV) + " HS " + std::to_string(HS) + ", backward " + std::to_string(tile.keys) +
                 " keys x " + std::to_string(tile.rows) + " rows");
    const int C = NH * HS;
    const size_t rows = static_cast<size_t>(B) * T;
    DeviceArray<__nv_bfloat16> qkv(random_bf16(rows * (C + 2 * NKV * HS), 1)), dout(random_bf16(rows * C, 2));
    DeviceArray<__nv_bfloat16> out(rows * C), dqkv(rows * (C + 2 * NKV * HS));
    DeviceArray<float> lse(static_cast<size_t>(B) * NH * T);
    const int keys = starts.empty() ? tile.keys : cuda::flash_backward_tile_small(HS).keys;  // documents: the small tile
    DeviceArray<float> scratch(cuda::flash_attention_backward_scratch_bytes(B, T, C, NH, keys) / sizeof(float) + 4);
    std::vector<int> ds(rows, 0);
    for (size_t r = 0; r < rows; r++)
        for (int s : starts)
            if (s <= static_cast<int>(r % T)) ds[r] = s;
    DeviceArray<int> doc(ds);
    const int* d = starts.empty() ? nullptr : doc.p;
    cuda::flash_attention_forward(out.p, lse.p, qkv.p, B, T, C, NH, NKV, nullptr, d);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
    cuda::flash_attention_backward(dqkv.p, dout.p, qkv.p, out.p, lse.p, B, T, C, NH, NKV, tile, scratch.p, nullptr, d);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
}

}  // namespace

TEST(Racecheck, PlantedHazardsFaultInEveryOrderAndABarrierEndsThem) {
    const char* needles[] = {"read after write", "write after read", "write after write", "read after write",
                             "read after write"};
    for (const char* order : emu_test::kThreadOrders) {
        emu_test::ScopedOrder scoped(order);
        for (int mode = 0; mode < 5; mode++) {
            SCOPED_TRACE(std::string(order) + ", mode " + std::to_string(mode));
            {
                DeviceArray<float> out(64);
                llmtrain::launch(planted_kernel, 1, 64, 64 * sizeof(float), nullptr, out.p, mode);
                const std::string report = emu_test::expect_fault(
                    mode >= 3 ? "with no __syncwarp (or __syncthreads) between" : "with no __syncthreads between");
                if (std::string(order) == "forward") {  // in the reverse order 0 and 1 (3) meet as each other
                    EXPECT_NE(report.find(needles[mode]), std::string::npos) << report;
                }
                EXPECT_NE(report.find("test_flash_racecheck.cu:"), std::string::npos) << "no source line:\n" << report;
            }
            DeviceArray<float> out(64);
            llmtrain::launch(planted_kernel, 1, 64, 64 * sizeof(float), nullptr, out.p, mode | 16);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
        }
    }
}

/// Between the blocks of one launch (global_hazards.hpp): a word two blocks store faults whichever
/// block runs first; the two bf16 halves of a word stored by two blocks do not.
TEST(Racecheck, BlocksOfALaunchStoringOneWordFault) {
    for (const char* order : {"sequential", "random:1", "random:2"}) {
        emu_test::ScopedOrder scoped("forward", order);
        SCOPED_TRACE(order);
        {
            DeviceArray<float> out(1);
            DeviceArray<__nv_bfloat16> pair(2);
            llmtrain::launch(planted_global_kernel, 2, 32, 0, nullptr, out.p, pair.p, 0);
            const std::string report = emu_test::expect_fault("write after write on byte 0 of allocation");
            EXPECT_NE(report.find("in the same launch"), std::string::npos) << report;
            EXPECT_NE(report.find("test_flash_racecheck.cu:"), std::string::npos) << "no source line:\n" << report;
        }
        DeviceArray<float> out(1);
        DeviceArray<__nv_bfloat16> pair(2);
        llmtrain::launch(planted_global_kernel, 2, 32, 0, nullptr, out.p, pair.p, 1);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
    }
}

/// Head size 64: T 300 has 3 forward blocks (the last partial), 3 key blocks of 128 (the last
/// partial) and skipped blocks past the diagonal; the small tile's 64-row steps too.
TEST(Racecheck, FlashHeadSize64HasNoHazard) {
    run_flash(1, 300, 2, 2, 64, cuda::flash_backward_tile_large(64));
    run_flash(1, 300, 2, 2, 64, cuda::flash_backward_tile_small(64));
    run_flash(1, 150, 4, 2, 64, cuda::flash_backward_tile_large(64));  // grouped-query
}

/// attention.cu's kernels (model.attention = "native" in fp32, CUDA cores, scores in dynamic shared
/// memory): forward and backward.
TEST(Racecheck, NativeFp32AttentionHasNoHazard) {
    const int B = 1, T = 150, NH = 2, C = 128;
    const size_t n = static_cast<size_t>(B) * T * C;
    std::vector<float> x(3 * n), g(n);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : x) v = u(rng);
    for (auto& v : g) v = u(rng);
    DeviceArray<float> qkv(x), dout(g), out(n), dqkv(3 * n), lse(static_cast<size_t>(B) * NH * T);
    DeviceArray<float> scratch(cuda::attention_backward_scratch_bytes(B, T, NH) / sizeof(float) + 4);
    cuda::attention_forward(out.p, lse.p, qkv.p, B, T, C, NH, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
    cuda::attention_backward(dqkv.p, dout.p, qkv.p, out.p, lse.p, B, T, C, NH, scratch.p, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
}

TEST(Racecheck, FlashHeadSize128HasNoHazard) {
    run_flash(1, 300, 2, 2, 128, cuda::flash_backward_tile_large(128));
    run_flash(1, 300, 2, 2, 128, cuda::flash_backward_tile_small(128));
    run_flash(1, 150, 4, 2, 128, cuda::flash_backward_tile_small(128));  // grouped-query
}

/// The backward in row chunks (flash_dq_workspace_cap forced to 1 byte: each launch one key/value
/// head, one query head of its group, one key block's rows; dK and dV carried between launches),
/// grouped-query, at both head sizes in both tiles.
TEST(Racecheck, FlashRowChunksHaveNoHazard) {
    cuda::flash_dq_workspace_cap = 1;
    for (int hs : {64, 128}) {
        run_flash(1, 300, 4, 2, hs, cuda::flash_backward_tile_large(hs));
        run_flash(1, 300, 4, 2, hs, cuda::flash_backward_tile_small(hs));
    }
    cuda::flash_dq_workspace_cap = cuda::kFlashDqWorkspaceCap;
}

/// Document masking (documents from 0, 70, 200 and 201: skipped key blocks, walks that end early, a
/// row with no key in a block it computes), grouped-query, at both head sizes in both tiles, in row
/// chunks, and attention.cu's fp32 kernels (tiles skipped, the key kernel's walk cut short).
TEST(Racecheck, FlashDocumentMaskHasNoHazard) {
    const std::vector<int> starts = {0, 70, 200, 201};
    for (int hs : {64, 128}) {
        run_flash(1, 300, 2, 1, hs, cuda::flash_backward_tile_large(hs), starts);
        run_flash(1, 300, 2, 1, hs, cuda::flash_backward_tile_small(hs), starts);
    }
    cuda::flash_dq_workspace_cap = 1;
    run_flash(1, 300, 2, 1, 64, cuda::flash_backward_tile_large(64), starts);
    cuda::flash_dq_workspace_cap = cuda::kFlashDqWorkspaceCap;
    const int B = 1, T = 150, NH = 2, C = 128;
    const size_t n = static_cast<size_t>(B) * T * C;
    std::vector<float> x(3 * n, 0.5f), g(n, 0.25f);
    std::vector<int> ds(T);
    for (int t = 0; t < T; t++) ds[size_t(t)] = t < 70 ? 0 : t < 100 ? 70 : t < 101 ? 100 : 101;
    DeviceArray<float> qkv(x), dout(g), out(n), dqkv(3 * n), lse(static_cast<size_t>(B) * NH * T);
    DeviceArray<float> scratch(cuda::attention_backward_scratch_bytes(B, T, NH) / sizeof(float) + 4);
    DeviceArray<int> doc(ds);
    cuda::attention_forward(out.p, lse.p, qkv.p, B, T, C, NH, nullptr, doc.p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
    cuda::attention_backward(dqkv.p, dout.p, qkv.p, out.p, lse.p, B, T, C, NH, scratch.p, nullptr, doc.p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << emu::last_error_message();
}
