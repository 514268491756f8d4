#include "steadymoe/kernels/cpu/activation.hpp"

#include "steadymoe/core/numeric.hpp"

#include <algorithm>
#include <cmath>

namespace steadymoe::cpu {

void quantize_row_fp8(const float* x, int64_t n, ActivationQuant mode, float* values, float* scales) {
    constexpr int64_t kGroup = 128;
    for (int64_t g0 = 0, g = 0; g0 < n; g0 += kGroup, ++g) {
        const int64_t g1 = std::min(n, g0 + kGroup);
        float amax = 0.0f;
        for (int64_t k = g0; k < g1; ++k) amax = std::max(amax, std::fabs(x[k]));
        // The floor keeps an all-zero group from dividing by zero (the reference does the same).
        amax = std::max(amax, 1e-4f);
        float s = amax / kE4M3Max;
        if (mode == ActivationQuant::Fp8Pow2) s = e8m0_to_f32(e8m0_from_f32_ceil(s));
        for (int64_t k = g0; k < g1; ++k) {
            const float q = e4m3_to_f32(f32_to_e4m3(x[k] / s));
            values[k] = fp8_keeps_scales(mode) ? q : q * s;
        }
        if (scales) scales[g] = fp8_keeps_scales(mode) ? s : 1.0f;
    }
}

}  // namespace steadymoe::cpu
