// model/adamw_math.hpp — AdamW's per-element arithmetic and the stochastic rounding of its params,
// written once for every place that steps weights: the CPU backend's loop (model/cpu/adamw_kernel.hpp),
// the CUDA kernel (model/cuda/adamw.cu) and the host-offloaded optimizer (optim/host_adamw.hpp). The
// three give the same bits, so an offloaded step equals an on-device one (docs/distributed.md "Optimizer
// offload"). Their sources are compiled without floating-point contraction (-ffp-contract=off,
// nvcc -fmad=false): an FMA would round once where this code rounds twice.
//
// AdamW (Loshchilov & Hutter 2019) in PyTorch's order, per element (fp32 arithmetic):
//   g = grad·grad_scale; m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²;
//   w = w·(1 − lr·wd) − (lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps),  bc_k = 1 − b_k^t.
// Stochastic rounding to bf16 (Gupta et al. 2015): add 16 random bits below the bf16 mantissa, then
// truncate; the random bits are a hash of (t, the element's index in the flat parameter buffer), so
// they depend neither on thread order nor on how the update is split into calls, shards or chunks.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LLMTRAIN_HD __host__ __device__
#else
#define LLMTRAIN_HD
#endif

namespace llmtrain {

/// Step t's stochastic-rounding seed: a golden-ratio multiple, so distinct steps get distinct seeds.
inline uint32_t rounding_seed(int t) { return static_cast<uint32_t>(t) * 0x9E3779B1u; }

/// One AdamW step's constants, derived on the host (in double where PyTorch does) by adamw_coeffs().
struct AdamWCoeffs {
    float b1, b2, one_minus_b1, one_minus_b2, eps, grad_scale;
    float step;      ///< lr / bc1
    float decay;     ///< 1 − lr·weight_decay
    float bc2_sqrt;  ///< sqrt(1 − b2^t)
    uint32_t seed;   ///< the step's stochastic-rounding seed (hashed again per element)
};

/// The constants of step t >= 1 (the caller checks t).
inline AdamWCoeffs adamw_coeffs(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                                int t) {
    AdamWCoeffs c;
    c.b1 = beta1;
    c.b2 = beta2;
    c.one_minus_b1 = 1.0f - beta1;
    c.one_minus_b2 = 1.0f - beta2;
    c.eps = eps;
    c.grad_scale = grad_scale;
    c.step = lr / static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t));
    c.decay = 1.0f - lr * weight_decay;
    c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), t)));
    c.seed = rounding_seed(t);
    return c;
}

/// Updates m and v in place from gradient g and returns the new weight from w (see the header).
LLMTRAIN_HD inline float adamw_element(float w, float& m, float& v, float g, const AdamWCoeffs& c) {
    const float gi = g * c.grad_scale;
    const float mi = c.b1 * m + c.one_minus_b1 * gi;
    const float vi = c.b2 * v + c.one_minus_b2 * gi * gi;
    m = mi;
    v = vi;
    return w * c.decay - c.step * mi / (sqrtf(vi) / c.bc2_sqrt + c.eps);
}

/// A 32-bit integer hash (the "lowbias32" finalizer).
LLMTRAIN_HD inline uint32_t hash_u32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/// The 32 random bits of element `index` (of the flat parameter buffer) at the step with `seed`.
/// Indices past 2^32 wrap (their bits repeat those 2^32 elements earlier).
LLMTRAIN_HD inline uint32_t rounding_bits(uint32_t seed, size_t index) {
    return hash_u32(static_cast<uint32_t>(index) ^ hash_u32(seed));
}

/// fp32 -> bf16 bits, rounded stochastically with the low 16 bits of `random` (up with probability
/// equal to the distance from the value below). Infinities stay infinite; NaN stays a quiet NaN.
LLMTRAIN_HD inline uint16_t bf16_bits_stochastic(float f, uint32_t random) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t up = (u + (random & 0xffffu)) >> 16;
    return static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : up);
}

}  // namespace llmtrain
