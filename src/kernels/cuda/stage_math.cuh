// Per-element stage arithmetic shared by the CUDA kernels, written to match the CPU backend's
// operation order (src/kernels/cpu/activation.hpp) so both backends mean the same thing.
#pragma once

#include "steadymoe/core/numeric.hpp"

#include <cuda_fp8.h>

namespace steadymoe::cuda {

__device__ __forceinline__ float round_act(float x, bool bf16) { return bf16 ? round_to_bf16(x) : x; }

// SwiGLU of one (gate, up) pair as a stage output: inputs rounded to the activation dtype, the
// optional clamp (up to [-limit, limit], gate to at most limit; NaN passes through), silu(g) * u,
// the routing weight applied here when it comes before the down projection, and the final rounding.
__device__ __forceinline__ float swiglu_stage(float gate, float up, float limit, bool weight_before, float weight,
                                              bool bf16) {
    float g = round_act(gate, bf16), u = round_act(up, bf16);
    if (limit > 0.0f) {
        u = u < -limit ? -limit : (limit < u ? limit : u);  // as std::clamp
        g = limit < g ? limit : g;                           // as std::min(g, limit)
    }
    float h = g / (1.0f + expf(-g)) * u;
    if (weight_before) h = weight * h;
    return round_act(h, bf16);
}

// Four floats to e4m3 codes, value j in byte j: f32_to_e4m3's bits for every float. From sm_89 on by the
// hardware's conversion (round to nearest even, saturating to ±448: the codec's rounding and clamp; the GPU
// test CudaCodecs.HardwareE4m3ConversionMatchesTheCodecOnEveryFloat runs all 2^32 inputs), two values per
// instruction where the codec takes a dozen with a branch; NaN keeps the codec's code (sign | 0x7F).
__device__ __forceinline__ uint32_t f32x4_to_e4m3x4(float a, float b, float c, float d) {
    const float v[4] = {a, b, c, d};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t codes = uint32_t(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3)) |
                     uint32_t(__nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3)) << 16;
#pragma unroll
    for (int j = 0; j < 4; ++j)
        if (v[j] != v[j]) codes = (codes & ~(0xFFu << (8 * j))) | uint32_t(f32_to_e4m3(v[j])) << (8 * j);
    return codes;
#else
    uint32_t codes = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) codes |= uint32_t(f32_to_e4m3(v[j])) << (8 * j);
    return codes;
#endif
}

}  // namespace steadymoe::cuda
