// tests/cuda/test_cuda_offload.cpp — the host-offloaded optimizer against the CUDA backend's own step,
// under emu/ (deferred streams: a copy runs only when something waits for it, and a
// device→host destination reads NaN until then, so a missing wait shows up every time).
//  - the CUDA AdamW kernel and the host AdamW step give the same bits (fp32; bf16 params from fp32
//    master weights, rounded to nearest or stochastically), at an odd length;
//  - AdamW with its state offloaded (fraction 1 and 0.5, chunks that cut tensors) equals AdamW on
//    the device, params and state, over 10 steps, in the emulator's three thread orders;
//  - a partial offload's device part is not waited for by the copies or the host step: under deferred
//    streams it runs only when the step finally waits for it, after every chunk (the trace order);
//    and a device part lasting 0.1 s (by the host clock) ends well after the copies' start (by its
//    events), which a step whose copies waited for it would not (on a GPU too);
//  - the race DeepSpeed #1219 hit (a staging buffer overwritten before its copy ran), injected by
//    dropping the one wait that prevents it, changes the result: the tests would catch it.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "optim/adamw.hpp"
#include "optim/host_adamw.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

// n_embd 12 leaves gaps between tensors; shard_multiple 7 pads units.
const GPTConfig kCfg{2, 2, 12, 5, 10};
const AdamWConfig kAdam{1e-2f, 0.9f, 0.95f, 1e-8f, 0.5f};

struct Case {
    std::string precision, order;
    bool stochastic;
};
std::string case_name(const testing::TestParamInfo<Case>& i) {
    return i.param.precision + "_" + i.param.order + (i.param.stochastic ? "_sr" : "");
}
/// How gtest (and ctest's discovered test names) prints a Case, instead of its raw bytes.
void PrintTo(const Case& c, std::ostream* os) {
    *os << c.precision << " " << c.order << (c.stochastic ? " stochastic rounding" : "");
}

class CudaOffload : public testing::TestWithParam<Case> {
protected:
    void SetUp() override { set_emu_order(GetParam().order); }
    void TearDown() override { reset_emu_order(); }

    struct Result {
        std::vector<float> params, w, m, v;
    };
    /// 10 steps of AdamW over the whole flat buffer with `off`, fresh gradients each step.
    Result ten_steps(OffloadConfig off) {
        CudaBackendOptions bo;
        bo.stochastic_rounding = GetParam().stochastic;
        auto ops = make_cuda_backend(GetParam().precision, bo);
        const DType t = ops->act_dtype();
        Allocator alloc(*ops);
        ParamLayout L(kCfg, 7);
        const size_t n = L.total_numel();
        off.stochastic_rounding = GetParam().stochastic;
        Result r;
        {
            AdamW opt(alloc, L, kAdam, t == DType::bf16, {}, off);
            DevBuf p = upload(*ops, random_vec(n, 1, t == DType::bf16), t);
            opt.init_state(p.ptr);
            for (int s = 0; s < 10; ++s) {
                DevBuf g = upload(*ops, random_vec(n, 100 + s, t == DType::bf16), t);
                opt.step(p.ptr, g.ptr, 1e-2f / float(1 + s), 1.0f / float(1 + s % 3));
            }
            r.params = download(*ops, p.ptr, n, t);
            r.w.resize(n);
            r.m.resize(n);
            r.v.resize(n);
            opt.state_to_host(p.ptr, r.w.data(), r.m.data(), r.v.data());
        }
        return r;
    }
};

OffloadConfig offload(double fraction, size_t chunk_elems) {
    OffloadConfig o;
    o.enabled = true;
    o.fraction = fraction;
    o.chunk_bytes = chunk_elems * sizeof(float);
    return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_P(CudaOffload, KernelAndHostStepGiveTheSameBits) {
    CudaBackendOptions bo;
    bo.stochastic_rounding = GetParam().stochastic;
    auto ops = make_cuda_backend(GetParam().precision, bo);
    const DType t = ops->act_dtype();
    const bool bf16 = t == DType::bf16;
    const size_t n = 10007, index0 = 123457;  // odd: vector tails; index0 keys the stochastic rounding
    auto w = random_vec(n, 1, bf16), m = random_vec(n, 2, false, 0.0f, 1e-3f), v = random_vec(n, 3, false, 0.0f, 1e-4f);
    const auto g = random_vec(n, 4, bf16, -1e-2f, 1e-2f);
    DevBuf dp = upload(*ops, w, t), dm = upload(*ops, m, DType::f32), dv = upload(*ops, v, DType::f32),
           dw = upload(*ops, w, DType::f32), dg = upload(*ops, g, t);
    ops->adamw_update(dp.ptr, bf16 ? dw.as<float>() : nullptr, dg.ptr, dm.as<float>(), dv.as<float>(), n, 3e-3f,
                      0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 4, index0);
    // The host: grads and params in the same dtype, as the offload engine moves them.
    std::vector<uint16_t> g16(n), p16(n);
    for (size_t i = 0; i < n; ++i) g16[i] = bf16_bits(g[i]);
    std::vector<float> p32(n);
    const HostAdamWStep st{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 4, GetParam().stochastic, index0};
    host_adamw(w.data(), m.data(), v.data(), bf16 ? static_cast<const void*>(g16.data()) : g.data(), t,
               bf16 ? static_cast<void*>(p16.data()) : p32.data(), t, n, st);
    if (bf16)
        for (size_t i = 0; i < n; ++i) p32[i] = bf16_to_float(p16[i]);
    EXPECT_TRUE(same_bits(download(*ops, dp.ptr, n, t), p32)) << "params";
    EXPECT_TRUE(same_bits(download(*ops, dm.ptr, n, DType::f32), m)) << "m";
    EXPECT_TRUE(same_bits(download(*ops, dv.ptr, n, DType::f32), v)) << "v";
    if (bf16) {
        EXPECT_TRUE(same_bits(download(*ops, dw.ptr, n, DType::f32), w)) << "master weights";
    }
}

TEST_P(CudaOffload, OffloadedStepEqualsTheDeviceStep) {
    const Result ref = ten_steps(OffloadConfig{});
    for (double fraction : {1.0, 0.5})
        for (size_t chunk : {97, 100000}) {  // many chunks, whose ends cut tensors; one chunk
            SCOPED_TRACE("fraction " + std::to_string(fraction) + " chunk " + std::to_string(chunk));
            const Result r = ten_steps(offload(fraction, chunk));
            EXPECT_TRUE(same_bits(ref.params, r.params)) << "params";
            EXPECT_TRUE(same_bits(ref.w, r.w)) << "fp32 weights";
            EXPECT_TRUE(same_bits(ref.m, r.m)) << "m";
            EXPECT_TRUE(same_bits(ref.v, r.v)) << "v";
        }
}

TEST_P(CudaOffload, AStagingBufferReusedBeforeItsCopyRanIsCaught) {
    // With the wait in place the result is the device step's (the test above); without it, chunk k's
    // params overwrite chunk k-2's in their staging buffer before chunk k-2's copy to the device ran.
    const Result ref = ten_steps(OffloadConfig{});
    OffloadConfig racy = offload(1.0, 97);
    racy.test_skip_reuse_wait = true;
    EXPECT_FALSE(same_bits(ref.params, ten_steps(racy).params));
}

class CudaOffloadOverlap : public testing::Test {
protected:
    void SetUp() override { set_emu_order("forward"); }
    void TearDown() override { reset_emu_order(); }
};

TEST_F(CudaOffloadOverlap, TheDevicePartRunsWhileTheHostSteps) {
    // Deferred streams run queued work only when something waits for it. The copy streams start from
    // an event recorded before the device part is queued, so the host's waits on the copies force
    // none of it: it runs when the step waits for its end, after the last chunk. Had the copies
    // waited for it (the event recorded after it), the first gradient copy would start after it.
    // Emulator only: on a GPU the device part starts at once and overlaps the copies' spans.
#ifdef LLMTRAIN_REAL_GPU
    GTEST_SKIP() << "the span order is the emulator's deferred streams'; the timing test below holds on a GPU";
#endif
    auto ops = make_cuda_backend("bf16", CudaBackendOptions{});
    Allocator alloc(*ops);
    ParamLayout L(kCfg, 7);
    const size_t n = L.total_numel();
    {
        AdamW opt(alloc, L, kAdam, true, {}, offload(0.5, 97));
        DevBuf p = upload(*ops, random_vec(n, 1, true), DType::bf16);
        DevBuf g = upload(*ops, random_vec(n, 2, true), DType::bf16);
        opt.init_state(p.ptr);
        opt.step(p.ptr, g.ptr, 1e-2f, 1.0f);
        const HostOffload& off = *opt.offload();
        ASSERT_GT(off.chunks(), 2);
        const auto& spans = off.last_spans();
        ASSERT_EQ(spans.size(), size_t(3 * off.chunks() + 1));
        ASSERT_STREQ(spans[0].phase, "device_adam");
        const OffloadSpan dev = spans[0];
        EXPECT_GT(dev.end, dev.start);
        for (size_t i = 1; i < spans.size(); ++i)
            EXPECT_LE(spans[i].end, dev.start) << spans[i].phase << " " << spans[i].chunk << " ended after the device part began";
    }
}

/// Seconds of `work` (queued on ops' default stream, then waited for), by the host's steady clock.
double seconds_of(Ops& ops, const std::function<void()>& work) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    ops.synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST_F(CudaOffloadOverlap, TheCopiesStartBeforeTheDevicePartEnds) {
    // The device part D (device work made to last >= 0.1 s, timed alone by this test's host clock:
    // t_dev) is queued after the copy streams' starting event, so the step's time origin t0 (an
    // event on the gradient copies' stream after that start, which the host waits for before its
    // first chunk) does not wait for it: D ends after t0, by about t_dev on a GPU (D starts at once,
    // beside the copies) and by more under the emulator (D runs at the step's final wait). Had the
    // copies been ordered after D (the starting event recorded after it: the bug this guards), t0
    // would come after D's end on either, and the host steps would wait for D. So require D's end,
    // read from its event against t0 (OffloadSpan), to lie more than t_dev / 2 after t0: an event
    // time against an independent host-clock duration, not two numbers from the same two events. On
    // a GPU also D's start before the host steps end (it ran while the host stepped; host clock
    // against the device's, both from t0). Injecting the bug (ready_ recorded after device_part in
    // optim/offload.cpp) fails it under the emulator: D ended -1.3e-6 s after t0.
    auto ops = make_cuda_backend("bf16", CudaBackendOptions{});
    Allocator alloc(*ops);
    const size_t n = 5 * 97;
    HostOffload off(alloc, n, {{0, 0, n, true}}, offload(1.0, 97));
    ASSERT_EQ(off.chunks(), 5);
    const std::vector<float> w = random_vec(n, 3, true);
    std::copy(w.begin(), w.end(), off.w());
    std::fill(off.m(), off.m() + n, 0.0f);
    std::fill(off.v(), off.v() + n, 0.0f);
    DevBuf p = upload(*ops, w, DType::bf16), g = upload(*ops, random_vec(n, 4, true), DType::bf16);
    // D: `reps` casts of a 256K-element buffer, doubled until it lasts 0.1 s alone.
    const size_t big = size_t(1) << 18;
    DevBuf src = upload(*ops, random_vec(big, 5, false), DType::f32), dst(*ops, big * 2);
    int reps = 1;
    auto device_part = [&] {
        for (int r = 0; r < reps; ++r) ops->cast(dst.ptr, DType::bf16, src.ptr, DType::f32, big);
    };
    double t_dev = seconds_of(*ops, device_part);
    while (t_dev < 0.1 && reps < (1 << 20)) {
        reps *= 2;
        t_dev = seconds_of(*ops, device_part);
    }
    ASSERT_GE(t_dev, 0.1) << reps << " casts";
    const HostAdamWStep st{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1};
    off.step(p.ptr, g.ptr, st, device_part);
    const auto& spans = off.last_spans();
    ASSERT_EQ(spans.size(), size_t(3 * off.chunks() + 1));
    ASSERT_STREQ(spans[0].phase, "device_adam");
    const OffloadSpan dev = spans[0];
    EXPECT_GT(dev.end, t_dev / 2) << "the device part (" << t_dev << " s alone) ended " << dev.end
                                  << " s after the copies' start: they waited for it";
#ifdef LLMTRAIN_REAL_GPU
    double host_end = 0;
    for (const OffloadSpan& sp : spans)
        if (std::string(sp.phase) == "host_adam") host_end = std::max(host_end, sp.end);
    EXPECT_LT(dev.start, host_end) << "the device part began after the host's last chunk step";
#endif
}

std::vector<Case> cases() {
    std::vector<Case> c;
    for (const std::string& o : emu_orders()) {  // the racecheck copy: forward and random (cuda_test_util.hpp)
        c.push_back({"fp32", o, false});
        c.push_back({"bf16", o, false});
        c.push_back({"bf16", o, true});
    }
    return c;
}
INSTANTIATE_TEST_SUITE_P(Emu, CudaOffload, testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace llmtrain::cudatest
