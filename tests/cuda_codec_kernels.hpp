// The host test's entry to the device codec kernel (plain types only).
#pragma once

#include <cstdint>

namespace steadymoe::test {

enum CodecOp : int {
    kDecodeE4M3,
    kEncodeE4M3,
    kDecodeE2M1,
    kEncodeE2M1,
    kDecodeE8M0,
    kCeilE8M0,
    kEncodeBf16,
    kEncodeF16,
    kDecodeF16,
};

// Applies `which` to every input (float bits or a code) on the GPU; 0 on success.
int run_codec_on_device(const uint32_t* in, uint32_t* out, int64_t n, int which);

enum Widening : int {
    kE4m3ToBf16,  // four e4m3 codes to four bf16 (two words out)
    kE2m1ToBf16,  // eight e2m1 codes with e8m0 exponent scales[i] to eight bf16 (four words out)
    kE2m1ToE4m3,  // a packed word of eight e2m1 codes (fp4_e4m3_word.hpp) to eight e4m3 codes of 2^-6 times their values (two words out)
    kE2m1ToE4m3ByTable,  // a table word (pack_e2m1x8_for_table) to eight e4m3 codes of 2^(scales[i] - 6) times their values (two words out)
};
// The tensor-core kernels' weight widening `how` on the GPU, per input word.
int run_widen_on_device(const uint32_t* codes, const uint32_t* scales, uint32_t* out, int64_t n, Widening how);

// The kernels' packed conversions by the hardware: four floats to e4m3 codes (f32x4_to_e4m3x4), two to bf16
// (f32x2_to_bf16x2, and round_act one at a time).
enum class PackedConversion { E4m3x4, Bf16x2 };
// Every float32 bit pattern (2^32) through one of them, against the codec on the GPU: the number that differ
// (0 on success), the first in *first_bits; -1 on a CUDA error.
int64_t count_packed_mismatches(PackedConversion which, uint32_t* first_bits);

}  // namespace steadymoe::test
