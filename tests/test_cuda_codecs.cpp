// The codecs of core/numeric.hpp give the same bits on the GPU as on the host: every code of every
// narrow format, and a sweep of float32 inputs through every encoder (ties, subnormals, saturation,
// NaN). Skips, saying so, without a GPU.
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"

#include "../src/kernels/cuda/fp4_e4m3_word.hpp"
#include "cuda_codec_kernels.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

using namespace steadymoe;
using namespace steadymoe::test;

namespace {

uint32_t on_host(uint32_t v, int which) {
    const float f = f32_from_bits(v);
    switch (which) {
        case kDecodeE4M3: return f32_bits(e4m3_to_f32(uint8_t(v)));
        case kEncodeE4M3: return f32_to_e4m3(f);
        case kDecodeE2M1: return f32_bits(e2m1_to_f32(uint8_t(v)));
        case kEncodeE2M1: return f32_to_e2m1(f);
        case kDecodeE8M0: return f32_bits(e8m0_to_f32(uint8_t(v)));
        case kCeilE8M0: return e8m0_from_f32_ceil(f);
        case kEncodeBf16: return f32_to_bf16(f);
        case kEncodeF16: return f32_to_f16(f);
        case kDecodeF16: return f32_bits(f16_to_f32(uint16_t(v)));
    }
    return 0;
}

// Float inputs: every bf16 value widened (covers all exponents, signs, NaN, inf), plus each of those
// with low bits set so encoders see exact ties and values just off them.
std::vector<uint32_t> float_sweep() {
    std::vector<uint32_t> v;
    for (uint32_t h = 0; h < 65536; ++h)
        for (uint32_t low : {0x0000u, 0x8000u, 0x7FFFu, 0x0001u, 0x4000u, 0x1000u, 0x8001u, 0x0800u, 0x0801u})
            v.push_back((h << 16) | low);
    return v;
}

void expect_same_on_device(int which, const std::vector<uint32_t>& in, const char* name) {
    std::vector<uint32_t> got(in.size());
    ASSERT_EQ(run_codec_on_device(in.data(), got.data(), int64_t(in.size()), which), 0) << name;
    int64_t mismatches = 0;
    for (size_t i = 0; i < in.size(); ++i) {
        const uint32_t want = on_host(in[i], which);
        // NaN results may differ in payload between host and device; every NaN is the same NaN here.
        const bool both_nan = (which == kDecodeE4M3 || which == kDecodeE8M0 || which == kDecodeF16) &&
                              ((want & 0x7FFFFFFFu) > 0x7F800000u) && ((got[i] & 0x7FFFFFFFu) > 0x7F800000u);
        if (want != got[i] && !both_nan && ++mismatches <= 3)
            ADD_FAILURE() << name << ": input 0x" << std::hex << in[i] << " host 0x" << want << " device 0x" << got[i];
    }
    EXPECT_EQ(mismatches, 0) << name;
}

}  // namespace

TEST(CudaCodecs, DeviceAndHostAgreeOnEveryCodeAndEveryEncoderInput) {
    SMOE_SKIP_WITHOUT_GPU();
    std::vector<uint32_t> codes8(256), codes16(65536);
    for (uint32_t i = 0; i < 256; ++i) codes8[i] = i;
    for (uint32_t i = 0; i < 65536; ++i) codes16[i] = i;
    const std::vector<uint32_t> floats = float_sweep();
    expect_same_on_device(kDecodeE4M3, codes8, "e4m3 decode");
    expect_same_on_device(kDecodeE2M1, codes8, "e2m1 decode");
    expect_same_on_device(kDecodeE8M0, codes8, "e8m0 decode");
    expect_same_on_device(kDecodeF16, codes16, "f16 decode");
    expect_same_on_device(kEncodeE4M3, floats, "e4m3 encode");
    expect_same_on_device(kEncodeE2M1, floats, "e2m1 encode");
    expect_same_on_device(kCeilE8M0, floats, "e8m0 ceil");
    expect_same_on_device(kEncodeBf16, floats, "bf16 encode");
    expect_same_on_device(kEncodeF16, floats, "f16 encode");
}

// The activation quantisers' hardware e4m3 conversion (four values to a word) gives the codec's code for
// every float32: all 2^32 bit patterns, spread over the word's four byte positions.
TEST(CudaCodecs, HardwareE4m3ConversionMatchesTheCodecOnEveryFloat) {
    SMOE_SKIP_WITHOUT_GPU();
    uint32_t first = 0;
    const int64_t bad = count_packed_mismatches(PackedConversion::E4m3x4, &first);
    ASSERT_GE(bad, 0) << "CUDA error";
    EXPECT_EQ(bad, 0) << "first differing input 0x" << std::hex << first;
}

// The epilogues' bf16 rounding by the hardware's conversion (NaN by the codec) gives the codec's bits for
// every float: subnormals, ties, overflow to infinity and NaN payloads included.
TEST(CudaCodecs, HardwareBf16ConversionMatchesTheCodecOnEveryFloat) {
    SMOE_SKIP_WITHOUT_GPU();
    uint32_t first = 0;
    const int64_t bad = count_packed_mismatches(PackedConversion::Bf16x2, &first);
    ASSERT_GE(bad, 0) << "CUDA error";
    EXPECT_EQ(bad, 0) << "first differing input 0x" << std::hex << first;
}

// The grouped GEMM's widening of stored FP8 / FP4 weights to bf16 (byte permutes and one exact bf16
// multiply) gives the bf16 of the decoded value for every code in every position, and for FP4 at
// scales across the accepted e8m0 range; NaN codes stay NaN.
TEST(CudaCodecs, WeightWideningIsExactForEveryCode) {
    SMOE_SKIP_WITHOUT_GPU();
    auto bf16_of = [](float f) { return f32_to_bf16(f); };
    {
        std::vector<uint32_t> codes, scales;
        for (uint32_t c = 0; c < 256; ++c) {
            codes.push_back(c | ((c + 1) & 255) << 8 | ((c + 2) & 255) << 16 | ((c + 3) & 255) << 24);
            scales.push_back(0);
        }
        std::vector<uint32_t> got(codes.size() * 2);
        ASSERT_EQ(run_widen_on_device(codes.data(), scales.data(), got.data(), int64_t(codes.size()), kE4m3ToBf16), 0);
        int64_t bad = 0;
        for (size_t i = 0; i < codes.size(); ++i)
            for (int j = 0; j < 4; ++j) {
                const uint8_t code = uint8_t(codes[i] >> (8 * j));
                const uint32_t want = bf16_of(e4m3_to_f32(code));
                const uint32_t have = (got[2 * i + j / 2] >> (16 * (j % 2))) & 0xFFFFu;
                const bool both_nan = (want & 0x7FFF) > 0x7F80 && (have & 0x7FFF) > 0x7F80;
                if (want != have && !both_nan && ++bad <= 3)
                    ADD_FAILURE() << "e4m3 code 0x" << std::hex << int(code) << ": want 0x" << want << " got 0x" << have;
            }
        EXPECT_EQ(bad, 0);
    }
    {
        std::vector<uint32_t> codes, scales;
        for (uint32_t e = 2; e <= 252; ++e)  // every exponent the upload lets through, in every byte of its word
            for (uint32_t c = 0; c < 16; ++c) {
                uint32_t word = 0;
                for (uint32_t j = 0; j < 8; ++j) word |= ((c + j) & 15) << (4 * j);
                codes.push_back(word);
                scales.push_back(e);
            }
        // Every pattern of four codes in each half of a word: the widening works on four codes at once, and
        // a sign must not leak into a neighbour.
        for (uint32_t pattern = 0; pattern < 65536; ++pattern) {
            codes.push_back(pattern | ((pattern * 7919u + 13u) & 0xFFFFu) << 16);
            scales.push_back(127);
        }
        std::vector<uint32_t> got(codes.size() * 4);
        ASSERT_EQ(run_widen_on_device(codes.data(), scales.data(), got.data(), int64_t(codes.size()), kE2m1ToBf16), 0);
        int64_t bad = 0;
        for (size_t i = 0; i < codes.size(); ++i)
            for (int j = 0; j < 8; ++j) {
                const uint8_t code = uint8_t((codes[i] >> (4 * j)) & 15);
                const uint32_t want = bf16_of(e2m1_to_f32(code) * std::ldexp(1.0f, int(scales[i]) - 127));
                const uint32_t have = (got[4 * i + j / 2] >> (16 * (j % 2))) & 0xFFFFu;
                if (want != have && ++bad <= 3)
                    ADD_FAILURE() << "e2m1 code " << int(code) << " scale " << scales[i] << ": want 0x" << std::hex
                                  << want << " got 0x" << have;
            }
        EXPECT_EQ(bad, 0);
    }
}

namespace {

// A packing of eight e2m1 codes keeps every bit of them, each in a bit of its own: packing a code with one bit
// set gives a word with one bit set, a different one for each of the 32.
template <class Pack>
void expect_every_code_bit_once(Pack pack) {
    uint32_t seen = 0;
    for (int code = 0; code < 8; ++code)
        for (int bit = 0; bit < 4; ++bit) {
            uint8_t first[4] = {0, 0, 0, 0}, second[4] = {0, 0, 0, 0};
            (code < 4 ? first[code] : second[code - 4]) = uint8_t(1 << bit);
            const uint32_t word = pack(first, second);
            EXPECT_EQ(std::popcount(word), 1) << "code " << code << " bit " << bit;
            EXPECT_EQ(word & seen, 0u) << "code " << code << " bit " << bit << " lands on another's bit";
            seen |= word;
        }
    EXPECT_EQ(seen, 0xFFFFFFFFu);
}

}  // namespace

// The e4m3-order word (fp4_e4m3_word.hpp) and the table word (block-exact weights) keep every code bit once.
TEST(CudaCodecs, Fp4E4m3WordHoldsEveryCodeBitOnce) {
    expect_every_code_bit_once([](const uint8_t(&f)[4], const uint8_t(&s)[4]) { return cuda::pack_e2m1x8_for_e4m3(f, s); });
}
TEST(CudaCodecs, Fp4TableWordHoldsEveryCodeBitOnce) {
    expect_every_code_bit_once([](const uint8_t(&f)[4], const uint8_t(&s)[4]) { return cuda::pack_e2m1x8_for_table(f, s); });
}

namespace {

// Every shift from 1 to 12 with every pattern of four codes in each register of a table word: the words,
// their shifts and their codes (first[0..3], second[0..3]).
struct TableCases {
    std::vector<uint32_t> words, shifts;
    std::vector<std::array<uint8_t, 8>> codes;
};
TableCases every_table_case() {
    TableCases c;
    for (uint32_t shift = cuda::kE4m3ShiftMin; shift <= cuda::kE4m3ShiftMax; ++shift)
        for (uint32_t pattern = 0; pattern < 65536; ++pattern) {
            const uint32_t other = (pattern * 7919u + 13u + shift) & 0xFFFFu;
            uint8_t first[4], second[4];
            for (int j = 0; j < 4; ++j) first[j] = uint8_t(pattern >> (4 * j) & 15), second[j] = uint8_t(other >> (4 * j) & 15);
            c.words.push_back(cuda::pack_e2m1x8_for_table(first, second));
            c.shifts.push_back(shift);
            c.codes.push_back({first[0], first[1], first[2], first[3], second[0], second[1], second[2], second[3]});
        }
    return c;
}

// `got` holds each case's two registers: each code must be the e4m3 code of its value times 2^(shift - 6).
void expect_exact_table_widening(const TableCases& c, const std::vector<uint32_t>& got) {
    int64_t bad = 0;
    for (size_t i = 0; i < c.words.size(); ++i)
        for (int j = 0; j < 8; ++j) {
            const uint8_t code = c.codes[i][size_t(j)];
            const uint8_t have = uint8_t(got[2 * i + j / 4] >> (8 * (j % 4)));
            const float want = std::ldexp(e2m1_to_f32(code), int(c.shifts[i]) - int(cuda::kE4m3ShiftBias));
            if (f32_bits(e4m3_to_f32(have)) != f32_bits(want) && ++bad <= 3)
                ADD_FAILURE() << "e2m1 code " << int(code) << " at shift " << c.shifts[i] << " as " << (j < 4 ? "first" : "second")
                              << "[" << j % 4 << "]: got e4m3 0x" << std::hex << int(have);
        }
    EXPECT_EQ(bad, 0);
}

}  // namespace

// Block-exact FP4 (fp4_blocks.hpp): each of a table word's eight codes becomes the e4m3 code of its value
// times 2^(shift - 6), exactly, for every shift from 1 to 12 and every pattern of four codes in each
// register (a sign must not leak into a neighbour, nor a shift into the next byte).
TEST(CudaCodecs, Fp4ToE4m3ByTableIsExactForEveryShiftAndCodePattern) {
    SMOE_SKIP_WITHOUT_GPU();
    const TableCases c = every_table_case();
    std::vector<uint32_t> got(c.words.size() * 2);
    ASSERT_EQ(run_widen_on_device(c.words.data(), c.shifts.data(), got.data(), int64_t(c.words.size()), kE2m1ToE4m3ByTable), 0);
    expect_exact_table_widening(c, got);
}

// The same lookup on the host, which host code that lays out converted tiles shares with the kernels
// (fp4_exact_tiles.hpp).
TEST(CudaCodecs, Fp4ToE4m3ByTableOnTheHostIsExactForEveryShiftAndCodePattern) {
    const TableCases c = every_table_case();
    std::vector<uint32_t> got(c.words.size() * 2);
    for (size_t i = 0; i < c.words.size(); ++i) {
        const cuda::E4m3Pair v = cuda::e2m1x8_to_e4m3_pair_by_table(c.words[i], cuda::e4m3_table(c.shifts[i]));
        got[2 * i] = v.first, got[2 * i + 1] = v.second;
    }
    expect_exact_table_widening(c, got);
}

// FP4 codes meeting e4m3 activations: each of the eight codes of a packed word becomes the e4m3 code of
// 2^-6 times its value (every e2m1 value is exact there, signed zeros too), byte j of the first register
// first[j] and of the second second[j], for every pattern of four codes in each register (a sign or an
// exponent bit must not leak into a neighbour).
TEST(CudaCodecs, Fp4ToE4m3IsExactForEveryCodePattern) {
    SMOE_SKIP_WITHOUT_GPU();
    std::vector<uint32_t> words;
    std::vector<std::array<uint8_t, 8>> codes;  // first[0..3], second[0..3]
    for (uint32_t pattern = 0; pattern < 65536; ++pattern) {
        const uint32_t other = (pattern * 7919u + 13u) & 0xFFFFu;
        uint8_t first[4], second[4];
        for (int j = 0; j < 4; ++j) first[j] = uint8_t(pattern >> (4 * j) & 15), second[j] = uint8_t(other >> (4 * j) & 15);
        words.push_back(cuda::pack_e2m1x8_for_e4m3(first, second));
        codes.push_back({first[0], first[1], first[2], first[3], second[0], second[1], second[2], second[3]});
    }
    const std::vector<uint32_t> scales(words.size(), 0);
    std::vector<uint32_t> got(words.size() * 2);
    ASSERT_EQ(run_widen_on_device(words.data(), scales.data(), got.data(), int64_t(words.size()), kE2m1ToE4m3), 0);
    int64_t bad = 0;
    for (size_t i = 0; i < words.size(); ++i)
        for (int j = 0; j < 8; ++j) {
            const uint8_t code = codes[i][size_t(j)];
            const uint8_t have = uint8_t(got[2 * i + j / 4] >> (8 * (j % 4)));
            const float want = e2m1_to_f32(code) * 0.015625f;
            if (f32_bits(e4m3_to_f32(have)) != f32_bits(want) && ++bad <= 3)
                ADD_FAILURE() << "e2m1 code " << int(code) << " as " << (j < 4 ? "first" : "second") << "[" << j % 4
                              << "]: got e4m3 0x" << std::hex << int(have);
        }
    EXPECT_EQ(bad, 0);
}
