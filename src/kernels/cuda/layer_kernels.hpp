// The element-wise stages of the CUDA layer, between the GEMMs: gathering (and FP8-quantising)
// activation rows, SwiGLU, scattering expert contributions, and the combine. Plain pointers and
// sizes only; every kernel is row-local, so no token's result depends on another's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace steadymoe::cuda {

// quant_mode: 0 none, 1 fp8 with per-128 scales kept, 2 fp8 with power-of-two scales folded in.
cudaError_t launch_gather_quant(const float* src, int64_t stride, const int64_t* rows, int64_t m, int64_t k,
                                int quant_mode, float* values, float* scales, cudaStream_t stream);

cudaError_t launch_swiglu(const float* gate, const float* up, int64_t m, int64_t width, const float* weights,
                          float limit, bool weight_before_down, bool bf16, float* out, cudaStream_t stream);

cudaError_t launch_scatter(const float* down, int64_t m, int64_t h, const int64_t* destinations,
                           const float* weights, bool weight_before_down, bool bf16, float* contributions,
                           cudaStream_t stream);

// out: [T][H] float32 or bf16 bits; masked tokens become zeros. Contributions [T*K + T][H] (f32, or bf16
// bits when contributions_bf16): token t's slots at rows t*K .. t*K+K-1, its shared expert (when has_shared)
// at row T*K + t. rows_initialised: every row holds initialised memory, a masked token's too (stale values are
// fine: they are not added), so that decode batches may load a token's rows beside its mask, not after it.
cudaError_t launch_combine(const void* contributions, bool contributions_bf16, int64_t t, int64_t k, int64_t h,
                           const uint8_t* active, bool has_shared, bool bf16, void* out, cudaStream_t stream,
                           bool rows_initialised = false);

// The same sums with slot s of token t read from row index[t*K + s] of `routed` (rows t*K + s when
// index is null) and the shared expert from row t of `shared` (none when null): for contributions
// that arrived from other GPUs in their own order.
cudaError_t launch_combine_indexed(const float* routed, const int64_t* index, const float* shared, int64_t t, int64_t k,
                                   int64_t h, const uint8_t* active, bool bf16, void* out, cudaStream_t stream);

}  // namespace steadymoe::cuda
