// tests/cuda_emu/test_warp.cu — warp shuffles and votes against expected lane values.
//
// Two references: literal tables worked out by hand from the CUDA C++ Programming Guide ("Warp
// Shuffle Functions") for representative cases, and a closed-form reference written from the same
// text (segment arithmetic, not the PTX formula the emulator uses) for every op, width and
// argument. Each kernel runs under every thread order: lane results may not depend on it.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tests/cuda_emu/test_util.hpp"

using emu_test::DeviceArray;

namespace {

enum Op { kIdx, kUp, kDown, kXor };

constexpr int kBlock = 64;  // two warps: lane = threadIdx.x % 32

/// out[t] = shuffle of (100 + t) by op/arg/width among the lanes of `mask`; -1 for other lanes.
__global__ void shuffle_kernel(int* out, int op, unsigned mask, int arg, int width) {
    const int lane = threadIdx.x % 32;
    const int v = 100 + threadIdx.x;
    int r = -1;
    if ((mask >> lane) & 1u) {
        if (op == kIdx) r = __shfl_sync(mask, v, arg, width);
        else if (op == kUp) r = __shfl_up_sync(mask, v, arg, width);
        else if (op == kDown) r = __shfl_down_sync(mask, v, arg, width);
        else r = __shfl_xor_sync(mask, v, arg, width);
    }
    out[threadIdx.x] = r;
}

/// Source lane per the Programming Guide's wording.
int reference_source(Op op, int lane, int arg, int width) {
    const int first = lane / width * width;  // first lane of the caller's segment
    switch (op) {
        case kIdx: return first + ((arg % width) + width) % width;       // srcLane modulo width
        case kUp: return lane - first >= arg ? lane - arg : lane;        // below delta: unchanged
        case kDown: return lane - first + arg < width ? lane + arg : lane;  // past the segment: unchanged
        case kXor: {
            const int src = lane ^ arg;
            return src >= first + width ? lane : src;  // later segments: own value; earlier: allowed
        }
    }
    return -1;
}

std::vector<int> run_shuffle(Op op, unsigned mask, int arg, int width) {
    DeviceArray<int> out(kBlock);
    llmtrain::launch(shuffle_kernel, 1, kBlock, 0, nullptr, out.p, static_cast<int>(op), mask, arg, width);
    return out.download();
}

class Warp : public ::testing::TestWithParam<const char*> {
protected:
    emu_test::ScopedOrder order{GetParam()};
};

TEST_P(Warp, LiteralTables) {
    struct Row {
        Op op;
        int arg, width;
        std::vector<int> lanes0to15;  // source lane of lanes 0..15
    };
    const Row rows[] = {
        {kDown, 3, 8, {3, 4, 5, 6, 7, 5, 6, 7, 11, 12, 13, 14, 15, 13, 14, 15}},
        {kUp, 1, 4, {0, 0, 1, 2, 4, 4, 5, 6, 8, 8, 9, 10, 12, 12, 13, 14}},
        {kXor, 1, 32, {1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14}},
        // 12 = 0b1100 with width 8: lanes 0-7 would read 12-15 (a later segment: own value), lanes 8-15
        // read 4-7 (an earlier segment: allowed).
        {kXor, 12, 8, {0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7, 0, 1, 2, 3}},
        {kIdx, 17, 16, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
        {kIdx, -1, 4, {3, 3, 3, 3, 7, 7, 7, 7, 11, 11, 11, 11, 15, 15, 15, 15}},
    };
    for (const Row& r : rows) {
        std::vector<int> got = run_shuffle(r.op, 0xffffffffu, r.arg, r.width);
        for (int lane = 0; lane < 16; ++lane)
            for (int warp = 0; warp < 2; ++warp)
                EXPECT_EQ(got[warp * 32 + lane], 100 + warp * 32 + r.lanes0to15[lane])
                    << "op " << r.op << " arg " << r.arg << " width " << r.width << " lane " << lane;
    }
}

TEST_P(Warp, EveryOpWidthAndArgumentFullMask) {
    for (Op op : {kIdx, kUp, kDown, kXor})
        for (int width = 1; width <= 32; width *= 2)
            for (int arg : {0, 1, 2, 3, 5, 8, 13, 16, 31, 33, -2}) {
                if (op != kIdx && (arg < 0 || arg > 31)) continue;  // delta and lane mask are 5-bit
                std::vector<int> got = run_shuffle(op, 0xffffffffu, arg, width);
                for (int t = 0; t < kBlock; ++t) {
                    const int base = t / 32 * 32;
                    ASSERT_EQ(got[t], 100 + base + reference_source(op, t % 32, arg, width))
                        << "op " << op << " width " << width << " arg " << arg << " thread " << t;
                }
            }
}

TEST_P(Warp, PartialMasks) {
    struct MaskCase {
        Op op;
        unsigned mask;
        int arg, width;
    };
    // Every source lane lies inside the mask.
    const MaskCase cases[] = {
        {kXor, 0x0000ffffu, 4, 16}, {kDown, 0x0000ffffu, 2, 16}, {kIdx, 0xaaaaaaaau, 1, 32},
        {kXor, 0xaaaaaaaau, 2, 32}, {kUp, 0xffff0000u, 3, 16},   {kIdx, 0x0000000fu, 2, 4},
    };
    for (const MaskCase& c : cases) {
        std::vector<int> got = run_shuffle(c.op, c.mask, c.arg, c.width);
        for (int t = 0; t < kBlock; ++t) {
            const int lane = t % 32;
            const int want = ((c.mask >> lane) & 1u) ? 100 + t / 32 * 32 + reference_source(c.op, lane, c.arg, c.width) : -1;
            ASSERT_EQ(got[t], want) << "mask " << std::hex << c.mask << std::dec << " thread " << t;
        }
    }
}

/// Shuffles of 8-byte and 2-byte types move the whole value.
__global__ void typed_shuffle_kernel(double* d, long long* ll, float* f, __nv_bfloat16* h) {
    const int t = threadIdx.x;
    d[t] = __shfl_xor_sync(0xffffffffu, 1.0e300 * (t + 1), 5);
    ll[t] = __shfl_down_sync(0xffffffffu, (1ll << 40) + t, 1);
    f[t] = __shfl_sync(0xffffffffu, 0.5f + t, 7, 8);
    h[t] = __shfl_up_sync(0xffffffffu, __float2bfloat16(static_cast<float>(t)), 2);
}

TEST_P(Warp, TypedValues) {
    DeviceArray<double> d(32);
    DeviceArray<long long> ll(32);
    DeviceArray<float> f(32);
    DeviceArray<__nv_bfloat16> h(32);
    llmtrain::launch(typed_shuffle_kernel, 1, 32, 0, nullptr, d.p, ll.p, f.p, h.p);
    auto dv = d.download();
    auto lv = ll.download();
    auto fv = f.download();
    auto hv = h.download();
    for (int t = 0; t < 32; ++t) {
        EXPECT_EQ(dv[t], 1.0e300 * ((t ^ 5) + 1));
        EXPECT_EQ(lv[t], (1ll << 40) + (t < 31 ? t + 1 : t));
        EXPECT_EQ(fv[t], 0.5f + (t / 8 * 8 + 7));
        EXPECT_EQ(__bfloat162float(hv[t]), static_cast<float>(t >= 2 ? t - 2 : t));
    }
}

/// votes[t] = {ballot, any, all} over the lanes of `mask` with predicate (lane % 3 == 0) and,
/// for all, (lane != skip).
__global__ void vote_kernel(unsigned* votes, unsigned mask, int skip) {
    const int lane = threadIdx.x % 32;
    if (!((mask >> lane) & 1u)) return;
    votes[3 * threadIdx.x] = __ballot_sync(mask, lane % 3 == 0);
    votes[3 * threadIdx.x + 1] = __any_sync(mask, lane == skip);
    votes[3 * threadIdx.x + 2] = __all_sync(mask, lane != skip);
}

TEST_P(Warp, Votes) {
    for (unsigned mask : {0xffffffffu, 0x0f0f0f0fu, 0x00000001u})
        for (int skip : {-1, 0, 8, 31}) {
            DeviceArray<unsigned> votes(3 * kBlock);
            CUDA_CHECK(cudaMemset(votes.p, 0, votes.n * sizeof(unsigned)));
            llmtrain::launch(vote_kernel, 1, kBlock, 0, nullptr, votes.p, mask, skip);
            auto v = votes.download();
            unsigned ballot = 0;
            bool any = false, all = true;
            for (int lane = 0; lane < 32; ++lane) {
                if (!((mask >> lane) & 1u)) continue;
                if (lane % 3 == 0) ballot |= 1u << lane;
                any = any || lane == skip;
                all = all && lane != skip;
            }
            for (int t = 0; t < kBlock; ++t) {
                const bool in = (mask >> (t % 32)) & 1u;
                EXPECT_EQ(v[3 * t], in ? ballot : 0u) << t;
                EXPECT_EQ(v[3 * t + 1], in ? unsigned(any) : 0u) << t;
                EXPECT_EQ(v[3 * t + 2], in ? unsigned(all) : 0u) << t;
            }
        }
}

/// With 48 threads the second warp has 16 lanes: its active mask is 0xffff.
__global__ void activemask_kernel(unsigned* out) { out[threadIdx.x] = __activemask(); }

TEST_P(Warp, ActiveMaskOfAPartialWarp) {
    DeviceArray<unsigned> out(48);
    llmtrain::launch(activemask_kernel, 1, 48, 0, nullptr, out.p);
    auto v = out.download();
    for (int t = 0; t < 48; ++t) EXPECT_EQ(v[t], t < 32 ? 0xffffffffu : 0x0000ffffu) << t;
}

INSTANTIATE_TEST_SUITE_P(Orders, Warp, ::testing::ValuesIn(emu_test::kThreadOrders),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (char& c : s)
                                 if (c == ':') c = '_';
                             return s;
                         });

}  // namespace
