// Per-element stage arithmetic shared by the CUDA kernels, written to match the CPU backend's
// operation order (src/kernels/cpu/activation.hpp) so both backends mean the same thing.
#pragma once

#include "steadymoe/core/numeric.hpp"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace steadymoe::cuda {

// How the epilogues round to bf16, the same bits either way: by the codec's integer operations
// (f32_to_bf16), or from sm_80 on by the hardware's conversion (round to nearest even, subnormals kept),
// where a NaN gets the codec's bits (the float's top half with the quiet bit set; the hardware gives one
// canonical NaN) by a select, not a branch. The hardware's takes one conversion and a few selects per pair
// where the codec takes seven integer operations a value, and leaves no slow path beside every output of the
// unrolled epilogues (the GPU test CudaCodecs.HardwareBf16ConversionMatchesTheCodecOnEveryFloat runs all
// 2^32 inputs through it). Decode CTAs of at most 32 tokens keep the codec's: their epilogues are a sliver
// of their time, and the hardware's conversion reshuffled their registers (one run had a one-token batch 5%
// slower, not replicated; bench/results/2026-12-04-cuda-epilogues.md).
enum class Bf16Rounding { Codec, Hardware };

// Two floats as bf16 bits, a in the low half.
template <Bf16Rounding kHow = Bf16Rounding::Hardware>
__device__ __forceinline__ uint32_t f32x2_to_bf16x2(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (kHow == Bf16Rounding::Hardware) {
        const __nv_bfloat162 pair = __floats2bfloat162_rn(a, b);
        const uint32_t converted = *reinterpret_cast<const uint32_t*>(&pair);
        const uint32_t codec_nan = __byte_perm(f32_bits(a), f32_bits(b), 0x7632) | 0x00400040u;
        const uint32_t nan_halves = (a != a ? 0x0000FFFFu : 0u) | (b != b ? 0xFFFF0000u : 0u);
        return (converted & ~nan_halves) | (codec_nan & nan_halves);
    }
#endif
    return uint32_t(f32_to_bf16(a)) | uint32_t(f32_to_bf16(b)) << 16;
}

// Two bf16 values (a in the low half) as the floats they are.
__device__ __forceinline__ float2 bf16x2_to_f32x2(uint32_t pair) {
    return make_float2(f32_from_bits(pair << 16), f32_from_bits(pair & 0xFFFF0000u));
}

// x rounded to the activation dtype (round_to_bf16's bits), or x.
template <Bf16Rounding kHow = Bf16Rounding::Hardware>
__device__ __forceinline__ float round_act(float x, bool bf16) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (kHow == Bf16Rounding::Hardware) {
        if (!bf16) return x;
        const float converted = __bfloat162float(__float2bfloat16_rn(x));
        return x != x ? f32_from_bits((f32_bits(x) & 0xFFFF0000u) | 0x00400000u) : converted;
    }
#endif
    return bf16 ? round_to_bf16(x) : x;
}

// SwiGLU of one (gate, up) pair as a stage output: inputs rounded to the activation dtype, the
// optional clamp (up to [-limit, limit], gate to at most limit; NaN passes through), silu(g) * u,
// the routing weight applied here when it comes before the down projection, and the final rounding.
template <Bf16Rounding kHow = Bf16Rounding::Hardware>
__device__ __forceinline__ float swiglu_stage(float gate, float up, float limit, bool weight_before, float weight,
                                              bool bf16) {
    float g = round_act<kHow>(gate, bf16), u = round_act<kHow>(up, bf16);
    if (limit > 0.0f) {
        u = u < -limit ? -limit : (limit < u ? limit : u);  // as std::clamp
        g = limit < g ? limit : g;                           // as std::min(g, limit)
    }
    float h = g / (1.0f + expf(-g)) * u;
    if (weight_before) h = weight * h;
    return round_act<kHow>(h, bf16);
}

// Four floats to e4m3 codes, value j in byte j: f32_to_e4m3's bits for every float. From sm_89 on by the
// hardware's conversion (round to nearest even, saturating to ±448: the codec's rounding and clamp; the GPU
// test CudaCodecs.HardwareE4m3ConversionMatchesTheCodecOnEveryFloat runs all 2^32 inputs), two values per
// instruction where the codec takes a dozen with a branch; a NaN's byte is then replaced by the codec's code
// (sign | 0x7F) with selects, no branch (a branch a value cost the row quantiser most of its time).
__device__ __forceinline__ uint32_t f32x4_to_e4m3x4(float a, float b, float c, float d) {
    const float v[4] = {a, b, c, d};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t codes = uint32_t(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3)) |
                     uint32_t(__nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3)) << 16;
    uint32_t nan_bytes = 0, nan_codes = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t u = f32_bits(v[j]);
        nan_bytes |= (u & 0x7FFFFFFFu) > 0x7F800000u ? 0xFFu << (8 * j) : 0u;
        nan_codes |= ((u >> 24 & 0x80u) | 0x7Fu) << (8 * j);
    }
    return (codes & ~nan_bytes) | (nan_codes & nan_bytes);
#else
    uint32_t codes = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) codes |= uint32_t(f32_to_e4m3(v[j])) << (8 * j);
    return codes;
#endif
}

}  // namespace steadymoe::cuda
