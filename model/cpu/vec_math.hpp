// model/cpu/vec_math.hpp — exp and tanh written in plain float arithmetic so that loops over them
// vectorize (glibc's expf/tanhf only vectorize under -ffast-math) and give the same bits on every
// machine with the same compiler.
//
// exp: Cody-Waite range reduction x = k ln2 + r, |r| <= ln2/2, then the degree-6 Taylor polynomial
// of e^r (truncation error < 1.3e-7 relative, about 1 ulp) times 2^k built from the exponent bits.
#pragma once
#include <cstdint>
#include <cstring>

namespace llmtrain::cpu {

/// e^x in fp32 for any x (clamped to [-87, 88]: results below ~1.6e-38 flush towards 0, above
/// ~1.65e38 saturate); relative error below 3e-7 in range.
inline float vexp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    // Round x*log2(e) to the nearest integer with the 1.5*2^23 trick (vectorizes, unlike nearbyint).
    const float kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = (x - kf * 0.693145751953125f) - kf * 1.4286068203094172e-6f;  // ln2 = hi + lo
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(kf) + 127) << 23;  // 2^k
    float two_k;
    std::memcpy(&two_k, &bits, 4);
    return p * two_k;
}

/// tanh(x) = 1 - 2 / (e^{2x} + 1); absolute error below 2.5e-7 (relative accuracy is lost only
/// near 0, where callers such as GELU multiply it by x anyway).
inline float vtanh(float x) { return 1.0f - 2.0f / (vexp(2.0f * x) + 1.0f); }

}  // namespace llmtrain::cpu
