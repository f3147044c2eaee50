// model/cpu/gelu.hpp — GELU with the tanh approximation (Hendrycks & Gimpel 2016), scalar forms
// shared by the standalone GELU op (gelu.cpp) and the matmul epilogues (matmul.cpp).
#pragma once
#include "model/cpu/vec_math.hpp"

namespace llmtrain::cpu {

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

/// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + vtanh(kGeluK * (x + kGeluA * x * x * x)));
}

/// d gelu_tanh / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
inline float gelu_tanh_grad(float x) {
    const float t = vtanh(kGeluK * (x + kGeluA * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * kGeluA * x * x);
}

}  // namespace llmtrain::cpu
