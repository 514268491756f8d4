// Per-token activation arithmetic between the GEMMs: FP8 quantisation of activation rows, the
// SwiGLU variants, and rounding to the activation dtype. All row-local: no value depends on
// another token.
#pragma once

#include "steadymoe/core/numeric.hpp"
#include "steadymoe/model/config.hpp"

#include <algorithm>
#include <cmath>

#include <cstdint>

namespace steadymoe::cpu {

// The dtype activations are rounded to between stages: that of the caller's hidden states.
enum class ActDType { F32, BF16 };

inline float round_act(float x, ActDType dtype) { return dtype == ActDType::BF16 ? round_to_bf16(x) : x; }

// Quantises one row of n values to e4m3 per 128-value group, DeepSeek style: amax floored at 1e-4,
// scale = amax / 448 (rounded up to a power of two for Fp8Pow2), q = e4m3(x / scale) saturating.
// Writes the exact operand values: q * scale when the scale is a power of two (folds exactly),
// otherwise q, with the scale in scales[group].
void quantize_row_fp8(const float* x, int64_t n, ActivationQuant mode, float* values, float* scales);

// The same quantisation as codes: e4m3 codes (n bytes) and every group's scale (ceil(n / 128)), whatever
// the mode — what a row needs to travel in FP8. fp8_codes_to_operand turns them back into exactly the
// values (and kept scales, when kept_scales is set) quantize_row_fp8 writes for the same row.
void quantize_row_fp8_codes(const float* x, int64_t n, ActivationQuant mode, uint8_t* codes, float* scales);
void fp8_codes_to_operand(const uint8_t* codes, const float* scales, int64_t n, ActivationQuant mode, float* values,
                          float* kept_scales);

// How many 128-value groups (scales) quantising a row of n values makes.
inline int64_t fp8_groups(int64_t n) { return (n + 127) / 128; }

// Whether quantize_row_fp8 leaves per-group scales to apply (true for Fp8Block).
inline bool fp8_keeps_scales(ActivationQuant mode) { return mode == ActivationQuant::Fp8Block; }

// SwiGLU in fp32 on rounded gate/up values: silu(gate) * up, with DeepSeek-V4's clamp when
// limit > 0 (up to [-limit, limit], gate to <= limit).
inline float swiglu(float gate, float up, float limit) {
    if (limit > 0.0f) {
        up = std::clamp(up, -limit, limit);
        gate = std::min(gate, limit);
    }
    const float silu = gate / (1.0f + std::exp(-gate));
    return silu * up;
}

}  // namespace steadymoe::cpu
