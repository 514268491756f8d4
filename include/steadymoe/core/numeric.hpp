// Bit-exact codecs for the narrow float formats. Every encoder rounds to nearest, ties to even.
// These are the single source of truth: the CPU kernels, the CUDA kernels, the quantiser and the tests
// all use them (every function compiles for the host and, under nvcc, for the device).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SMOE_HD __host__ __device__
#else
#define SMOE_HD
#endif

namespace steadymoe {

SMOE_HD inline uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(x);
#else
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
#endif
}
SMOE_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float x;
    std::memcpy(&x, &u, 4);
    return x;
#endif
}
SMOE_HD inline float abs_f32(float x) { return f32_from_bits(f32_bits(x) & 0x7FFFFFFFu); }
// Round to the nearest integer, ties to even (the default rounding mode on the host).
SMOE_HD inline float round_even(float x) {
#if defined(__CUDA_ARCH__)
    return rintf(x);
#else
    return std::nearbyint(x);
#endif
}

// ---- bfloat16 -----------------------------------------------------------------------------------
SMOE_HD inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }
SMOE_HD inline uint16_t f32_to_bf16(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN, sign kept
    u += 0x7FFFu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
SMOE_HD inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// ---- IEEE half ----------------------------------------------------------------------------------
SMOE_HD inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    const uint32_t man = h & 0x3FFu;
    if (exp == 0) {
        const float v = float(man) * 5.9604644775390625e-08f;  // man * 2^-24: subnormal or zero, exact
        return f32_from_bits(f32_bits(v) | sign);
    }
    if (exp == 31) return f32_from_bits(sign | 0x7F800000u | (man << 13) | (man ? 0x00400000u : 0u));
    return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}
SMOE_HD inline uint16_t f32_to_f16(float x) {
    const uint32_t u = f32_bits(x);
    const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u);
    if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520: infinity
    if (a < 0x38800000u) {                                  // below 2^-14: subnormal half
        const float v = round_even(f32_from_bits(a) * 16777216.0f);  // units of 2^-24, exact scale
        return uint16_t(sign | uint16_t(v));
    }
    const uint32_t r = a + 0xFFFu + ((a >> 13) & 1u);
    return uint16_t(sign | uint16_t((r >> 13) - (112u << 10)));
}

// ---- e4m3fn (bias 7, max 448, no infinities) ---------------------------------------------------
inline constexpr float kE4M3Max = 448.0f;
SMOE_HD inline float e4m3_to_f32(uint8_t c) {
    const uint32_t sign = uint32_t(c & 0x80u) << 24;
    const uint32_t exp = (c >> 3) & 0xFu;
    const uint32_t man = c & 0x7u;
    if (exp == 15 && man == 7) return f32_from_bits(sign | 0x7FC00000u);
    if (exp == 0) return f32_from_bits(f32_bits(float(man) * 0.001953125f) | sign);  // man * 2^-9
    return f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}
// Saturating: finite values beyond ±448 become ±448 (what the quantisers want); NaN stays NaN.
SMOE_HD inline uint8_t f32_to_e4m3(float x) {
    const uint32_t u = f32_bits(x);
    const uint8_t sign = uint8_t((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return uint8_t(sign | 0x7Fu);
    const float ax = f32_from_bits(a);
    if (ax > kE4M3Max) return uint8_t(sign | 0x7Eu);
    if (ax < 0.015625f) {  // below 2^-6: subnormal, units of 2^-9 (a count of 8 is the smallest normal)
        return uint8_t(sign | uint8_t(round_even(ax * 512.0f)));
    }
    const uint32_t r = a + 0x7FFFFu + ((a >> 20) & 1u);
    return uint8_t(sign | uint8_t((r >> 20) - (120u << 3)));
}

// ---- e8m0 (unsigned power of two, 2^(e-127); 0xFF is NaN) --------------------------------------
SMOE_HD inline float e8m0_to_f32(uint8_t e) {
    if (e == 0xFF) return f32_from_bits(0x7FC00000u);  // quiet NaN
    if (e == 0) return f32_from_bits(0x00400000u);  // 2^-127, an fp32 subnormal
    return f32_from_bits(uint32_t(e) << 23);
}
// The exponent of a positive finite scale, rounded down (floor(log2 s)) or up (ceil(log2 s)),
// clamped to the codes 0..254. Zero and subnormals map to code 0 (rounding down) or the exact code.
SMOE_HD inline uint8_t e8m0_from_f32_floor(float s) {
    const uint32_t a = f32_bits(s) & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) return 0xFF;
    const int e = int(a >> 23);
    if (e == 0) return 0;  // below 2^-126: 2^-127 (code 0) is the floor at best
    return uint8_t(e > 254 ? 254 : e);
}
SMOE_HD inline uint8_t e8m0_from_f32_ceil(float s) {
    const uint32_t a = f32_bits(s) & 0x7FFFFFFFu;
    if (a >= 0x7F800000u) return 0xFF;
    int e = int(a >> 23);
    const uint32_t m = a & 0x7FFFFFu;
    if (e == 0) return m > 0x00400000u ? 1 : 0;  // subnormal: 2^-127 covers m <= 2^22
    if (m != 0) ++e;
    return uint8_t(e > 254 ? 254 : e);
}

// ---- activation groups (e4m3 codes per 128 values) ---------------------------------------------
// The scale of a group whose largest magnitude is amax (a NaN never the largest): amax floored at 1e-4, so an
// all-zero group does not divide by zero (the reference does the same), over 448, and rounded up to a power
// of two where scales are powers of two (DeepSeek-V4). Every quantiser of activations, CPU and GPU, takes it
// from here.
SMOE_HD inline float e4m3_group_scale(float amax, bool pow2) {
    amax = amax < 1e-4f ? 1e-4f : amax;
    const float s = amax / kE4M3Max;
    return pow2 ? e8m0_to_f32(e8m0_from_f32_ceil(s)) : s;
}

// ---- e2m1 (fp4: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives; no NaN, no infinity) -----------------
inline constexpr float kE2M1Max = 6.0f;
SMOE_HD inline float e2m1_to_f32(uint8_t code) {
    // Exponent e (2 bits, bias 1) and mantissa m (1 bit): e == 0 is the subnormal 0 or 0.5.
    const int e = (code >> 1) & 3, m = code & 1;
    const float mag = e == 0 ? 0.5f * float(m) : float(2 + m) * float(1 << (e - 1)) * 0.5f;
    return (code & 0x8) ? -mag : mag;
}
// Saturating to ±6, ties to the even code. NaN has no code: callers must reject it first (it maps to 0).
// The code is the count of midpoints below |x| (a midpoint itself goes to the even code: > where the code
// below is even, >= where it is odd); NaN passes none. Counting, where a chain of ifs picks the interval,
// has no branches to mispredict: a quantiser's values are random to a branch predictor.
SMOE_HD inline uint8_t f32_to_e2m1(float x) {
    const uint8_t sign = (f32_bits(x) >> 28) & 0x8u;
    const float a = abs_f32(x);
    const int c = int(a > 0.25f) + int(a >= 0.75f) + int(a > 1.25f) + int(a >= 1.75f) + int(a > 2.5f) +
                  int(a >= 3.5f) + int(a > 5.0f);
    return uint8_t(sign | c);
}

}  // namespace steadymoe
