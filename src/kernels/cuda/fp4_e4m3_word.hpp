// The words in which FP4 weights meeting e4m3 activations are stored (expert_group.cpp packs them at upload,
// the decode kernel widens them): for the per-32 arithmetic, eight e2m1 codes that become two registers of an
// MMA fragment, each four e4m3 codes of 2^-6 times their values — exact for every e2m1 value, signed zeros
// too: e2m1's sign, two exponent bits and mantissa bit are e4m3's sign, two low exponent bits and top
// mantissa bit, and e2m1's subnormal 0.5 is e4m3's subnormal 2^-7. (Block-exact weights: the table word
// below.)
//
// Why this bit order: widening is most of the FP4 decode kernel's work per stage and runs on the integer
// pipe. The first register's codes sit in the word where e4m3 wants them, so a mask makes it; the second's,
// in the bits left over, come by a rotate and a shift: five integer operations for the eight codes, where two
// codes a byte in their nibbles took seven (deepseek-v4-flash's routed experts took 4.0%, 4.3% and 6.9% less
// time at 8, 128 and 256 tokens: bench/results/2026-12-03-cuda-widening.md).
#pragma once

#include "steadymoe/core/numeric.hpp"

#include <cstdint>

namespace steadymoe::cuda {

// Codes are s e1 e0 m (bits 3..0). Byte j of the word holds first[j] at e4m3's places (s at bit 7, e1 e0 m at
// bits 4..2), second[j]'s e1 e0 at bits 6..5 and its m at bit 0, and at bit 1 the sign of second[j - 1]
// (second[3]'s in byte 0), which a rotate right by two brings to bit 7 of byte j - 1.
SMOE_HD constexpr uint32_t pack_e2m1x8_for_e4m3(const uint8_t (&first)[4], const uint8_t (&second)[4]) {
    uint32_t word = 0;
    for (int j = 0; j < 4; ++j) {
        const uint32_t a = first[j] & 0xFu, b = second[j] & 0xFu, previous_sign = second[(j + 3) % 4] >> 3 & 1u;
        const uint32_t byte = (a & 8u) << 4 | (a & 7u) << 2 | (b & 6u) << 4 | (b & 1u) | previous_sign << 1;
        word |= byte << (8 * j);
    }
    return word;
}

// Block-exact FP4 (expert_group.cpp: a matrix whose every 128 x 128 block converts exactly to e4m3 codes
// under one power-of-two scale, so its products take the FP8 kernels' arithmetic:
// grouped_gemm_sm90_fp4_exact.cuh): a group's codes become e4m3 codes of their values times 2^(shift - 6),
// shift in [1, 12] per row and group, by a byte table the shift builds, looked up with a byte permute. Its
// word: first[j]'s magnitude (e1 e0 m) at bits 4j .. 4j + 2 and its sign at bit 8j + 7, second[j]'s magnitude
// at bits 16 + 4j .. and its sign at bit 8j + 3, so that each register's four selectors are one masked
// half-word and its signs one masked (shifted) word.
inline constexpr uint32_t kE4m3ShiftMin = 1, kE4m3ShiftMax = 12, kE4m3ShiftBias = 6;
SMOE_HD constexpr uint32_t pack_e2m1x8_for_table(const uint8_t (&first)[4], const uint8_t (&second)[4]) {
    uint32_t word = 0;
    for (int j = 0; j < 4; ++j) {
        const uint32_t a = first[j] & 0xFu, b = second[j] & 0xFu;
        word |= (a & 7u) << (4 * j) | (a >> 3) << (8 * j + 7) | (b & 7u) << (16 + 4 * j) | (b >> 3) << (8 * j + 3);
    }
    return word;
}

// The e4m3 magnitudes of the eight e2m1 magnitudes (0, 0.5, 1, 1.5, 2, 3, 4, 6) times 2^(shift - 6), bytes
// 0..3 in lo and 4..7 in hi: 0.5 is 2^(shift - 7) (exponent field shift, a normal number for every shift from
// 1) and each step of the exponent field is 8; at shift 12, 6 * 64 = 384 (0x7C) is the largest, below e4m3's
// 448.
struct E4m3Table {
    uint32_t lo, hi;
};
SMOE_HD constexpr E4m3Table e4m3_table(uint32_t shift) {
    return {shift * 0x08080800u + 0x0C080000u, shift * 0x08080808u + 0x1C181410u};
}

// A block-exact row's word for one 128-wide block (fp4_blocks.hpp: fp4_block_shift_word), read: group g's
// shift (bits 4g..), and the block's weight scale 2^(b - 127) from its exponent b (bits 16..23). A row past
// the matrix has a word of 0, and its scale is 0, as FP8 weights' scales past the matrix are.
SMOE_HD constexpr uint32_t shift_word_group_shift(uint32_t word, int g) { return word >> (4 * g) & 0xFu; }
SMOE_HD inline float shift_word_block_scale(uint32_t word) { return f32_from_bits((word >> 16 & 0xFFu) << 23); }

// Bytes of the table selected by four 3-bit selectors (bits 4j .. 4j + 2: byte j of the result), as the GPU's
// byte permute selects them (on the host: the same selection, so that host code converts as the kernels do).
SMOE_HD inline uint32_t e4m3_table_lookup(E4m3Table table, uint32_t selectors) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(table.lo, table.hi, selectors);
#else
    const uint64_t bytes = uint64_t(table.hi) << 32 | table.lo;
    uint32_t out = 0;
    for (int j = 0; j < 4; ++j) out |= uint32_t(bytes >> (8 * (selectors >> (4 * j) & 7u)) & 0xFFu) << (8 * j);
    return out;
#endif
}

// A table word's two registers of e4m3 codes (byte j: first[j], second[j]): the byte permute reads a
// selector's low three bits (its fourth, which would replicate a byte's sign, is masked off) and the sign
// comes after.
struct E4m3Pair {
    uint32_t first, second;
};
SMOE_HD inline E4m3Pair e2m1x8_to_e4m3_pair_by_table(uint32_t word, E4m3Table table) {
    return {e4m3_table_lookup(table, word & 0x7777u) | (word & 0x80808080u),
            e4m3_table_lookup(table, (word >> 16) & 0x7777u) | ((word << 4) & 0x80808080u)};
}

#if defined(__CUDACC__)
// The same as the two registers of an MMA fragment.
__device__ __forceinline__ uint2 e2m1x8_to_e4m3x8_by_table(uint32_t word, E4m3Table table) {
    const E4m3Pair v = e2m1x8_to_e4m3_pair_by_table(word, table);
    return make_uint2(v.first, v.second);
}

// The two registers of e4m3 codes (byte j: first[j], second[j]).
__device__ __forceinline__ uint2 e2m1x8_to_e4m3x8(uint32_t word) {
    const uint32_t first = word & 0x9C9C9C9Cu;
    const uint32_t second = (__funnelshift_r(word, word, 2) & 0x98989898u) | ((word << 2) & 0x04040404u);
    return make_uint2(first, second);
}
#endif

}  // namespace steadymoe::cuda
