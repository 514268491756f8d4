// FP4 matrices whose every 128 x 128 block converts exactly to e4m3 codes under one power-of-two scale —
// the conversion DeepSeek-V4's FP4 x FP8 path rests on. On request such matrices' products take the FP8
// kernels' arithmetic on the GPU (grouped_gemm_sm90_fp4_exact.cuh): one tensor-core sum per 128-wide block,
// folded once, where FP4 matrices are otherwise summed and scaled per 32-wide group. Whether a matrix is
// block-exact depends on its weights alone.
#pragma once

#include "steadymoe/model/weights.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace steadymoe::cuda {

// Whether a 32-wide group's 16 bytes of packed e2m1 codes hold a nonzero value.
bool fp4_group_has_value(const uint8_t* bytes);

// Per (128-row block, 128-wide k block) of an FP4 matrix [rows][k] ([row block][k block]), the exponent b of
// the block's scale 2^(b - 127) under which each 32-wide group with a nonzero code, of e8m0 exponent e,
// becomes e4m3 codes of its values times 2^(e - b) (fp4_e4m3_word.hpp: shift e - b + 6 in [1, 12]): b is the
// largest such e less 6, and at least 1 (a normal f32 scale). Nothing where some block's groups' exponents
// span more than 11 binades (with its largest at 7 or more): the table's e4m3 codes are normal numbers, and
// subnormal ones would stretch that only to 14. A block of zeros takes 127.
std::optional<std::vector<uint8_t>> fp4_block_exponents(const WeightMatrix& w);

// A row's word for one 128-wide block of a block-exact matrix: its four groups' shifts, four bits each (a
// group of zeros takes any: the bias), then the block's exponent at bits 16..23. `codes`: the row's 64 bytes
// of the block; `exps`: its four e8m0 exponents.
uint32_t fp4_block_shift_word(const uint8_t* codes, const uint8_t* exps, uint8_t block_exponent);

}  // namespace steadymoe::cuda
