// tests/cuda/test_cuda_fp8.cpp — the CUDA backend's FP8 linear layers (training.fp8; docs/fp8.md),
// run under cuda_emu (its cuBLASLt's FP8 GEMMs: emu/cublaslt_fp8.cpp), against the CPU
// backend's FP8 numerics (model/cpu/matmul_fp8.cpp, itself checked against a double reference in
// tests/model/test_ops_matmul_fp8.cpp), in fp32 and bf16 and in every thread order. Both backends
// see the same values (bf16-exact in bf16 mode), so the amaxes, scales and FP8 codes agree exactly
// and only the fp32 summation order and the output's rounding differ: cuda_test_util.hpp's
// tolerances. Then the refusals: devices below compute capability 8.9, rowwise off sm_90, shapes
// cuBLASLt's FP8 GEMMs cannot take.
#include <cstdlib>

#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {
namespace {

constexpr int N = 48, C = 64, OC = 96;  // multiples of 16, as the FP8 GEMMs need

struct Fp8Case {
    Mode mode;
    Fp8Recipe recipe;
};

/// gtest prints a case by its name (not its bytes) in test names and failures.
void PrintTo(const Fp8Case& c, std::ostream* os) { *os << c.mode.precision << "/" << c.mode.order << "/" << fp8_recipe_name(c.recipe); }

class Fp8Test : public testing::TestWithParam<Fp8Case> {
protected:
    void SetUp() override {
        set_emu_order(GetParam().mode.order);
        cpu = make_cpu_backend();
        cuda = make_cuda_backend(GetParam().mode.precision);
        bf16 = cuda->act_dtype() == DType::bf16;
        tol = bf16 ? kTolBf16 : kTolF32;
    }
    void TearDown() override { reset_emu_order(); }
    std::vector<float> rnd(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) const {
        return random_vec(n, seed, bf16, lo, hi);
    }
    std::unique_ptr<Ops> cpu, cuda;
    bool bf16 = false;
    double tol = kTolF32;
};

TEST_P(Fp8Test, ForwardMatchesCpu) {
    const Fp8Recipe r = GetParam().recipe;
    const auto x = rnd(size_t(N) * C, 1, -4, 4), w = rnd(size_t(OC) * C, 2, -0.2f, 0.2f), b = rnd(OC, 3);
    for (bool bias : {false, true}) {
        std::vector<float> out[2];
        Ops* backends[2] = {cpu.get(), cuda.get()};
        for (int k = 0; k < 2; ++k) {
            Ops& o = *backends[k];
            const DType dt = o.act_dtype();
            DevBuf dx = upload(o, x, dt), dw = upload(o, w, dt), db = upload(o, b, dt);
            DevBuf y(o, size_t(N) * OC * dtype_size(dt));
            o.matmul_forward_fp8(r, y.ptr, dx.ptr, dw.ptr, bias ? db.ptr : nullptr, N, C, OC);
            out[k] = download(o, y.ptr, size_t(N) * OC, dt);
        }
        expect_close(bias ? "out with bias" : "out", out[1], out[0], tol);
    }
}

TEST_P(Fp8Test, BackwardMatchesCpu) {
    const Fp8Recipe r = GetParam().recipe;
    const auto x = rnd(size_t(N) * C, 4), w = rnd(size_t(OC) * C, 5), dy = rnd(size_t(N) * OC, 6, -0.01f, 0.01f);
    const auto dw0 = rnd(w.size(), 7, -0.1f, 0.1f), db0 = rnd(OC, 8, -0.1f, 0.1f);
    std::vector<float> res[2][3];
    Ops* backends[2] = {cpu.get(), cuda.get()};
    for (int k = 0; k < 2; ++k) {
        Ops& o = *backends[k];
        const DType dt = o.act_dtype();
        DevBuf dx(o, x.size() * dtype_size(dt)), ddy = upload(o, dy, dt), dxin = upload(o, x, dt), dwin = upload(o, w, dt);
        DevBuf dw = upload(o, dw0, dt), db = upload(o, db0, dt);
        o.matmul_backward_fp8(r, dx.ptr, dw.ptr, db.ptr, ddy.ptr, dxin.ptr, dwin.ptr, N, C, OC);
        res[k][0] = download(o, dx.ptr, x.size(), dt);
        res[k][1] = download(o, dw.ptr, w.size(), dt);
        res[k][2] = download(o, db.ptr, size_t(OC), dt);
    }
    expect_close("dinp", res[1][0], res[0][0], tol);
    expect_close("dweight", res[1][1], res[0][1], tol);
    expect_close("dbias", res[1][2], res[0][2], tol);
}

std::vector<Fp8Case> fp8_cases() {
    std::vector<Fp8Case> v;
    for (const Mode& m : all_modes())
        for (Fp8Recipe r : {Fp8Recipe::tensorwise, Fp8Recipe::rowwise}) v.push_back({m, r});
    return v;
}
INSTANTIATE_TEST_SUITE_P(Cuda, Fp8Test, testing::ValuesIn(fp8_cases()), [](const auto& info) {
    return mode_name(testing::TestParamInfo<Mode>(info.param.mode, info.index)) + "_" +
           fp8_recipe_name(info.param.recipe);
});

/// The emulated device's compute capability for one scope (emu/: CUDA_EMU_CC).
struct EmulatedCapability {
    explicit EmulatedCapability(const char* cc) { setenv("CUDA_EMU_CC", cc, 1); }
    ~EmulatedCapability() { unsetenv("CUDA_EMU_CC"); }
};

TEST(Fp8Refusals, CapabilityNamedInTheReason) {
    {
        EmulatedCapability a100("80");
        const auto ops = make_cuda_backend("bf16");
        EXPECT_NE(ops->fp8_unsupported(Fp8Recipe::tensorwise).find("8.9 or newer"), std::string::npos);
        EXPECT_NE(ops->fp8_unsupported(Fp8Recipe::tensorwise).find("this device is 8.0"), std::string::npos);
    }
    {
        EmulatedCapability ada("89");
        const auto ops = make_cuda_backend("bf16");
        EXPECT_EQ(ops->fp8_unsupported(Fp8Recipe::tensorwise), "");
        EXPECT_NE(ops->fp8_unsupported(Fp8Recipe::rowwise).find("9.0 (Hopper)"), std::string::npos);
    }
    const auto h100 = make_cuda_backend("bf16");  // the emulator's default: 9.0
    EXPECT_EQ(h100->fp8_unsupported(Fp8Recipe::rowwise), "");
}

TEST(Fp8Refusals, ShapesNotMultiplesOf16) {
    const auto ops = make_cuda_backend("bf16");
    DevBuf x(*ops, 4096), w(*ops, 4096), y(*ops, 4096);
    try {
        ops->matmul_forward_fp8(Fp8Recipe::tensorwise, y.ptr, x.ptr, w.ptr, nullptr, 24, 16, 16);
        FAIL() << "24 rows accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("multiples of 16"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace llmtrain::cudatest
