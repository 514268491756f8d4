#include "fp4_blocks.hpp"
#include "fp4_e4m3_word.hpp"

#include <algorithm>

namespace steadymoe::cuda {

namespace {

constexpr int64_t kGroupBytes = kMxBlockSize / 2;  // 32 codes, two a byte

}  // namespace

bool fp4_group_has_value(const uint8_t* bytes) {
    for (int64_t i = 0; i < kGroupBytes; ++i)
        if (bytes[i] & 0x77) return true;  // a magnitude other than zero, in either nibble
    return false;
}

std::optional<std::vector<uint8_t>> fp4_block_exponents(const WeightMatrix& w) {
    const int64_t k_blocks = w.cols / 128, groups = w.cols / 32, row_blocks = (w.rows + 127) / 128;
    const auto* codes = static_cast<const uint8_t*>(w.data.raw());
    const auto* exps = static_cast<const uint8_t*>(w.scale.raw());
    std::vector<int> lowest(size_t(row_blocks * k_blocks), 256), highest(size_t(row_blocks * k_blocks), -1);
    for (int64_t r = 0; r < w.rows; ++r)
        for (int64_t g = 0; g < groups; ++g) {
            if (!fp4_group_has_value(codes + r * (w.cols / 2) + g * kGroupBytes)) continue;
            const size_t block = size_t((r / 128) * k_blocks + g / 4);
            const int e = exps[r * groups + g];
            lowest[block] = std::min(lowest[block], e), highest[block] = std::max(highest[block], e);
        }
    constexpr int kTop = int(kE4m3ShiftMax - kE4m3ShiftBias);
    std::vector<uint8_t> out(lowest.size(), 127);
    for (size_t b = 0; b < out.size(); ++b) {
        if (highest[b] < 0) continue;
        // The block's largest exponent takes the largest shift, unless the scale would leave f32's normal
        // numbers (then every shift, e + 5 for e below 7, is in range).
        const int exponent = std::max(1, highest[b] - kTop);
        if (lowest[b] - exponent + int(kE4m3ShiftBias) < int(kE4m3ShiftMin)) return std::nullopt;
        out[b] = uint8_t(exponent);
    }
    return out;
}

uint32_t fp4_block_shift_word(const uint8_t* codes, const uint8_t* exps, uint8_t block_exponent) {
    uint32_t word = uint32_t(block_exponent) << 16;
    for (int g = 0; g < 4; ++g) {
        const uint32_t shift = fp4_group_has_value(codes + g * kGroupBytes)
                                   ? uint32_t(exps[g] - block_exponent) + kE4m3ShiftBias
                                   : kE4m3ShiftBias;
        word |= shift << (4 * g);
    }
    return word;
}

}  // namespace steadymoe::cuda
