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

// block[at + i] = fma(sums[i], 2^(e_g - 127), block[at + i]): group g's sums (element i: weight row row + 8 *
// (i / 2 % 2); `at` a multiple of 4, where a chunk of the tokens starts) scaled by their rows' exponents; the
// first group's a plain product.
template <int kN, int kAcc>
__device__ __forceinline__ void fold_group(float (&block)[kAcc], int at, const float (&sums)[kN], const Fp4Block& blk, int g) {
    static_assert(kN <= kAcc);
    const float scale[2] = {__uint_as_float((blk.exps[0] >> (8 * g) & 0xFFu) << 23), __uint_as_float((blk.exps[1] >> (8 * g) & 0xFFu) << 23)};
#pragma unroll
    for (int i = 0; i < kN; ++i)
        block[at + i] = g == 0 ? __fmul_rn(sums[i], scale[i / 2 % 2]) : __fmaf_rn(sums[i], scale[i / 2 % 2], block[at + i]);
}
template <int kAcc>
__device__ __forceinline__ void fold_group(float (&block)[kAcc], const float (&sums)[kAcc], const Fp4Block& blk, int g) {
    fold_group(block, 0, sums, blk, g);
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
// Elements [at, at + count) only (both multiples of 4; tokens 2 * at onwards), where a chunk's block is done.
template <int kAcc, class Scale>
__device__ __forceinline__ void fold_token_pairs(float (&total)[kAcc], const float (&block)[kAcc],
                                                 const float* token_scale, int q, Scale scale, int at = 0, int count = kAcc) {
#pragma unroll
    for (int j = at / 4; j < (at + count) / 4; ++j) {
        const float2 pair = *reinterpret_cast<const float2*>(token_scale + 8 * j + 2 * q);
#pragma unroll
        for (int r = 0; r < 4; ++r)
            total[4 * j + r] = __fmaf_rn(block[4 * j + r], scale(r & 1 ? pair.y : pair.x, r), total[4 * j + r]);
    }
}

// total = fma(block, 64 * s_a, total): the per-32 arithmetic's fold of a block (elements [at, at + count)).
template <class S>
__device__ __forceinline__ void fold_block(float (&total)[S::kAcc], const float (&block)[S::kAcc],
                                           const float* token_scale, int q, int at = 0, int count = S::kAcc) {
    fold_token_pairs(total, block, token_scale, q, [](float sa, int) { return __fmul_rn(sa, 64.0f); }, at, count);
}

// One block (b of its stage): its four groups' MMAs, kSets at once into sums of their own, each set committed
// and waited for, the next set's fragments widened while it multiplies. kSets is as many as the CTA's
// registers hold without ptxas serialising the MMAs (notice C7512, which makes each MMA wait for the one
// before it): all four on 8-token CTAs (64 registers at six to an SM), two on 16-token ones (five to an SM),
// one on 64-token ones (32 accumulators). One wait for four MMAs against a wait after each:
// deepseek-v4-flash's one-token gate/up took 35.4 against 43.7 µs
// (bench/results/2026-12-02-cuda-fp4-e4m3.md). (Two blocks multiplied at once on 8-token CTAs six to an SM,
// block 0 folded while block 1's multiply, needed the registers of eight MMAs: ptxas serialised every MMA of
// the kernel; without it, deepseek-v4-flash's routed experts took 3.8% less time at 256 tokens and the same
// elsewhere: bench/results/2026-12-03-cuda-widening.md. Four to an SM have those registers:
// fp4_e4m3_block_pair.)
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

// One block on 64-token CTAs in two 32-token chunks (S::kChunkedMmas): each group's MMA as one m64n32 MMA a
// chunk, two in flight, so that a chunk's sums are folded while the other chunk's MMA multiplies, where
// fp4_e4m3_block waits for a group's one m64n64 MMA before its fold (the profiler put 9% of those CTAs'
// samples on the waits: bench/results/2026-12-03-cuda-indexed-rows.md). Two sets of a chunk's 16 sums take
// the registers of one set of 32. MMA m is group m / 2 of chunk m % 2: each element is folded group by group
// in ascending order, and a chunk's products are those of the whole width's MMA (a row's tensor-core sum does
// not depend on the MMA's width): the same bits. A chunk's block goes into its totals once its fourth group
// is in. (128-token CTAs so, four chunks, two sets of sums: nvcc 13.0's ptxas left out six of their sixteen
// MMAs, the folds then reading another chunk's sums — bench/sass_mma_check.py shows it without a GPU; with a
// set a chunk they spilled at 168 registers. Neither is kept. On 64-token CTAs the check finds the eight
// MMAs, folded in order.)
template <class S>
__device__ __forceinline__ void fp4_e4m3_chunked_block(float (&total)[S::kAcc], const char* stage, StageScales sc, int b, int row, int lane) {
    static_assert(S::kChunkedMmas && S::kTokens == 64);
    constexpr int kChunkTokens = 32, kChunkAcc = kChunkTokens / 2, kChunks = S::kTokens / kChunkTokens;
    constexpr int kMmas = kFp4Groups * kChunks;
    const Fp4Block blk = load_fp4_block<S>(stage, b, row, lane & 3);
    const uint64_t tokens = stage_tokens<S>(stage, b);
    const float* token_scale = sc.scales + b * sc.ld;
    uint32_t a[2][4];           // group g's fragments in a[g % 2]
    float sums[2][kChunkAcc];   // MMA m's sums in sums[m % 2]
    float block[S::kAcc];
    // MMA m's sums into the block (after the wait that ends it; group g's fragments are free, and kept from
    // being reused sooner, once its last chunk's MMA has ended), and the chunk's block into its totals after
    // its last group
    const auto fold = [&](int m) {
        const int g = m / kChunks, c = m % kChunks;
        if (c == kChunks - 1) order_mma_registers(sums[m % 2], a[g % 2]);
        else fence_operands(sums[m % 2]);
        fold_group(block, c * kChunkAcc, sums[m % 2], blk, g);
        if (g == kFp4Groups - 1) fold_block<S>(total, block, token_scale, lane & 3, c * kChunkAcc, kChunkAcc);
    };
    widen_group(blk, 0, a[0]);
#pragma unroll
    for (int m = 0; m < kMmas; ++m) {
        const int g = m / kChunks, c = m % kChunks;
        if (m >= 2) {  // MMA m - 2's sums, folded before MMA m writes its set anew
            wgmma_wait<1>();
            fold(m - 2);
        }
        order_mma_registers(sums[m % 2], a[g % 2]);
        wgmma_fence();
        // (the token tile of group g, from k 32 * (g % 2), at chunk c's rows: whole swizzle atoms further on)
        wgmma_m64n32k32_e4m3_rs(sums[m % 2], a[g % 2],
                                tokens + (g / 2) * (S::kTokenTileBytes / 16) + (32 * (g % 2)) / 16 + c * (kChunkTokens * S::kTokenRowBytes / 16));
        wgmma_commit();
        // Group g + 1's fragments into a[(g + 1) % 2]: free from the start for group 1; for the others once
        // group g - 1's last MMA (m - 2 at c == 1) has been waited for.
        if (g + 1 < kFp4Groups && c == (g == 0 ? 0 : 1)) widen_group(blk, g + 1, a[(g + 1) % 2]);
    }
    wgmma_wait<1>();
    fold(kMmas - 2);
    wgmma_wait<0>();
    fold(kMmas - 1);
}

// A stage's `count` blocks (a split's last stage may have one).
template <class S>
__device__ __forceinline__ void fp4_e4m3_stage(float (&total)[S::kAcc], const char* stage, StageScales sc, int count, int row, int lane) {
    if constexpr (S::kChunkedMmas) {
        for (int b = 0; b < count; ++b) fp4_e4m3_chunked_block<S>(total, stage, sc, b, row, lane);
    } else {
        if constexpr (S::kBlocksAtOnce) {
            if (count == 2) return fp4_e4m3_block_pair<S>(total, stage, sc, row, lane);
        }
        for (int b = 0; b < count; ++b) fp4_e4m3_block<S>(total, stage, sc, b, row, lane);
    }
}
#endif

}  // namespace steadymoe::cuda::fp4_e4m3
