// tests/optim/test_offload.cpp — the host-offloaded optimizer on the CPU backend: AdamW with its state
// offloaded (whole or in part, in chunks whose ends cut tensors) against the same AdamW on the device,
// bit for bit over 10 steps (params and the fp32 state); the state round trip through host arrays
// (the checkpoint path) across offload settings; memory by category against the closed form; the
// step's phase times and spans; bad input.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "model/backend.hpp"
#include "optim/adamw.hpp"

namespace llmtrain {
namespace {

// n_embd 12 leaves gaps between tensors; shard_multiple 7 pads units.
const GPTConfig kCfg{2, 2, 12, 5, 10};
const AdamWConfig kAdam{1e-2f, 0.9f, 0.95f, 1e-8f, 0.5f};

std::vector<float> randu(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

/// Shard-local copy of the flat buffer's `ranges` (empty: all of it).
std::vector<float> local(const std::vector<float>& flat, const std::vector<FlatRange>& ranges) {
    if (ranges.empty()) return flat;
    std::vector<float> out;
    for (const FlatRange& r : ranges) out.insert(out.end(), flat.begin() + r.offset, flat.begin() + r.offset + r.numel);
    return out;
}

struct Steps {
    std::vector<float> params, w, m, v;
};

/// 10 steps with fresh gradients each, lr and grad_scale varying, then the state read back.
Steps ten_steps(const OffloadConfig& off, bool master, const std::vector<FlatRange>& ranges) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    ParamLayout L(kCfg, 7);
    AdamW opt(alloc, L, kAdam, master, ranges, off);
    Steps r;
    r.params = local(randu(L.total_numel(), 1), ranges);
    opt.init_state(r.params.data());
    for (int s = 0; s < 10; ++s) {
        const auto g = local(randu(L.total_numel(), 100 + s), ranges);
        opt.step(r.params.data(), g.data(), 1e-2f / float(1 + s), 1.0f / float(1 + s % 3));
    }
    const size_t n = opt.numel();
    r.w.resize(n);
    r.m.resize(n);
    r.v.resize(n);
    opt.state_to_host(r.params.data(), r.w.data(), r.m.data(), r.v.data());
    return r;
}

void expect_same(const Steps& a, const Steps& b) {
    ASSERT_EQ(a.params.size(), b.params.size());
    for (size_t i = 0; i < a.params.size(); ++i) {
        ASSERT_EQ(a.params[i], b.params[i]) << "param " << i;  // bitwise: == on floats that are not NaN
        ASSERT_EQ(a.w[i], b.w[i]) << "weight " << i;
        ASSERT_EQ(a.m[i], b.m[i]) << "m " << i;
        ASSERT_EQ(a.v[i], b.v[i]) << "v " << i;
    }
}

OffloadConfig offload(double fraction, size_t chunk_elems) {
    OffloadConfig o;
    o.enabled = true;
    o.fraction = fraction;
    o.chunk_bytes = chunk_elems * sizeof(float);
    return o;
}

TEST(Offload, BitwiseEqualToTheDeviceStep) {
    const std::vector<std::vector<FlatRange>> shards = {{}, {{3, 40}, {90, 77}, {300, 101}}};  // whole, and a ZeRO-like shard
    for (bool master : {false, true})
        for (const auto& ranges : shards) {
            const Steps ref = ten_steps(OffloadConfig{}, master, ranges);
            for (double fraction : {1.0, 0.5, 0.3})
                for (size_t chunk : {13, 64, 100000}) {  // many chunks cutting tensors, ..., one chunk
                    SCOPED_TRACE("master " + std::to_string(master) + " ranges " + std::to_string(ranges.size()) +
                                 " fraction " + std::to_string(fraction) + " chunk " + std::to_string(chunk));
                    expect_same(ref, ten_steps(offload(fraction, chunk), master, ranges));
                }
            OffloadConfig serial = offload(1.0, 13);
            serial.overlap = false;  // the benchmark's baseline computes the same
            expect_same(ref, ten_steps(serial, master, ranges));
        }
}

TEST(Offload, StateRoundTripsAcrossOffloadSettings) {
    // What a checkpoint does: state_to_host from one optimizer, state_from_host into another with a
    // different offload split; both then step alike.
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    ParamLayout L(kCfg, 1);
    const size_t n = L.total_numel();
    auto params = randu(n, 7);
    AdamW a(alloc, L, kAdam, true, {}, offload(0.5, 29));
    a.init_state(params.data());
    const auto g = randu(n, 8);
    a.step(params.data(), g.data(), 1e-2f, 1.0f);
    std::vector<float> w(n), m(n), v(n);
    a.state_to_host(params.data(), w.data(), m.data(), v.data());
    for (const OffloadConfig& o : {OffloadConfig{}, offload(1.0, 17), offload(0.25, 64)}) {
        AdamW b(alloc, L, kAdam, true, {}, o);
        b.state_from_host(w.data(), m.data(), v.data());
        b.set_t(a.t());
        std::vector<float> w2(n), m2(n), v2(n);
        b.state_to_host(params.data(), w2.data(), m2.data(), v2.data());
        EXPECT_EQ(w, w2);
        EXPECT_EQ(m, m2);
        EXPECT_EQ(v, v2);
        auto pa = params, pb = params;
        AdamW c(alloc, L, kAdam, true, {}, offload(0.5, 29));
        c.state_from_host(w.data(), m.data(), v.data());
        c.set_t(a.t());
        c.step(pa.data(), g.data(), 1e-2f, 1.0f);
        b.step(pb.data(), g.data(), 1e-2f, 1.0f);
        EXPECT_EQ(pa, pb);
    }
}

TEST(Offload, MemoryByCategoryMatchesTheClosedForm) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    ParamLayout L(kCfg, 1);
    const size_t n = L.total_numel(), chunk = 50;
    AdamW opt(alloc, L, kAdam, false, {}, offload(0.5, chunk));
    const size_t h = opt.host_numel();
    EXPECT_EQ(h % 64, 0u);  // the device part starts aligned
    EXPECT_NEAR(double(h), 0.5 * double(n), 64.0);
    // Host: w, m, v of the offloaded part (12 bytes each) and 4 staging buffers of a chunk (fp32 here).
    EXPECT_EQ(alloc.current(MemCategory::host), 12 * h + 4 * chunk * 4);
    // Device: m, v of the rest (no master weights in fp32).
    EXPECT_EQ(alloc.current(MemCategory::optimizer), 8 * (n - h));
    EXPECT_EQ(alloc.current_total(), alloc.current(MemCategory::optimizer));  // the total is device memory only
}

TEST(Offload, PhaseTimesAndSpansDescribeTheLastStep) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    ParamLayout L(kCfg, 1);
    const size_t n = L.total_numel();
    AdamW opt(alloc, L, kAdam, true, {}, offload(1.0, 40));
    auto p = randu(n, 1);
    const auto g = randu(n, 2);
    opt.init_state(p.data());
    opt.step(p.data(), g.data(), 1e-3f, 1.0f);
    const HostOffload& off = *opt.offload();
    ASSERT_EQ(off.chunks(), int((n + 39) / 40));
    ASSERT_EQ(off.last_spans().size(), size_t(3 * off.chunks()));
    const OffloadTimes& t = off.last_times();
    double adam = 0;
    for (const OffloadSpan& s : off.last_spans()) {
        EXPECT_GE(s.end, s.start);
        EXPECT_GE(s.start, 0.0);
        EXPECT_LE(s.end, t.wall + 1e-3);  // every span inside the step (the CPU runs copies at once)
        if (std::string(s.phase) == "host_adam") adam += s.end - s.start;
    }
    EXPECT_DOUBLE_EQ(adam, t.host_adam);
    EXPECT_GE(t.wall, t.host_adam);
    EXPECT_GE(t.d2h, 0.0);
    EXPECT_GE(t.h2d, 0.0);
}

TEST(Offload, BadInputIsRefusedClearly) {
    auto ops = make_backend("cpu", "fp32");
    Allocator alloc(*ops);
    ParamLayout L(kCfg, 1);
    for (double f : {0.0, -0.5, 1.5}) {
        try {
            AdamW opt(alloc, L, kAdam, false, {}, offload(f, 64));
            FAIL() << "fraction " << f << " accepted";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("optimizer.offload_fraction"), std::string::npos) << e.what();
        }
    }
    OffloadConfig tiny = offload(1.0, 1);
    tiny.chunk_bytes = 2;  // under one fp32 parameter
    EXPECT_THROW(AdamW(alloc, L, kAdam, false, {}, tiny), std::invalid_argument);
    // Pinned memory that cannot be had: the error says how much and of what.
    try {
        alloc.alloc_host(size_t(1) << 62);
        FAIL() << "a 4 EiB pinned allocation succeeded";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("pinned host memory"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace llmtrain
