// How the expert weights lie in GPU memory (expert_group.cpp uploads them so; the kernels read them so):
// the stored tiles of the tiled kernel, FP4 weights in e4m3 order for the kernels that meet e4m3 tokens, and
// FP4 scale tiles. Host code: it lays out a matrix's bytes, and the tests read the same layouts.
#pragma once

#include "grouped_gemm.hpp"

#include <cstdint>
#include <vector>

namespace steadymoe::cuda {

// Stored bytes of one stage tile: kTileN rows x 64 k values.
int64_t stage_tile_bytes(WeightCode code);

// Each layout below is written into `out`, resized to it, every byte written (padding rows as zeros): a
// buffer reused from an earlier matrix needs no clearing. The uploads reuse theirs, since a large buffer's
// first writes cost its page faults, several times the writes themselves.

// The device layout of one matrix, from its rows in the order the GEMM uses ([n][row bytes]): n-tiles of
// kTileN rows (the last padded with zero rows), each a run of K/64 stage tiles, so every stage the
// kernel loads is one contiguous block. bf16 and FP8 tiles are stored swizzled — byte o of a tile is what
// byte o of the shared-memory stage holds (128-byte rows in the 128-byte swizzle, 64-byte FP8 rows in
// the 64-byte swizzle that Hopper's FP8 MMAs read) — FP4 tiles row-major.
void tile_matrix(const uint8_t* rows, int64_t n, int64_t k, WeightCode code, std::vector<uint8_t>& out);

// FP4 rows in e4m3 order ([n][k/2] codes and [n][k/32] e8m0 scales in GEMM row order) as one run per 64-row
// half of an n-tile (the rows of one CTA of the e4m3 kernel, grouped_gemm_sm90_decode.cu), of one block per
// 128-wide k block: its two stage tiles' codes (64 rows x 32 bytes each, put_in_e4m3_order) then the rows'
// four exponents (64 x 4 bytes). Rows past n are zeros. Block-exact matrices give row r's 128-row block's
// exponents ([k/128]) at block_exps[r], and each row's four exponents become its shift word (fp4_blocks.hpp).
void fp4_e4m3_blocks(const uint8_t* rows, const uint8_t* scales, int64_t n, int64_t k,
                     const std::vector<const uint8_t*>& block_exps, std::vector<uint8_t>& out);

// FP4 e8m0 scales ([n][k/32] in GEMM row order) per (n-tile, 128-wide k block): kTileN rows x 4 bytes.
void tile_fp4_scales(const uint8_t* scales, int64_t n, int64_t k, std::vector<uint8_t>& out);

}  // namespace steadymoe::cuda
