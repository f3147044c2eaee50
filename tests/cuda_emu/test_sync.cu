// tests/cuda_emu/test_sync.cu — thread indices, barriers, shared memory and __syncwarp.
//
// References are closed forms (index formulas, integer sums) computed on the host. Every test runs
// under every thread order: correct kernels must not depend on it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;

namespace {

class Sync : public ::testing::TestWithParam<const char*> {
protected:
    emu_test::ScopedOrder order{GetParam(), "random:5"};
};

/// Each thread writes its coordinates at its global linear index.
__global__ void coords_kernel(uint32_t* out) {
    const uint32_t block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const uint32_t thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const uint32_t threads = blockDim.x * blockDim.y * blockDim.z;
    uint32_t* o = out + 6 * (block * threads + thread);
    o[0] = threadIdx.x, o[1] = threadIdx.y, o[2] = threadIdx.z;
    o[3] = blockIdx.x, o[4] = blockIdx.y, o[5] = blockIdx.z;
}

TEST_P(Sync, ThreadAndBlockIndicesCover3DGridsOnce) {
    const dim3 grid(3, 2, 2), block(4, 3, 2);
    const uint32_t n = grid.x * grid.y * grid.z * block.x * block.y * block.z;
    DeviceArray<uint32_t> out(6 * n);
    llmtrain::launch(coords_kernel, grid, block, 0, nullptr, out.p);
    auto v = out.download();
    uint32_t i = 0;
    for (uint32_t bz = 0; bz < grid.z; ++bz)
        for (uint32_t by = 0; by < grid.y; ++by)
            for (uint32_t bx = 0; bx < grid.x; ++bx)
                for (uint32_t tz = 0; tz < block.z; ++tz)
                    for (uint32_t ty = 0; ty < block.y; ++ty)
                        for (uint32_t tx = 0; tx < block.x; ++tx, ++i) {
                            const std::vector<uint32_t> want{tx, ty, tz, bx, by, bz};
                            ASSERT_EQ(std::vector<uint32_t>(v.begin() + 6 * i, v.begin() + 6 * i + 6), want) << i;
                        }
}

/// Block sum of in[] by a shared-memory tree (one barrier per level), result per block.
__global__ void block_sum_kernel(float* out, const float* in) {
    __shared__ float s[256];
    const int t = threadIdx.x;
    s[t] = in[blockIdx.x * blockDim.x + t];
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

TEST_P(Sync, SharedMemoryTreeReductionIsExact) {
    const int blocks = 37, threads = 256;
    std::vector<float> in(blocks * threads);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 1000);  // integer sums stay exact
    DeviceArray<float> d_in(in), d_out(blocks);
    llmtrain::launch(block_sum_kernel, blocks, threads, 0, nullptr, d_out.p, d_in.p);
    auto out = d_out.download();
    for (int b = 0; b < blocks; ++b) {
        double want = 0;
        for (int t = 0; t < threads; ++t) want += in[b * threads + t];
        ASSERT_EQ(out[b], want) << "block " << b;
    }
}

/// Lanes pass values through shared memory with __syncwarp between write and read.
__global__ void syncwarp_rotate_kernel(int* out) {
    __shared__ int s[64];
    const int t = threadIdx.x, lane = t % 32, base = t - lane;
    s[t] = 10 * t;
    __syncwarp();
    const int v = s[base + (lane + 1) % 32];
    __syncwarp();  // everyone read before anyone overwrites
    s[t] = v + 1;
    __syncwarp();
    out[t] = s[base + (lane + 31) % 32];
}

TEST_P(Sync, SyncwarpOrdersSharedMemoryWithinAWarp) {
    DeviceArray<int> out(64);
    llmtrain::launch(syncwarp_rotate_kernel, 1, 64, 0, nullptr, out.p);
    auto v = out.download();
    for (int t = 0; t < 64; ++t) EXPECT_EQ(v[t], 10 * t + 1) << t;  // rotated forward, then back
}

/// Dynamic shared memory: reads before any write see the poison; a round trip through it works.
__global__ void dynamic_smem_kernel(float* first_read, float* out, int n) {
    EXTERN_SHARED(float, s);
    const int t = threadIdx.x;
    for (int i = t; i < n; i += blockDim.x) first_read[blockIdx.x * n + i] = s[i];
    __syncthreads();
    for (int i = t; i < n; i += blockDim.x) s[i] = static_cast<float>(blockIdx.x * n + i);
    __syncthreads();
    for (int i = t; i < n; i += blockDim.x) out[blockIdx.x * n + i] = s[n - 1 - i];
}

TEST_P(Sync, DynamicSharedMemoryStartsPoisonedPerBlock) {
    const int blocks = 6, n = 1000;
    DeviceArray<float> first(blocks * n), out(blocks * n);
    llmtrain::launch(dynamic_smem_kernel, blocks, 96, n * sizeof(float), nullptr, first.p, out.p, n);
    auto f = first.download();
    auto o = out.download();
    for (int b = 0; b < blocks; ++b)
        for (int i = 0; i < n; ++i) {
            ASSERT_TRUE(std::isnan(f[b * n + i])) << "block " << b << " read " << f[b * n + i];
            ASSERT_EQ(o[b * n + i], static_cast<float>(b * n + n - 1 - i));
        }
}

/// Blocks on different workers each keep their own static __shared__ copy: every block writes its
/// index into shared memory, syncs many times, and checks nobody else's value appeared.
__global__ void shared_isolation_kernel(int* bad) {
    __shared__ int s[128];
    for (int round = 0; round < 20; ++round) {
        s[threadIdx.x] = blockIdx.x * 1000 + round;
        __syncthreads();
        if (s[(threadIdx.x + 7) % blockDim.x] != static_cast<int>(blockIdx.x * 1000 + round)) atomicAdd(bad, 1);
        __syncthreads();
    }
}

TEST_P(Sync, StaticSharedMemoryIsPerBlock) {
    DeviceArray<int> bad(1);
    CUDA_CHECK(cudaMemset(bad.p, 0, sizeof(int)));
    llmtrain::launch(shared_isolation_kernel, 64, 128, 0, nullptr, bad.p);
    EXPECT_EQ(bad.download()[0], 0);
}

/// Synchronizes only when asked: without `sync` every thread runs on the plain loop of the fast
/// path; with it the loop hands each thread to the scheduler at the barrier. Reverses the block's
/// values through shared memory when syncing, else copies them.
__global__ void maybe_syncing_kernel(int* out, const int* in, int sync) {
    __shared__ int s[96];
    const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    if (!sync) {
        out[base + t] = in[base + t];
        return;
    }
    s[t] = in[base + t];
    __syncthreads();
    out[base + t] = s[blockDim.x - 1 - t];
}

TEST_P(Sync, DataDependentSynchronizationLeavesTheFastPath) {
    const int blocks = 5, threads = 96;
    std::vector<int> in(blocks * threads);
    std::iota(in.begin(), in.end(), 0);
    DeviceArray<int> d_in(in), out(in.size());
    for (int sync : {0, 1, 0, 1}) {
        llmtrain::launch(maybe_syncing_kernel, blocks, threads, 0, nullptr, out.p, d_in.p, sync);
        auto v = out.download();
        for (int i = 0; i < blocks * threads; ++i)
            ASSERT_EQ(v[i], sync ? i / threads * threads + threads - 1 - i % threads : i) << "sync " << sync;
    }
}

INSTANTIATE_TEST_SUITE_P(Orders, Sync, ::testing::ValuesIn(emu_test::kThreadOrders), [](const auto& info) {
    std::string s = info.param;
    for (char& c : s)
        if (c == ':') c = '_';
    return s;
});

}  // namespace
