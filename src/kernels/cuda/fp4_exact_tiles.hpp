// Block-exact FP4 weights (fp4_blocks.hpp) as the FP8 weights' stored tiles, so that the tiled kernel
// (grouped_gemm_sm90.cu) multiplies them as it multiplies FP8 weights: per stage, the 256 consumer threads of
// a 128-row tile (or 64 epilogue threads of a tall one, four rows each) convert one 128 x 128 block, stored
// in e4m3 order for the decode kernel (weight_layouts.hpp: fp4_e4m3_blocks, two 64-row halves), into the e4m3
// codes and the two weight scales that FP8 weights' stored tiles and block scales hold (tile_matrix). Each
// code is the e4m3 code of its value over the block's scale 2^(b - 127), exactly (fp4_e4m3_word.hpp's table):
// the same products, summed and folded as FP8 weights' are, so the same bits. Host and device code: the tests
// convert blocks on the host as the kernel does.
#pragma once

#include <cstdint>
#include <cstring>

#include "fp4_e4m3_word.hpp"
#include "grouped_gemm.hpp"

namespace steadymoe::cuda::fp4_tiles {

constexpr int kSubK = kStageK;                          // k of one stored sub-tile (a stage holds two)
constexpr int kHalfRows = kFp4E4m3HalfRows;             // rows of a stored half block
constexpr int kE4m3SubTileBytes = kTileN * kSubK;       // one e4m3 sub-tile: 128 rows x 64 codes
constexpr int kE4m3BlockBytes = 2 * kE4m3SubTileBytes;  // the block's two
constexpr int kConvertThreads = 2 * 2 * kHalfRows;      // a thread per (half, sub-tile, row)

// Byte offset of (row, k) in a block's two e4m3 sub-tiles as FP8 weights' stored tiles hold it: 64-byte
// rows in wgmma's 64-byte swizzle (16-byte chunk c of row r at chunk c ^ (r / 2 % 4)).
SMOE_HD constexpr int e4m3_tile_offset(int row, int k) {
    return k / kSubK * kE4m3SubTileBytes + row * kSubK + (((k % kSubK / 16) ^ (row >> 1 & 3)) << 4) + k % 16;
}

// A value of type T at p: one shared-memory access on the device (every address here is aligned to it).
template <class T>
SMOE_HD inline T load_as(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
    return *reinterpret_cast<const T*>(p);
#else
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
#endif
}
template <class T>
SMOE_HD inline void store_as(uint8_t* p, T v) {
#if defined(__CUDA_ARCH__)
    *reinterpret_cast<T*>(p) = v;
#else
    std::memcpy(p, &v, sizeof(T));
#endif
}

// Row r of half `half`'s sub-tile `sub` of a stage's block (`stored`: its two half blocks, one after the
// other) — 64 codes, each group's widened by its shift — as one 64-byte row of `tile` (kE4m3BlockBytes). Rows
// 0 and 8 of half 0's sub-tile 0 also write the two weight scales where the FP8 tiled kernel's fold reads them
// (`fragment_scales`: the even fragments' of 8 rows, then the odd ones'; gate and up where rows interleave,
// each from its own 128-row block).
SMOE_HD inline void convert_half_row(const uint8_t* stored, uint8_t* tile, float* fragment_scales, int half, int sub, int r) {
    const int row = half * kHalfRows + r;
    const uint8_t* half_block = stored + half * kFp4E4m3BlockBytes;
    // word 2q + g: group g's codes 4q.. and 16 + 4q.. (weight_layouts.cpp: put_in_e4m3_order)
    const uint4 low = load_as<uint4>(half_block + (sub * kHalfRows + r) * (kSubK / 2)),
                high = load_as<uint4>(half_block + (sub * kHalfRows + r) * (kSubK / 2) + 16);
    const uint32_t words[8] = {low.x, low.y, low.z, low.w, high.x, high.y, high.z, high.w};
    const uint32_t shift_word = load_as<uint32_t>(half_block + kFp4E4m3CodeBytes + r * 4);
    for (int g = 0; g < 2; ++g) {
        const E4m3Table table = e4m3_table(shift_word_group_shift(shift_word, 2 * sub + g));
        uint32_t first[4], second[4];  // k 32g + 0..15 and 32g + 16..31 of the sub-tile
        for (int q = 0; q < 4; ++q) {
            const E4m3Pair v = e2m1x8_to_e4m3_pair_by_table(words[2 * q + g], table);
            first[q] = v.first, second[q] = v.second;
        }
        store_as(tile + e4m3_tile_offset(row, kSubK * sub + 32 * g),
                 make_uint4(first[0], first[1], first[2], first[3]));
        store_as(tile + e4m3_tile_offset(row, kSubK * sub + 32 * g + 16),
                 make_uint4(second[0], second[1], second[2], second[3]));
    }
    if (half == 0 && sub == 0 && (r == 0 || r == 8)) fragment_scales[r / 8] = shift_word_block_scale(shift_word);
}

// Converting thread t's share of a stage's block: row t % 64 of half t / 128's sub-tile t / 64 % 2.
SMOE_HD inline void convert_row(const uint8_t* stored, uint8_t* tile, float* fragment_scales, int t) {
    convert_half_row(stored, tile, fragment_scales, t / (2 * kHalfRows), t / kHalfRows % 2, t % kHalfRows);
}

}  // namespace steadymoe::cuda::fp4_tiles
