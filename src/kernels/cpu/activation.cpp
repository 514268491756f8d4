#include "steadymoe/kernels/cpu/activation.hpp"

#include "steadymoe/core/numeric.hpp"

#include <algorithm>
#include <cmath>

namespace steadymoe::cpu {

namespace {

constexpr int64_t kGroup = 128;

// The scale of values x[g0, g1) (e4m3_group_scale).
float group_scale(const float* x, int64_t g0, int64_t g1, ActivationQuant mode) {
    float amax = 0.0f;
    for (int64_t k = g0; k < g1; ++k) amax = std::max(amax, std::fabs(x[k]));
    return e4m3_group_scale(amax, mode == ActivationQuant::Fp8Pow2);
}

// The operand value of code c under scale s: q, or q * s where the scale folds (a power of two).
float operand_value(uint8_t c, float s, ActivationQuant mode) {
    const float q = e4m3_to_f32(c);
    return fp8_keeps_scales(mode) ? q : q * s;
}

}  // namespace

void quantize_row_fp8(const float* x, int64_t n, ActivationQuant mode, float* values, float* scales) {
    for (int64_t g0 = 0, g = 0; g0 < n; g0 += kGroup, ++g) {
        const int64_t g1 = std::min(n, g0 + kGroup);
        const float s = group_scale(x, g0, g1, mode);
        for (int64_t k = g0; k < g1; ++k) values[k] = operand_value(f32_to_e4m3(x[k] / s), s, mode);
        if (scales) scales[g] = fp8_keeps_scales(mode) ? s : 1.0f;
    }
}

void quantize_row_fp8_codes(const float* x, int64_t n, ActivationQuant mode, uint8_t* codes, float* scales) {
    for (int64_t g0 = 0, g = 0; g0 < n; g0 += kGroup, ++g) {
        const int64_t g1 = std::min(n, g0 + kGroup);
        const float s = group_scale(x, g0, g1, mode);
        for (int64_t k = g0; k < g1; ++k) codes[k] = f32_to_e4m3(x[k] / s);
        scales[g] = s;
    }
}

void fp8_codes_to_operand(const uint8_t* codes, const float* scales, int64_t n, ActivationQuant mode, float* values,
                          float* kept_scales) {
    for (int64_t g0 = 0, g = 0; g0 < n; g0 += kGroup, ++g) {
        const int64_t g1 = std::min(n, g0 + kGroup);
        for (int64_t k = g0; k < g1; ++k) values[k] = operand_value(codes[k], scales[g], mode);
        if (kept_scales) kept_scales[g] = fp8_keeps_scales(mode) ? scales[g] : 1.0f;
    }
}

}  // namespace steadymoe::cpu
