#include "steadymoe/core/numeric.hpp"

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
    amax = amax < 1e-4f ? 1e-4f : amax;
    float s = amax / kE4M3Max;
    if (mode == 2) s = e8m0_to_f32(e8m0_from_f32_ceil(s));
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

// kVec consecutive elements of a row of contributions (f32 or bf16 bits) as floats: one 16-byte load
// per 8 bf16 or 4 f32 where kVec is 8.
template <int kVec>
__device__ __forceinline__ void load_row(const float* p, float (&v)[kVec]) {
    if constexpr (kVec == 8) {
        const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[j] = p[j];
    }
}
template <int kVec>
__device__ __forceinline__ void load_row(const uint16_t* p, float (&v)[kVec]) {
    if constexpr (kVec == 8) {
        const uint4 a = *reinterpret_cast<const uint4*>(p);
        const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) v[2 * j] = bf16_to_f32(uint16_t(w[j])), v[2 * j + 1] = bf16_to_f32(uint16_t(w[j] >> 16));
    } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[j] = bf16_to_f32(p[j]);
    }
}

// The slots in ascending order, then the shared expert: the CPU layer's combine, operation for operation.
// C: the contributions' element, f32 or bf16 bits (each contribution is rounded to the activation dtype).
// A thread sums kVec consecutive features (8 where h allows: vector loads and stores).
template <typename C, int kVec>
__global__ void combine_kernel(const C* routed, const int64_t* index, const C* shared, int64_t t, int64_t k,
                               int64_t h, const uint8_t* active, bool bf16, void* out) {
    begin_dependent_kernel();
    const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
    if (i >= t * h) return;
    const int64_t tok = i / h, n = i % h;
    float acc[kVec] = {};
    // The slots' rows are found, then loaded, kChunk slots at a time before any is added (the same sums in
    // the same order): a decode token's slot indices and rows come from L2 or DRAM, and each slot's two
    // dependent loads in turn made the one-token combine a chain of latencies: now the token's mask, its
    // indices, then its rows.
    constexpr int kChunk = 8;
    const bool live = active[tok] != 0;
    float from_shared[kVec];  // loaded with the slots', added after them
    if (live && shared) load_row<kVec>(shared + tok * h + n, from_shared);
    for (int64_t s0 = 0; live && s0 < k; s0 += kChunk) {
        int64_t row[kChunk];
#pragma unroll
        for (int q = 0; q < kChunk; ++q) {
            const int64_t slot = tok * k + s0 + q;
            row[q] = s0 + q < k ? (index ? index[slot] : slot) : 0;
        }
        float v[kChunk][kVec];
#pragma unroll
        for (int q = 0; q < kChunk; ++q)
            if (s0 + q < k) load_row<kVec>(routed + row[q] * h + n, v[q]);
#pragma unroll
        for (int q = 0; q < kChunk; ++q)
            if (s0 + q < k)
#pragma unroll
                for (int j = 0; j < kVec; ++j) acc[j] += v[q][j];
    }
    if (live && shared)
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[j] += from_shared[j];
    if (bf16) {
        uint16_t b[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) b[j] = live ? f32_to_bf16(acc[j]) : uint16_t(0);
        uint16_t* o = static_cast<uint16_t*>(out) + i;
        if constexpr (kVec == 8)
            *reinterpret_cast<uint4*>(o) = make_uint4(b[0] | uint32_t(b[1]) << 16, b[2] | uint32_t(b[3]) << 16,
                                                      b[4] | uint32_t(b[5]) << 16, b[6] | uint32_t(b[7]) << 16);
        else
            for (int j = 0; j < kVec; ++j) o[j] = b[j];
    } else {
        float* o = static_cast<float*>(out) + i;
        if constexpr (kVec == 8) {
            reinterpret_cast<float4*>(o)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
            reinterpret_cast<float4*>(o)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
        } else {
            for (int j = 0; j < kVec; ++j) o[j] = acc[j];
        }
    }
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
