// The shared-memory stages of the grouped GEMM kernels (grouped_gemm.cu for sm_80+, grouped_gemm_sm90.cu
// for Hopper): 64-wide k stages of A rows (bf16, or e4m3 on Hopper's FP8 path) and weight rows (bf16,
// e4m3 or e2m1 + e8m0 as stored),
// loaded by cp.async with zero fill, 128-byte rows XOR-swizzled by 16-byte chunk — conflict-free for
// ldmatrix and exactly the 128-byte swizzle of Hopper's wgmma descriptors — and the widening of FP8 /
// FP4 weights to bf16, which is exact (tests/cuda_codec_kernels.cu checks every code).
#pragma once

#include "fp4_e4m3_word.hpp"
#include "grouped_gemm.hpp"
#include "stage_math.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace steadymoe::cuda::stage {

constexpr int kBK = kStageK;          // k per stored weight tile and per (sub-)stage: two make one 128-wide scale block
constexpr int kRowBytes = kBK * 2;    // one bf16 row of a stage: 128 bytes, 8 chunks of 16
constexpr int kBTileBytes = kTileN * kRowBytes;
constexpr int kScaleBytes = 1024;     // per stage: the 128-block scales of the rows, then of the fragments

__host__ __device__ constexpr int raw_b_bytes(WeightCode code) {
    return code == WeightCode::Bf16 ? kBTileBytes : code == WeightCode::Fp8 ? kTileN * kBK : kTileN * kBK / 2 + kTileN * 4;
}
// Bytes of one A row of a stage: 64 bf16 values, or 64 e4m3 codes (Hopper's FP8 tensor-core path).
__host__ __device__ constexpr int a_row_bytes(bool fp8_a) { return fp8_a ? kBK : kRowBytes; }
// Stages stay 1024-byte aligned (the swizzle atom of wgmma).
__host__ __device__ constexpr int stage_bytes(WeightCode code, int rows, bool fp8_a = false) {
    return (rows * a_row_bytes(fp8_a) + raw_b_bytes(code) + kScaleBytes + 1023) / 1024 * 1024;
}
__host__ __device__ constexpr int smem_bytes(WeightCode code, int rows, int stages) {
    return stages * stage_bytes(code, rows) + (code == WeightCode::Bf16 ? 0 : kBTileBytes) + 1024;  // + alignment
}

// Raises kKernel's dynamic shared-memory limit to `bytes`, once per device: the attribute call costs
// host time on every launch otherwise, and decode batches are short enough for that to show.
template <auto kKernel>
cudaError_t allow_shared_memory(int bytes) {
    static std::atomic<uint64_t> done_devices{0};
    int device = 0;
    if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
    const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
    if (bit && (done_devices.load(std::memory_order_acquire) & bit)) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    // All of the SM's unified memory as shared memory: the stages are what keeps weight bytes in flight,
    // and several decode CTAs to an SM need the largest carveout.
    if (err == cudaSuccess)
        err = cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    if (err == cudaSuccess) done_devices.fetch_or(bit, std::memory_order_release);
    return err;
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled 128-byte-row tile.
__device__ __forceinline__ int swizzle(int row, int chunk) { return row * kRowBytes + ((chunk ^ (row & 7)) << 4); }
// The same for a 64-byte-row tile (e4m3 stages) in wgmma's 64-byte swizzle: 8-row, 512-byte atoms, chunk
// bits XOR-ed with bits 7-8 of the offset. FP8 weight tiles are stored this way (expert_group.cpp).
__device__ __forceinline__ int swizzle64(int row, int chunk) { return row * kBK + ((chunk ^ ((row >> 1) & 3)) << 4); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async with zero fill: when !valid nothing is read and the destination becomes zeros.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// a * b for two bf16 pairs, exactly when the products are representable (subnormals included): an fma
// with a -0 addend, which leaves every product — signed zeros too — as it is (sm_80 has no bf16x2 mul).
__device__ __forceinline__ uint32_t bf16x2_mul_exact(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
    return d;
}

// Four e4m3 codes (low byte first) as four bf16 values (two pairs), exactly: e4m3 -> f16 is exact
// (one conversion per pair), f16 -> f32 -> bf16 too. (Moving the fields with integer operations and
// scaling by an exact bf16 multiply, as FP4 does below, measured slower for FP8 on the H200.)
__device__ __forceinline__ uint2 e4m3x4_to_bf16x4(uint32_t codes) {
    uint32_t r[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const __half2 pair(__nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(codes >> (16 * h)), __NV_E4M3));
        const float2 f = __half22float2(pair);
        const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
        r[h] = *reinterpret_cast<const uint32_t*>(&b);
    }
    return make_uint2(r[0], r[1]);
}

// prmt in its default mode: a selector nibble with its top bit set replicates the selected byte's top
// bit over the result byte (__byte_perm is documented for the three low bits only).
__device__ __forceinline__ uint32_t prmt_sign_mode(uint32_t a, uint32_t b, uint32_t selector) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
}

// Eight e2m1 codes (low nibble first) times 2^(e - 127) as eight bf16 values (four pairs), exactly.
// A byte permute looks up four magnitudes' bf16 bits (at scale 1) at once — high and low bytes from
// two 8-entry tables — another makes the sign bits, and one bf16 multiply by 2^(e - 127) scales
// them (e in [2, 252], checked at upload, keeps every product normal and exact). Widening is most of
// an FP4 decode kernel's work and runs on the integer pipe, so every operation counts: this form
// takes seven integer operations per four codes where masking the signs out took nine (the same
// bits for every pattern of four codes). `scale` is 2^(e - 127) as a bf16 pair (bf16_pair_scale).
__device__ __forceinline__ uint4 e2m1x8_to_bf16x8(uint32_t codes, uint32_t scale) {
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const uint32_t c = codes >> (16 * q);                // codes 4q .. 4q + 3 in the low 16 bits
        const uint32_t magnitude = c & 0x7777u;              // byte selectors: magnitude 0..7 per code
        // The code itself as the selector over 0x80 bytes: 0xFF for a negative code (sign bit = the
        // nibble's top bit), 0x80 otherwise — bit 0 is the sign, moved to bit 7 of its byte.
        const uint32_t negative = prmt_sign_mode(0x80808080u, 0x80808080u, c) << 7;
        // Magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 are bf16 0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0.
        const uint32_t hi = __byte_perm(0x3F3F3F00u, 0x40404040u, magnitude) | (negative & 0x80808080u);
        const uint32_t lo = __byte_perm(0xC0800000u, 0xC0804000u, magnitude);
        r[2 * q] = bf16x2_mul_exact(__byte_perm(lo, hi, 0x5140), scale);
        r[2 * q + 1] = bf16x2_mul_exact(__byte_perm(lo, hi, 0x7362), scale);
    }
    return make_uint4(r[0], r[1], r[2], r[3]);
}
// Byte `byte` of `exponents` (an e8m0 code e) as the bf16 pair (2^(e - 127), 2^(e - 127)).
__device__ __forceinline__ uint32_t bf16_pair_scale(uint32_t exponents, uint32_t byte) {
    return __byte_perm(exponents, 0, 0x4040u | byte | byte << 8) << 7;  // e in bytes 0 and 2, then to bits 7-14
}

struct Tile {
    int expert, row0, rows, n0;
    int split, kt0, ktiles;  // the k split this block sums: 64-wide k tiles kt0 .. kt0 + ktiles - 1
};

// The grid: x walks a row tile's output tiles, y the row tiles, so the CTAs running together share
// their A rows and their expert's weights in L2; z the k splits.
inline dim3 tile_grid(const GroupedGemmLaunch& g) {
    return dim3(unsigned((g.n + kTileN - 1) / kTileN), unsigned(g.max_tiles), unsigned(g.k_splits));
}

// Row tile i of the launch with the output features of n-block n_block and k split `split`; rows = 0 past
// the batch's tile count.
// kPastL1: the list read from L2 (ld.global.cg): a kernel reading it before its dependent-launch wait
// (GroupedGemmLaunch::tiles_before_wait) must not meet lines an earlier kernel left in the SM's L1.
template <bool kPastL1 = false>
__device__ __forceinline__ Tile tile_at(const GroupedGemmLaunch& g, int i, int n_block, int split) {
    const auto load = [](const int32_t* p) { return kPastL1 ? __ldcg(p) : *p; };
    const int ktiles = int(g.k / kBK) / g.k_splits;
    if (g.identity_rows > 0) {
        const int64_t row0 = int64_t(i) * g.identity_tile_rows;
        if (row0 >= g.identity_rows) return {0, 0, 0, 0, 0, 0, 0};
        const int rows = int(g.identity_rows - row0 < g.identity_tile_rows ? g.identity_rows - row0 : g.identity_tile_rows);
        return {0, int(row0), rows, n_block * kTileN, split, split * ktiles, ktiles};
    }
    if (i >= load(g.tile_count)) return {0, 0, 0, 0, 0, 0, 0};
    return {load(g.tile_expert + i), load(g.tile_row0 + i), load(g.tile_rows + i), n_block * kTileN, split,
            split * ktiles, ktiles};
}
// Row tiles in this batch.
__device__ __forceinline__ int tile_count(const GroupedGemmLaunch& g) {
    return g.identity_rows > 0 ? int((g.identity_rows + g.identity_tile_rows - 1) / g.identity_tile_rows) : *g.tile_count;
}
// Tile i of the launch with this block's features and split (blockIdx.x, blockIdx.z).
template <bool kPastL1 = false>
__device__ __forceinline__ Tile tile_of_block(const GroupedGemmLaunch& g, int i) {
    return tile_at<kPastL1>(g, i, int(blockIdx.x), int(blockIdx.z));
}
__device__ __forceinline__ Tile tile_of_block(const GroupedGemmLaunch& g) { return tile_of_block(g, int(blockIdx.y)); }

// Byte offset of the 128-block scale of output feature n (FP8 weights) in an expert's scale block.
__device__ __forceinline__ int64_t weight_scale_offset(const GroupedGemmLaunch& g, int64_t n, int kb) {
    int64_t block = n / 128;
    if (g.fp8_half_blocks > 0) {  // interleaved gate/up rows: undo the interleave
        const int64_t frag = n / 8, original = (frag >> 1) * 8;
        block = (frag & 1) * g.fp8_half_blocks + original / 128;
    }
    return (block * (g.k / 128) + kb) * 4;
}

// Loads k-stages of a tile into shared memory. Every address that does not depend on k is worked out
// once per tile here, so a stage costs each thread a handful of cp.async and pointer adds: the loop
// around the MMAs must issue few instructions to keep the tensor cores fed.
template <WeightCode kCode, bool kScaled, int kRows, int kThreads>
struct StageLoader {
    static constexpr int kA = kRows * kRowBytes / 16 / kThreads;         // 16-byte chunks of A per thread
    static constexpr int kBChunksPerRow = kCode == WeightCode::Bf16 ? 8 : kCode == WeightCode::Fp8 ? 4 : 2;
    static constexpr int kB = kTileN * kBChunksPerRow / kThreads;          // of the stored weights
    static_assert(kA >= 1 && kB >= 1 && kA <= 32 && kB <= 32);

    const char* a_src[kA];
    const char* b_src[kB];
    int a_dst[kA], b_dst[kB];
    uint32_t a_valid = 0;
    // Up to three 4-byte loads per stage, each advancing 4 bytes per 128-wide k block: the FP4 weight
    // row's e8m0 scales, an activation row's scale, an 8-feature fragment's FP8 weight scale.
    const char* scale_src[3] = {nullptr, nullptr, nullptr};
    int scale_dst[3] = {0, 0, 0};
    int scale_stride[3] = {4, 4, 4};  // bytes per 128-wide k block
    bool scale_valid[3] = {false, false, false};
    // The stored weight tile of one stage: kTileN rows x 64 k values (the FP4 scales come separately).
    static constexpr int raw_tile_bytes = kTileN * kBChunksPerRow * 16;

    __device__ __forceinline__ StageLoader(const GroupedGemmLaunch& g, const Tile& t) {
        const int tid = threadIdx.x;
        constexpr int kATileBytes = kRows * kRowBytes;
#pragma unroll
        for (int i = 0; i < kA; ++i) {
            const int idx = tid + i * kThreads, row = idx >> 3, chunk = idx & 7;
            const bool valid = row < t.rows;
            a_src[i] = reinterpret_cast<const char*>(g.a + int64_t(t.row0 + (valid ? row : 0)) * g.k + chunk * 8);
            a_dst[i] = swizzle(row, chunk);
            a_valid |= uint32_t(valid) << i;
        }
        // The weights: this n-tile's stage tiles are contiguous, and so are the chunks within one.
        const char* w = static_cast<const char*>(g.w) + int64_t(t.expert) * g.w_expert_bytes +
                        int64_t(t.n0 / kTileN) * (g.k / kBK) * raw_tile_bytes;
#pragma unroll
        for (int i = 0; i < kB; ++i) {
            b_src[i] = w + (tid + i * kThreads) * 16;
            b_dst[i] = kATileBytes + (tid + i * kThreads) * 16;
        }
        const char* scales = static_cast<const char*>(g.w_scale) + int64_t(t.expert) * g.scale_expert_bytes;
        if (kCode == WeightCode::Fp4 && tid < kTileN) {  // this n-tile's e8m0 scales, 512 bytes per 128-k block
            scale_valid[0] = true;
            scale_src[0] = scales + int64_t(t.n0 / kTileN) * (g.k / 128) * kTileN * 4 + tid * 4;
            scale_dst[0] = kATileBytes + raw_tile_bytes + tid * 4;
            scale_stride[0] = kTileN * 4;
        }
        if constexpr (kScaled) {  // each stage carries its 128-block's scales: the fold never waits on memory
            const int scale_tile = kATileBytes + raw_b_bytes(kCode);
            if (tid < kRows && g.a_scale) {
                scale_valid[1] = tid < t.rows;
                scale_src[1] = reinterpret_cast<const char*>(g.a_scale + int64_t(t.row0 + (scale_valid[1] ? tid : 0)) * (g.k / 128));
                scale_dst[1] = scale_tile + tid * 4;
            } else if (kCode == WeightCode::Fp8 && tid >= kRows && tid < kRows + kTileN / 8) {
                const int64_t n = t.n0 + (tid - kRows) * 8;
                scale_valid[2] = n < g.n;
                scale_src[2] = scales + (scale_valid[2] ? weight_scale_offset(g, n, 0) : 0);
                scale_dst[2] = scale_tile + kRows * 4 + (tid - kRows) * 4;
            }
        }
    }

    // Rows past the tile's rows are never loaded: zero them once in every stage instead (a row's
    // products never reach another row, but the MMAs should not read uninitialised memory).
    __device__ __forceinline__ void zero_padding_rows(char* smem, int stage_bytes, int stages, int rows) const {
        const int chunks = (kRows - rows) * 8;
        for (int s = 0; s < stages; ++s)
            for (int c = threadIdx.x; c < chunks; c += kThreads)
                *reinterpret_cast<uint4*>(smem + s * stage_bytes + rows * kRowBytes + c * 16) = make_uint4(0, 0, 0, 0);
    }

    __device__ __forceinline__ void load(char* stage, int k0) const {
        const int64_t a_off = int64_t(k0) * 2;
        const int64_t b_off = int64_t(k0 / kBK) * raw_tile_bytes;
#pragma unroll
        for (int i = 0; i < kA; ++i)
            if (a_valid >> i & 1) cp_async16(stage + a_dst[i], a_src[i] + a_off, true);
#pragma unroll
        for (int i = 0; i < kB; ++i) cp_async16(stage + b_dst[i], b_src[i] + b_off, true);
        const int block = k0 / 128;
#pragma unroll
        for (int i = 0; i < 3; ++i)
            if (scale_src[i]) cp_async4(stage + scale_dst[i], scale_src[i] + block * scale_stride[i], scale_valid[i]);
    }
};

// Widens one stage's FP8 / FP4 weight tile to bf16 in the swizzled layout the MMAs read.
template <WeightCode kCode, int kThreads>
__device__ __forceinline__ void widen_stage(const char* b_raw, char* b_bf16, int k0) {
    for (int idx = threadIdx.x; idx < kTileN * 8; idx += kThreads) {
        const int row = idx >> 3, chunk = idx & 7;  // 8 values: k = chunk*8 .. chunk*8+7
        uint4 out;
        if constexpr (kCode == WeightCode::Fp8) {  // stored 64-byte swizzled: chunk / 2 is its 16-byte chunk
            const uint2 codes = *reinterpret_cast<const uint2*>(b_raw + swizzle64(row, chunk >> 1) + (chunk & 1) * 8);
            const uint2 a = e4m3x4_to_bf16x4(codes.x), b = e4m3x4_to_bf16x4(codes.y);
            out = make_uint4(a.x, a.y, b.x, b.y);
        } else {
            const uint32_t codes = *reinterpret_cast<const uint32_t*>(b_raw + row * (kBK / 2) + chunk * 4);
            const uint32_t exponents = *reinterpret_cast<const uint32_t*>(b_raw + kTileN * kBK / 2 + row * 4);
            out = e2m1x8_to_bf16x8(codes, bf16_pair_scale(exponents, ((k0 & 127) + chunk * 8) / 32));
        }
        *reinterpret_cast<uint4*>(b_bf16 + swizzle(row, chunk)) = out;
    }
}

// A 64-wide stage's scales, as its loader left them: [rows] activation scales then [kTileN / 8] weight scales.
template <WeightCode kCode, int kRows, bool kFp8A = false>
__device__ __forceinline__ const float* stage_scales(const char* stage) {
    return reinterpret_cast<const float*>(stage + kRows * a_row_bytes(kFp8A) + raw_b_bytes(kCode));
}

// Two adjacent outputs at element `offset` of the launch's output: one 8-byte f32 write, or one 4-byte
// write of their bf16 bits (out_bf16).
template <Bf16Rounding kHow = Bf16Rounding::Hardware>
__device__ __forceinline__ void store_pair(const GroupedGemmLaunch& g, int64_t offset, float2 v) {
    if (g.out_bf16)
        *reinterpret_cast<uint32_t*>(g.out_bf16 + offset) = f32x2_to_bf16x2<kHow>(v.x, v.y);
    else
        *reinterpret_cast<float2*>(g.out + offset) = v;
}

// What the epilogue needs of one row of a tile, read once for all of the row's pairs: a pair's store may
// alias these reads as far as the compiler knows, so reading them per pair would reload them after every
// store (two dependent global loads per pair).
struct EpilogueRow {
    int64_t row = -1;      // the row in the launch's rows; -1 past the tile's rows
    int64_t dest = 0;      // Scatter: its destination row
    float weight = 1.0f;   // Scatter, SwiGlu: its routing weight (1 where the launch has none)
};
__device__ __forceinline__ EpilogueRow epilogue_row(const GroupedGemmLaunch& g, const Tile& t, int row) {
    EpilogueRow r;
    if (row >= t.rows) return r;
    r.row = t.row0 + row;
    if (g.epilogue == GemmEpilogue::Scatter) {
        r.weight = g.row_weight[r.row];
        r.dest = g.row_dest[r.row];
    } else if (g.epilogue == GemmEpilogue::SwiGlu && g.row_weight) {
        r.weight = g.row_weight[r.row];
    }
    return r;
}

// Two adjacent output elements (row r, features n and n + 1 of the tile; n even) through the launch's
// epilogue. For SwiGlu, v are gate features and up the matching up features; their outputs are the
// adjacent intermediate features j, j + 1.
template <Bf16Rounding kHow = Bf16Rounding::Hardware>
__device__ __forceinline__ void epilogue_pair(const GroupedGemmLaunch& g, const Tile& t, const EpilogueRow& r, int n, float2 v,
                                              float2 up) {
    if (r.row < 0) return;
    const int64_t col = t.n0 + n;
    if (g.epilogue == GemmEpilogue::Store) {
        if (col < g.n) *reinterpret_cast<float2*>(g.out + t.split * g.split_stride + r.row * g.ldo + col) = v;
    } else if (g.epilogue == GemmEpilogue::Scatter) {
        const float w = r.weight;
        float2 out = g.weight_before_down ? v : make_float2(w * v.x, w * v.y);
        // bf16 outputs: the store rounds, and rounding to bf16 twice gives the bits of rounding once
        if (kHow == Bf16Rounding::Codec || !g.out_bf16)
            out = make_float2(round_act<kHow>(out.x, g.round_bf16), round_act<kHow>(out.y, g.round_bf16));
        // n is even and N a multiple of 8 (checked on the host): the pair is whole
        if (col < g.n) store_pair<kHow>(g, r.dest * g.ldo + col, out);
    } else {  // gate feature col sits in fragment 2f, its up partner in 2f + 1: intermediate feature f*8 + col%8
        const float2 out = make_float2(swiglu_stage<kHow>(v.x, up.x, g.swiglu_limit, g.weight_before_down, r.weight, g.round_bf16),
                                       swiglu_stage<kHow>(v.y, up.y, g.swiglu_limit, g.weight_before_down, r.weight, g.round_bf16));
        const int64_t j = (col / 16) * 8 + col % 8;
        if (j < g.n / 2) store_pair<kHow>(g, r.row * g.ldo + j, out);
    }
}
// The same for tile row `row`, where a caller meets each row once or twice.
template <Bf16Rounding kHow = Bf16Rounding::Hardware>
__device__ __forceinline__ void epilogue_pair(const GroupedGemmLaunch& g, const Tile& t, int row, int n, float2 v, float2 up) {
    epilogue_pair<kHow>(g, t, epilogue_row(g, t, row), n, v, up);
}

}  // namespace steadymoe::cuda::stage
