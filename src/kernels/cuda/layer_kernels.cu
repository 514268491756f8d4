#include <type_traits>

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

// kVec consecutive elements of a row of contributions (f32, or bf16 bits) as loaded: one 16-byte load per 8
// bf16 or 4 f32 where kVec is 8. They stay as loaded (half the registers for bf16) until added.
template <typename C, int kVec>
struct RowPiece {
    static constexpr int kWords = kVec == 8 ? kVec * int(sizeof(C)) / 16 : 1;  // 16-byte words, or one element
    using Word = std::conditional_t<kVec == 8, uint4, C>;
    static_assert(kVec == 8 ? kWords * 16 == kVec * int(sizeof(C)) : kVec == 1, "whole 16-byte words, or one element");
    Word w[kVec == 8 ? kWords : kVec];

    __device__ __forceinline__ void load(const C* p) {
        if constexpr (kVec == 8) {
#pragma unroll
            for (int j = 0; j < kWords; ++j) w[j] = reinterpret_cast<const uint4*>(p)[j];
        } else {
#pragma unroll
            for (int j = 0; j < kVec; ++j) w[j] = p[j];
        }
    }
    // acc[j] += element j, in order j = 0, 1, ...
    __device__ __forceinline__ void add_to(float (&acc)[kVec]) const {
        if constexpr (kVec != 8) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) acc[j] += value(w[j]);
        } else {
#pragma unroll
            for (int j = 0; j < kWords; ++j) {
                const uint32_t u[4] = {w[j].x, w[j].y, w[j].z, w[j].w};
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    if constexpr (sizeof(C) == 2) {
                        acc[8 * j + 2 * q] += bf16_to_f32(uint16_t(u[q]));
                        acc[8 * j + 2 * q + 1] += bf16_to_f32(uint16_t(u[q] >> 16));
                    } else {
                        acc[4 * j + q] += __uint_as_float(u[q]);
                    }
                }
            }
        }
    }

private:
    __device__ __forceinline__ static float value(float v) { return v; }
    __device__ __forceinline__ static float value(uint16_t v) { return bf16_to_f32(v); }
};

// The slots in ascending order, then the shared expert: the CPU layer's combine, operation for operation.
// C: the contributions' element, f32 or bf16 bits (each contribution is rounded to the activation dtype).
// A thread sums kVec consecutive features (8 where h allows: vector loads and stores). kEagerRows (decode
// batches whose every row is initialised: launch_combine's rows_initialised): the slots' rows are loaded
// beside the token's mask, not after it (a masked token's are loaded and not added), so that a decode token
// waits on one trip to L2, not two: the kernel 0.0-0.3 µs shorter at one token, the layers level
// (H100, bench/results/2026-12-07-cuda-one-token-permute.md).
template <typename C, int kVec, bool kEagerRows>
__global__ void __launch_bounds__(kThreads) combine_kernel(const C* routed, const int64_t* index, const C* shared,
                                                           int64_t t, int64_t k, int64_t h, const uint8_t* active,
                                                           bool bf16, void* out) {
    begin_dependent_kernel();
    const int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
    if (i >= t * h) return;
    const int64_t tok = i / h, n = i % h;
    float acc[kVec] = {};
    // The token's mask, then its slots' indices, then their rows (with kEagerRows the rows' loads do not wait
    // for the mask): kChunk slots' loads are issued before any is added (the same sums in the same order), so
    // that neither a decode token's chain of dependent loads nor a prefill thread waits on one row at a time.
    // Every load of a chunk is issued: a slot past k reads slot k - 1 again and is not added. (Loads guarded by
    // the slot's test compiled to a branch around each, and registers reused load after load: one row in flight
    // per thread, and the prefill combine took 2.2x its time: 334 against 148 µs for qwen3 at 16384 tokens.)
    constexpr int kChunk = 8;
    const bool live = active[tok] != 0;
    RowPiece<C, kVec> from_shared;  // loaded with the slots', added after them
    if ((kEagerRows || live) && shared) from_shared.load(shared + tok * h + n);
    for (int64_t s0 = 0; (kEagerRows || live) && s0 < k; s0 += kChunk) {
        int64_t row[kChunk];
#pragma unroll
        for (int q = 0; q < kChunk; ++q) {
            const int64_t slot = tok * k + min(s0 + q, k - 1);
            row[q] = index ? index[slot] : slot;
        }
        RowPiece<C, kVec> v[kChunk];
#pragma unroll
        for (int q = 0; q < kChunk; ++q) v[q].load(routed + row[q] * h + n);
#pragma unroll
        for (int q = 0; q < kChunk; ++q)
            if (live && s0 + q < k) v[q].add_to(acc);
    }
    if (live && shared) from_shared.add_to(acc);
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

// Batches of at most this many tokens load their slots' rows beside their masks (combine_kernel's kEagerRows);
// larger ones after them, so that a masked token costs no loads.
constexpr int64_t kEagerCombineTokens = 64;

template <typename C>
cudaError_t launch_combine_of(const C* routed, const int64_t* index, const C* shared, int64_t t, int64_t k, int64_t h,
                              const uint8_t* active, bool bf16, void* out, cudaStream_t stream, bool rows_initialised = false) {
    if (t * h == 0) return cudaSuccess;
    const bool by8 = h % 8 == 0, eager = rows_initialised && !index && t <= kEagerCombineTokens;
    auto kernel = by8 ? (eager ? combine_kernel<C, 8, true> : combine_kernel<C, 8, false>)
                      : (eager ? combine_kernel<C, 1, true> : combine_kernel<C, 1, false>);
    return launch_dependent(kernel, blocks_for(by8 ? t * h / 8 : t * h), kThreads, 0, stream, routed, index, shared, t, k, h,
                            active, bf16, out);
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
                           const uint8_t* active, bool has_shared, bool bf16, void* out, cudaStream_t stream,
                           bool rows_initialised) {
    if (contributions_bf16) {
        const auto* c = static_cast<const uint16_t*>(contributions);
        return launch_combine_of(c, nullptr, has_shared ? c + t * k * h : nullptr, t, k, h, active, bf16, out, stream,
                                 rows_initialised);
    }
    const auto* c = static_cast<const float*>(contributions);
    return launch_combine_of(c, nullptr, has_shared ? c + t * k * h : nullptr, t, k, h, active, bf16, out, stream,
                             rows_initialised);
}

cudaError_t launch_combine_indexed(const float* routed, const int64_t* index, const float* shared, int64_t t, int64_t k,
                                   int64_t h, const uint8_t* active, bool bf16, void* out, cudaStream_t stream) {
    return launch_combine_of(routed, index, shared, t, k, h, active, bf16, out, stream);
}

}  // namespace steadymoe::cuda
