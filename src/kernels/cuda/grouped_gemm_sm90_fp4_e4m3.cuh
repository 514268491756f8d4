// FP4 weights meeting e4m3 tokens on Hopper (grouped_gemm_sm90_decode.cu's kernel): DeepSeek-V4's arithmetic
// per 128-wide block, with the weights as the MMAs' A operand widened from e2m1 codes straight into registers
// and the tokens as their B operand in shared memory. Device code for sm_90a, but for the constants.
#pragma once

#include "fp4_e4m3_word.hpp"
#include "wgmma.cuh"

#include <cstdint>

namespace steadymoe::cuda::fp4_e4m3 {

using namespace wgmma;

constexpr int kSubs = 2;               // stored 64-k tiles per 128-k block, folded at the block's end
constexpr int kFp4Groups = kSubs * 2;  // 32-wide groups per 128-wide block

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// FP4 weights meeting e4m3 tokens, DeepSeek-V4's arithmetic, per 128-wide block: per 32-wide group g (one
// e8m0 scale per weight row) one MMA sums the group's products anew (the FP8 tensor cores' sum; the weights
// as e4m3 codes of 2^-6 times their values, so every product is exact); block = fma(sum_g, 2^(e_g - 127),
// block) in ascending g (the first a plain product: exact); then total = fma(block, 64 * s_a, total) with
// the token's 128-block scale s_a. A row's sum depends neither on the batch nor on the CTA's width (tokens
// per CTA), so every batch size takes this kernel and its bits.
//
// A block's codes and exponents as one thread's fragments need them: expert_group.cpp ordered the codes so
// that one word gives a thread's two registers of a group for one of its rows.
struct Fp4Block {
    uint32_t exps[2];       // rows row, row + 8: the e8m0 exponents of the block's four groups, one byte each
                            // (block-exact weights: the row's shift word, fp4_blocks.hpp)
    uint2 words[kSubs][2];  // [sub-tile][row, row + 8]: this thread's word of each of the sub-tile's two groups
};

template <class S>
__device__ __forceinline__ Fp4Block load_fp4_block(const char* stage, int b, int row, int q) {
    const char* weights = stage + S::kCodesOffset + b * S::kBlockWeightBytes;
    Fp4Block blk;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        blk.exps[r] = *reinterpret_cast<const uint32_t*>(weights + kSubs * S::kHalfTileBytes + (row + 8 * r) * 4);
#pragma unroll
        for (int h = 0; h < kSubs; ++h)
            blk.words[h][r] = *reinterpret_cast<const uint2*>(weights + h * S::kHalfTileBytes + (row + 8 * r) * S::kWeightRowBytes + 8 * q);
    }
    return blk;
}

// Group g's A fragment: (row, k 4q..), (row + 8, k 4q..), (row, k 16 + 4q..), (row + 8, ..), each of the
// group's words (row r's: `widen(word, r)`) widened to eight e4m3 codes.
template <class Widen>
__device__ __forceinline__ void widen_group(const Fp4Block& blk, int g, uint32_t (&a)[4], Widen widen) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const uint2 v = widen(g % 2 ? blk.words[g / 2][r].y : blk.words[g / 2][r].x, r);
        a[r] = v.x, a[r + 2] = v.y;
    }
}

// The per-32 arithmetic's widening: the codes as e4m3 codes of 2^-6 times their values.
__device__ __forceinline__ void widen_group(const Fp4Block& blk, int g, uint32_t (&a)[4]) {
    widen_group(blk, g, a, [](uint32_t word, int) { return e2m1x8_to_e4m3x8(word); });
}

// Group g's MMA of a block into sums (written anew; with kScaleD 1 added to them, as block-exact weights'
// chain does: grouped_gemm_sm90_fp4_exact.cuh), after the fence that orders the fragment's registers and the
// sums' before it. `tokens` describes the block's first token tile (stage_tokens): group g reads tile g / 2
// from k 32 * (g % 2), by adding to the descriptor's start address (16-byte units; a stage never reaches past
// the field's 256 KB), where making a descriptor anew takes a handful of uniform operations each time.
template <class S, int kScaleD = 0>
__device__ __forceinline__ void group_mma(float (&sums)[S::kAcc], const uint32_t (&a)[4], uint64_t tokens, int g) {
    tokens += (g / 2) * (S::kTokenTileBytes / 16) + (32 * (g % 2)) / 16;
    if constexpr (S::kTokens == 8) wgmma_m64n8k32_e4m3_rs<kScaleD>(sums, a, tokens);
    else if constexpr (S::kTokens == 16) wgmma_m64n16k32_e4m3_rs<kScaleD>(sums, a, tokens);
    else if constexpr (S::kTokens == 32)
        wgmma_m64n32k32_e4m3_rs<kScaleD>(sums, a, tokens);
    else wgmma_m64n64k32_e4m3_rs<kScaleD>(sums, a, tokens);
}

// The descriptor of block b's first token tile in a stage.
template <class S>
__device__ __forceinline__ uint64_t stage_tokens(const char* stage, int b) {
    return smem_descriptor<512>(stage) + b * kSubs * (S::kTokenTileBytes / 16);
}

// Orders registers before the MMAs that read them (written before the fence) or after those that wrote
// them (read after the wait).
template <int kAcc>
__device__ __forceinline__ void order_mma_registers(float (&sums)[kAcc], uint32_t (&a)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[i])::"memory");
    fence_operands(sums);
}

// block = fma(sums, 2^(e_g - 127), block): group g's sums (element i: weight row row + 8 * (i / 2 % 2))
// scaled by their rows' exponents; the first group's a plain product.
template <int kAcc>
__device__ __forceinline__ void fold_group(float (&block)[kAcc], const float (&sums)[kAcc], const Fp4Block& blk, int g) {
    const float scale[2] = {__uint_as_float((blk.exps[0] >> (8 * g) & 0xFFu) << 23), __uint_as_float((blk.exps[1] >> (8 * g) & 0xFFu) << 23)};
#pragma unroll
    for (int i = 0; i < kAcc; ++i) block[i] = g == 0 ? __fmul_rn(sums[i], scale[i / 2 % 2]) : __fmaf_rn(sums[i], scale[i / 2 % 2], block[i]);
}

// Where a stage's token scales lie for its consumers: block b's at scales + b * ld, token by token (in
// the stage, or held for the CTA's whole k range).
struct StageScales {
    const float* scales;
    int ld;
};

// total = fma(block, scale(s_a, r), total) with the block's token scales s_a (element i = 4j + r: token
// 8j + 2q + r % 2, weight row row + 8 * (r / 2)), a lane's two tokens read as one pair (both places that
// hold them are 8-byte aligned).
template <int kAcc, class Scale>
__device__ __forceinline__ void fold_token_pairs(float (&total)[kAcc], const float (&block)[kAcc],
                                                 const float* token_scale, int q, Scale scale) {
#pragma unroll
    for (int j = 0; j < kAcc / 4; ++j) {
        const float2 pair = *reinterpret_cast<const float2*>(token_scale + 8 * j + 2 * q);
#pragma unroll
        for (int r = 0; r < 4; ++r)
            total[4 * j + r] = __fmaf_rn(block[4 * j + r], scale(r & 1 ? pair.y : pair.x, r), total[4 * j + r]);
    }
}

// total = fma(block, 64 * s_a, total): the per-32 arithmetic's fold of a block.
template <class S>
__device__ __forceinline__ void fold_block(float (&total)[S::kAcc], const float (&block)[S::kAcc],
                                           const float* token_scale, int q) {
    fold_token_pairs(total, block, token_scale, q, [](float sa, int) { return __fmul_rn(sa, 64.0f); });
}

// One block (b of its stage): its four groups' MMAs, kSets at once into sums of their own, each set committed
// and waited for, the next set's fragments widened while it multiplies (on 64-token CTAs the compilers put
// that widening after the wait wherever it is written, ten integer operations a group:
// bench/results/2026-12-06-cuda-producer-addresses.md). kSets is as many as the CTA's
// registers hold without ptxas serialising the MMAs (notice C7512, which makes each MMA wait for the one
// before it): all four on 8-token CTAs (64 registers at six to an SM), two on 16-token ones (five to an SM),
// one on 32- and 64-token ones (16 and 32 accumulators; two sets staggered on 64-token CTAs, two to an SM,
// were 15-17% slower than three CTAs of one set: bench/results/2026-12-07-cuda-per32-staggered.md). One
// wait for four MMAs against a wait after each: deepseek-v4-flash's one-token gate/up took 35.4 against
// 43.7 µs (bench/results/2026-12-02-cuda-fp4-e4m3.md). (Two blocks multiplied at once on 8-token CTAs six
// to an SM, block 0 folded while block 1's multiply, needed the registers of eight MMAs: ptxas serialised
// every MMA of the kernel; without it, deepseek-v4-flash's routed experts took 3.8% less time at 256 tokens
// and the same elsewhere: bench/results/2026-12-03-cuda-widening.md. Four to an SM have those registers:
// fp4_e4m3_block_pair.)
// (64-token CTAs with each group's MMA in two 32-token chunks, one chunk's sums folded while the other's MMA
// multiplied, in the registers of one set of sums: deepseek-v4-flash's routed experts took 1.3-1.5% more time
// at 4096 and 16384 tokens — 8% more instructions a block, the issue slots 69.6% busy against 67.4% — so not
// kept: bench/results/2026-12-05-cuda-switched-paths.md.)
template <class S>
__device__ __forceinline__ void fp4_e4m3_block(float (&total)[S::kAcc], const char* stage, StageScales sc, int b, int row, int lane) {
    static_assert(S::kFp4E4m3);
    constexpr int kSets = S::kAcc <= 4 ? kFp4Groups : S::kAcc <= 8 ? 2 : 1;  // groups multiplied at once
    const Fp4Block blk = load_fp4_block<S>(stage, b, row, lane & 3);
    const uint64_t tokens = stage_tokens<S>(stage, b);
    uint32_t a[kFp4Groups][4];
    float sums[kSets][S::kAcc], block[S::kAcc];
#pragma unroll
    for (int g = 0; g < kSets; ++g) widen_group(blk, g, a[g]);
#pragma unroll
    for (int first = 0; first < kFp4Groups; first += kSets) {
#pragma unroll
        for (int j = 0; j < kSets; ++j) order_mma_registers(sums[j], a[first + j]);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < kSets; ++j) group_mma<S>(sums[j], a[first + j], tokens, first + j);
        wgmma_commit();
#pragma unroll
        for (int g = first + kSets; g < first + 2 * kSets && g < kFp4Groups; ++g) widen_group(blk, g, a[g]);
        wgmma_wait<0>();
#pragma unroll
        for (int j = 0; j < kSets; ++j) {
            order_mma_registers(sums[j], a[first + j]);
            fold_group(block, sums[j], blk, first + j);
        }
    }
    fold_block<S>(total, block, sc.scales + b * sc.ld, lane & 3);
}

// A stage's two blocks with all eight of their MMAs in flight, where the CTA's registers hold them
// (S::kBlocksAtOnce): block 0's four, committed; block 1's widened and issued behind them, committed; block 0
// folded while block 1's multiply, then block 1. The same MMAs and the same folds in the same order as
// fp4_e4m3_block's: the same bits.
template <class S>
__device__ __forceinline__ void fp4_e4m3_block_pair(float (&total)[S::kAcc], const char* stage, StageScales sc, int row, int lane) {
    static_assert(S::kFp4E4m3 && S::kBlocks == 2);
    const Fp4Block blk[2] = {load_fp4_block<S>(stage, 0, row, lane & 3), load_fp4_block<S>(stage, 1, row, lane & 3)};
    uint32_t a[2][kFp4Groups][4];
    float sums[2][kFp4Groups][S::kAcc], block[S::kAcc];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
        const uint64_t tokens = stage_tokens<S>(stage, b);
#pragma unroll
        for (int g = 0; g < kFp4Groups; ++g) {
            widen_group(blk[b], g, a[b][g]);
            order_mma_registers(sums[b][g], a[b][g]);
        }
        wgmma_fence();
#pragma unroll
        for (int g = 0; g < kFp4Groups; ++g) group_mma<S>(sums[b][g], a[b][g], tokens, g);
        wgmma_commit();
    }
#pragma unroll
    for (int b = 0; b < 2; ++b) {
        if (b == 0) wgmma_wait<1>();
        else wgmma_wait<0>();
#pragma unroll
        for (int g = 0; g < kFp4Groups; ++g) {
            order_mma_registers(sums[b][g], a[b][g]);
            fold_group(block, sums[b][g], blk[b], g);
        }
        fold_block<S>(total, block, sc.scales + b * sc.ld, lane & 3);
    }
}

// A stage's `count` blocks (a split's last stage may have one).
template <class S>
__device__ __forceinline__ void fp4_e4m3_stage(float (&total)[S::kAcc], const char* stage, StageScales sc, int count, int row, int lane) {
    if constexpr (S::kBlocksAtOnce) {
        if (count == 2) return fp4_e4m3_block_pair<S>(total, stage, sc, row, lane);
    }
    for (int b = 0; b < count; ++b) fp4_e4m3_block<S>(total, stage, sc, b, row, lane);
}
#endif

}  // namespace steadymoe::cuda::fp4_e4m3
