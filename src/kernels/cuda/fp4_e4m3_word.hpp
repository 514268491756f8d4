// The word in which FP4 weights meeting e4m3 activations are stored (expert_group.cpp packs it at upload, the
// decode kernel widens it): eight e2m1 codes that become two registers of an MMA fragment, each four e4m3 codes
// of 2^-6 times their values — exact for every e2m1 value, signed zeros too: e2m1's sign, two exponent bits
// and mantissa bit are e4m3's sign, two low exponent bits and top mantissa bit, and e2m1's subnormal 0.5 is
// e4m3's subnormal 2^-7.
//
// Why this bit order: widening is most of the FP4 decode kernel's work per stage and runs on the integer pipe.
// The first register's codes sit in the word where e4m3 wants them, so a mask makes it; the second's, in the
// bits left over, come by a rotate and a shift: five integer operations for the eight codes, where two
// codes a byte in their nibbles took seven (deepseek-v4-flash's routed experts took 4.0%, 4.3% and 6.9% less time
// at 8, 128 and 256 tokens: bench/results/2026-12-03-cuda-widening.md).
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

#if defined(__CUDACC__)
// The two registers of e4m3 codes (byte j: first[j], second[j]).
__device__ __forceinline__ uint2 e2m1x8_to_e4m3x8(uint32_t word) {
    const uint32_t first = word & 0x9C9C9C9Cu;
    const uint32_t second = (__funnelshift_r(word, word, 2) & 0x98989898u) | ((word << 2) & 0x04040404u);
    return make_uint2(first, second);
}
#endif

}  // namespace steadymoe::cuda
