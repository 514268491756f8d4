// The combine's arithmetic for kVec consecutive features of one token: its slots' contributions in ascending
// order, then its shared expert's, summed in f32 from 0 and stored in the activation dtype (zeros for a masked
// token) — the CPU layer's combine, operation for operation. The combine kernel (layer_kernels.cu) runs it for
// every token; a decode step's down GEMM runs it for its last 64-feature blocks in place of that kernel
// (grouped_gemm_sm90_decode.cu: DownCombine), so both give the same bits.
#pragma once

#include "steadymoe/core/numeric.hpp"

#include <cstdint>
#include <type_traits>

namespace steadymoe::cuda {

// kVec consecutive elements of a row of contributions (f32, or bf16 bits) as loaded: one 16-byte load per 8
// bf16 or 4 f32 where kVec is 8. They stay as loaded (half the registers for bf16) until added. kPastL1: loads
// from L2 (rows other CTAs of the same kernel wrote).
template <typename C, int kVec, bool kPastL1 = false>
struct RowPiece {
    static constexpr int kWords = kVec == 8 ? kVec * int(sizeof(C)) / 16 : 1;  // 16-byte words, or one element
    using Word = std::conditional_t<kVec == 8, uint4, C>;
    static_assert(kVec == 8 ? kWords * 16 == kVec * int(sizeof(C)) : kVec == 1, "whole 16-byte words, or one element");
    static_assert(kVec == 8 || !kPastL1, "loads past L1 are 16-byte words");
    Word w[kVec == 8 ? kWords : kVec];

    __device__ __forceinline__ void load(const C* p) {
        if constexpr (kVec == 8) {
#pragma unroll
            for (int j = 0; j < kWords; ++j) w[j] = kPastL1 ? __ldcg(reinterpret_cast<const uint4*>(p) + j) : reinterpret_cast<const uint4*>(p)[j];
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

// Elements i .. i + kVec - 1 of out ([tokens][h], i a multiple of kVec): token tok = i / h, features n = i % h
// on. Slot s's contribution is row index[tok * k + s] of routed (row tok * k + s without an index), the shared
// expert's row tok of shared (none where null); active[tok] == 0 masks the token; bf16: out holds bf16 bits,
// else f32. kChunk: slots loaded at once (any number gives the same sums; fewer take fewer registers).
template <typename C, int kVec, bool kPastL1 = false, int kChunk = 8>
__device__ __forceinline__ void combine_piece(const C* routed, const int64_t* index, const C* shared, int64_t i,
                                              int64_t k, int64_t h, const uint8_t* active, bool bf16, void* out) {
    const int64_t tok = i / h, n = i % h;
    float acc[kVec] = {};
    // The token's mask, then its slots' indices, then their rows: kChunk slots' loads are issued before any
    // is added (the same sums in the same order), so that neither a decode token's chain of dependent loads
    // nor a prefill thread waits on one row at a time. Every load of a chunk is issued: a slot past k
    // reads slot k - 1 again and is not added. (Loads guarded by the slot's test compiled to a branch
    // around each, and registers reused load after load: one row in flight per thread, and the prefill
    // combine took 2.2x its time: 334 against 148 µs for qwen3 at 16384 tokens.)
    const bool live = active[tok] != 0;
    RowPiece<C, kVec, kPastL1> from_shared;  // loaded with the slots', added after them
    if (live && shared) from_shared.load(shared + tok * h + n);
    for (int64_t s0 = 0; live && s0 < k; s0 += kChunk) {
        int64_t row[kChunk];
#pragma unroll
        for (int q = 0; q < kChunk; ++q) {
            const int64_t slot = tok * k + min(s0 + q, k - 1);
            row[q] = index ? index[slot] : slot;
        }
        RowPiece<C, kVec, kPastL1> v[kChunk];
#pragma unroll
        for (int q = 0; q < kChunk; ++q) v[q].load(routed + row[q] * h + n);
#pragma unroll
        for (int q = 0; q < kChunk; ++q)
            if (s0 + q < k) v[q].add_to(acc);
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

}  // namespace steadymoe::cuda
