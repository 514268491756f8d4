// Block-exact FP4 weights meeting e4m3 tokens on Hopper (grouped_gemm_sm90_decode.cu's kernel), on request
// (expert_group.hpp: fp4_block_exact_requested): weights whose every 128 x 128 block converts exactly to e4m3
// codes under one power-of-two scale 2^(b - 127) (fp4_blocks.hpp) take the FP8 kernels' arithmetic. Per
// 128-wide block, each group's codes are widened to those e4m3 codes (its shift's byte table:
// fp4_e4m3_word.hpp), four MMAs sum the block's products in one accumulator, the first anew, and total =
// fma(sums, s_a * 2^(b - 127), total) with the token's 128-block scale s_a: the FP8 kernels' four MMAs a
// block and their fold with the block's weight scale. One fold per block where the per-32 arithmetic
// (grouped_gemm_sm90_fp4_e4m3.cuh) folds five times. Device code for sm_90a.
#pragma once

#include "grouped_gemm_sm90_fp4_e4m3.cuh"

#include <cstdint>

namespace steadymoe::cuda::fp4_exact {

using namespace wgmma;
using fp4_e4m3::kFp4Groups;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using fp4_e4m3::Fp4Block;
using fp4_e4m3::StageScales;

// Group g's A fragment (fp4_e4m3::widen_group's registers), each row's codes by its group's shift (bits 4g..
// of the row's word in Fp4Block::exps).
__device__ __forceinline__ void widen_shifted_group(const Fp4Block& blk, int g, uint32_t (&a)[4]) {
    fp4_e4m3::widen_group(blk, g, a, [&](uint32_t word, int r) {
        return e2m1x8_to_e4m3x8_by_table(word, e4m3_table(shift_word_group_shift(blk.exps[r], g)));
    });
}

// A block's four groups widened and their MMAs issued and committed, after the fence that orders the
// fragments' and the sums' registers.
template <class S>
__device__ __forceinline__ void issue_block(float (&sums)[S::kAcc], uint32_t (&a)[kFp4Groups][4],
                                            const Fp4Block& blk, uint64_t tokens) {
#pragma unroll
    for (int g = 0; g < kFp4Groups; ++g) {
        widen_shifted_group(blk, g, a[g]);
        fp4_e4m3::order_mma_registers(sums, a[g]);
    }
    wgmma_fence();
    fp4_e4m3::group_mma<S, 0>(sums, a[0], tokens, 0);  // the first anew, the others added
    fp4_e4m3::group_mma<S, 1>(sums, a[1], tokens, 1);
    fp4_e4m3::group_mma<S, 1>(sums, a[2], tokens, 2);
    fp4_e4m3::group_mma<S, 1>(sums, a[3], tokens, 3);
    wgmma_commit();
}

// total = fma(sums, s_a * 2^(b - 127), total), as the FP8 kernels fold (element i: token
// 8 * (i / 4) + 2q + i % 2, weight row row + 8 * (i / 2 % 2), whose block exponent is bits 16..23 of its
// word), after the block's wait.
template <class S>
__device__ __forceinline__ void fold_block(float (&total)[S::kAcc], float (&sums)[S::kAcc],
                                           uint32_t (&a)[kFp4Groups][4], const Fp4Block& blk,
                                           const float* token_scale, int q) {
#pragma unroll
    for (int g = 0; g < kFp4Groups; ++g) fp4_e4m3::order_mma_registers(sums, a[g]);
    const float weight_scale[2] = {shift_word_block_scale(blk.exps[0]), shift_word_block_scale(blk.exps[1])};
    fp4_e4m3::fold_token_pairs(total, sums, token_scale, q,
                               [&](float sa, int r) { return __fmul_rn(sa, weight_scale[r >> 1]); });
}

// A stage's `count` blocks. Two are multiplied at once where the CTA's registers hold both blocks' fragments
// and sums (S::kExactPairs), their MMAs interleaved (block 0's group 0, block 1's group 0, block 0's group 1,
// ...): each MMA of a block's chain adds to the sums of the one before it, which a lone block's chain waits
// for, while here the other block's MMA runs in between. The same MMAs into each block's sums in the same
// order, and the same folds: the same bits either way.
template <class S>
__device__ __forceinline__ void stage(float (&total)[S::kAcc], const char* stage, StageScales sc, int count,
                                      int row, int lane) {
    static_assert(S::kBlockExact);
    const int q = lane & 3;
    if constexpr (S::kExactPairs) {
        if (count == 2) {
            const Fp4Block blk[2] = {fp4_e4m3::load_fp4_block<S>(stage, 0, row, q),
                                     fp4_e4m3::load_fp4_block<S>(stage, 1, row, q)};
            const uint64_t tokens[2] = {fp4_e4m3::stage_tokens<S>(stage, 0),
                                        fp4_e4m3::stage_tokens<S>(stage, 1)};
            uint32_t a[2][kFp4Groups][4];
            float sums[2][S::kAcc];
#pragma unroll
            for (int b = 0; b < 2; ++b)
#pragma unroll
                for (int g = 0; g < kFp4Groups; ++g) {
                    widen_shifted_group(blk[b], g, a[b][g]);
                    fp4_e4m3::order_mma_registers(sums[b], a[b][g]);
                }
            wgmma_fence();
            fp4_e4m3::group_mma<S, 0>(sums[0], a[0][0], tokens[0], 0);
            fp4_e4m3::group_mma<S, 0>(sums[1], a[1][0], tokens[1], 0);
#pragma unroll
            for (int g = 1; g < kFp4Groups; ++g) {
                fp4_e4m3::group_mma<S, 1>(sums[0], a[0][g], tokens[0], g);
                fp4_e4m3::group_mma<S, 1>(sums[1], a[1][g], tokens[1], g);
            }
            wgmma_commit();
            wgmma_wait<0>();
            fold_block<S>(total, sums[0], a[0], blk[0], sc.scales, q);
            fold_block<S>(total, sums[1], a[1], blk[1], sc.scales + sc.ld, q);
            return;
        }
    }
    for (int b = 0; b < count; ++b) {
        const Fp4Block blk = fp4_e4m3::load_fp4_block<S>(stage, b, row, q);
        uint32_t a[kFp4Groups][4];
        float sums[S::kAcc];
        issue_block<S>(sums, a, blk, fp4_e4m3::stage_tokens<S>(stage, b));
        wgmma_wait<0>();
        fold_block<S>(total, sums, a, blk, sc.scales + b * sc.ld, q);
    }
}
#endif

}  // namespace steadymoe::cuda::fp4_exact
