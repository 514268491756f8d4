// The quantisers (FP8, MXFP4 with both E8M0 roundings, NVFP4) and whole-checkpoint conversion.
//
// Matrix results are checked against rules written out here from the formats' definitions: the scale
// a block must get, that every code is a nearest grid point of w / scale, error bounds, exact round
// trips for values already on the grid, and a dequantiser written independently of weights.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "steadymoe/core/numeric.hpp"
#include "steadymoe/model/checkpoint.hpp"
#include "steadymoe/model/quantize.hpp"
#include "test_util.hpp"

namespace steadymoe {
namespace {

namespace fs = std::filesystem;
using test::golden_dir;
using test::scratch_dir;

constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- independent decoders --------------------------------------------------------------------------

double ref_e4m3(uint8_t c) {
    const double sign = (c & 0x80) ? -1.0 : 1.0;
    const int e = (c >> 3) & 0xF, m = c & 0x7;
    if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
    return e == 0 ? sign * std::ldexp(m, -9) : sign * std::ldexp(1.0 + m / 8.0, e - 7);
}
double ref_e2m1(uint8_t c) {
    static const double kMagnitude[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (c & 0x8) ? -kMagnitude[c & 7] : kMagnitude[c & 7];
}
double ref_e8m0(uint8_t c) {
    return c == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, int(c) - 127);
}
uint8_t nibble(const WeightMatrix& m, int64_t r, int64_t k) {
    const uint8_t byte = m.data.data<uint8_t>()[r * (m.cols / 2) + k / 2];
    return (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);  // even index in the low nibble
}

// The stored value of element (r, k) as fp32, computed in double from the codes (all products here
// are exact in double) and rounded once, as the dequantiser's fp32 products are.
float decode_element(const WeightMatrix& m, int64_t r, int64_t k) {
    switch (m.format) {
        case ExpertFormat::Fp8: {
            const int64_t si = (r / 128) * m.scale.dim(1) + k / 128;
            const double s = m.scale.dtype() == DType::F32 ? m.scale.data<float>()[si]
                                                           : ref_e8m0(m.scale.data<uint8_t>()[si]);
            return float(ref_e4m3(m.data.data<uint8_t>()[r * m.cols + k]) * s);
        }
        case ExpertFormat::Fp4:
            return float(ref_e2m1(nibble(m, r, k)) *
                         ref_e8m0(m.scale.data<uint8_t>()[r * (m.cols / 32) + k / 32]));
        case ExpertFormat::Nvfp4:
            return float(ref_e2m1(nibble(m, r, k)) *
                         ref_e4m3(m.scale.data<uint8_t>()[r * (m.cols / 16) + k / 16]) *
                         double(m.global_scale));
        case ExpertFormat::Dense:
            return float(m.data.get(r * m.cols + k));
    }
    return NAN;
}

std::vector<float> dequantize_all(const WeightMatrix& m) {
    std::vector<float> out(size_t(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) m.dequantize_row(r, out.data() + r * m.cols);
    return out;
}

// validate() passes, and dequantize_row agrees bit for bit with the independent decoder.
std::vector<float> check_and_dequantize(const WeightMatrix& m) {
    EXPECT_NO_THROW(m.validate());
    std::vector<float> deq = dequantize_all(m);
    for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t k = 0; k < m.cols; ++k) {
            const float want = decode_element(m, r, k);
            const float got = deq[size_t(r * m.cols + k)];
            EXPECT_EQ(f32_bits(got), f32_bits(want))
                << m.name << " (" << r << ", " << k << "): " << got << " vs " << want;
            if (f32_bits(got) != f32_bits(want)) return deq;  // one report is enough
        }
    return deq;
}

void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want,
                          const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(f32_bits(got[i]), f32_bits(want[i]))
            << what << " element " << i << ": " << got[i] << " vs " << want[i];
    }
}

// `code` holds a nearest grid value to x once x is saturated to the grid's largest magnitude.
void expect_nearest(float x, double coded, const std::vector<double>& magnitudes, const std::string& where) {
    const double top = magnitudes.back();
    const double ax = std::min(std::fabs(double(x)), top);
    double best = kInf;
    for (double g : magnitudes) best = std::min(best, std::fabs(ax - g));
    EXPECT_EQ(std::fabs(ax - std::fabs(coded)), best) << where << ": x = " << x << " coded as " << coded;
    if (coded != 0) {
        EXPECT_EQ(std::signbit(coded), std::signbit(x)) << where;
    }
}

std::vector<double> e4m3_magnitudes() {
    std::vector<double> g;
    for (int c = 0; c <= 0x7E; ++c) g.push_back(ref_e4m3(uint8_t(c)));
    return g;
}
std::vector<double> e2m1_magnitudes() { return {0, 0.5, 1, 1.5, 2, 3, 4, 6}; }

// Gaussian-ish values whose magnitude varies by region, so blocks get different scales, plus outliers.
std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-12, 6);
    std::vector<float> w(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float row_scale = std::ldexp(1.0f, exponent(rng));
        for (int64_t c = 0; c < cols; ++c) {
            float v = normal(rng) * row_scale * (1.0f + float(c / 16 % 5));
            if (rng() % 97 == 0) v *= 20.0f;  // an outlier
            w[size_t(r * cols + c)] = v;
        }
    }
    return w;
}

float block_amax(const std::vector<float>& w, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    float m = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) m = std::max(m, std::fabs(w[size_t(r * cols + c)]));
    return m;
}

// =====================================================================================================
// FP8
// =====================================================================================================

// Checks every element of an FP8 result: nearest code of w / scale, and the resulting error bound:
// half an e4m3 step, i.e. 2^-4 of |w| for normal codes or 2^-10 of the scale for subnormal ones.
void check_fp8_elements(const std::vector<float>& w, const WeightMatrix& q, const std::vector<float>& deq) {
    const std::vector<double> grid = e4m3_magnitudes();
    for (int64_t r = 0; r < q.rows; ++r)
        for (int64_t c = 0; c < q.cols; ++c) {
            const size_t i = size_t(r * q.cols + c);
            const int64_t si = (r / 128) * q.scale.dim(1) + c / 128;
            const float s = q.scale.dtype() == DType::F32 ? q.scale.data<float>()[si]
                                                          : float(ref_e8m0(q.scale.data<uint8_t>()[si]));
            const uint8_t code = q.data.data<uint8_t>()[i];
            ASSERT_NE(code & 0x7F, 0x7F) << "NaN code at (" << r << ", " << c << ")";
            expect_nearest(w[i] / s, ref_e4m3(code), grid, fmt::format("({}, {})", r, c));
            const double bound =
                std::max(std::ldexp(std::fabs(double(w[i])), -4), std::ldexp(double(s), -10));
            ASSERT_LE(std::fabs(double(w[i]) - double(deq[i])), bound * (1 + 1e-6))
                << "(" << r << ", " << c << "): w " << w[i] << " deq " << deq[i] << " scale " << s;
        }
}

TEST(QuantizeFp8, ScaleIsBlockAmaxOver448WithPartialEdgeBlocks) {
    const int64_t rows = 200, cols = 300;  // 2 x 3 blocks, the last row and column of blocks partial
    const std::vector<float> w = random_matrix(rows, cols, 1);
    const WeightMatrix q = quantize_fp8(w.data(), rows, cols, /*ue8m0=*/false, "fp8.weight");
    EXPECT_EQ(q.format, ExpertFormat::Fp8);
    EXPECT_EQ(q.name, "fp8.weight");
    EXPECT_EQ(q.data.dtype(), DType::F8_E4M3);
    EXPECT_EQ(q.data.shape(), (Shape{rows, cols}));
    ASSERT_EQ(q.scale.dtype(), DType::F32);
    ASSERT_EQ(q.scale.shape(), (Shape{2, 3}));
    for (int64_t br = 0; br < 2; ++br)
        for (int64_t bc = 0; bc < 3; ++bc) {
            const float amax = block_amax(w, cols, br * 128, std::min(rows, br * 128 + 128), bc * 128,
                                          std::min(cols, bc * 128 + 128));
            EXPECT_EQ(f32_bits(q.scale.data<float>()[br * 3 + bc]), f32_bits(amax / 448.0f))
                << br << ", " << bc;
        }
    const std::vector<float> deq = check_and_dequantize(q);
    check_fp8_elements(w, q, deq);
}

TEST(QuantizeFp8, Ue8m0ScaleIsTheSmallestPowerOfTwoThatCoversTheBlock) {
    const int64_t rows = 130, cols = 260;
    const std::vector<float> w = random_matrix(rows, cols, 2);
    const WeightMatrix q = quantize_fp8(w.data(), rows, cols, /*ue8m0=*/true, "fp8.weight");
    ASSERT_EQ(q.scale.dtype(), DType::F8_E8M0);
    ASSERT_EQ(q.scale.shape(), (Shape{2, 3}));
    for (int64_t br = 0; br < 2; ++br)
        for (int64_t bc = 0; bc < 3; ++bc) {
            const double amax = block_amax(w, cols, br * 128, std::min(rows, br * 128 + 128), bc * 128,
                                           std::min(cols, bc * 128 + 128));
            const double s = ref_e8m0(q.scale.data<uint8_t>()[br * 3 + bc]);
            EXPECT_GE(448 * s, amax) << "block clips";
            EXPECT_LT(448 * s / 2, amax) << "a smaller power of two would do";
        }
    const std::vector<float> deq = check_and_dequantize(q);
    check_fp8_elements(w, q, deq);
}

// Each block's values are e4m3 codes times a power of two, with one at 448 times it: both scale rules
// then pick exactly that power of two, and the round trip reproduces the input bit for bit.
TEST(QuantizeFp8, ValuesOnTheGridRoundTripExactly) {
    const int64_t rows = 150, cols = 140;
    std::mt19937 rng(3);
    std::vector<float> w(size_t(rows * cols));
    for (int64_t br = 0; br < 2; ++br)
        for (int64_t bc = 0; bc < 2; ++bc) {
            const int k = int(br * 7 - bc * 5);
            for (int64_t r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
                for (int64_t c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c) {
                    const uint8_t code = uint8_t(rng() % 0xFF);
                    const uint8_t safe = (code & 0x7F) == 0x7F ? uint8_t(code & 0x80) : code;  // no NaN
                    w[size_t(r * cols + c)] = std::ldexp(float(ref_e4m3(safe)), k);
                }
            w[size_t(br * 128 * cols + bc * 128)] = std::ldexp(-448.0f, k);
        }
    for (const bool ue8m0 : {false, true}) {
        const WeightMatrix q = quantize_fp8(w.data(), rows, cols, ue8m0, "grid.weight");
        expect_bitwise_equal(check_and_dequantize(q), w, ue8m0 ? "ue8m0" : "f32 scales");
    }
}

TEST(QuantizeFp8, ZeroBlocksGetScaleOneAndNegativeZeroKeepsItsSign) {
    const int64_t rows = 128, cols = 256;
    std::vector<float> w(size_t(rows * cols), 0.0f);
    for (int64_t r = 0; r < rows; ++r) w[size_t(r * cols + 3)] = -0.0f;  // block 0 holds only zeros
    for (int64_t r = 0; r < rows; ++r) w[size_t(r * cols + 200)] = 1.0f;
    w[size_t(5 * cols + 130)] = -0.0f;
    for (const bool ue8m0 : {false, true}) {
        const WeightMatrix q = quantize_fp8(w.data(), rows, cols, ue8m0, "zero.weight");
        if (ue8m0) {
            EXPECT_EQ(q.scale.data<uint8_t>()[0], 127);
        } else {
            EXPECT_EQ(q.scale.data<float>()[0], 1.0f);
        }
        EXPECT_EQ(q.data.data<uint8_t>()[3], 0x80);
        EXPECT_EQ(q.data.data<uint8_t>()[5 * cols + 130], 0x80);
        expect_bitwise_equal(check_and_dequantize(q), w, "zeros");
    }
}

TEST(QuantizeFp8, SubnormalBlocksNeverGetAZeroScale) {
    const float tiny = std::numeric_limits<float>::denorm_min() * 3;
    std::vector<float> w(16 * 16, tiny);
    const WeightMatrix q = quantize_fp8(w.data(), 16, 16, false, "tiny.weight");
    EXPECT_GT(q.scale.data<float>()[0], 0.0f);
    for (float v : check_and_dequantize(q)) EXPECT_TRUE(std::isfinite(v));
}

// =====================================================================================================
// MXFP4
// =====================================================================================================

// Every code is a nearest e2m1 value of w / scale (after saturation at 6).
void check_e2m1_codes(const std::vector<float>& w, const WeightMatrix& q, int64_t block) {
    const std::vector<double> grid = e2m1_magnitudes();
    for (int64_t r = 0; r < q.rows; ++r)
        for (int64_t k = 0; k < q.cols; ++k) {
            const uint8_t sc = q.scale.data<uint8_t>()[r * (q.cols / block) + k / block];
            const float s =
                q.format == ExpertFormat::Fp4 ? float(ref_e8m0(sc)) : float(ref_e4m3(sc)) * q.global_scale;
            expect_nearest(w[size_t(r * q.cols + k)] / s, ref_e2m1(nibble(q, r, k)), grid,
                           fmt::format("({}, {})", r, k));
        }
}

TEST(QuantizeMxfp4, UpRoundingPicksTheSmallestCoveringPowerOfTwoAndNeverClips) {
    const int64_t rows = 48, cols = 256;
    const std::vector<float> w = random_matrix(rows, cols, 4);
    const WeightMatrix q = quantize_mxfp4(w.data(), rows, cols, E8M0Rounding::Up, "mx.weight");
    EXPECT_EQ(q.format, ExpertFormat::Fp4);
    EXPECT_EQ(q.data.dtype(), DType::U8);
    EXPECT_EQ(q.data.shape(), (Shape{rows, cols / 2}));
    EXPECT_EQ(q.scale.dtype(), DType::F8_E8M0);
    EXPECT_EQ(q.scale.shape(), (Shape{rows, cols / 32}));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < cols / 32; ++b) {
            const double amax = block_amax(w, cols, r, r + 1, b * 32, b * 32 + 32);
            const double s = ref_e8m0(q.scale.data<uint8_t>()[r * (cols / 32) + b]);
            ASSERT_GE(6 * s, amax) << "row " << r << " block " << b << " clips";
            ASSERT_LT(3 * s, amax) << "row " << r << " block " << b << ": a smaller power of two covers it";
        }
    check_e2m1_codes(w, q, 32);
    check_and_dequantize(q);
}

TEST(QuantizeMxfp4, DownRoundingIsTheOcpScaleAndSaturatesAboveSix) {
    const int64_t rows = 32, cols = 128;
    std::vector<float> w = random_matrix(rows, cols, 5);
    // Row 0, block 0: amax 7.5 -> floor(log2 7.5) = 2 -> scale 2^0; 7 and 7.5 saturate to 6.
    for (int i = 0; i < 32; ++i) w[size_t(i)] = 0.1f * float(i % 7);
    w[0] = 7.0f, w[1] = -7.5f, w[2] = 5.9f, w[3] = 5.0f;
    const WeightMatrix q = quantize_mxfp4(w.data(), rows, cols, E8M0Rounding::Down, "mx.weight");
    int saturated = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < cols / 32; ++b) {
            const float amax = block_amax(w, cols, r, r + 1, b * 32, b * 32 + 32);
            int e = 0;
            std::frexp(amax, &e);  // amax = m * 2^e, m in [0.5, 1): floor(log2 amax) = e - 1
            EXPECT_EQ(int(q.scale.data<uint8_t>()[r * (cols / 32) + b]), (e - 1) - 2 + 127) << r << ", " << b;
            const double s = std::ldexp(1.0, e - 3);
            for (int64_t k = b * 32; k < b * 32 + 32; ++k)
                saturated += std::fabs(w[size_t(r * cols + k)]) > 6 * s;
        }
    EXPECT_GT(saturated, 2);          // Down rounding lets the top of [4, 8) clip; these data hit it
    EXPECT_EQ(nibble(q, 0, 0), 0x7);  // 7 -> 6
    EXPECT_EQ(nibble(q, 0, 1), 0xF);  // -7.5 -> -6
    EXPECT_EQ(nibble(q, 0, 2), 0x7);  // 5.9 -> 6
    EXPECT_EQ(nibble(q, 0, 3), 0x6);  // 5 is a tie between 4 and 6: even code, 4
    check_e2m1_codes(w, q, 32);
    const std::vector<float> deq = check_and_dequantize(q);
    EXPECT_EQ(deq[1], -6.0f);

    // The same block under Up rounding: scale 2, nothing clips.
    const WeightMatrix up = quantize_mxfp4(w.data(), rows, cols, E8M0Rounding::Up, "mx.weight");
    EXPECT_EQ(up.scale.data<uint8_t>()[0], 128);
    EXPECT_EQ(dequantize_all(up)[1], -8.0f);  // -7.5 / 2 = -3.75 -> -4
}

// Blocks of e2m1 values times 2^k whose largest magnitude is 6 or 4 times 2^k: both roundings choose
// 2^k, so dequantising gives back the input bit for bit (negative zero included).
TEST(QuantizeMxfp4, ValuesOnTheGridRoundTripExactlyWithBothRoundings) {
    const int64_t rows = 20, cols = 160;
    std::mt19937 rng(6);
    std::vector<float> w(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < cols / 32; ++b) {
            const int k = int(rng() % 40) - 20;
            const bool top_is_six = rng() % 2;
            for (int64_t i = 0; i < 32; ++i) {
                uint8_t code = uint8_t(rng() % 16);
                if (!top_is_six && (code & 7) == 7) code = uint8_t(code - 1);  // at most 4
                w[size_t(r * cols + b * 32 + i)] = std::ldexp(float(ref_e2m1(code)), k);
            }
            w[size_t(r * cols + b * 32 + rng() % 32)] = std::ldexp(top_is_six ? 6.0f : -4.0f, k);
        }
    for (const E8M0Rounding rounding : {E8M0Rounding::Up, E8M0Rounding::Down}) {
        const WeightMatrix q = quantize_mxfp4(w.data(), rows, cols, rounding, "grid.weight");
        expect_bitwise_equal(check_and_dequantize(q), w, rounding == E8M0Rounding::Up ? "up" : "down");
    }
}

TEST(QuantizeMxfp4, PacksTheEvenIndexInTheLowNibble) {
    std::vector<float> w(32, 0.0f);
    w[0] = 0.5f, w[1] = 1.0f, w[2] = -6.0f, w[3] = 3.0f;  // amax 6: scale 1 under both roundings
    const WeightMatrix q = quantize_mxfp4(w.data(), 1, 32, E8M0Rounding::Up, "pack.weight");
    EXPECT_EQ(q.scale.data<uint8_t>()[0], 127);
    EXPECT_EQ(q.data.data<uint8_t>()[0], 0x21);  // 0.5 (code 1) low, 1.0 (code 2) high
    EXPECT_EQ(q.data.data<uint8_t>()[1], 0x5F);  // -6 (code 15) low, 3 (code 5) high
    for (int i = 2; i < 16; ++i) EXPECT_EQ(q.data.data<uint8_t>()[i], 0);
}

TEST(QuantizeMxfp4, ZeroBlocksGetScaleOneAndNegativeZeroKeepsItsSign) {
    std::vector<float> w(64, 0.0f);
    w[5] = -0.0f;
    w[40] = 2.0f;
    for (const E8M0Rounding rounding : {E8M0Rounding::Up, E8M0Rounding::Down}) {
        const WeightMatrix q = quantize_mxfp4(w.data(), 1, 64, rounding, "zero.weight");
        EXPECT_EQ(q.scale.data<uint8_t>()[0], 127);
        EXPECT_EQ(nibble(q, 0, 5), 0x8);
        expect_bitwise_equal(check_and_dequantize(q), w, "zeros");
    }
}

TEST(QuantizeMxfp4, ExponentsClampToTheE8M0Range) {
    std::vector<float> w(64, 0.0f);
    w[0] = 1e-41f;  // subnormal: the scale would want 2^-137
    w[1] = -3e-42f;
    w[32] = 3e38f;  // near the fp32 maximum
    w[33] = -1e38f;
    for (const E8M0Rounding rounding : {E8M0Rounding::Up, E8M0Rounding::Down}) {
        const WeightMatrix q = quantize_mxfp4(w.data(), 1, 64, rounding, "range.weight");
        EXPECT_EQ(q.scale.data<uint8_t>()[0], 0);  // 2^-127, the smallest scale
        EXPECT_EQ(q.scale.data<uint8_t>()[1], rounding == E8M0Rounding::Up ? 253 : 252);
        const std::vector<float> deq = check_and_dequantize(q);
        for (float v : deq) EXPECT_TRUE(std::isfinite(v));
        EXPECT_NEAR(deq[32] / 3e38f, 1.0f, 0.25f);
    }
}

// A value near the fp32 maximum may round to a code whose decoded value is 2^128 or more (e2m1's 4 or
// 6 times a 2^126 scale): it takes the nearest finite code instead, so dequantising never overflows.
TEST(Quantize, DecodedValuesStayFiniteNearTheFp32Maximum) {
    const float big[] = {std::numeric_limits<float>::max(), 3.4e38f, 3e38f, 2.6e38f, 1.7e38f};
    std::vector<float> w(64, 1.0f);
    for (int i = 0; i < 64; ++i) w[size_t(i)] = (i % 2 ? -1.0f : 1.0f) * big[i % 5];
    const WeightMatrix results[] = {
        quantize_fp8(w.data(), 1, 64, false, "big"),
        quantize_fp8(w.data(), 1, 64, true, "big"),
        quantize_mxfp4(w.data(), 1, 64, E8M0Rounding::Up, "big"),
        quantize_mxfp4(w.data(), 1, 64, E8M0Rounding::Down, "big"),
        quantize_nvfp4(w.data(), 1, 64, "big"),
    };
    for (const WeightMatrix& q : results) {
        const std::vector<float> deq = check_and_dequantize(q);
        for (size_t i = 0; i < deq.size(); ++i) {
            ASSERT_TRUE(std::isfinite(deq[i])) << expert_format_name(q.format) << " element " << i;
            EXPECT_LT(std::fabs(deq[i] / w[i] - 1.0f), 0.5f)
                << expert_format_name(q.format) << " element " << i;
        }
    }
    // MXFP4 Up: 3e38 / 2^126 = 3.53 would round to 4, i.e. 2^128: it becomes 3 * 2^126 instead.
    EXPECT_EQ(dequantize_all(results[2])[2], std::ldexp(3.0f, 126));
}

TEST(QuantizeMxfp4, ColumnsMustBeAMultipleOf32) {
    std::vector<float> w(48, 1.0f);
    try {
        quantize_mxfp4(w.data(), 1, 48, E8M0Rounding::Up, "odd.weight");
        FAIL() << "48 columns accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("odd.weight"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
    }
}

// =====================================================================================================
// NVFP4
// =====================================================================================================

TEST(QuantizeNvfp4, GlobalScaleAndPerSixteenE4m3Scales) {
    const int64_t rows = 24, cols = 96;
    const std::vector<float> w = random_matrix(rows, cols, 7);
    const WeightMatrix q = quantize_nvfp4(w.data(), rows, cols, "nv.weight");
    EXPECT_EQ(q.format, ExpertFormat::Nvfp4);
    EXPECT_EQ(q.data.dtype(), DType::U8);
    EXPECT_EQ(q.data.shape(), (Shape{rows, cols / 2}));
    EXPECT_EQ(q.scale.dtype(), DType::F8_E4M3);
    EXPECT_EQ(q.scale.shape(), (Shape{rows, cols / 16}));
    const float amax_all = block_amax(w, cols, 0, rows, 0, cols);
    EXPECT_EQ(f32_bits(q.global_scale), f32_bits(amax_all / 2688.0f));  // 448 * 6
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < cols / 16; ++b) {
            const float amax = block_amax(w, cols, r, r + 1, b * 16, b * 16 + 16);
            const uint8_t code = q.scale.data<uint8_t>()[r * (cols / 16) + b];
            ASSERT_EQ(code & 0x80, 0) << "negative block scale";
            const double want = double(amax) / 6 / q.global_scale;
            // The nearest e4m3 value to amax / 6 / g (checked against the whole grid), never zero.
            if (want >= ref_e4m3(0x01)) {
                expect_nearest(float(want), ref_e4m3(code), e4m3_magnitudes(), "scale");
            } else {
                EXPECT_EQ(code, 0x01);
            }
        }
    check_e2m1_codes(w, q, 16);
    check_and_dequantize(q);
}

// g = 2^j when the matrix amax is 2688 * 2^j; each block's amax is 6 * s * g for an e4m3 value s;
// every value is an e2m1 value times s * g. Then every scale is exact and so is the round trip.
TEST(QuantizeNvfp4, ValuesOnTheGridRoundTripExactly) {
    const int64_t rows = 8, cols = 64;
    const int j = -9;
    std::mt19937 rng(8);
    std::vector<float> w(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < cols / 16; ++b) {
            const float s = (r == 0 && b == 0) ? 448.0f : float(ref_e4m3(uint8_t(1 + rng() % 0x7E)));
            for (int64_t i = 0; i < 16; ++i)
                w[size_t(r * cols + b * 16 + i)] = std::ldexp(float(ref_e2m1(uint8_t(rng() % 16))) * s, j);
            w[size_t(r * cols + b * 16 + rng() % 16)] = std::ldexp(-6.0f * s, j);
        }
    const WeightMatrix q = quantize_nvfp4(w.data(), rows, cols, "grid.weight");
    EXPECT_EQ(q.global_scale, std::ldexp(1.0f, j));
    expect_bitwise_equal(check_and_dequantize(q), w, "nvfp4");
}

TEST(QuantizeNvfp4, ZeroBlocksUseTheSmallestPositiveScaleAndAZeroMatrixHasGlobalOne) {
    std::vector<float> w(32, 0.0f);
    w[3] = -0.0f;
    WeightMatrix q = quantize_nvfp4(w.data(), 1, 32, "zero.weight");
    EXPECT_EQ(q.global_scale, 1.0f);
    EXPECT_EQ(q.scale.data<uint8_t>()[0], 0x01);
    EXPECT_EQ(q.scale.data<uint8_t>()[1], 0x01);
    expect_bitwise_equal(check_and_dequantize(q), w, "zero matrix");

    w[20] = 2.625f;  // block 1 nonzero, block 0 still zero; 2.625 / (448 * 6) = 2^-10 is exact
    q = quantize_nvfp4(w.data(), 1, 32, "zero.weight");
    EXPECT_EQ(q.scale.data<uint8_t>()[0], 0x01);
    EXPECT_EQ(q.scale.data<uint8_t>()[1], 0x7E);  // 448: this block holds the matrix amax
    EXPECT_EQ(nibble(q, 0, 3), 0x8);
    expect_bitwise_equal(check_and_dequantize(q), w, "one value");
}

TEST(QuantizeNvfp4, ColumnsMustBeAMultipleOf16) {
    std::vector<float> w(24, 1.0f);
    EXPECT_THROW(quantize_nvfp4(w.data(), 1, 24, "odd.weight"), Error);
}

// =====================================================================================================
// Shared input checks
// =====================================================================================================

TEST(Quantize, NonFiniteInputIsRejectedNamingTheTensorRowAndColumn) {
    const int64_t rows = 4, cols = 64;
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf}) {
        std::vector<float> w(size_t(rows * cols), 1.0f);
        w[size_t(2 * cols + 37)] = bad;
        const std::function<void()> calls[] = {
            [&] { quantize_fp8(w.data(), rows, cols, false, "layers.0.ffn.experts.3.w1.weight"); },
            [&] { quantize_fp8(w.data(), rows, cols, true, "layers.0.ffn.experts.3.w1.weight"); },
            [&] {
                quantize_mxfp4(w.data(), rows, cols, E8M0Rounding::Up, "layers.0.ffn.experts.3.w1.weight");
            },
            [&] {
                quantize_mxfp4(w.data(), rows, cols, E8M0Rounding::Down, "layers.0.ffn.experts.3.w1.weight");
            },
            [&] { quantize_nvfp4(w.data(), rows, cols, "layers.0.ffn.experts.3.w1.weight"); },
        };
        for (const auto& call : calls) {
            try {
                call();
                ADD_FAILURE() << bad << " accepted";
            } catch (const Error& e) {
                const std::string msg = e.what();
                EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << msg;
                EXPECT_NE(msg.find("layers.0.ffn.experts.3.w1.weight"), std::string::npos) << msg;
                EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
                EXPECT_NE(msg.find("column 37"), std::string::npos) << msg;
            }
        }
    }
}

TEST(Quantize, EmptyMatricesAreRejected) {
    float w = 1.0f;
    EXPECT_THROW(quantize_fp8(&w, 0, 1, false, "e"), Error);
    EXPECT_THROW(quantize_mxfp4(&w, 1, 0, E8M0Rounding::Up, "e"), Error);
    EXPECT_THROW(quantize_nvfp4(nullptr, 1, 16, "e"), Error);
}

TEST(Quantize, TargetNames) {
    EXPECT_STREQ(quant_target_name(QuantTarget::Fp8), "fp8");
    EXPECT_STREQ(quant_target_name(QuantTarget::Mxfp4), "mxfp4");
    EXPECT_STREQ(quant_target_name(QuantTarget::Nvfp4), "nvfp4");
}

// =====================================================================================================
// Whole checkpoints
// =====================================================================================================

bool is_routed_expert_weight(const std::string& name) {
    return name.find(".experts.") != std::string::npos && name.find("shared") == std::string::npos &&
           name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
}
bool is_v4_name(const std::string& name) { return name.find(".ffn.") != std::string::npos; }
std::string base_of(const std::string& weight) { return weight.substr(0, weight.size() - 7); }

struct Expected {
    DType weight_dtype;
    std::vector<std::pair<std::string, DType>> scales;  // suffix, dtype
};

Expected expected_tensors(const QuantizeOptions& o, bool v4) {
    switch (o.target) {
        case QuantTarget::Fp8:
            return {DType::F8_E4M3,
                    {{v4 ? ".scale" : ".weight_scale_inv", o.fp8_ue8m0 ? DType::F8_E8M0 : DType::F32}}};
        case QuantTarget::Mxfp4:
            return {v4 ? DType::I8 : DType::U8, {{v4 ? ".scale" : ".weight_scale", DType::F8_E8M0}}};
        case QuantTarget::Nvfp4:
            return {DType::U8, {{".weight_scale", DType::F8_E4M3}, {".weight_scale_2", DType::F32}}};
    }
    return {};
}

ExpertFormat expected_format(QuantTarget t) {
    return t == QuantTarget::Fp8     ? ExpertFormat::Fp8
           : t == QuantTarget::Mxfp4 ? ExpertFormat::Fp4
                                     : ExpertFormat::Nvfp4;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
           std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(test::read_file(p)); }

struct Converted {
    size_t progress_calls = 0;
    size_t last_done = 0, last_total = 0;
};

Converted convert(const fs::path& in, const fs::path& out, const QuantizeOptions& base) {
    Converted c;
    QuantizeOptions o = base;
    o.progress = [&c](size_t done, size_t total, const std::string&) {
        ++c.progress_calls;
        EXPECT_EQ(done, c.last_done + 1);
        c.last_done = done, c.last_total = total;
    };
    quantize_checkpoint(in, out, o);
    return c;
}

// Checks a converted checkpoint tensor by tensor against its input, and every MoE layer through the
// engine's loader. Returns the largest relative error of a dequantised expert matrix.
double check_converted(const fs::path& in_dir, const fs::path& out_dir, const QuantizeOptions& o,
                       const Converted& progress) {
    const Checkpoint in = Checkpoint::open(in_dir);
    const Checkpoint out = Checkpoint::open(out_dir);
    EXPECT_EQ(out.config().expert_format, expected_format(o.target));
    EXPECT_EQ(MoeConfig::from_file(out_dir / "config.json").expert_format, expected_format(o.target));

    // Names: every input tensor survives except old expert scales; each expert gains its new scales.
    std::set<std::string> want_names, consumed;
    for (const std::string& name : in.names()) {
        if (!is_routed_expert_weight(name)) continue;
        for (const char* s : {".scale", ".weight_scale_inv", ".weight_scale", ".weight_scale_2"})
            if (in.contains(base_of(name) + s)) consumed.insert(base_of(name) + s);
    }
    for (const std::string& name : in.names()) {
        if (consumed.count(name)) continue;
        want_names.insert(name);
        if (!is_routed_expert_weight(name)) {
            EXPECT_TRUE(same_bytes(out.get(name), in.get(name))) << name << " changed";
            continue;
        }
        const Expected e = expected_tensors(o, is_v4_name(name));
        const Tensor w = out.get(name);
        EXPECT_EQ(w.dtype(), e.weight_dtype) << name;
        const Tensor src = in.get(name);
        const bool packed = src.dtype() == DType::I8 || src.dtype() == DType::U8;
        const int64_t rows = src.dim(0), cols = packed ? src.dim(1) * 2 : src.dim(1);
        EXPECT_EQ(w.shape(), (Shape{rows, o.target == QuantTarget::Fp8 ? cols : cols / 2})) << name;
        for (const auto& [suffix, dtype] : e.scales) {
            const std::string s = base_of(name) + suffix;
            want_names.insert(s);
            if (!out.contains(s)) {
                ADD_FAILURE() << s << " is missing";
                continue;
            }
            EXPECT_EQ(out.get(s).dtype(), dtype) << s;
            if (suffix == ".weight_scale_2") {
                EXPECT_EQ(out.get(s).shape(), Shape{}) << s;
            }
        }
    }
    // Every tensor starts at a multiple of its element size, so the mapping can be read as typed data.
    for (const std::string& shard : out.shard_files()) {
        const SafetensorsFile file = SafetensorsFile::open(out_dir / shard);
        for (const TensorInfo& t : file.tensors())
            EXPECT_EQ(t.begin % dtype_size(t.dtype), 0u) << shard << ": " << t.name << " is misaligned";
    }
    const std::vector<std::string> got = out.names();
    EXPECT_EQ(std::set<std::string>(got.begin(), got.end()), want_names);
    EXPECT_EQ(progress.progress_calls, progress.last_total);
    EXPECT_EQ(progress.last_done, progress.last_total);
    EXPECT_EQ(progress.last_total, in.names().size() - consumed.size());

    // Every routed expert through the loader: the new format, values close to the input's, and the
    // very bytes the matrix quantiser makes from the input's dequantised values.
    double worst = 0;
    for (int64_t layer = 0; layer < in.config().num_hidden_layers; ++layer) {
        if (!in.config().is_moe_layer(layer)) continue;
        const MoeLayerWeights a = load_moe_layer(in, layer);
        const MoeLayerWeights b = load_moe_layer(out, layer);
        EXPECT_EQ(b.experts.size(), a.experts.size());
        for (size_t e = 0; e < a.experts.size(); ++e) {
            for (const auto& [src, dst] : {std::pair{&a.experts[e].gate, &b.experts[e].gate},
                                           std::pair{&a.experts[e].up, &b.experts[e].up},
                                           std::pair{&a.experts[e].down, &b.experts[e].down}}) {
                EXPECT_EQ(dst->format, expected_format(o.target)) << dst->name;
                const std::vector<float> x = dequantize_all(*src);
                const std::vector<float> y = check_and_dequantize(*dst);
                const Tensor tx = Tensor::borrow(DType::F32, {int64_t(x.size())}, x.data(), nullptr);
                const Tensor ty = Tensor::borrow(DType::F32, {int64_t(y.size())}, y.data(), nullptr);
                worst = std::max(worst, test::relative_error(ty, tx));
                const WeightMatrix direct =
                    o.target == QuantTarget::Fp8
                        ? quantize_fp8(x.data(), src->rows, src->cols, o.fp8_ue8m0, "d")
                    : o.target == QuantTarget::Mxfp4
                        ? quantize_mxfp4(x.data(), src->rows, src->cols, o.rounding, "d")
                        : quantize_nvfp4(x.data(), src->rows, src->cols, "d");
                EXPECT_EQ(std::memcmp(direct.data.raw(), dst->data.raw(), direct.data.nbytes()), 0)
                    << dst->name;
                EXPECT_EQ(std::memcmp(direct.scale.raw(), dst->scale.raw(), direct.scale.nbytes()), 0)
                    << dst->name;
                EXPECT_EQ(direct.global_scale, dst->global_scale) << dst->name;
            }
        }
        // Shared experts and routers are not routed experts: unchanged.
        if (a.has_shared) {
            EXPECT_TRUE(same_bytes(a.shared.gate.data, b.shared.gate.data));
        }
        EXPECT_TRUE(same_bytes(a.router, b.router));
    }
    return worst;
}

fs::path qwen3() { return golden_dir() / "qwen3-moe-tiny"; }
fs::path deepseek_v4() { return golden_dir() / "deepseek-v4-tiny"; }

QuantizeOptions options(QuantTarget t, E8M0Rounding r = E8M0Rounding::Up, bool ue8m0 = false) {
    QuantizeOptions o;
    o.target = t;
    o.rounding = r;
    o.fp8_ue8m0 = ue8m0;
    return o;
}

TEST(QuantizeCheckpoint, Qwen3ToFp8) {
    const fs::path out = scratch_dir("quantize_qwen3_fp8") / "out";
    const QuantizeOptions o = options(QuantTarget::Fp8);
    const Converted c = convert(qwen3(), out, o);
    EXPECT_LT(check_converted(qwen3(), out, o, c), 0.04);
    EXPECT_TRUE(fs::exists(out / "model.safetensors"));
    EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
    nlohmann::json cfg = read_json(out / "config.json");
    const nlohmann::json want = {{"quant_method", "fp8"},
                                 {"fmt", "e4m3"},
                                 {"activation_scheme", "dynamic"},
                                 {"weight_block_size", {128, 128}}};
    EXPECT_EQ(cfg["quantization_config"], want);
    // Everything else in config.json is as it was.
    nlohmann::json in_cfg = read_json(qwen3() / "config.json"), out_cfg = cfg;
    out_cfg.erase("quantization_config");
    EXPECT_EQ(out_cfg, in_cfg);
    // Nothing but the checkpoint's files: no temporaries left behind.
    std::set<std::string> files;
    for (const auto& e : fs::directory_iterator(out)) files.insert(e.path().filename().string());
    EXPECT_EQ(files, (std::set<std::string>{"config.json", "model.safetensors"}));
}

// Expert matrices are converted several at a time: any thread count writes the same files, byte for byte.
TEST(QuantizeCheckpoint, ThreadCountsWriteTheSameFiles) {
    const fs::path dir = scratch_dir("quantize_threads");
    std::vector<std::string> bytes;
    for (const int threads : {1, 3, 0}) {
        const fs::path out = dir / ("out" + std::to_string(threads));
        QuantizeOptions o = options(QuantTarget::Mxfp4);
        o.threads = threads;
        (void)convert(qwen3(), out, o);
        bytes.push_back(test::read_file(out / "model.safetensors") + test::read_file(out / "config.json"));
    }
    EXPECT_EQ(bytes[1], bytes[0]) << "3 threads";
    EXPECT_EQ(bytes[2], bytes[0]) << "every thread";
}

// Where several expert matrices are damaged, the error names the first in the file's order whatever the
// thread count, and nothing is written. The two damaged ones sit side by side at an even place among the
// first eight tensors, so that they share a batch on 2 and 8 threads (parallel_for's own test pins the rule
// that the lowest item's error wins however the threads run).
TEST(QuantizeCheckpoint, TheFirstDamagedMatrixIsNamedOnAnyThreadCount) {
    const fs::path dir = scratch_dir("quantize_damaged"), in = dir / "in";
    fs::create_directories(in);
    fs::copy_file(qwen3() / "config.json", in / "config.json");
    const SafetensorsFile src = SafetensorsFile::open(qwen3() / "model.safetensors");
    const std::vector<TensorInfo>& infos = src.tensors();
    size_t first = 0;  // the first damaged tensor's place
    while (first + 1 < infos.size() && !(is_routed_expert_weight(infos[first].name) && is_routed_expert_weight(infos[first + 1].name)))
        first += 2;
    ASSERT_LT(first + 1, size_t(8)) << "no two expert matrices side by side at an even place among the first eight";
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (size_t i = 0; i < infos.size(); ++i) {
        Tensor v = src.get(infos[i].name);
        if (i == first || i == first + 1) {  // one value each
            Tensor bad = v.to_f32();
            bad.mutable_data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
            v = std::move(bad);
        }
        tensors.emplace_back(infos[i].name, std::move(v));
    }
    write_safetensors(in / "model.safetensors", tensors);
    ASSERT_EQ(SafetensorsFile::open(in / "model.safetensors").tensors()[first].name, infos[first].name) << "the order changed";
    for (const int threads : {1, 2, 8}) {
        const fs::path out = dir / ("out" + std::to_string(threads));
        QuantizeOptions o = options(QuantTarget::Fp8);
        o.threads = threads;
        try {
            quantize_checkpoint(in, out, o);
            ADD_FAILURE() << "a damaged checkpoint converted on " << threads << " threads";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(infos[first].name), std::string::npos) << threads << " threads: " << e.what();
        }
        EXPECT_FALSE(fs::exists(out / "model.safetensors")) << threads << " threads";
    }
}

TEST(QuantizeCheckpoint, Qwen3ToFp8WithUe8m0Scales) {
    const fs::path out = scratch_dir("quantize_qwen3_fp8_ue8m0") / "out";
    const QuantizeOptions o = options(QuantTarget::Fp8, E8M0Rounding::Up, true);
    const Converted c = convert(qwen3(), out, o);
    EXPECT_LT(check_converted(qwen3(), out, o, c), 0.05);
    EXPECT_EQ(read_json(out / "config.json")["quantization_config"]["scale_fmt"], "ue8m0");
    EXPECT_TRUE(Checkpoint::open(out).config().quantization.ue8m0_scales);
}

TEST(QuantizeCheckpoint, Qwen3ToMxfp4WithBothRoundings) {
    for (const E8M0Rounding r : {E8M0Rounding::Up, E8M0Rounding::Down}) {
        const std::string tag = r == E8M0Rounding::Up ? "up" : "down";
        const fs::path out = scratch_dir("quantize_qwen3_mxfp4_" + tag) / "out";
        const QuantizeOptions o = options(QuantTarget::Mxfp4, r);
        const Converted c = convert(qwen3(), out, o);
        EXPECT_LT(check_converted(qwen3(), out, o, c), 0.15) << tag;
        const nlohmann::json want = {{"quant_method", "mxfp4"}, {"scale_rounding", tag}};
        EXPECT_EQ(read_json(out / "config.json")["quantization_config"], want);
    }
}

TEST(QuantizeCheckpoint, Qwen3ToNvfp4) {
    const fs::path out = scratch_dir("quantize_qwen3_nvfp4") / "out";
    const QuantizeOptions o = options(QuantTarget::Nvfp4);
    const Converted c = convert(qwen3(), out, o);
    EXPECT_LT(check_converted(qwen3(), out, o, c), 0.12);
    const nlohmann::json want = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}};
    EXPECT_EQ(read_json(out / "config.json")["quantization_config"], want);
}

// The V4 experts are FP4 already: conversion dequantises them first. FP8 keeps V4's names (".scale")
// and records the format in expert_dtype, leaving quantization_config (the shared expert's) alone.
TEST(QuantizeCheckpoint, DeepseekV4Fp4ToFp8) {
    for (const bool ue8m0 : {true, false}) {
        const fs::path out = scratch_dir(ue8m0 ? "quantize_v4_fp8_ue8m0" : "quantize_v4_fp8") / "out";
        const QuantizeOptions o = options(QuantTarget::Fp8, E8M0Rounding::Up, ue8m0);
        const Converted c = convert(deepseek_v4(), out, o);
        EXPECT_LT(check_converted(deepseek_v4(), out, o, c), 0.04);
        nlohmann::json in_cfg = read_json(deepseek_v4() / "config.json");
        nlohmann::json out_cfg = read_json(out / "config.json");
        EXPECT_EQ(out_cfg["expert_dtype"], "fp8");
        EXPECT_EQ(out_cfg["quantization_config"], in_cfg["quantization_config"]);
        EXPECT_EQ(Checkpoint::open(out).config().family, ModelFamily::DeepseekV4);
    }
}

// e2m1 values times a power of two are re-quantised exactly by either E8M0 rounding (the block's new
// scale is the old one or a smaller power of two that still holds every value), so V4 -> MXFP4 is
// lossless. It keeps V4's layout: I8 weights and ".scale".
TEST(QuantizeCheckpoint, DeepseekV4ToMxfp4IsLossless) {
    for (const E8M0Rounding r : {E8M0Rounding::Up, E8M0Rounding::Down}) {
        const fs::path out =
            scratch_dir(r == E8M0Rounding::Up ? "quantize_v4_mx_up" : "quantize_v4_mx_down") / "out";
        const QuantizeOptions o = options(QuantTarget::Mxfp4, r);
        const Converted c = convert(deepseek_v4(), out, o);
        EXPECT_EQ(check_converted(deepseek_v4(), out, o, c), 0.0);
        EXPECT_EQ(read_json(out / "config.json")["expert_dtype"], "fp4");
    }
}

TEST(QuantizeCheckpoint, DeepseekV4ToNvfp4IsRefusedBeforeWritingAnything) {
    const fs::path out = scratch_dir("quantize_v4_nvfp4") / "out";
    try {
        quantize_checkpoint(deepseek_v4(), out, options(QuantTarget::Nvfp4));
        FAIL() << "V4 to NVFP4 accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
}

// A sharded input whose expert weights and scales sit in different shards: the shards keep their names,
// the index is rewritten, and the conversion (lossless here) is unaffected.
TEST(QuantizeCheckpoint, ShardedInputKeepsShardsAndRewritesTheIndex) {
    const fs::path dir = scratch_dir("quantize_sharded");
    const fs::path in = dir / "in", out = dir / "out";
    fs::create_directories(in);
    fs::copy_file(deepseek_v4() / "config.json", in / "config.json");
    const Checkpoint src = Checkpoint::open(deepseek_v4());
    std::vector<std::pair<std::string, Tensor>> shard[2];
    nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
    const char* shard_names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    size_t i = 0;
    for (const std::string& name : src.names()) {  // sorted: ".scale" and ".weight" alternate shards
        shard[i % 2].emplace_back(name, src.get(name));
        index["weight_map"][name] = shard_names[i % 2];
        ++i;
    }
    for (int s = 0; s < 2; ++s) write_safetensors(in / shard_names[s], shard[s]);
    test::write_file(in / "model.safetensors.index.json", index.dump());

    const QuantizeOptions o = options(QuantTarget::Mxfp4);
    const Converted c = convert(in, out, o);
    EXPECT_EQ(check_converted(in, out, o, c), 0.0);
    const Checkpoint q = Checkpoint::open(out);
    EXPECT_EQ(q.shard_files(), (std::vector<std::string>{shard_names[0], shard_names[1]}));
    EXPECT_FALSE(fs::exists(out / "model.safetensors"));
    nlohmann::json out_index = read_json(out / "model.safetensors.index.json");
    uint64_t total = 0;
    size_t listed = 0;
    for (const char* shard_name : shard_names) {
        const SafetensorsFile file = SafetensorsFile::open(out / shard_name);
        for (const TensorInfo& t : file.tensors()) {
            EXPECT_EQ(out_index.at("weight_map").value(t.name, std::string()), shard_name) << t.name;
            total += t.end - t.begin;
            ++listed;
        }
    }
    EXPECT_EQ(listed, q.names().size());
    EXPECT_EQ(out_index["weight_map"].size(), q.names().size());
    EXPECT_EQ(out_index["metadata"]["total_size"].get<uint64_t>(), total);
}

TEST(QuantizeCheckpoint, RefusesToOverwriteACheckpoint) {
    const fs::path dir = scratch_dir("quantize_refuse");
    const QuantizeOptions o = options(QuantTarget::Fp8);

    // Into the input itself.
    try {
        quantize_checkpoint(qwen3(), qwen3(), o);
        FAIL() << "wrote into the input";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_NE(std::string(e.what()).find("input"), std::string::npos) << e.what();
    }

    // Into a finished output: the second run must not touch it.
    const fs::path out = dir / "out";
    quantize_checkpoint(qwen3(), out, o);
    const std::string before = test::read_file(out / "model.safetensors");
    EXPECT_THROW(quantize_checkpoint(qwen3(), out, options(QuantTarget::Nvfp4)), Error);
    EXPECT_EQ(test::read_file(out / "model.safetensors"), before);

    // A directory holding only a config.json, or only some safetensors file, is refused too.
    for (const char* file : {"config.json", "weights.safetensors"}) {
        const fs::path d = dir / (std::string("has_") + file);
        fs::create_directories(d);
        test::write_file(d / file, "{}");
        try {
            quantize_checkpoint(qwen3(), d, o);
            FAIL() << "overwrote a directory holding " << file;
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
            EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
        }
        EXPECT_EQ(test::read_file(d / file), "{}");
    }

    // Other files are fine, and missing parents are created.
    const fs::path notes = dir / "notes";
    fs::create_directories(notes);
    test::write_file(notes / "README.txt", "hello");
    EXPECT_NO_THROW(quantize_checkpoint(qwen3(), notes, o));
    EXPECT_NO_THROW(quantize_checkpoint(qwen3(), dir / "a" / "b" / "c", o));
    EXPECT_NO_THROW(Checkpoint::open(dir / "a" / "b" / "c"));
}

}  // namespace
}  // namespace steadymoe
