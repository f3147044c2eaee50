// tests/cuda/flash_test_util.hpp — what the tests of the FlashAttention-2 path (model.attention =
// "native" in bf16; test_flash_attention.cpp, test_flash_variants.cpp) share: the shapes they run
// (each named by the blocks it exercises), the native bf16 backend, one attention forward +
// backward downloaded as fp32, seeded bf16-exact inputs, keys and values poisoned with NaN from a
// position on, the name of the device's backward tile, the fraction of a derived bound an output used, a bitwise comparison, and (emulated
// only) the device's opt-in shared memory per block set for a scope.
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/cuda/flash_attention.hpp"
#include "tests/cuda/cuda_test_util.hpp"

namespace llmtrain::cudatest {

struct Shape {
    int B, T, C, NH;
};
constexpr Shape kHs64{2, 150, 128, 2};      // forward blocks of 128 + 22 rows, key blocks 64, 64, 22
constexpr Shape kHs128{1, 100, 256, 2};     // one partial forward block; key blocks 64 + 36
constexpr Shape kHs64T100{2, 100, 128, 2};  // one partial forward block; key blocks 64 + 36
constexpr Shape kHs64T129{1, 129, 128, 2};  // a forward block of one row; a key block of one key
constexpr Shape kHs64T300{1, 300, 128, 2};  // 3 forward blocks, 5 key blocks (causal skipping)
constexpr Shape kHs128T150{2, 150, 256, 2};  // forward blocks of 128 + 22 rows; backward steps of 64 or 32
constexpr Shape kHs128T129{1, 129, 256, 2};  // a forward block of one row
constexpr Shape kHs128T300{1, 300, 256, 2};  // 3 forward blocks, 5 key blocks (causal skipping)

inline std::unique_ptr<Ops> make_native_bf16() {
    CudaBackendOptions opt;
    opt.attention = Attention::native;
    return make_cuda_backend("bf16", opt);
}

#ifndef LLMTRAIN_REAL_GPU
constexpr size_t k99KiB = 101376;   // sm_86, sm_89, sm_120: the small backward tiles
constexpr size_t k227KiB = 232448;  // sm_90 (the emulator's default): the large ones

/// Sets the emulated device's opt-in shared memory per block (CUDA_EMU_SMEM_OPTIN, read at each
/// call) for a scope, then restores the former setting (so a run with it set stays on its device).
class ScopedSmemOptin {
public:
    explicit ScopedSmemOptin(size_t bytes) {
        if (const char* v = std::getenv("CUDA_EMU_SMEM_OPTIN")) saved_ = v, had_ = true;
        setenv("CUDA_EMU_SMEM_OPTIN", std::to_string(bytes).c_str(), 1);
    }
    ~ScopedSmemOptin() {
        if (had_) setenv("CUDA_EMU_SMEM_OPTIN", saved_.c_str(), 1);
        else unsetenv("CUDA_EMU_SMEM_OPTIN");
    }
    ScopedSmemOptin(const ScopedSmemOptin&) = delete;
    ScopedSmemOptin& operator=(const ScopedSmemOptin&) = delete;

private:
    std::string saved_;
    bool had_ = false;
};
#endif

/// "128 keys x 64 rows": the backward tile this device runs at head size hs
/// (flash_backward_tile_on_device), for the cases' traces and printed lines.
inline std::string tile_name(int hs) {
    const cuda::FlashBackwardTile t = cuda::flash_backward_tile_on_device(hs);
    return std::to_string(t.keys) + " keys x " + std::to_string(t.rows) + " rows";
}

/// out, lse and dqkv (as fp32) of one backend's attention forward + backward on qkv and dout.
inline std::array<std::vector<float>, 3> run_attention(Ops& o, const std::vector<float>& qkv,
                                                       const std::vector<float>& dout, const Shape& s) {
    return attention_fwd_bwd(o, qkv, dout, s.B, s.T, s.C, s.NH);
}

/// Random qkv in [-2, 2) and dout in [-1, 1), bf16-exact.
inline std::pair<std::vector<float>, std::vector<float>> inputs(const Shape& s, uint64_t seed) {
    const size_t N = static_cast<size_t>(s.B) * s.T;
    return {random_vec(N * 3 * s.C, seed, true, -2, 2), random_vec(N * s.C, seed + 1, true)};
}

/// qkv (B, T, 3C) with every key and value from position `from` on set to NaN (queries kept).
inline std::vector<float> nan_kv_from(std::vector<float> qkv, const Shape& s, int from) {
    const size_t W = 3 * static_cast<size_t>(s.C);
    for (int b = 0; b < s.B; b++)
        for (int t = from; t < s.T; t++)
            for (size_t c = s.C; c < W; c++) qkv[(static_cast<size_t>(b) * s.T + t) * W + c] = NAN;
    return qkv;
}

/// The worst |got - want| / bound over the elements (printed beside each case).
inline double bound_fraction(const std::vector<float>& got, const std::vector<float>& want,
                             const std::vector<double>& bound) {
    double worst = 0;
    for (size_t i = 0; i < got.size() && i < want.size() && i < bound.size(); i++)
        worst = std::fmax(worst, std::fabs(double(got[i]) - want[i]) / (bound[i] + 1e-30));
    return worst;
}

/// True when a and b hold the same bits (NaN included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace llmtrain::cudatest
