// model/fp8.hpp — fp32 <-> FP8 (e4m3 and e5m2) as raw bits, on the host and in CUDA kernels (the
// functions are __host__ __device__ under nvcc and plain inline functions elsewhere, the emulator
// included), the amax-based scales of current ("just-in-time") scaling, and training.fp8's recipes.
// The FP8 linear layers built on them: docs/fp8.md.
//
// Source: OCP 8-bit Floating Point Specification (OFP8), revision 1.0, 2023. A code is
// S.EEEE.MMM (e4m3) or S.EEEEE.MM (e5m2): sign bit, biased exponent field e, mantissa field m.
//
//   format  bias  normal (e > 0)             subnormal (e == 0)   max normal          min normal  min subnormal
//   e4m3     7    (1 + m/8) * 2^(e-7)        (m/8) * 2^-6         S.1111.110 = 448    2^-6        2^-9
//   e5m2    15    (1 + m/4) * 2^(e-15)       (m/4) * 2^-14        S.11110.11 = 57344  2^-14       2^-16
//
// Special codes. e4m3 has no infinities: S.1111.111 (0x7F, 0xFF) is NaN and every other code with
// e == 15 is a finite normal (hence the max 448, not 240). e5m2 is IEEE-754-like: S.11111.00 is ±Inf,
// S.11111.{01,10,11} are NaN. Both have ±0 (0x00, 0x80).
//
// Conversion from fp32 rounds to nearest, ties to even (ties go to the code with an even mantissa
// field; this includes the carry from the largest subnormal to the smallest normal and from one
// binade into the next). Subnormal results are rounded the same way; values at most half the
// smallest subnormal become ±0 with the sign kept (a tie with 0 goes to 0, whose mantissa is even).
// Two overflow behaviours, as the specification's conversion and NVIDIA's __nv_cvt_float_to_fp8
// name them:
//   Fp8Saturation::kSatFinite — anything whose rounding exceeds max normal, ±Inf included, becomes
//       ±max normal (cuBLASLt's FP8 outputs and __NV_SATFINITE do this). The default.
//   Fp8Saturation::kNoSat — such values become ±Inf in e5m2 and NaN in e4m3 (__NV_NOSAT).
// NaN in gives NaN out in both modes: the canonical 0x7F (S=0: e4m3 0.1111.111, e5m2 0.11111.11),
// whatever the input's sign and payload, as NVIDIA's conversion (cuda_fp8.hpp, PTX cvt) gives it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__CUDACC__)
#define LLMTRAIN_FP8_HD __host__ __device__
#else
#define LLMTRAIN_FP8_HD
#endif

namespace llmtrain {

/// The two OFP8 formats.
enum class Fp8Format : uint8_t { kE4M3, kE5M2 };
/// What fp32 values beyond the largest finite FP8 value become (see the file comment).
enum class Fp8Saturation : uint8_t { kSatFinite, kNoSat };

/// Largest finite value of each format: e4m3 448, e5m2 57344.
inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8E5M2Max = 57344.0f;

namespace fp8_detail {

LLMTRAIN_FP8_HD inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
#endif
}

LLMTRAIN_FP8_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
}

/// Rounds |x| (fp32 bits `a`, not NaN, at most max normal's bits) to an FP8 magnitude code with
/// `mbits` mantissa bits and exponent bias `bias`: round to nearest, ties to even. The fp32
/// significand (implicit bit at position 23) is shifted right by 23 - mbits, plus 1 - e for each
/// binade below the smallest normal (e <= 0: a subnormal result); adding (e - 1) << mbits for a
/// normal result lets the implicit bit carry into the exponent field, so a rounding carry moves to
/// the next binade (or from subnormal to normal) on its own.
LLMTRAIN_FP8_HD inline uint32_t round_magnitude(uint32_t a, int mbits, int bias) {
    const int e32 = static_cast<int>(a >> 23);
    if (e32 == 0) return 0;  // fp32 zero or subnormal: < 2^-126, far below half of any FP8 subnormal
    const int e = e32 - 127 + bias;  // the FP8 biased exponent of a normal result
    const uint32_t sig = (a & 0x7fffffu) | 0x800000u;
    int shift = 23 - mbits + (e < 1 ? 1 - e : 0);
    if (shift > 25) shift = 25;  // sig < 2^24 <= half: the result is 0, no round-up
    uint32_t code = (e > 1 ? static_cast<uint32_t>(e - 1) << mbits : 0u) + (sig >> shift);
    const uint32_t rem = sig & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (code & 1u))) ++code;
    return code;
}

}  // namespace fp8_detail

/// fp32 -> e4m3 bits (OFP8 rules, see the file comment): round to nearest even; beyond 448 (±Inf
/// included) ±448 under kSatFinite, NaN (±0x7F) under kNoSat; NaN -> 0x7F.
LLMTRAIN_FP8_HD inline uint8_t f32_to_e4m3(float x, Fp8Saturation sat = Fp8Saturation::kSatFinite) {
    const uint32_t u = fp8_detail::float_bits(x);
    const uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7fu;
    const uint32_t max_bits = 0x43e00000u;  // 448.0f
    if (a > max_bits && sat == Fp8Saturation::kSatFinite) a = max_bits;
    if (a >= 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // Inf, kNoSat: no Inf in e4m3
    const uint32_t code = fp8_detail::round_magnitude(a, 3, 7);
    return static_cast<uint8_t>(sign | (code > 0x7eu ? 0x7fu : code));  // past 448 under kNoSat: NaN
}

/// fp32 -> e5m2 bits (OFP8 rules, see the file comment): round to nearest even; beyond 57344 (±Inf
/// included) ±57344 under kSatFinite, ±Inf under kNoSat; NaN -> 0x7F.
LLMTRAIN_FP8_HD inline uint8_t f32_to_e5m2(float x, Fp8Saturation sat = Fp8Saturation::kSatFinite) {
    const uint32_t u = fp8_detail::float_bits(x);
    const uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7fu;
    const uint32_t max_bits = 0x47600000u;  // 57344.0f
    if (a > max_bits && sat == Fp8Saturation::kSatFinite) a = max_bits;
    if (a >= 0x7f800000u) return static_cast<uint8_t>(sign | 0x7cu);
    const uint32_t code = fp8_detail::round_magnitude(a, 2, 15);
    return static_cast<uint8_t>(sign | (code > 0x7bu ? 0x7cu : code));  // past 57344 under kNoSat: Inf
}

/// e4m3 bits -> fp32 (exact: every e4m3 value is an fp32). S.1111.111 -> NaN with the sign.
LLMTRAIN_FP8_HD inline float e4m3_to_f32(uint8_t c) {
    const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
    const uint32_t e = (c >> 3) & 0xfu, m = c & 0x7u;
    if (e == 0xfu && m == 0x7u) return fp8_detail::bits_float(sign | 0x7fc00000u);
    if (e == 0) {  // subnormal: m * 2^-9, exact in fp32
        const float mag = static_cast<float>(m) * (1.0f / 512.0f);
        return sign ? -mag : mag;
    }
    return fp8_detail::bits_float(sign | ((e - 7u + 127u) << 23) | (m << 20));
}

/// e5m2 bits -> fp32 (exact). S.11111.00 -> ±Inf, S.11111.{01,10,11} -> NaN with the sign.
LLMTRAIN_FP8_HD inline float e5m2_to_f32(uint8_t c) {
    const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
    const uint32_t e = (c >> 2) & 0x1fu, m = c & 0x3u;
    if (e == 0x1fu) return fp8_detail::bits_float(sign | (m == 0 ? 0x7f800000u : 0x7fc00000u));
    if (e == 0) {  // subnormal: m * 2^-16, exact in fp32
        const float mag = static_cast<float>(m) * (1.0f / 65536.0f);
        return sign ? -mag : mag;
    }
    return fp8_detail::bits_float(sign | ((e - 15u + 127u) << 23) | (m << 21));
}

/// Either format by a runtime tag (the same functions as above).
LLMTRAIN_FP8_HD inline uint8_t f32_to_fp8(float x, Fp8Format f, Fp8Saturation sat = Fp8Saturation::kSatFinite) {
    return f == Fp8Format::kE4M3 ? f32_to_e4m3(x, sat) : f32_to_e5m2(x, sat);
}
LLMTRAIN_FP8_HD inline float fp8_to_f32(uint8_t c, Fp8Format f) {
    return f == Fp8Format::kE4M3 ? e4m3_to_f32(c) : e5m2_to_f32(c);
}
/// Largest finite value of format `f` (448 or 57344).
LLMTRAIN_FP8_HD inline float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? kFp8E4M3Max : kFp8E5M2Max; }

// ---- current scaling: scale = fp8_max / amax, the tensor stored as fp8(x * scale) ----
// A GEMM on the stored values gives the product times scale_a * scale_b, so cuBLASLt's A/B scale
// pointers (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, ...) take the inverses 1 / scale.

/// The scale that maps `amax` (the largest |x| of a tensor or row, >= 0) onto the format's max:
/// fp8_max(f) / amax. amax 0 (an all-zero tensor), NaN or Inf give 1 (nothing to scale; a NaN or
/// Inf stays visible in the converted values); a quotient beyond FLT_MAX (amax below ~1e-36) gives
/// 2^127 (a power of two near FLT_MAX), so the scale stays finite.
LLMTRAIN_FP8_HD inline float fp8_scale_from_amax(float amax, Fp8Format f) {
    if (!(amax > 0.0f) || !(amax <= 3.4028234663852886e38f)) return 1.0f;  // 0, NaN, Inf
    const float s = fp8_max(f) / amax;
    return s <= 1.7014118346046923e38f ? s : 1.7014118346046923e38f;  // 2^127
}

/// Host: max |x| over x[0..n); NaN if any element is NaN (amax 0 for n == 0).
inline float fp8_amax(const float* x, size_t n) {
    float amax = 0.0f;
    for (size_t i = 0; i < n; ++i) {
        const float a = x[i] < 0 ? -x[i] : x[i];
        if (a != a) return a;
        if (a > amax) amax = a;
    }
    return amax;
}

/// Host: the per-tensor scale of x[0..n) for format `f` (fp8_scale_from_amax of its amax).
inline float fp8_tensor_scale(const float* x, size_t n, Fp8Format f) {
    return fp8_scale_from_amax(fp8_amax(x, n), f);
}

/// Host: per-row scales of a row-major [rows, cols] matrix x into scales[0..rows).
inline void fp8_row_scales(const float* x, size_t rows, size_t cols, Fp8Format f, float* scales) {
    for (size_t r = 0; r < rows; ++r) scales[r] = fp8_scale_from_amax(fp8_amax(x + r * cols, cols), f);
}

// ---- training.fp8: which operands share a scale (docs/fp8.md "Recipes") ----

/// How a linear layer's GEMM operands are scaled when FP8 is on. Weights and activations are e4m3,
/// output gradients e5m2; every scale is current (from the operand's amax at that call).
enum class Fp8Recipe : uint8_t {
    off,         ///< no FP8: the compute dtype throughout
    tensorwise,  ///< one scale per operand (torchao's "tensorwise", TransformerEngine's current scaling)
    rowwise,     ///< one scale per row of each operand along the product's outer dimension ("rowwise")
};

/// training.fp8's spelling of `r`: "off", "tensorwise", "rowwise".
inline const char* fp8_recipe_name(Fp8Recipe r) {
    return r == Fp8Recipe::tensorwise ? "tensorwise" : r == Fp8Recipe::rowwise ? "rowwise" : "off";
}

/// "off" | "tensorwise" | "rowwise" -> Fp8Recipe. Errors: std::invalid_argument naming training.fp8.
inline Fp8Recipe parse_fp8_recipe(const std::string& s) {
    if (s == "off") return Fp8Recipe::off;
    if (s == "tensorwise") return Fp8Recipe::tensorwise;
    if (s == "rowwise") return Fp8Recipe::rowwise;
    throw std::invalid_argument("training.fp8: expected \"off\", \"tensorwise\" or \"rowwise\", got \"" + s + "\"");
}

}  // namespace llmtrain
