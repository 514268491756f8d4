// The benchmark data generator: element i of a tensor drawn from stream s with seed S is a fixed function of
// (S, s, i), so any implementation can regenerate the same inputs. Element i (the row-major flat index,
// 64-bit):
//   key = lowbias32(S * 0x9E3779B1 + s * 0x85EBCA77 + 0x165667B1)             (uint32 arithmetic throughout)
//   h_lane = lowbias32(lowbias32(uint32(c) ^ key) ^ uint32(c >> 32)) for c = 2i + lane (mod 2^64), lane 0, 1
//   n = lo16(h_0) + hi16(h_0) + lo16(h_1) + hi16(h_1)                          (in [0, 262140])
//   value = float32(n - 131070) * float32(std / sqrt((65536^2 - 1) / 3)), rounded to nearest-even into the
//   tensor's dtype
// with lowbias32(x): x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16.
#pragma once

#include "steadymoe/core/tensor.hpp"

#include <cstdint>

namespace steadymoe::synthetic {

// Stream numbers shared with other implementations.
enum Stream : uint32_t {
    kHidden = 0,        // x [T, H] bf16, std 1
    kRouterLogits = 1,  // [T, E] fp32, std 1
    kGateUp = 2,        // [E, 2I, H] bf16, std 0.02 (rows 0..I-1 gate, I..2I-1 up)
    kDown = 3,          // [E, H, I] bf16, std 0.02
    kFillerHidden = 4,
    kFillerLogits = 5,
    kRouter = 6,        // [E, H] bf16, std 0.02
    kBias = 7,          // [E] fp32, std 0.01
    kSharedGateUp = 8,  // [2 Is, H] bf16, std 0.02
    kSharedDown = 9,    // [H, Is] bf16, std 0.02
};

uint32_t lowbias32(uint32_t x);
// The float32 value of element `index` (before rounding to the tensor's dtype).
float value(uint32_t seed, uint32_t stream, uint64_t index, float stddev);
// A whole tensor (F32 or BF16), elements index_offset .. index_offset + numel - 1 of the stream.
Tensor tensor(DType dtype, Shape shape, uint32_t seed, uint32_t stream, float stddev, uint64_t index_offset = 0);
// Elements index_offset .. index_offset + n - 1 into out, each rounded to bf16 and widened back: the f32
// values of a BF16 tensor of the stream (what a quantiser reads), into a buffer the caller keeps, on this
// thread.
void fill_bf16_as_f32(float* out, int64_t n, uint32_t seed, uint32_t stream, float stddev, uint64_t index_offset);

}  // namespace steadymoe::synthetic
