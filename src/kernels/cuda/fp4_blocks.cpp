#include "fp4_blocks.hpp"
#include "fp4_e4m3_word.hpp"

#include <algorithm>

namespace steadymoe::cuda {

namespace {

constexpr int64_t kGroupBytes = 16;  // 32 codes, two a byte

bool group_has_value(const uint8_t* bytes) {
    for (int64_t i = 0; i < kGroupBytes; ++i)
        if (bytes[i] & 0x77) return true;  // a magnitude other than zero, in either nibble
    return false;
}

}  // namespace

std::optional<std::vector<uint8_t>> fp4_block_exponents(const WeightMatrix& w) {
    const int64_t k_blocks = w.cols / 128, groups = w.cols / 32, row_blocks = (w.rows + 127) / 128;
    const auto* codes = static_cast<const uint8_t*>(w.data.raw());
    const auto* exps = static_cast<const uint8_t*>(w.scale.raw());
    std::vector<int> lowest(size_t(row_blocks * k_blocks), 256), highest(size_t(row_blocks * k_blocks), -1);
    for (int64_t r = 0; r < w.rows; ++r)
        for (int64_t g = 0; g < groups; ++g) {
            if (!group_has_value(codes + r * (w.cols / 2) + g * kGroupBytes)) continue;
            const size_t block = size_t((r / 128) * k_blocks + g / 4);
            const int e = exps[r * groups + g];
            lowest[block] = std::min(lowest[block], e), highest[block] = std::max(highest[block], e);
        }
    constexpr int kSpan = int(kE4m3ShiftMax - kE4m3ShiftMin), kTop = int(kE4m3ShiftMax - kE4m3ShiftBias);
    std::vector<uint8_t> out(lowest.size(), 127);
    for (size_t b = 0; b < out.size(); ++b) {
        if (highest[b] < 0) continue;
        if (highest[b] - lowest[b] > kSpan || highest[b] - kTop < 1) return std::nullopt;
        out[b] = uint8_t(highest[b] - kTop);  // the block's largest exponent takes the largest shift
    }
    return out;
}

uint32_t fp4_block_shift_word(const uint8_t* codes, const uint8_t* exps, uint8_t block_exponent) {
    uint32_t word = uint32_t(block_exponent) << 16;
    for (int g = 0; g < 4; ++g) {
        const uint32_t shift = group_has_value(codes + g * kGroupBytes)
                                   ? uint32_t(exps[g] - block_exponent) + kE4m3ShiftBias
                                   : kE4m3ShiftBias;
        word |= shift << (4 * g);
    }
    return word;
}

}  // namespace steadymoe::cuda
