// tests/model/test_fp8.cpp — model/fp8.hpp against the OFP8 specification (v1.0, 2023): every code
// decoded from its sign/exponent/mantissa fields in double, round trips, ties to even at every
// midpoint, saturation, subnormals and underflow, the specification's table values, and a sweep of
// fp32 values against a brute-force nearest-code search (an encoder written from the spec's words,
// not from fp8.hpp's bit arithmetic). Exact comparisons: conversion is bit-defined.
// (NVIDIA's own host conversion, __nv_cvt_float_to_fp8, is compared in tests/cuda/test_fp8_emu.cu.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "model/fp8.hpp"

namespace llmtrain {
namespace {

struct Spec {
    Fp8Format f;
    int ebits, mbits, bias;
    double max, min_normal, min_subnormal;
    const char* name;
};
const Spec kE4M3{Fp8Format::kE4M3, 4, 3, 7, 448.0, std::ldexp(1.0, -6), std::ldexp(1.0, -9), "e4m3"};
const Spec kE5M2{Fp8Format::kE5M2, 5, 2, 15, 57344.0, std::ldexp(1.0, -14), std::ldexp(1.0, -16), "e5m2"};
const Spec kSpecs[] = {kE4M3, kE5M2};

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// The specification's value of code c, from its fields: e4m3's S.1111.111 is NaN (no Inf);
/// e5m2's all-ones exponent is Inf (m == 0) or NaN; e == 0 is subnormal m/2^M * 2^(1-bias).
double spec_value(const Spec& s, int c) {
    const int sign = c >> 7, e = (c >> s.mbits) & ((1 << s.ebits) - 1), m = c & ((1 << s.mbits) - 1);
    const int emax_field = (1 << s.ebits) - 1;
    double v;
    if (s.f == Fp8Format::kE4M3 && e == emax_field && m == (1 << s.mbits) - 1) return kNaN;
    if (s.f == Fp8Format::kE5M2 && e == emax_field) {
        if (m != 0) return kNaN;
        v = kInf;
    } else if (e == 0) {
        v = std::ldexp(static_cast<double>(m), 1 - s.bias - s.mbits);
    } else {
        v = std::ldexp(1.0 + static_cast<double>(m) / (1 << s.mbits), e - s.bias);
    }
    return sign ? -v : v;
}

uint8_t enc(const Spec& s, float x, Fp8Saturation sat = Fp8Saturation::kSatFinite) { return f32_to_fp8(x, s.f, sat); }
float dec(const Spec& s, int c) { return fp8_to_f32(static_cast<uint8_t>(c), s.f); }

bool is_nan_code(const Spec& s, int c) { return std::isnan(spec_value(s, c)); }

/// Brute-force reference encoder: the finite code nearest to x, a tie between two codes going to
/// the one with the even mantissa field. Past max: the next value above max would be max + one ulp
/// of the top binade (e4m3's 480, whose code is NaN; e5m2's 2^16, one binade up), with the opposite
/// mantissa parity, so the midpoint between them rounds to max when max's mantissa is even (e4m3,
/// S.1111.110) and beyond it when odd (e5m2, S.11110.11). Beyond: ±max (satfinite) or the format's
/// overflow code (Inf in e5m2, NaN in e4m3). NaN in: the canonical NaN code 0x7F.
int ref_encode(const Spec& s, const std::vector<double>& values, double x, bool satfinite) {
    if (std::isnan(x)) return 0x7f;
    const int sign = std::signbit(x) ? 0x80 : 0;
    const double a = std::fabs(x);
    const int max_code = s.f == Fp8Format::kE4M3 ? 0x7e : 0x7b;
    const double ulp_top = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(s.max))) - s.mbits);
    const double mid = s.max + ulp_top / 2;
    if (a > mid || (a == mid && (max_code & 1))) {
        if (satfinite) return sign | max_code;
        return sign | (s.f == Fp8Format::kE4M3 ? 0x7f : 0x7c);
    }
    int best = 0;
    double best_d = kInf;
    for (int c = 0; c <= max_code; ++c) {  // non-negative finite codes, in increasing value
        const double d = std::fabs(values[c] - a);
        if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
    }
    return sign | best;
}

TEST(Fp8, EveryCodeDecodesToTheSpecValue) {
    for (const Spec& s : kSpecs)
        for (int c = 0; c < 256; ++c) {
            const double want = spec_value(s, c);
            const float got = dec(s, c);
            if (std::isnan(want)) {
                EXPECT_TRUE(std::isnan(got)) << s.name << " code " << c;
            } else {
                EXPECT_EQ(static_cast<double>(got), want) << s.name << " code " << c;
                EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << s.name << " code " << c;  // -0 too
            }
        }
    // NaN and Inf codes by number: e4m3 only 0x7f/0xff; e5m2 0x7c/0xfc Inf, 0x7d-0x7f/0xfd-0xff NaN.
    int nan4 = 0, nan5 = 0, inf5 = 0;
    for (int c = 0; c < 256; ++c) {
        nan4 += std::isnan(dec(kE4M3, c));
        nan5 += std::isnan(dec(kE5M2, c));
        inf5 += std::isinf(dec(kE5M2, c));
        EXPECT_FALSE(std::isinf(dec(kE4M3, c))) << c;
    }
    EXPECT_EQ(nan4, 2);
    EXPECT_EQ(nan5, 6);
    EXPECT_EQ(inf5, 2);
    EXPECT_EQ(dec(kE5M2, 0x7c), std::numeric_limits<float>::infinity());
    EXPECT_EQ(dec(kE5M2, 0xfc), -std::numeric_limits<float>::infinity());
}

TEST(Fp8, EncodeOfDecodeIsTheCodeForEveryNonNanCode) {
    for (const Spec& s : kSpecs)
        for (int c = 0; c < 256; ++c) {
            if (is_nan_code(s, c)) continue;
            const bool inf = std::isinf(spec_value(s, c));
            // Inf is kept only without saturation; satfinite turns it into ±max.
            EXPECT_EQ(enc(s, dec(s, c), Fp8Saturation::kNoSat), c) << s.name << " code " << c;
            if (!inf) {
                EXPECT_EQ(enc(s, dec(s, c)), c) << s.name << " code " << c;
            }
        }
}

TEST(Fp8, MidpointsTieToEvenAndNeighboursRoundToNearest) {
    for (const Spec& s : kSpecs)
        for (int sign : {0, 0x80})
            for (int c = 0; c < 0x7f; ++c) {  // each pair (c, c+1) of adjacent finite magnitudes
                const double lo = spec_value(s, sign | c), hi = spec_value(s, sign | (c + 1));
                if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
                const double mid = (lo + hi) / 2;  // exact in double, and in fp32 (one more bit)
                ASSERT_EQ(static_cast<double>(static_cast<float>(mid)), mid);
                const int even = (c & 1) == 0 ? c : c + 1;
                EXPECT_EQ(enc(s, static_cast<float>(mid)), sign | even) << s.name << " tie " << c;
                const float finf = std::numeric_limits<float>::infinity();
                const float above = std::nextafter(static_cast<float>(mid), sign ? -finf : finf);
                const float below = std::nextafter(static_cast<float>(mid), 0.0f);
                EXPECT_EQ(enc(s, above), sign | (c + 1)) << s.name << " above tie " << c;
                EXPECT_EQ(enc(s, below), sign | c) << s.name << " below tie " << c;
            }
}

TEST(Fp8, SaturationAndSpecials) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    // e4m3: max 448 = S.1111.110; the next binade step would be 480, so [448, 464) -> 448.
    EXPECT_EQ(enc(kE4M3, 448.0f), 0x7e);
    EXPECT_EQ(enc(kE4M3, -448.0f), 0xfe);
    for (float x : {449.0f, 463.99f, 464.0f, 480.0f, 1e6f, 3e38f, inf}) {
        EXPECT_EQ(enc(kE4M3, x), 0x7e) << x;
        EXPECT_EQ(enc(kE4M3, -x), 0xfe) << x;
    }
    // Without saturation, 464 is the tie between 448 (S.1111.110, even) and 480 (S.1111.111, odd,
    // the NaN code): it goes to 448. Above it, NaN (no Inf in e4m3).
    EXPECT_EQ(enc(kE4M3, 463.99f, Fp8Saturation::kNoSat), 0x7e);
    EXPECT_EQ(enc(kE4M3, 464.0f, Fp8Saturation::kNoSat), 0x7e);
    for (float x : {std::nextafter(464.0f, 1e9f), 480.0f, 1e6f, inf}) {
        EXPECT_EQ(enc(kE4M3, x, Fp8Saturation::kNoSat), 0x7f) << x;
        EXPECT_EQ(enc(kE4M3, -x, Fp8Saturation::kNoSat), 0xff) << x;
    }
    // e5m2: max 57344 = S.11110.11; [57344, 61440) -> max under rounding, beyond -> ±max or ±Inf.
    EXPECT_EQ(enc(kE5M2, 57344.0f), 0x7b);
    for (float x : {57345.0f, 61439.0f, 61440.0f, 65536.0f, 1e30f, inf}) {
        EXPECT_EQ(enc(kE5M2, x), 0x7b) << x;
        EXPECT_EQ(enc(kE5M2, -x), 0xfb) << x;
    }
    // 61440 is the tie between 57344 (S.11110.11, odd) and 2^16 (one binade up, even): beyond.
    EXPECT_EQ(enc(kE5M2, 61439.0f, Fp8Saturation::kNoSat), 0x7b);
    for (float x : {61440.0f, 65536.0f, inf}) {
        EXPECT_EQ(enc(kE5M2, x, Fp8Saturation::kNoSat), 0x7c) << x;
        EXPECT_EQ(enc(kE5M2, -x, Fp8Saturation::kNoSat), 0xfc) << x;
    }
    // NaN stays NaN in both modes: the canonical 0x7F of either format, whatever its sign and payload
    // (NVIDIA's conversion does the same; tests/cuda/test_fp8_emu.cu).
    uint32_t payload_bits = 0xffa00001u;  // a negative signalling NaN with a payload
    float snan;
    std::memcpy(&snan, &payload_bits, 4);
    for (Fp8Saturation sat : {Fp8Saturation::kSatFinite, Fp8Saturation::kNoSat})
        for (float x : {nan, -nan, snan})
            for (const Spec& s : kSpecs) {
                EXPECT_EQ(enc(s, x, sat), 0x7f) << s.name;
                EXPECT_TRUE(std::isnan(dec(s, enc(s, x, sat)))) << s.name;
            }
}

TEST(Fp8, SubnormalsAndUnderflowKeepTheSign) {
    for (const Spec& s : kSpecs) {
        const float sub = static_cast<float>(s.min_subnormal);
        EXPECT_EQ(enc(s, sub), 0x01) << s.name;
        EXPECT_EQ(enc(s, -sub), 0x81) << s.name;
        EXPECT_EQ(enc(s, sub / 2), 0x00) << s.name;  // tie with 0: to 0 (even)
        EXPECT_EQ(enc(s, -sub / 2), 0x80) << s.name;
        EXPECT_EQ(enc(s, std::nextafter(sub / 2, 1.0f)), 0x01) << s.name;
        EXPECT_EQ(enc(s, -std::nextafter(sub / 2, 1.0f)), 0x81) << s.name;
        EXPECT_EQ(enc(s, sub * 1.5f), 0x02) << s.name;  // tie between 1 and 2: to 2 (even)
        for (float tiny : {sub / 4, 1e-30f, std::numeric_limits<float>::denorm_min(), 0.0f}) {
            EXPECT_EQ(enc(s, tiny), 0x00) << s.name << " " << tiny;
            EXPECT_EQ(enc(s, -tiny), 0x80) << s.name << " " << tiny;
        }
        // The largest subnormal and the smallest normal; between them the tie goes to the normal
        // (mantissa 0, even), carried from the subnormal range into the first binade.
        const int max_sub = (1 << s.mbits) - 1, min_norm = 1 << s.mbits;
        EXPECT_EQ(static_cast<double>(dec(s, max_sub)), s.min_normal - s.min_subnormal) << s.name;
        EXPECT_EQ(static_cast<double>(dec(s, min_norm)), s.min_normal) << s.name;
        EXPECT_EQ(enc(s, static_cast<float>(s.min_normal - s.min_subnormal / 2)), min_norm) << s.name;
    }
}

TEST(Fp8, SpecificationTableValues) {
    // OFP8 v1.0 table: e4m3 max normal S.1111.110 = 448, min normal S.0001.000 = 2^-6, max
    // subnormal S.0000.111 = 0.875 * 2^-6, min subnormal S.0000.001 = 2^-9; e5m2 max normal
    // S.11110.11 = 57344, min normal S.00001.00 = 2^-14, max subnormal 0.75 * 2^-14, min subnormal 2^-16.
    EXPECT_EQ(dec(kE4M3, 0x7e), 448.0f);
    EXPECT_EQ(dec(kE4M3, 0x08), std::ldexp(1.0f, -6));
    EXPECT_EQ(dec(kE4M3, 0x07), 0.875f * std::ldexp(1.0f, -6));
    EXPECT_EQ(dec(kE4M3, 0x01), std::ldexp(1.0f, -9));
    EXPECT_EQ(dec(kE5M2, 0x7b), 57344.0f);
    EXPECT_EQ(dec(kE5M2, 0x04), std::ldexp(1.0f, -14));
    EXPECT_EQ(dec(kE5M2, 0x03), 0.75f * std::ldexp(1.0f, -14));
    EXPECT_EQ(dec(kE5M2, 0x01), std::ldexp(1.0f, -16));
    EXPECT_EQ(fp8_max(Fp8Format::kE4M3), 448.0f);
    EXPECT_EQ(fp8_max(Fp8Format::kE5M2), 57344.0f);
    EXPECT_EQ(dec(kE4M3, 0x38), 1.0f);  // S.0111.000: bias 7
    EXPECT_EQ(dec(kE5M2, 0x3c), 1.0f);  // S.01111.00: bias 15
}

/// fp32 values across every exponent: the bits step by 2^13 (every exponent, the top 10 mantissa
/// bits), each with varied low bits, plus the midpoints' neighbourhoods covered above.
TEST(Fp8, Fp32SweepMatchesBruteForceNearestCode) {
    for (const Spec& s : kSpecs) {
        // Only magnitudes up to twice the overflow point and down to a quarter of the min subnormal
        // are interesting; everything else is covered by the saturation/underflow tests.
        std::vector<double> values(0x80);
        for (int c = 0; c < 0x80; ++c) values[c] = spec_value(s, c);
        int checked = 0;
        for (uint32_t hi = 0; hi < (1u << 19); ++hi) {
            const uint32_t bits = (hi << 13) | ((hi * 2654435761u) & 0x1fffu);
            float x;
            std::memcpy(&x, &bits, 4);
            const double a = std::fabs(static_cast<double>(x));
            if ((std::isfinite(x) && (a > 4 * s.max || a < s.min_subnormal / 4))) continue;
            for (bool satfinite : {true, false}) {
                const int want = ref_encode(s, values, x, satfinite);
                const int got = enc(s, x, satfinite ? Fp8Saturation::kSatFinite : Fp8Saturation::kNoSat);
                ASSERT_EQ(got, want) << s.name << " x=" << x << " bits=" << bits << " satfinite=" << satfinite;
            }
            ++checked;
        }
        EXPECT_GT(checked, 10000) << s.name;
    }
}

TEST(Fp8, ScalesFromAmax) {
    EXPECT_EQ(fp8_scale_from_amax(2.0f, Fp8Format::kE4M3), 224.0f);
    EXPECT_EQ(fp8_scale_from_amax(0.5f, Fp8Format::kE5M2), 114688.0f);
    EXPECT_EQ(fp8_scale_from_amax(0.0f, Fp8Format::kE4M3), 1.0f);  // all-zero tensor
    EXPECT_EQ(fp8_scale_from_amax(std::numeric_limits<float>::infinity(), Fp8Format::kE4M3), 1.0f);
    EXPECT_EQ(fp8_scale_from_amax(std::numeric_limits<float>::quiet_NaN(), Fp8Format::kE4M3), 1.0f);
    const float tiny = std::numeric_limits<float>::denorm_min();
    EXPECT_EQ(fp8_scale_from_amax(tiny, Fp8Format::kE5M2), std::ldexp(1.0f, 127));  // finite, clamped

    // Per tensor: amax 3.5 at a negative entry; the scaled amax lands on max exactly.
    const std::vector<float> x = {0.25f, -3.5f, 1.0f, 0.0f, 2.0f, -0.125f};
    const float st = fp8_tensor_scale(x.data(), x.size(), Fp8Format::kE4M3);
    EXPECT_EQ(st, 128.0f);
    EXPECT_EQ(f32_to_e4m3(-3.5f * st), 0xfe);
    EXPECT_EQ(fp8_amax(x.data(), 0), 0.0f);
    const std::vector<float> with_nan = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
    EXPECT_TRUE(std::isnan(fp8_amax(with_nan.data(), with_nan.size())));

    // Per row of a [3, 2] matrix: rows {0.25, -3.5}, {1, 0}, {2, -0.125}.
    float rs[3];
    fp8_row_scales(x.data(), 3, 2, Fp8Format::kE5M2, rs);
    EXPECT_EQ(rs[0], 57344.0f / 3.5f);
    EXPECT_EQ(rs[1], 57344.0f);  // row {1, 0}: amax 1
    EXPECT_EQ(rs[2], 57344.0f / 2.0f);
    const std::vector<float> zeros = {0.0f, -0.0f, 5.0f, 1.0f};
    fp8_row_scales(zeros.data(), 2, 2, Fp8Format::kE4M3, rs);
    EXPECT_EQ(rs[0], 1.0f);
    EXPECT_EQ(rs[1], 448.0f / 5.0f);
}

}  // namespace
}  // namespace llmtrain
