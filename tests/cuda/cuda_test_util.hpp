// tests/cuda/cuda_test_util.hpp — helpers for comparing the emulated CUDA backend with the CPU one:
// the two backends, bf16 rounding done independently of the CUDA headers, device upload/download in
// either dtype, the emulator's thread orders, and the tolerance check used by every test.
//
// Tolerance (stated once for all tests): element i passes when
//     |cuda_i - cpu_i| <= tol * (|cpu_i| + rms(cpu))
// i.e. relative to the element, with the tensor's RMS as the floor for elements near zero.
// fp32 mode: tol = 1e-5 (reordering of fp32 sums only). bf16 mode: tol = 2^-7 for one op whose
// inputs are already bf16 (one rounding of the output, at most 2^-8 relative: bf16 keeps 8 significant
// bits, so its unit roundoff is 2^-8; plus rounded intermediates).
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/bf16.hpp"
#include "model/cpu/cpu_ops.hpp"
#include "model/cuda/cuda_backend.hpp"
#include "model/ops.hpp"
#ifndef LLMTRAIN_REAL_GPU
#include "emu/emu.hpp"
#endif

namespace llmtrain::cudatest {

constexpr double kTolF32 = 1e-5;
constexpr double kTolBf16 = 1.0 / 128;  // 2^-7

/// fp32 -> bf16 bits (round to nearest even) and back: the host's one rounding (model/bf16.hpp).
inline uint16_t bf16_bits(float x) { return llmtrain::f32_to_bf16(x); }
inline float bf16_to_float(uint16_t b) { return llmtrain::bf16_to_f32(b); }
inline float bf16_round(float x) { return bf16_to_float(bf16_bits(x)); }

/// n uniform values in [lo, hi) from `seed`, rounded to bf16 when `bf16` (so both backends see
/// exactly the same inputs).
inline std::vector<float> random_vec(size_t n, uint64_t seed, bool bf16, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = bf16 ? bf16_round(d(rng)) : d(rng);
    return v;
}

/// A device buffer of one backend that frees itself.
struct DevBuf {
    Ops* ops = nullptr;
    void* ptr = nullptr;
    DevBuf() = default;
    DevBuf(Ops& o, size_t bytes) : ops(&o), ptr(o.malloc(bytes)) {}
    DevBuf(DevBuf&& b) noexcept : ops(b.ops), ptr(b.ptr) { b.ptr = nullptr; }
    DevBuf& operator=(DevBuf&& b) noexcept {
        std::swap(ops, b.ops);
        std::swap(ptr, b.ptr);
        return *this;
    }
    ~DevBuf() {
        if (ptr != nullptr) ops->free(ptr);
    }
    template <class X = void>
    X* as() const {
        return static_cast<X*>(ptr);
    }
};

/// Copies host fp32 values to a new device buffer in dtype t (synchronizes).
inline DevBuf upload(Ops& ops, const std::vector<float>& h, DType t) {
    DevBuf d(ops, h.size() * dtype_size(t));
    if (t == DType::f32) {
        ops.memcpy_h2d(d.ptr, h.data(), h.size() * 4);
        ops.synchronize();
    } else {
        std::vector<uint16_t> b(h.size());
        for (size_t i = 0; i < h.size(); i++) b[i] = bf16_bits(h[i]);
        ops.memcpy_h2d(d.ptr, b.data(), b.size() * 2);
        ops.synchronize();
    }
    return d;
}
inline DevBuf upload_ints(Ops& ops, const std::vector<int>& h) {
    DevBuf d(ops, h.size() * 4);
    ops.memcpy_h2d(d.ptr, h.data(), h.size() * 4);
    ops.synchronize();
    return d;
}
/// n values of dtype t from device memory as fp32 (synchronizes).
inline std::vector<float> download(Ops& ops, const void* p, size_t n, DType t) {
    std::vector<float> h(n);
    if (t == DType::f32) {
        ops.memcpy_d2h(h.data(), p, n * 4);
        ops.synchronize();
    } else {
        std::vector<uint16_t> b(n);
        ops.memcpy_d2h(b.data(), p, n * 2);
        ops.synchronize();
        for (size_t i = 0; i < n; i++) h[i] = bf16_to_float(b[i]);
    }
    return h;
}

/// out, lse and dqkv (as fp32) of one multi-head attention forward + backward on `o`: qkv (B,T,3C)
/// and dout (B,T,C) rounded to its activation dtype; out and dqkv NaN-filled first (0xff bytes),
/// so an element the backend leaves unwritten shows.
inline std::array<std::vector<float>, 3> attention_fwd_bwd(Ops& o, const std::vector<float>& qkv,
                                                           const std::vector<float>& dout, int B, int T, int C,
                                                           int NH) {
    const DType dt = o.act_dtype();
    const size_t es = dtype_size(dt), N = static_cast<size_t>(B) * T, stats = N * NH;
    DevBuf dq = upload(o, qkv, dt), dgo = upload(o, dout, dt);
    DevBuf out(o, N * C * es), lse(o, stats * 4), dqkv(o, qkv.size() * es);
    o.memset(out.ptr, 0xff, N * C * es);
    o.memset(dqkv.ptr, 0xff, qkv.size() * es);
    o.attention_forward(out.ptr, lse.as<float>(), dq.ptr, B, T, C, NH);
    o.attention_backward(dqkv.ptr, dgo.ptr, dq.ptr, out.ptr, lse.as<float>(), B, T, C, NH);
    return {download(o, out.ptr, N * C, dt), download(o, lse.ptr, stats, DType::f32),
            download(o, dqkv.ptr, qkv.size(), dt)};
}

/// Expects |got_i - want_i| <= tol (|want_i| + rms(want)) for all i; names the worst element.
inline void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                         double tol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double ss = 0.0;
    for (float w : want) ss += static_cast<double>(w) * w;
    const double rms = want.empty() ? 0.0 : std::sqrt(ss / want.size());
    double worst = 0.0;
    size_t wi = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double r = std::fabs(static_cast<double>(got[i]) - want[i]) / (std::fabs(want[i]) + rms + 1e-30);
        if (std::isnan(r)) r = INFINITY;
        if (r > worst) {
            worst = r;
            wi = i;
        }
    }
    EXPECT_LE(worst, tol) << what << ": worst element " << wi << " cuda " << got[wi] << " cpu " << want[wi]
                          << " (rms " << rms << ", tolerance " << tol << " relative)";
}

/// A test parameter: precision and the emulator's thread (and block) order.
struct Mode {
    std::string precision;  ///< "fp32" or "bf16"
    std::string order;      ///< "forward", "reverse" or "random"
};
inline std::string mode_name(const testing::TestParamInfo<Mode>& info) {
    return info.param.precision + "_" + info.param.order;
}
/// How gtest (and so ctest's discovered test names) prints a Mode: "fp32 forward", not its raw bytes.
inline void PrintTo(const Mode& m, std::ostream* os) { *os << m.precision << " " << m.order; }
/// The emulator orders a parameterized test runs in: "forward", "reverse" and "random". The racecheck
/// copies (compiled with LLMTRAIN_RACECHECK_COPY, tests/cuda/CMakeLists.txt) leave out "reverse":
/// what they add to the plain copies, which run all three, is the hazard check, and "reverse"
/// changes nothing it sees. Its shared-memory check faults whichever warp or lane ran first
/// (docs/cuda_emu.md "Hazards between warps, and the racecheck": a write is compared with every
/// lane that read the word, not the last reader only; test_flash_racecheck's planted hazards, between
/// warps and between lanes of one warp, fault in every thread order), and its global check depends
/// on the block order only, which is sequential in both "forward" and "reverse" (only "random"
/// shuffles blocks: emu::BlockOrder).
inline std::vector<std::string> emu_orders() {
#ifdef LLMTRAIN_RACECHECK_COPY
    return {"forward", "random"};
#else
    return {"forward", "reverse", "random"};
#endif
}
inline std::vector<Mode> all_modes() {
    std::vector<Mode> m;
    for (const char* p : {"fp32", "bf16"})
        for (const std::string& o : emu_orders()) m.push_back({p, o});
    return m;
}

#ifdef LLMTRAIN_REAL_GPU
// The same tests linked with the nvcc backend (test_cuda_gpu): a real GPU schedules as it likes.
inline void set_emu_order(const std::string&) {}
inline void reset_emu_order() {}
#else
/// Sets the emulator's order for a mode: threads forward, reversed, or shuffled (seeded), and
/// blocks shuffled in the random mode.
inline void set_emu_order(const std::string& order) {
    emu::Order o;
    if (order == "reverse") o.thread = emu::ThreadOrder::reverse;
    if (order == "random") {
        o.thread = emu::ThreadOrder::random;
        o.thread_seed = 12345;
        o.block = emu::BlockOrder::random;
        o.block_seed = 678;
    }
    emu::set_order(o);
}
inline void reset_emu_order() { emu::set_order(emu::Order{}); }
#endif

/// Fixture: a CPU backend, an emulated CUDA backend in the mode's precision, the order applied.
class CudaVsCpu : public testing::TestWithParam<Mode> {
protected:
    void SetUp() override {
        set_emu_order(GetParam().order);
        cpu = make_cpu_backend();
        cuda = make_cuda_backend(GetParam().precision);
        t = cuda->act_dtype();
        bf16 = t == DType::bf16;
        tol = bf16 ? kTolBf16 : kTolF32;
    }
    void TearDown() override { reset_emu_order(); }
    /// Random inputs for both backends (bf16-exact in bf16 mode).
    std::vector<float> rnd(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) const {
        return random_vec(n, seed, bf16, lo, hi);
    }
    std::unique_ptr<Ops> cpu, cuda;
    DType t = DType::f32;
    bool bf16 = false;
    double tol = kTolF32;
};

}  // namespace llmtrain::cudatest
