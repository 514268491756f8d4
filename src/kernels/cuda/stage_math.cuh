// Per-element stage arithmetic shared by the CUDA kernels, written to match the CPU backend's
// operation order (src/kernels/cpu/activation.hpp) so both backends mean the same thing.
#pragma once

#include "steadymoe/core/numeric.hpp"

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

}  // namespace steadymoe::cuda
