#include <type_traits>

#include "steadymoe/core/numeric.hpp"

#include "combine_piece.cuh"
#include "dependent_launch.cuh"
#include "layer_kernels.hpp"
#include "stage_math.cuh"

namespace steadymoe::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

// One thread per (row, 128-value group): the CPU's quantize_row_fp8, operation for operation.
__global__ void gather_quant_kernel(const float* src, int64_t stride, const int64_t* rows, int64_t m, int64_t k,
                                    int mode, float* values, float* scales) {
    const int64_t groups = (k + 127) / 128;
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= m * groups) return;
    const int64_t r = i / groups, g0 = (i % groups) * 128, g1 = min(k, g0 + 128);
    const float* row = src + (rows ? rows[r] : r) * stride;
    float* out = values + r * k;
    if (mode == 0) {
        for (int64_t c = g0; c < g1; ++c) out[c] = row[c];
        return;
    }
    float amax = 0.0f;
    for (int64_t c = g0; c < g1; ++c) {
        const float v = abs_f32(row[c]);
        amax = amax < v ? v : amax;  // as std::max: a NaN never becomes the maximum
    }
    const float s = e4m3_group_scale(amax, mode == 2);
    const bool keep = mode == 1;
    for (int64_t c = g0; c < g1; ++c) {
        const float q = e4m3_to_f32(f32_to_e4m3(row[c] / s));
        out[c] = keep ? q : q * s;
    }
    if (scales) scales[r * groups + i % groups] = keep ? s : 1.0f;
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t m, int64_t width, const float* weights,
                              float limit, bool before, bool bf16, float* out) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= m * width) return;
    out[i] = swiglu_stage(gate[i], up[i], limit, before, before ? weights[i / width] : 1.0f, bf16);
}

__global__ void scatter_kernel(const float* down, int64_t m, int64_t h, const int64_t* dest, const float* weights,
                               bool before, bool bf16, float* contributions) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= m * h) return;
    const int64_t r = i / h, n = i % h;
    const float v = down[i];
    contributions[dest[r] * h + n] = round_act(before ? v : weights[r] * v, bf16);
}

// The slots in ascending order, then the shared expert: the CPU layer's combine, operation for operation
// (combine_piece.cuh). C: the contributions' element, f32 or bf16 bits (each contribution is rounded to the
// activation dtype). A thread sums kVec consecutive features (8 where h allows: vector loads and stores).
template <typename C, int kVec>
__global__ void __launch_bounds__(kThreads) combine_kernel(const C* routed, const int64_t* index, const C* shared,
                                                           int64_t t, int64_t k, int64_t h, const uint8_t* active,
                                                           bool bf16, void* out) {
    begin_dependent_kernel();
    const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
    if (i < t * h) combine_piece<C, kVec>(routed, index, shared, i, k, h, active, bf16, out);
}

template <typename C>
cudaError_t launch_combine_of(const C* routed, const int64_t* index, const C* shared, int64_t t, int64_t k, int64_t h,
                              const uint8_t* active, bool bf16, void* out, cudaStream_t stream) {
    if (t * h == 0) return cudaSuccess;
    const bool by8 = h % 8 == 0;
    return launch_dependent(by8 ? combine_kernel<C, 8> : combine_kernel<C, 1>, blocks_for(by8 ? t * h / 8 : t * h), kThreads, 0,
                            stream, routed, index, shared, t, k, h, active, bf16, out);
}

}  // namespace

cudaError_t launch_gather_quant(const float* src, int64_t stride, const int64_t* rows, int64_t m, int64_t k,
                                int quant_mode, float* values, float* scales, cudaStream_t stream) {
    const int64_t n = m * ((k + 127) / 128);
    if (n > 0) gather_quant_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, stride, rows, m, k, quant_mode, values, scales);
    return cudaGetLastError();
}

cudaError_t launch_swiglu(const float* gate, const float* up, int64_t m, int64_t width, const float* weights,
                          float limit, bool weight_before_down, bool bf16, float* out, cudaStream_t stream) {
    if (m * width > 0)
        swiglu_kernel<<<blocks_for(m * width), kThreads, 0, stream>>>(gate, up, m, width, weights, limit,
                                                                      weight_before_down, bf16, out);
    return cudaGetLastError();
}

cudaError_t launch_scatter(const float* down, int64_t m, int64_t h, const int64_t* destinations, const float* weights,
                           bool weight_before_down, bool bf16, float* contributions, cudaStream_t stream) {
    if (m * h > 0)
        scatter_kernel<<<blocks_for(m * h), kThreads, 0, stream>>>(down, m, h, destinations, weights,
                                                                   weight_before_down, bf16, contributions);
    return cudaGetLastError();
}

cudaError_t launch_combine(const void* contributions, bool contributions_bf16, int64_t t, int64_t k, int64_t h,
                           const uint8_t* active, bool has_shared, bool bf16, void* out, cudaStream_t stream) {
    if (contributions_bf16) {
        const auto* c = static_cast<const uint16_t*>(contributions);
        return launch_combine_of(c, nullptr, has_shared ? c + t * k * h : nullptr, t, k, h, active, bf16, out, stream);
    }
    const auto* c = static_cast<const float*>(contributions);
    return launch_combine_of(c, nullptr, has_shared ? c + t * k * h : nullptr, t, k, h, active, bf16, out, stream);
}

cudaError_t launch_combine_indexed(const float* routed, const int64_t* index, const float* shared, int64_t t, int64_t k,
                                   int64_t h, const uint8_t* active, bool bf16, void* out, cudaStream_t stream) {
    return launch_combine_of(routed, index, shared, t, k, h, active, bf16, out, stream);
}

}  // namespace steadymoe::cuda
