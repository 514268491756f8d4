// Exhaustive tests of the narrow-float codecs in numeric.hpp. Every expected value here is computed
// from the format's definition (sign, biased exponent, mantissa) in double precision, independently
// of the code under test, so a shared mistake cannot hide.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "steadymoe/core/numeric.hpp"

namespace steadymoe {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool bit_equal(float a, float b) { return f32_bits(a) == f32_bits(b); }

// ---- reference decoders, straight from the definitions -------------------------------------------

// e4m3fn: bias 7, subnormals m * 2^-9, exponent 15 with mantissa 7 is NaN, no infinities.
double ref_e4m3(uint8_t c) {
    const double sign = (c & 0x80) ? -1.0 : 1.0;
    const int e = (c >> 3) & 0xF;
    const int m = c & 0x7;
    if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
    if (e == 0) return sign * std::ldexp(double(m), -9);
    return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

// e2m1: bias 1, subnormal 0.5 * m, no NaN or infinity.
double ref_e2m1(uint8_t c) {
    const double sign = (c & 0x8) ? -1.0 : 1.0;
    const int e = (c >> 1) & 0x3;
    const int m = c & 0x1;
    if (e == 0) return sign * 0.5 * m;
    return sign * std::ldexp(1.0 + m / 2.0, e - 1);
}

// IEEE binary16: bias 15, subnormals m * 2^-24.
double ref_f16(uint16_t c) {
    const double sign = (c & 0x8000) ? -1.0 : 1.0;
    const int e = (c >> 10) & 0x1F;
    const int m = c & 0x3FF;
    if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
    if (e == 0) return sign * std::ldexp(double(m), -24);
    return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

// The midpoint between two adjacent codes' values, which must be exactly representable in fp32
// (true for all these formats: their significands are far narrower than fp32's).
float exact_midpoint(double lo, double hi) {
    const double mid = (lo + hi) / 2;
    const float f = float(mid);
    EXPECT_EQ(double(f), mid) << "midpoint of " << lo << " and " << hi << " is not an fp32 value";
    return f;
}

// =================================================================================================
// e4m3fn
// =================================================================================================

TEST(E4M3, EveryCodeDecodesToItsDefinition) {
    for (int c = 0; c < 256; ++c) {
        const double want = ref_e4m3(uint8_t(c));
        const float got = e4m3_to_f32(uint8_t(c));
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << "code " << c;
        } else {
            EXPECT_EQ(double(got), want) << "code " << c;
            EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;
        }
    }
}

TEST(E4M3, NanCodesAndMaximum) {
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7F)));
    EXPECT_TRUE(std::isnan(e4m3_to_f32(0xFF)));
    EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
    EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
    EXPECT_EQ(kE4M3Max, 448.0f);
    EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
    EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
    // The e4m3fn variant has no infinity: 0x78 (exponent 15, mantissa 0) is the finite 256.
    EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);
}

TEST(E4M3, EveryFiniteCodeReencodesToItselfIncludingNegativeZero) {
    for (int c = 0; c < 256; ++c) {
        const float v = e4m3_to_f32(uint8_t(c));
        const uint8_t back = f32_to_e4m3(v);
        if ((c & 0x7F) == 0x7F) {
            EXPECT_EQ(back & 0x7F, 0x7F) << "NaN code " << c << " re-encoded to a non-NaN " << int(back);
        } else {
            EXPECT_EQ(back, c) << "code " << c;  // -0 (0x80) keeps its sign
        }
    }
}

// Both sides of every midpoint between adjacent codes, and the midpoint itself (which goes to the
// code with an even mantissa), for both signs.
TEST(E4M3, RoundsToNearestEvenAtEveryMidpoint) {
    for (int c = 0; c < 0x7E; ++c) {
        const double lo = ref_e4m3(uint8_t(c));
        const double hi = ref_e4m3(uint8_t(c + 1));
        ASSERT_LT(lo, hi);
        const float mid = exact_midpoint(lo, hi);
        const int even = (c % 2 == 0) ? c : c + 1;
        for (const int sign : {0x00, 0x80}) {
            const float s = sign ? -1.0f : 1.0f;
            EXPECT_EQ(f32_to_e4m3(s * mid), sign | even) << "midpoint " << mid;
            EXPECT_EQ(f32_to_e4m3(s * std::nextafter(mid, 0.0f)), sign | c) << "below " << mid;
            EXPECT_EQ(f32_to_e4m3(s * std::nextafter(mid, kInf)), sign | (c + 1)) << "above " << mid;
            EXPECT_EQ(f32_to_e4m3(s * float(lo)), sign | c);
            EXPECT_EQ(f32_to_e4m3(s * float(hi)), sign | (c + 1));
        }
    }
}

TEST(E4M3, TinyAndSubnormalFp32InputsRoundToZeroKeepingSign) {
    const float denorm = std::numeric_limits<float>::denorm_min();
    EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
    EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
    EXPECT_EQ(f32_to_e4m3(denorm), 0x00);
    EXPECT_EQ(f32_to_e4m3(-denorm), 0x80);
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::min()), 0x00);
    EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie between 0 and 2^-9: even is 0
    EXPECT_EQ(f32_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
}

TEST(E4M3, FiniteValuesAbove448AndInfinitySaturateTo448) {
    for (const float v : {std::nextafter(448.0f, kInf), 449.0f, 464.0f, 479.0f, 480.0f, 512.0f, 1e6f, 1e30f,
                          std::numeric_limits<float>::max(), kInf}) {
        EXPECT_EQ(f32_to_e4m3(v), 0x7E) << v;
        EXPECT_EQ(f32_to_e4m3(-v), 0xFE) << -v;
    }
    EXPECT_EQ(f32_to_e4m3(448.0f), 0x7E);
    EXPECT_EQ(f32_to_e4m3(std::nextafter(448.0f, 0.0f)), 0x7E);  // rounds to 448, not down to 416
}

TEST(E4M3, NanEncodesToANanCode) {
    EXPECT_EQ(f32_to_e4m3(kNaN) & 0x7F, 0x7F);
    EXPECT_EQ(f32_to_e4m3(-kNaN) & 0x7F, 0x7F);
    EXPECT_EQ(f32_to_e4m3(f32_from_bits(0x7F800001u)) & 0x7F, 0x7F);  // signalling NaN
}

// =================================================================================================
// e8m0
// =================================================================================================

TEST(E8M0, EveryCodeDecodesToItsPowerOfTwo) {
    for (int c = 0; c < 255; ++c) {
        const float got = e8m0_to_f32(uint8_t(c));
        EXPECT_EQ(double(got), std::ldexp(1.0, c - 127)) << "code " << c;
    }
    EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
    // Code 0 is 2^-127, which fp32 holds only as a subnormal.
    EXPECT_EQ(f32_bits(e8m0_to_f32(0)), 0x00400000u);
    EXPECT_EQ(e8m0_to_f32(127), 1.0f);
    EXPECT_EQ(e8m0_to_f32(254), std::ldexp(1.0f, 127));
}

TEST(E8M0, FloorAndCeilAreExactOnEveryPowerOfTwo) {
    for (int c = 0; c < 255; ++c) {
        const float v = std::ldexp(1.0f, c - 127);
        EXPECT_EQ(e8m0_from_f32_floor(v), c) << "2^" << c - 127;
        EXPECT_EQ(e8m0_from_f32_ceil(v), c) << "2^" << c - 127;
    }
}

TEST(E8M0, FloorAndCeilJustAboveAndBelowPowersOfTwo) {
    for (int c = 1; c < 255; ++c) {
        const float v = std::ldexp(1.0f, c - 127);
        const float below = std::nextafter(v, 0.0f);
        const float above = std::nextafter(v, kInf);
        EXPECT_EQ(e8m0_from_f32_floor(below), c - 1) << "just below 2^" << c - 127;
        EXPECT_EQ(e8m0_from_f32_ceil(below), c) << "just below 2^" << c - 127;
        EXPECT_EQ(e8m0_from_f32_floor(above), c) << "just above 2^" << c - 127;
        // Above 2^127 the next power is not representable: the encoder clamps to the largest code.
        EXPECT_EQ(e8m0_from_f32_ceil(above), c < 254 ? c + 1 : 254) << "just above 2^" << c - 127;
        // Midway between powers (1.5 * 2^k) rounds each way.
        const float between = 1.5f * v;
        if (std::isfinite(between)) {
            EXPECT_EQ(e8m0_from_f32_floor(between), c);
            EXPECT_EQ(e8m0_from_f32_ceil(between), c < 254 ? c + 1 : 254);
        }
    }
    EXPECT_EQ(e8m0_from_f32_floor(std::numeric_limits<float>::max()), 254);
    EXPECT_EQ(e8m0_from_f32_ceil(std::numeric_limits<float>::max()), 254);
}

TEST(E8M0, ZeroAndSubnormalsClampToTheSmallestCode) {
    const float two_m127 = std::ldexp(1.0f, -127);
    EXPECT_EQ(e8m0_from_f32_floor(0.0f), 0);
    EXPECT_EQ(e8m0_from_f32_ceil(0.0f), 0);
    EXPECT_EQ(e8m0_from_f32_floor(std::numeric_limits<float>::denorm_min()), 0);
    EXPECT_EQ(e8m0_from_f32_ceil(std::numeric_limits<float>::denorm_min()), 0);
    EXPECT_EQ(e8m0_from_f32_floor(std::ldexp(1.0f, -140)), 0);
    EXPECT_EQ(e8m0_from_f32_ceil(std::ldexp(1.0f, -140)), 0);  // 2^-127 is the smallest scale at all
    EXPECT_EQ(e8m0_from_f32_floor(std::nextafter(two_m127, 0.0f)), 0);
    EXPECT_EQ(e8m0_from_f32_ceil(std::nextafter(two_m127, 0.0f)), 0);
    EXPECT_EQ(e8m0_from_f32_floor(std::nextafter(two_m127, 1.0f)), 0);
    EXPECT_EQ(e8m0_from_f32_ceil(std::nextafter(two_m127, 1.0f)), 1);
    // The largest subnormal lies between 2^-127 and 2^-126.
    const float max_sub = std::nextafter(std::numeric_limits<float>::min(), 0.0f);
    EXPECT_EQ(e8m0_from_f32_floor(max_sub), 0);
    EXPECT_EQ(e8m0_from_f32_ceil(max_sub), 1);
}

TEST(E8M0, NonFiniteEncodesToTheNanCode) {
    EXPECT_EQ(e8m0_from_f32_floor(kNaN), 0xFF);
    EXPECT_EQ(e8m0_from_f32_ceil(kNaN), 0xFF);
    EXPECT_EQ(e8m0_from_f32_floor(kInf), 0xFF);
    EXPECT_EQ(e8m0_from_f32_ceil(kInf), 0xFF);
}

// =================================================================================================
// e2m1
// =================================================================================================

TEST(E2M1, AllSixteenCodes) {
    const double want[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
    for (int c = 0; c < 16; ++c) {
        EXPECT_EQ(ref_e2m1(uint8_t(c)), want[c]) << "reference table, code " << c;
        const float got = e2m1_to_f32(uint8_t(c));
        EXPECT_EQ(double(got), want[c]) << "code " << c;
        EXPECT_EQ(std::signbit(got), c >= 8) << "code " << c;
        EXPECT_EQ(f32_to_e2m1(got), c) << "code " << c << " does not re-encode to itself";
    }
    // Only the low nibble is a code: the high bits of a packed byte are ignored.
    EXPECT_EQ(e2m1_to_f32(0xF7), 6.0f);
    EXPECT_EQ(kE2M1Max, 6.0f);
}

TEST(E2M1, TiesGoToTheEvenCode) {
    struct Tie {
        float x;
        float want;
    };
    const Tie ties[] = {{0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},
                        {2.5f, 2.0f},  {3.5f, 4.0f},  {5.0f, 4.0f}};
    for (const Tie& t : ties) {
        EXPECT_EQ(e2m1_to_f32(f32_to_e2m1(t.x)), t.want) << t.x;
        EXPECT_TRUE(bit_equal(e2m1_to_f32(f32_to_e2m1(-t.x)), -t.want)) << -t.x;
    }
}

TEST(E2M1, RoundsToNearestEvenAtEveryMidpoint) {
    for (int c = 0; c < 7; ++c) {
        const double lo = ref_e2m1(uint8_t(c));
        const double hi = ref_e2m1(uint8_t(c + 1));
        const float mid = exact_midpoint(lo, hi);
        const int even = (c % 2 == 0) ? c : c + 1;
        for (const int sign : {0x0, 0x8}) {
            const float s = sign ? -1.0f : 1.0f;
            EXPECT_EQ(f32_to_e2m1(s * mid), sign | even) << "midpoint " << s * mid;
            EXPECT_EQ(f32_to_e2m1(s * std::nextafter(mid, 0.0f)), sign | c) << "below " << s * mid;
            EXPECT_EQ(f32_to_e2m1(s * std::nextafter(mid, kInf)), sign | (c + 1)) << "above " << s * mid;
        }
    }
}

TEST(E2M1, SaturatesAboveSixIncludingInfinity) {
    for (const float v : {std::nextafter(6.0f, kInf), 6.5f, 7.0f, 8.0f, 100.0f, 1e30f, kInf}) {
        EXPECT_EQ(f32_to_e2m1(v), 0x7) << v;
        EXPECT_EQ(f32_to_e2m1(-v), 0xF) << -v;
    }
    EXPECT_EQ(f32_to_e2m1(std::nextafter(5.0f, kInf)), 0x7);
}

TEST(E2M1, ZeroKeepsItsSignAndNanHasNoCode) {
    EXPECT_EQ(f32_to_e2m1(0.0f), 0x0);
    EXPECT_EQ(f32_to_e2m1(-0.0f), 0x8);
    EXPECT_EQ(f32_to_e2m1(std::numeric_limits<float>::denorm_min()), 0x0);
    // Documented: NaN maps to a zero code; callers reject NaN before encoding.
    EXPECT_EQ(f32_to_e2m1(kNaN) & 0x7, 0x0);
}

// =================================================================================================
// bfloat16
// =================================================================================================

TEST(BF16, EveryCodeDecodesAndRoundTrips) {
    for (uint32_t c = 0; c < 65536; ++c) {
        const float v = bf16_to_f32(uint16_t(c));
        EXPECT_EQ(f32_bits(v), c << 16) << "code " << c;  // bf16 is the top half of fp32
        const uint16_t back = f32_to_bf16(v);
        if (std::isnan(v)) {
            EXPECT_TRUE(std::isnan(bf16_to_f32(back))) << "NaN code " << c << " became " << back;
            EXPECT_EQ(back & 0x8000, c & 0x8000) << "NaN sign, code " << c;
        } else {
            EXPECT_EQ(back, c) << "code " << c;
        }
    }
}

TEST(BF16, RoundsToNearestEvenAtEveryMidpoint) {
    for (uint32_t c = 0; c < 65536; ++c) {
        if ((c & 0x7FFF) >= 0x7F80) continue;                  // infinities and NaNs have no next code
        const float mid = f32_from_bits((c << 16) | 0x8000u);  // exactly halfway to code c + 1
        const uint32_t even = (c % 2 == 0) ? c : c + 1;        // c + 1 of the largest finite is infinity
        ASSERT_EQ(f32_to_bf16(mid), even) << "midpoint above code " << c;
        ASSERT_EQ(f32_to_bf16(f32_from_bits((c << 16) | 0x7FFFu)), c) << "below midpoint above " << c;
        ASSERT_EQ(f32_to_bf16(f32_from_bits((c << 16) | 0x8001u)), c + 1) << "above midpoint above " << c;
    }
}

TEST(BF16, OverflowAndNan) {
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to infinity
    EXPECT_EQ(f32_to_bf16(kInf), 0x7F80);
    EXPECT_EQ(f32_to_bf16(-kInf), 0xFF80);
    // A NaN whose payload sits only in the low half must not truncate to infinity.
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f32_from_bits(0x7F800001u)))));
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f32_from_bits(0xFF800001u)))));
    EXPECT_TRUE(bit_equal(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f));  // tie to even
}

// =================================================================================================
// IEEE half
// =================================================================================================

TEST(F16, EveryCodeDecodesAndRoundTrips) {
    for (uint32_t c = 0; c < 65536; ++c) {
        const double want = ref_f16(uint16_t(c));
        const float v = f16_to_f32(uint16_t(c));
        const uint16_t back = f32_to_f16(v);
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(v)) << "code " << c;
            EXPECT_TRUE(std::isnan(f16_to_f32(back))) << "NaN code " << c << " became " << back;
        } else {
            EXPECT_EQ(double(v), want) << "code " << c;
            EXPECT_EQ(std::signbit(v), (c & 0x8000) != 0) << "code " << c;
            EXPECT_EQ(back, c) << "code " << c;
        }
    }
}

TEST(F16, RoundsToNearestEvenAtEveryMidpointIncludingSubnormals) {
    for (uint32_t c = 0; c < 0x7BFF; ++c) {  // every finite positive code and its successor
        const double lo = ref_f16(uint16_t(c));
        const double hi = ref_f16(uint16_t(c + 1));
        const float mid = exact_midpoint(lo, hi);
        const uint32_t even = (c % 2 == 0) ? c : c + 1;
        for (const uint32_t sign : {0x0000u, 0x8000u}) {
            const float s = sign ? -1.0f : 1.0f;
            ASSERT_EQ(f32_to_f16(s * mid), sign | even) << "midpoint " << s * mid;
            ASSERT_EQ(f32_to_f16(s * std::nextafter(mid, 0.0f)), sign | c) << "below " << s * mid;
            ASSERT_EQ(f32_to_f16(s * std::nextafter(mid, kInf)), sign | (c + 1)) << "above " << s * mid;
        }
    }
}

TEST(F16, TinyValuesFlushToSignedZero) {
    const float half_min_sub = std::ldexp(1.0f, -25);  // halfway between 0 and the smallest subnormal
    EXPECT_EQ(f32_to_f16(half_min_sub), 0x0000);
    EXPECT_EQ(f32_to_f16(-half_min_sub), 0x8000);
    EXPECT_EQ(f32_to_f16(std::nextafter(half_min_sub, 1.0f)), 0x0001);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
    // Rounding up out of the subnormal range lands on the smallest normal, 2^-14.
    EXPECT_EQ(f32_to_f16(std::nextafter(std::ldexp(1.0f, -14), 0.0f)), 0x0400);
}

TEST(F16, OverflowsToInfinityAtTheLastMidpoint) {
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
    EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // tie: 65504 has an odd mantissa, infinity is even
    EXPECT_EQ(f32_to_f16(-65520.0f), 0xFC00);
    EXPECT_EQ(f32_to_f16(1e6f), 0x7C00);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7C00);
    EXPECT_EQ(f32_to_f16(kInf), 0x7C00);
    EXPECT_EQ(f32_to_f16(-kInf), 0xFC00);
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(kNaN))));
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f32_from_bits(0x7F800001u)))));
}

}  // namespace
}  // namespace steadymoe
