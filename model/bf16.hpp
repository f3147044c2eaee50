// model/bf16.hpp — bf16 <-> fp32 on the host, as raw bits: the one rounding function of the host
// code (the CPU backend's casts, MpiComm's bf16 sums). bf16 is the upper half of an fp32; rounding
// is to nearest, ties to even (IEEE 754 default, the same as cuda_bf16.h's __float2bfloat16_rn).
#pragma once
#include <cstdint>
#include <cstring>

namespace llmtrain {

/// fp32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN with its sign. No branch, so
/// loops over it vectorize (the host AdamW, model/cpu/adamw_kernel.hpp).
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // half to even on the 16 dropped bits
    return static_cast<uint16_t>(nan ? ((u >> 16) | 0x0040u) : rounded);
}

/// bf16 bits -> fp32 (exact).
inline float bf16_to_f32(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

}  // namespace llmtrain
