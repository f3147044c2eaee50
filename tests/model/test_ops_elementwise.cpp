// tests/model/test_ops_elementwise.cpp — the CPU backend's encoder, GELU, vexp, casts, AdamW update,
// squared norm, scale and memory against double loops, finite differences or bit-level references.
#include <cstdint>
#include <cstring>

#include "model/cpu/cpu_ops.hpp"
#include "model/cpu/vec_math.hpp"
#include "tests/model/ref_ops.hpp"
#include "tests/model/test_util.hpp"

namespace llmtrain::test {
namespace {

TEST(CpuEncoder, ForwardAndBackwardMatchDouble) {
    CpuOps ops;
    const int B = 3, T = 7, C = 40, Vp = 16, maxT = 9;
    std::vector<int> tok(B * T);
    for (int i = 0; i < B * T; ++i) tok[i] = (i * 5) % 6;  // repeated tokens: the scatter must sum
    auto wte = randu(Vp * C, 1), wpe = randu(maxT * C, 2), dout = randu(B * T * C, 3);
    std::vector<float> out(B * T * C);
    ops.encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    for (int bt = 0; bt < B * T; ++bt)
        for (int c = 0; c < C; ++c)
            EXPECT_EQ(out[bt * C + c], wte[tok[bt] * C + c] + wpe[(bt % T) * C + c]);

    auto dwte = randu(Vp * C, 4), dwpe = randu(maxT * C, 5);  // accumulated into
    Vec want_wte = to_double(dwte), want_wpe = to_double(dwpe);
    for (int bt = 0; bt < B * T; ++bt)
        for (int c = 0; c < C; ++c) {
            want_wte[tok[bt] * C + c] += dout[bt * C + c];
            want_wpe[(bt % T) * C + c] += dout[bt * C + c];
        }
    ops.encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    // fp32 sums of <= 5 terms in [-1,1].
    expect_close("dwte", dwte, want_wte, 1e-6, 1e-6);
    expect_close("dwpe", dwpe, want_wpe, 1e-6, 1e-6);
}

TEST(CpuVecMath, ExpAndTanhMatchDouble) {
    for (double x = -87.0; x <= 88.0; x += 0.0137) {
        const double want = std::exp(x);
        EXPECT_LE(std::fabs(cpu::vexp(static_cast<float>(x)) - std::exp(static_cast<double>(static_cast<float>(x)))),
                  3e-7 * want)
            << "x = " << x;
        const float t = static_cast<float>(x / 8.0);
        EXPECT_LE(std::fabs(cpu::vtanh(t) - std::tanh(static_cast<double>(t))), 2.5e-7) << "x = " << t;
    }
}

TEST(CpuGelu, ForwardMatchesDoubleBackwardMatchesFiniteDifferences) {
    CpuOps ops;
    auto x = randu(1000, 6, -6.0f, 6.0f), dy = randu(1000, 7);
    std::vector<float> y(1000), dx(1000);
    ops.gelu_forward(y.data(), x.data(), x.size());
    Vec want(1000);
    for (int i = 0; i < 1000; ++i) want[i] = ref_gelu(x[i]);
    expect_close("gelu", y, want, 1e-6, 1e-6);
    ops.gelu_backward(dx.data(), x.data(), dy.data(), x.size());
    Vec g(1000);
    for (int i = 0; i < 1000; ++i) {
        const double h = 1e-6;
        g[i] = dy[i] * (ref_gelu(x[i] + h) - ref_gelu(x[i] - h)) / (2 * h);
    }
    expect_close("dgelu", dx, g, 1e-5, 2e-6);
    ops.gelu_backward(dy.data(), x.data(), dy.data(), x.size());  // in place: dinp aliases dout
    EXPECT_EQ(dy, dx);
}

/// bf16 by exact reasoning in double: the two neighbouring bf16 values, nearest wins, ties to even.
uint16_t ref_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
    auto val = [](uint16_t h) {
        uint32_t v = static_cast<uint32_t>(h) << 16;
        float r;
        std::memcpy(&r, &v, 4);
        return static_cast<double>(r);
    };
    const double dl = std::fabs(f - val(lo)), dh = std::fabs(val(hi) - f);
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

TEST(CpuCast, Bf16RoundsToNearestEvenAndBack) {
    CpuOps ops;
    std::vector<float> x = randu(5000, 8, -1e3f, 1e3f);
    x.push_back(1.0f + 1.0f / 256.0f);  // exact tie between 1 and 1+2^-7: rounds to even (1)
    x.push_back(1.0f + 3.0f / 256.0f);  // tie: rounds to even (1 + 2^-6)
    x.push_back(0.0f);
    x.push_back(-0.0f);
    std::vector<uint16_t> h(x.size());
    ops.cast(h.data(), DType::bf16, x.data(), DType::f32, x.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(h[i], ref_bf16(x[i])) << "x = " << x[i];
    std::vector<float> back(x.size());
    ops.cast(back.data(), DType::f32, h.data(), DType::bf16, x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &back[i], 4);
        EXPECT_EQ(u, static_cast<uint32_t>(h[i]) << 16);  // widening is exact
    }
}

TEST(CpuAdamW, UpdateMatchesDoubleLoop) {
    CpuOps ops;
    const size_t n = 1003;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    for (bool use_master : {false, true}) {
        auto p = randu(n, 9), g = randu(n, 10), m = randu(n, 11, -0.1f, 0.1f), v = randu(n, 12, 0.0f, 0.1f);
        std::vector<float> master = p;
        Vec wp = to_double(p), wm = to_double(m), wv = to_double(v);
        const int t = 3;
        for (size_t i = 0; i < n; ++i) {
            const double gi = static_cast<double>(g[i]) * gs;
            wm[i] = b1 * wm[i] + (1 - b1) * gi;
            wv[i] = b2 * wv[i] + (1 - b2) * gi * gi;
            const double mh = wm[i] / (1 - std::pow(b1, t)), vh = wv[i] / (1 - std::pow(b2, t));
            wp[i] = wp[i] - lr * wd * wp[i] - lr * mh / (std::sqrt(vh) + eps);
        }
        ops.adamw_update(p.data(), use_master ? master.data() : nullptr, g.data(), m.data(), v.data(), n, lr, b1,
                         b2, eps, wd, gs, t, 0);
        // fp32 state update: a few ulps of O(1) values.
        expect_close("m", m, wm, 1e-6, 1e-7);
        expect_close("v", v, wv, 1e-6, 1e-8);
        expect_close("params", p, wp, 1e-6, 1e-6);
        if (use_master) {
            EXPECT_EQ(master, p);
        }
    }
}

TEST(CpuNorm, SquaredNormAndScaleMatchDouble) {
    CpuOps ops;
    auto x = randu(100003, 13);
    double want = 0;
    for (float f : x) want += static_cast<double>(f) * f;
    float out = 5.0f;
    ops.norm_squared(&out, x.data(), x.size(), false);
    EXPECT_NEAR(out, want, 1e-6 * want);  // double accumulation, one fp32 rounding
    ops.norm_squared(&out, x.data(), x.size(), true);
    EXPECT_NEAR(out, 2 * want, 1e-6 * want);
    auto y = x;
    ops.scale(y.data(), 0.25f, y.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i] * 0.25f);
}

TEST(CpuMemory, AlignedAllocCopiesAndMemInfo) {
    CpuOps ops;
    void* p = ops.malloc(1000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
    std::vector<char> src(1000, 'x'), dst(1000, 0);
    ops.memcpy_h2d(p, src.data(), 1000);
    ops.memcpy_d2h(dst.data(), p, 1000);
    EXPECT_EQ(src, dst);
    ops.memset(p, 0, 1000);
    ops.memcpy_d2h(dst.data(), p, 1000);
    EXPECT_EQ(dst, std::vector<char>(1000, 0));
    ops.free(p);
    size_t free_b = 0, total_b = 0;
    ops.mem_info(&free_b, &total_b);
    EXPECT_GT(total_b, 0u);
    EXPECT_LE(free_b, total_b);
}

}  // namespace
}  // namespace llmtrain::test
