#include "weight_layouts.hpp"
#include "fp4_blocks.hpp"
#include "fp4_e4m3_word.hpp"

#include <cstring>

namespace steadymoe::cuda {

namespace {

// The row's 64 FP4 codes of one stage tile (32 bytes) in e4m3 order: word 2q + s holds group s's (k 32s
// onwards) codes 4q .. 4q + 3 and 16 + 4q .. 16 + 4q + 3, packed so that thread q of a decode MMA reads both
// its words at once and widens each into its two fragment registers (fp4_e4m3_word.hpp). Codes stay in their
// 32-wide group. Block-exact matrices (`table`) pack them for a byte table's lookup instead.
void put_in_e4m3_order(const uint8_t* src, uint8_t* dst, bool table) {
    const auto code = [&](int k) { return uint8_t((src[k / 2] >> (4 * (k % 2))) & 0xF); };
    for (int s = 0; s < 2; ++s)
        for (int q = 0; q < 4; ++q) {
            uint8_t first[4], second[4];
            for (int j = 0; j < 4; ++j) first[j] = code(32 * s + 4 * q + j), second[j] = code(32 * s + 16 + 4 * q + j);
            const uint32_t word = table ? pack_e2m1x8_for_table(first, second) : pack_e2m1x8_for_e4m3(first, second);
            std::memcpy(dst + 4 * (2 * q + s), &word, 4);  // little-endian, as the GPU reads it
        }
}

}  // namespace

int64_t stage_tile_bytes(WeightCode code) {
    return kTileN * (code == WeightCode::Bf16 ? kStageK * 2 : code == WeightCode::Fp8 ? kStageK : kStageK / 2);
}

void tile_matrix(const uint8_t* rows, int64_t n, int64_t k, WeightCode code, std::vector<uint8_t>& out) {
    const int64_t n_tiles = (n + kTileN - 1) / kTileN, k_tiles = k / kStageK, tile = stage_tile_bytes(code);
    const int64_t row_bytes = tile / kTileN * k_tiles;  // bytes of one stored row
    const int64_t slice = tile / kTileN;                // bytes of one row within a stage tile
    out.resize(size_t(n_tiles * k_tiles * tile));
    for (int64_t nt = 0; nt < n_tiles; ++nt)
        for (int64_t kt = 0; kt < k_tiles; ++kt) {
            uint8_t* dst = out.data() + (nt * k_tiles + kt) * tile;
            for (int64_t r = 0; r < kTileN; ++r) {
                if (nt * kTileN + r >= n) {
                    std::memset(dst + r * slice, 0, size_t(slice));
                    continue;
                }
                const uint8_t* src = rows + (nt * kTileN + r) * row_bytes + kt * slice;
                if (code == WeightCode::Fp4) {
                    std::memcpy(dst + r * slice, src, size_t(slice));
                    continue;
                }
                // 16-byte chunks, XOR-swizzled by row: bf16 by r % 8, FP8 by (r / 2) % 4.
                const int64_t chunks = slice / 16, key = code == WeightCode::Bf16 ? (r & 7) : ((r >> 1) & 3);
                for (int64_t c = 0; c < chunks; ++c) std::memcpy(dst + r * slice + ((c ^ key) << 4), src + c * 16, 16);
            }
        }
}

void fp4_e4m3_blocks(const uint8_t* rows, const uint8_t* scales, int64_t n, int64_t k,
                     const std::vector<const uint8_t*>& block_exps, std::vector<uint8_t>& out) {
    constexpr int64_t kHalfRows = kFp4E4m3HalfRows;
    static_assert(kFp4E4m3CodeBytes == 2 * kHalfRows * kStageK / 2, "two stage tiles' codes, then the exponents");
    const bool exact = !block_exps.empty();
    const int64_t halves = (n + kTileN - 1) / kTileN * 2, k_blocks = k / 128;
    out.resize(size_t(halves * k_blocks * kFp4E4m3BlockBytes));
    for (int64_t h = 0; h < halves; ++h)
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
            uint8_t* block = out.data() + (h * k_blocks + kb) * kFp4E4m3BlockBytes;
            for (int64_t r = 0; r < kHalfRows; ++r) {
                const int64_t row = h * kHalfRows + r;
                if (row >= n) {  // a padding row: zero codes and exponents
                    for (int64_t sub = 0; sub < 2; ++sub)
                        std::memset(block + (sub * kHalfRows + r) * (kStageK / 2), 0, kStageK / 2);
                    std::memset(block + kFp4E4m3CodeBytes + r * 4, 0, 4);
                    continue;
                }
                const uint8_t* codes = rows + row * (k / 2) + kb * (2 * kStageK / 2);
                for (int64_t sub = 0; sub < 2; ++sub)
                    put_in_e4m3_order(codes + sub * (kStageK / 2), block + (sub * kHalfRows + r) * (kStageK / 2), exact);
                uint8_t* exps = block + kFp4E4m3CodeBytes + r * 4;
                if (!exact) {
                    std::memcpy(exps, scales + row * (k / 32) + kb * 4, 4);
                    continue;
                }
                const uint32_t word = fp4_block_shift_word(codes, scales + row * (k / 32) + kb * 4, block_exps[size_t(row)][kb]);
                std::memcpy(exps, &word, 4);
            }
        }
}

void tile_fp4_scales(const uint8_t* scales, int64_t n, int64_t k, std::vector<uint8_t>& out) {
    const int64_t n_tiles = (n + kTileN - 1) / kTileN, k_blocks = k / 128;
    out.resize(size_t(n_tiles * k_blocks * kTileN * 4));
    for (int64_t nt = 0; nt < n_tiles; ++nt)
        for (int64_t kb = 0; kb < k_blocks; ++kb)
            for (int64_t r = 0; r < kTileN; ++r) {
                uint8_t* dst = out.data() + ((nt * k_blocks + kb) * kTileN + r) * 4;
                if (nt * kTileN + r < n) std::memcpy(dst, scales + (nt * kTileN + r) * (k / 32) + kb * 4, 4);
                else std::memset(dst, 0, 4);
            }
}

}  // namespace steadymoe::cuda
