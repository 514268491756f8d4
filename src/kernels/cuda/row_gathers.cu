// The gathers of row_gathers.hpp: a GEMM's input rows put in order, copied, converted or quantised.
#include "row_gathers.hpp"

#include <algorithm>
#include <cstdint>

#include "dependent_launch.cuh"
#include "env_switch.hpp"
#include "live_rows.cuh"
#include "stage_math.cuh"

namespace steadymoe::cuda {

namespace {

// Where quantise_rows_kernel and copy_bf16_to_pairs_kernel put a token's bytes: the rows of its pairs
// i = token * top_k + j, row[i] where that is a live row (below *live, or bound) whose dest is i.
// row == nullptr (quantise_rows_kernel): row r of the output.
struct PairRows {
    const int32_t* row = nullptr;
    const int64_t* dest = nullptr;
    int64_t top_k = 0;
    int64_t bound = 0;
    const int32_t* live = nullptr;
};

// The row of pair i: PairRows::row[i] where that is a live row (below live_pairs) whose dest is i, else -1
// (the entries of pairs without a row this batch are stale).
__device__ __forceinline__ int64_t live_pair_row(const PairRows& pairs, int64_t i, int64_t live_pairs) {
    const int64_t to_row = pairs.row[i];
    return to_row >= 0 && to_row < live_pairs && pairs.dest[to_row] == i ? to_row : -1;
}

// store(row) for the row of each of token t's pairs that has one this batch (live_pair_row), in pair order.
template <class Store>
__device__ __forceinline__ void for_each_pair_row(const PairRows& pairs, int64_t t, int64_t live_pairs, Store&& store) {
    for (int64_t i = t * pairs.top_k; i < (t + 1) * pairs.top_k; ++i) {
        const int64_t to_row = live_pair_row(pairs, i, live_pairs);
        if (to_row >= 0) store(to_row);
    }
}

// One warp per (row, 128-value group): the CPU's quantize_row_fp8, with the group maximum taken by
// a warp reduction (max is exact in any order; NaN never becomes the maximum, as on the CPU); 4 values
// per lane. kFp8Out writes the e4m3 codes and keeps the scale (power of two in mode 2); otherwise the
// values go out as bf16 (mode 2 with its scale folded in).
template <bool kFp8Out>
__device__ void gather_group(const void* src, bool src_bf16, int64_t stride, const int32_t* rows,
                             int64_t item, int64_t k, int mode, void* out, float* scales, ScaleLayout layout) {
    const int64_t groups = k / 128;
    const int lane = threadIdx.x & 31;
    const int64_t r = item / groups, group = item % groups, c0 = group * 128 + lane * 4;
    const int64_t row = (rows ? int64_t(rows[r]) : r) * stride + c0;
    // One vector load and store per lane (k and the stride are multiples of 128, c0 of 4).
    float v[4];
    if (src_bf16) {
        const uint2 b = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(src) + row);
        v[0] = bf16_to_f32(uint16_t(b.x)), v[1] = bf16_to_f32(uint16_t(b.x >> 16));
        v[2] = bf16_to_f32(uint16_t(b.y)), v[3] = bf16_to_f32(uint16_t(b.y >> 16));
    } else {
        const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(src) + row);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    }
    uint2* dst = reinterpret_cast<uint2*>(static_cast<uint16_t*>(out) + r * k + c0);
    auto store_bf16 = [&](const uint16_t(&b)[4]) {
        *dst = make_uint2(uint32_t(b[0]) | uint32_t(b[1]) << 16, uint32_t(b[2]) | uint32_t(b[3]) << 16);
    };
    if (!kFp8Out && mode == 0) {
        const uint16_t b[4] = {f32_to_bf16(v[0]), f32_to_bf16(v[1]), f32_to_bf16(v[2]), f32_to_bf16(v[3])};
        store_bf16(b);
        return;
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float a = abs_f32(v[j]);
        amax = amax < a ? a : amax;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, amax, offset);
        amax = amax < o ? o : amax;
    }
    const float s = e4m3_group_scale(amax, mode == 2);
    if constexpr (kFp8Out) {
        const uint32_t codes = f32x4_to_e4m3x4(v[0] / s, v[1] / s, v[2] / s, v[3] / s);
        *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(out) + r * k + c0) = codes;
        if (lane == 0) scales[layout.at(r, group, groups)] = s;
    } else {
        const bool keep = mode == 1;
        const uint32_t codes = f32x4_to_e4m3x4(v[0] / s, v[1] / s, v[2] / s, v[3] / s);
        uint16_t b[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float q = e4m3_to_f32(uint8_t(codes >> (8 * j)));
            b[j] = f32_to_bf16(keep ? q : q * s);
        }
        store_bf16(b);
        if (scales && lane == 0) scales[layout.at(r, group, groups)] = keep ? s : 1.0f;
    }
}

// Warps stride over the live rows' groups: the grid is sized by the bound `m`, capped, so a launch for a
// large bound with few live rows (an expert-parallel rank's receive capacity) costs little.
template <bool kFp8Out>
__global__ void gather_kernel(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                              const int32_t* live_rows, int64_t k, int mode, void* out, float* scales,
                              ScaleLayout layout) {
    begin_dependent_kernel();
    const int64_t live = live_count(m, live_rows);
    const int64_t items = live * (k / 128), warps = int64_t(gridDim.x) * blockDim.x / 32;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < items; item += warps)
        gather_group<kFp8Out>(src, src_bf16, stride, rows, item, k, mode, out, scales, layout);
}

// 16 bytes of codes per thread, and a row's scales by the threads of its first k/128 chunks. (A warp per
// row with eight loads a lane in flight, as copy_bf16_rows_kernel below, took half the time at 16384 tokens
// of deepseek-v3, 495 µs against 1019, yet the layer 1.6% more over seven runs: its routed gate/up GEMM
// then started beside the shared expert's GEMMs on the side stream;
// bench/results/2026-12-04-cuda-row-copies-early-weights.md. The layer now quantises tokens straight into
// their pairs' rows, launch_quantise_to_pairs, and copies codes only where asked to compare.)
__global__ void gather_e4m3_rows_kernel(const uint8_t* src, const float* src_scales, const int32_t* rows,
                                        int64_t m, const int32_t* live_rows, int64_t k, uint8_t* out,
                                        float* scales, ScaleLayout layout) {
    begin_dependent_kernel();
    const int64_t live = live_count(m, live_rows);
    const int64_t chunks = k / 16, items = live * chunks, stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; item < items; item += stride) {
        const int64_t r = item / chunks, c = item % chunks, from = rows[r];
        reinterpret_cast<uint4*>(out + r * k)[c] = reinterpret_cast<const uint4*>(src + from * k)[c];
        if (c < k / 128) scales[layout.at(r, c, k / 128)] = src_scales[from * (k / 128) + c];
    }
}

// Both bf16 halves of each word with a NaN made quiet, as the codec's f32_to_bf16 leaves a NaN that
// bf16_to_f32 widened: the gather's conversions for a bf16 source kept as bf16 (quant_mode 0).
__device__ __forceinline__ uint4 quiet_bf16_nans(uint4 v) {
    const auto quiet = [](uint32_t w) {
        return w | (__vcmpgtu2(w & 0x7FFF7FFFu, 0x7F807F80u) & 0x00400040u);  // a half above infinity's bits
    };
    return make_uint4(quiet(v.x), quiet(v.y), quiet(v.z), quiet(v.w));
}

// bf16 rows kept as bf16 (quant_mode 0), out[r] = src[rows ? rows[r] : r] with NaNs made quiet:
// gather_group's bits. A warp per row, each lane with up to kBatch 16-byte loads in flight: gather_group's
// one 8-byte load a lane left too few bytes in flight to fill the memory pipes (qwen3's 16384 tokens: 316
// µs, now 238, the layer 1.9-2.3% less; bench/results/2026-12-04-cuda-row-copies-early-weights.md). Every
// load of a batch is issued, a word past the row's end reading its last word again and not stored: guarded
// loads compile to a branch around each, one in flight at a time. The rows (src, out, the stride, k) are
// 16-byte aligned.
__global__ void copy_bf16_rows_kernel(const uint16_t* src, int64_t stride, const int32_t* rows, int64_t m,
                                      const int32_t* live_rows, int64_t k, uint16_t* out) {
    constexpr int kBatch = 8;
    begin_dependent_kernel();
    const int64_t live = live_count(m, live_rows);
    const int64_t words = k / 8, warps = int64_t(gridDim.x) * blockDim.x / 32;
    const int lane = threadIdx.x & 31;
    for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < live; r += warps) {
        const uint4* row = reinterpret_cast<const uint4*>(src + (rows ? int64_t(rows[r]) : r) * stride);
        uint4* to = reinterpret_cast<uint4*>(out + r * k);
        for (int64_t w0 = lane; w0 < words; w0 += 32 * kBatch) {
            uint4 v[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; ++j) v[j] = row[min(w0 + 32 * j, words - 1)];
#pragma unroll
            for (int j = 0; j < kBatch; ++j)
                if (w0 + 32 * j < words) to[w0 + 32 * j] = quiet_bf16_nans(v[j]);
        }
    }
}

// Each live row's pair: pair_row[dest[row]] = row. Pairs without a row this batch keep what they held, which
// quantise_rows_kernel tells from a row of this batch by dest (a row's pair is dest[row] alone).
__global__ void pair_rows_kernel(const int64_t* dest, int64_t bound, const int32_t* live_rows, int64_t pairs,
                                 int32_t* pair_row) {
    begin_dependent_kernel();
    const int64_t live = live_count(bound, live_rows);
    for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < live;
         row += int64_t(gridDim.x) * blockDim.x) {
        const int64_t i = dest[row];
        if (i >= 0 && i < pairs) pair_row[i] = int32_t(row);
    }
}

// bf16 tokens copied as they are into the rows of their pairs (PairRows), each token read once:
// copy_bf16_rows_kernel's bits (NaNs made quiet). Through the permutation's rows that kernel reads a token
// once for each of its pairs, most of them from DRAM where the tokens outgrow L2: qwen3-30b-a3b's 16384
// tokens are 67 MB, read eight times for 537 MB written (1.07 GB in 332 µs on an H100, 3.2 TB/s, above
// the 3.0 the bench measures for a copy: some reads hit L2), where this reads them once, 217 µs
// (bench/results/2026-12-07-cuda-copy-to-pairs.md). A warp takes a chunk of 32 * kBatch words of a token,
// every load in flight, a word past the row's end reading its last word again and not stored (as
// quantise_rows_kernel).
template <int kBatch>
__global__ void copy_bf16_to_pairs_kernel(const uint16_t* src, int64_t stride, int64_t tokens, int64_t k,
                                          uint16_t* out, const PairRows pairs) {
    constexpr int64_t kChunkWords = 32 * kBatch;
    begin_dependent_kernel();
    const int64_t live_pairs = live_count(pairs.bound, pairs.live);
    const int64_t words = k / 8, chunks = (words + kChunkWords - 1) / kChunkWords;
    const int64_t items = tokens * chunks, warps = int64_t(gridDim.x) * blockDim.x / 32;
    const int lane = threadIdx.x & 31;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < items; item += warps) {
        const int64_t t = item / chunks, w0 = (item - t * chunks) * kChunkWords + lane;
        const uint4* row = reinterpret_cast<const uint4*>(src + t * stride);
        uint4 v[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) v[j] = quiet_bf16_nans(row[min(w0 + 32 * j, words - 1)]);
        for_each_pair_row(pairs, t, live_pairs, [&](int64_t to_row) {
            uint4* to = reinterpret_cast<uint4*>(out + to_row * k);
#pragma unroll
            for (int j = 0; j < kBatch; ++j)
                if (w0 + 32 * j < words) to[w0 + 32 * j] = v[j];
        });
    }
}

// Rows quantised to e4m3 codes per 128 values (quant_mode 1, or 2's power-of-two scales, kept in `scales`):
// gather_group's bytes, from sources whose rows are 16-byte aligned. A lane takes kUnit values at a time
// (whole 16-byte source words) and stores their codes as one word of kUnit bytes. A warp takes a chunk of a
// row, kBatch such units a lane with every load in flight, where gather_group has one 8-byte load a lane in
// flight and a 64-bit division an item. A group's 128 values are 128 / kUnit lanes' units; they take its
// maximum by shuffles (exact in any order; fmaxf, as the CPU's std::max from 0, never takes a NaN). Every
// unit is loaded, one past the row's end reading its last word again: units past the end fill whole groups (a
// row is whole groups), which are not stored.
// - Many rows take units of 16 values, two a lane: deepseek-v3's shared-expert rows and SwiGLU outputs took
//   10-12% less time at 16384 tokens than with a source word a lane (8 bf16 values, 8 bytes of codes), its
//   tokens into their pairs' rows the same (bench/results/2026-12-07-cuda-quantise-units.md).
// - Few rows take a source word a lane, one a chunk: more warps to a row, and a loop body small enough to
//   stay in the instruction cache (a first version, eight words a lane for every batch, took 14-19 µs for
//   one token's rows, the per-group gather 4); with units of 16 values deepseek-v4-flash's one-token layer
//   took about 1 µs more. This mixed form: prefill's routed experts 0.4-0.6% faster, one token level.
//
// With `pairs.row` set, row r is a token whose codes go to the rows of its pairs r * top_k + j instead (at
// PairRows::row, those of this batch: PairRows).
template <typename Source, int kBatch, int kUnit>
__global__ void quantise_rows_kernel(const Source* src, int64_t stride, const int32_t* rows, int64_t m,
                                     const int32_t* live_rows, int64_t k, bool pow2, uint8_t* out,
                                     float* scales, ScaleLayout layout, const PairRows pairs) {
    constexpr int kPerWord = 16 / int(sizeof(Source));  // values a 16-byte word: 8 bf16 or 4 f32
    static_assert(kUnit % kPerWord == 0 && (kUnit == 4 || kUnit == 8 || kUnit == 16),
                  "whole words, one store");
    constexpr int kUnitWords = kUnit / kPerWord;  // source words of a lane's unit
    constexpr int kGroupLanes = 128 / kUnit;
    constexpr int64_t kChunkUnits = 32 * kBatch;
    begin_dependent_kernel();
    const int64_t live = live_count(m, live_rows);
    const int64_t live_pairs = live_count(pairs.bound, pairs.live);
    const int64_t words = k / kPerWord, units = k / kUnit, chunks = (units + kChunkUnits - 1) / kChunkUnits;
    const int64_t items = live * chunks, warps = int64_t(gridDim.x) * blockDim.x / 32;
    const int lane = threadIdx.x & 31;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < items; item += warps) {
        const int64_t r = item / chunks, u0 = (item - r * chunks) * kChunkUnits + lane;
        const uint4* row = reinterpret_cast<const uint4*>(src + (rows ? int64_t(rows[r]) : r) * stride);
        uint4 v[kBatch][kUnitWords];
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
#pragma unroll
            for (int q = 0; q < kUnitWords; ++q)
                v[j][q] = row[min((u0 + 32 * j) * kUnitWords + q, words - 1)];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            float x[kUnit];
#pragma unroll
            for (int q = 0; q < kUnitWords; ++q) {
                const uint32_t w[4] = {v[j][q].x, v[j][q].y, v[j][q].z, v[j][q].w};
#pragma unroll
                for (int i = 0; i < kPerWord; ++i) {
                    if constexpr (kPerWord == 8)
                        x[q * 8 + i] = bf16_to_f32(uint16_t(w[i / 2] >> (16 * (i % 2))));
                    else
                        x[q * 4 + i] = f32_from_bits(w[i]);
                }
            }
            float amax = 0.0f;
#pragma unroll
            for (int i = 0; i < kUnit; ++i) amax = fmaxf(amax, abs_f32(x[i]));
#pragma unroll
            for (int offset = kGroupLanes / 2; offset > 0; offset >>= 1)
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
            const float s = e4m3_group_scale(amax, pow2);
            const int64_t u = u0 + 32 * j;
            if (u >= units) continue;
            // A power of two's reciprocal is exact, so x * (1 / s) rounds the same real number x / s does.
            const float inv = pow2 ? 1.0f / s : 0.0f;
            uint32_t codes[kUnit / 4];
#pragma unroll
            for (int q = 0; q < kUnit / 4; ++q) {
                const float* y = x + 4 * q;
                codes[q] = pow2 ? f32x4_to_e4m3x4(y[0] * inv, y[1] * inv, y[2] * inv, y[3] * inv)
                                : f32x4_to_e4m3x4(y[0] / s, y[1] / s, y[2] / s, y[3] / s);
            }
            const auto store = [&](int64_t to_row) {
                uint8_t* to = out + to_row * k + u * kUnit;
                if constexpr (kUnit == 16)
                    *reinterpret_cast<uint4*>(to) = make_uint4(codes[0], codes[1], codes[2], codes[3]);
                else if constexpr (kUnit == 8)
                    *reinterpret_cast<uint2*>(to) = make_uint2(codes[0], codes[1]);
                else
                    *reinterpret_cast<uint32_t*>(to) = codes[0];
                if (lane % kGroupLanes == 0) scales[layout.at(to_row, u / kGroupLanes, k / 128)] = s;
            };
            if (pairs.row) for_each_pair_row(pairs, r, live_pairs, store);
            else store(r);
        }
    }
}

// Blocks of 256 threads for a grid-stride gather of `threads` items, at most 4096 (8 warps each: enough to
// keep every SM's memory pipes busy).
unsigned gather_blocks(int64_t threads) { return unsigned(std::min<int64_t>((threads + 255) / 256, 4096)); }

template <bool kFp8Out>
cudaError_t launch_gather(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                          const int32_t* live_rows, int64_t k, int quant_mode, void* out, float* scales,
                          cudaStream_t stream, ScaleLayout layout = {}) {
    const int64_t threads = m * (k / 128) * 32;
    if (threads == 0) return cudaGetLastError();
    return launch_dependent(gather_kernel<kFp8Out>, gather_blocks(threads), 256, 0, stream, src, src_bf16,
                            stride, rows, m, live_rows, k, quant_mode, out, scales, layout);
}

// Batches of fewer rows (or tokens) than this take a word a lane in the row kernels (quantise_rows_kernel,
// copy_bf16_to_pairs_kernel): more warps to a row.
constexpr int64_t kFewRows = 512;

// The row kernels' grid: a warp for each chunk of `chunk_values` of each of `rows` rows of k values.
unsigned warp_per_chunk_blocks(int64_t rows, int64_t k, int64_t chunk_values) {
    return gather_blocks(rows * ((k + chunk_values - 1) / chunk_values) * 32);
}

// pair_rows_kernel for launch_quantise_to_pairs and launch_copy_bf16_to_pairs: each live row's pair.
cudaError_t launch_pair_rows(const int64_t* dest, int64_t max_rows, const int32_t* live_rows, int64_t pairs,
                             int32_t* pair_row, cudaStream_t stream) {
    return launch_dependent(pair_rows_kernel, gather_blocks(max_rows), 256, 0, stream, dest, max_rows,
                            live_rows, pairs, pair_row);
}

// quantise_rows_kernel over `m` rows (sources that row_quantiser_takes): batches of fewer than kFewRows rows
// take a source word a lane, others two units of 16 values; the grid covers every row's chunks.
cudaError_t launch_row_quantiser(const void* src, bool src_bf16, int64_t stride, const int32_t* rows,
                                 int64_t m, const int32_t* live_rows, int64_t k, bool pow2_scales,
                                 uint8_t* out, float* scales, ScaleLayout layout, const PairRows& pairs,
                                 cudaStream_t stream) {
    if (m == 0 || k == 0) return cudaGetLastError();
    const bool few = m < kFewRows;
    // (a chunk: one source word a lane, or two units of 16 values)
    const int64_t chunk_values = few ? 32 * (src_bf16 ? 8 : 4) : 32 * 2 * 16;
    const unsigned blocks = warp_per_chunk_blocks(m, k, chunk_values);
    const auto launch = [&](auto kernel, const auto* source) {
        return launch_dependent(kernel, blocks, 256, 0, stream, source, stride, rows, m, live_rows, k,
                                pow2_scales, out, scales, layout, pairs);
    };
    const auto* bf16 = static_cast<const uint16_t*>(src);
    const auto* f32 = static_cast<const float*>(src);
    if (src_bf16)
        return few ? launch(quantise_rows_kernel<uint16_t, 1, 8>, bf16)
                   : launch(quantise_rows_kernel<uint16_t, 2, 16>, bf16);
    return few ? launch(quantise_rows_kernel<float, 1, 4>, f32)
               : launch(quantise_rows_kernel<float, 2, 16>, f32);
}

}  // namespace

bool bf16_rows_copyable(const void* src, int64_t stride, int64_t k, const void* out) {
    return (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(out)) % 16 == 0 &&
           stride % 8 == 0 && k % 8 == 0;  // (elements: 16 bytes)
}

cudaError_t launch_gather_bf16(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                               const int32_t* live_rows, int64_t k, int quant_mode, uint16_t* out,
                               float* scales, cudaStream_t stream) {
    if (quant_mode == 0 && src_bf16 && bf16_rows_copyable(src, stride, k, out)) {
        if (m == 0) return cudaGetLastError();
        return launch_dependent(copy_bf16_rows_kernel, gather_blocks(m * 32), 256, 0, stream,
                                static_cast<const uint16_t*>(src), stride, rows, m, live_rows, k, out);
    }
    return launch_gather<false>(src, src_bf16, stride, rows, m, live_rows, k, quant_mode, out, scales,
                                stream);
}

cudaError_t launch_gather_e4m3_rows(const uint8_t* src, const float* src_scales, const int32_t* rows,
                                    int64_t m, const int32_t* live_rows, int64_t k, uint8_t* out,
                                    float* scales, cudaStream_t stream, ScaleLayout scale_layout) {
    const int64_t threads = m * (k / 16);
    if (threads == 0) return cudaGetLastError();
    return launch_dependent(gather_e4m3_rows_kernel, gather_blocks(threads), 256, 0, stream, src, src_scales,
                            rows, m, live_rows, k, out, scales, scale_layout);
}

bool row_quantiser_takes(const void* src, bool src_bf16, int64_t stride, int64_t k, const void* out) {
    // STEADYMOE_QUANTISE_ROWS=group: gather_group for every source, to compare (the same bytes).
    static const bool by_group = env_equals("STEADYMOE_QUANTISE_ROWS", "group");
    const int64_t value_bytes = src_bf16 ? 2 : 4;
    return !by_group && reinterpret_cast<uintptr_t>(src) % 16 == 0 && stride * value_bytes % 16 == 0 &&
           k % 128 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
}

cudaError_t launch_gather_fp8(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                              const int32_t* live_rows, int64_t k, bool pow2_scales, uint8_t* out,
                              float* scales, cudaStream_t stream, ScaleLayout scale_layout) {
    if (row_quantiser_takes(src, src_bf16, stride, k, out))
        return launch_row_quantiser(src, src_bf16, stride, rows, m, live_rows, k, pow2_scales, out, scales,
                                    scale_layout, PairRows{}, stream);
    return launch_gather<true>(src, src_bf16, stride, rows, m, live_rows, k, pow2_scales ? 2 : 1, out, scales,
                               stream, scale_layout);
}

cudaError_t launch_quantise_to_pairs(const void* src, bool src_bf16, int64_t stride, int64_t tokens,
                                     int32_t top_k, const int64_t* dest, int64_t max_rows,
                                     const int32_t* live_rows, int64_t k, bool pow2_scales, int32_t* pair_row,
                                     uint8_t* out, float* scales, cudaStream_t stream, ScaleLayout scale_layout) {
    if (!row_quantiser_takes(src, src_bf16, stride, k, out) || top_k <= 0) return cudaErrorInvalidValue;
    if (tokens == 0 || max_rows == 0) return cudaGetLastError();
    const cudaError_t err = launch_pair_rows(dest, max_rows, live_rows, tokens * top_k, pair_row, stream);
    if (err != cudaSuccess) return err;
    return launch_row_quantiser(src, src_bf16, stride, nullptr, tokens, nullptr, k, pow2_scales, out, scales,
                                scale_layout, PairRows{pair_row, dest, top_k, max_rows, live_rows}, stream);
}

cudaError_t launch_copy_bf16_to_pairs(const uint16_t* src, int64_t stride, int64_t tokens, int32_t top_k,
                                      const int64_t* dest, int64_t max_rows, const int32_t* live_rows,
                                      int64_t k, int32_t* pair_row, uint16_t* out, cudaStream_t stream) {
    if (!bf16_rows_copyable(src, stride, k, out) || top_k <= 0) return cudaErrorInvalidValue;
    if (tokens == 0 || max_rows == 0 || k == 0) return cudaGetLastError();
    const cudaError_t err = launch_pair_rows(dest, max_rows, live_rows, tokens * top_k, pair_row, stream);
    if (err != cudaSuccess) return err;
    const int64_t batch = tokens < kFewRows ? 1 : 8;  // 16-byte words (8 values) a lane
    const unsigned blocks = warp_per_chunk_blocks(tokens, k, 32 * batch * 8);
    const PairRows pairs{pair_row, dest, top_k, max_rows, live_rows};
    const auto launch = [&](auto kernel) {
        return launch_dependent(kernel, blocks, 256, 0, stream, src, stride, tokens, k, out, pairs);
    };
    return batch == 1 ? launch(copy_bf16_to_pairs_kernel<1>) : launch(copy_bf16_to_pairs_kernel<8>);
}

}  // namespace steadymoe::cuda
