// The benchmark data generator of docs/benchmarks.md: element i of a tensor drawn from stream s with
// seed S is a fixed function of (S, s, i), so any implementation can regenerate the same inputs.
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

}  // namespace steadymoe::synthetic
