// The Hopper (sm_90a) grouped GEMM: the same launch, tiles and arithmetic contract as grouped_gemm.hpp,
// with warpgroup MMAs (wgmma) reading both operands from the swizzled shared stages. Each of two
// warpgroups owns 64 of a tile's 128 rows (each of three, 64 of a tall tile's 192).
#pragma once

#include "grouped_gemm.hpp"

namespace steadymoe::cuda {

inline constexpr int kHopperTileRows = 128;
// Rows per tile of launches on three-warpgroup CTAs (grouped_gemm_tall_tile_rows).
inline constexpr int kHopperTallTileRows = 192;

// True when the current GPU is a Hopper and this build carries the sm_90a kernels (asked once per device). The environment
// variable STEADYMOE_GEMM_KERNEL=mma forces the sm_80 kernel instead (to test it on a Hopper).
bool hopper_gemm_available();

cudaError_t launch_grouped_gemm_sm90(const GroupedGemmLaunch& launch);

// The kernels for launches whose tiles hold few rows (few_rows: a decode batch), each with the same
// arithmetic per row as the tiled kernel: STEADYMOE_FEW_ROW_KERNELS=0 in the environment keeps every
// launch on the tiled kernel's 128-row CTAs, to compare (but FP4 weights meeting e4m3 activations, which
// only the decode kernel multiplies: they take its 64-token CTAs).
bool hopper_few_row_kernels();
// Streaming multiprocessors of the current GPU (asked once per device; 1 where the query fails).
int hopper_sm_count();
// Whether `launch` runs as 64-row CTAs, and how many of them the FP8 x e4m3 kernel keeps on one SM (the
// bf16 ones use as much shared memory).
bool hopper_half_tiles(const GroupedGemmLaunch& launch);
int hopper_few_row_ctas_per_sm();
// Launches so far that ran on persistent CTAs paired in clusters of two sharing their rows' copies, and in
// clusters of four sharing their weights' copies too.
uint64_t hopper_paired_launches();
uint64_t hopper_quad_launches();
// Launches so far whose scatter epilogues were parked as bf16 (unless STEADYMOE_PARKED_SCATTER=0).
uint64_t hopper_parked_scatters();
// Launches so far whose row scales came by tensor copies.
uint64_t hopper_scale_map_launches();
// Launches so far on three-warpgroup CTAs (tall tiles).
uint64_t hopper_tall_launches();
// Launches so far that parked their SwiGLU outputs as bf16 (bf16 rows meeting bf16 weights and tall tiles
// unless STEADYMOE_PARKED_SWIGLU=0; every path with =1).
uint64_t hopper_parked_swiglus();
// Launches so far in clusters of two that shared their weights' copies over two row tiles (weight pairs: by
// default where a weight column holds kWeightPairColumnBytes, or kSwiGluWeightPairColumnBytes where 128-row
// tiles' SwiGLU outputs are parked; STEADYMOE_WEIGHT_PAIRS=0/1 for none or all).
uint64_t hopper_weight_pair_launches();
// Whether few-row launches over weights `code` (FP8: with e4m3 activations) take the decode kernel.
bool hopper_decode_takes(WeightCode code);
// Whether block-exact FP4 weights meeting e4m3 activations take the tiled kernel in launches other than
// few-row ones: each stage's block converted to FP8 weights' tiles (fp4_exact_tiles.hpp) and multiplied as
// those are, the same bits as the decode kernel's. deepseek-v4-flash's routed experts took 21% less time so
// at 16384 tokens (bench/results/2026-12-05-cuda-switched-paths.md); STEADYMOE_FP4_EXACT_TILED=0 keeps them on
// the decode kernel's 64-token CTAs, to compare (the same bits).
bool hopper_fp4_exact_tiled();
// Whether `launch` is of block-exact FP4 weights that take the tiled kernel (hopper_fp4_exact_tiled: outside
// few-row launches).
bool hopper_fp4_exact_tiles(const GroupedGemmLaunch& launch);
// Whether `launch` takes the decode kernel (grouped_gemm_sm90_decode.cu: the weights as the MMAs' A operand;
// launches with few rows, and every launch of FP4 weights meeting e4m3 activations), that kernel's launch, and
// how many of its CTAs the current GPU keeps on one SM for weights `code` in decode batches (FP4: with bf16
// activations; 0 where the query fails).
bool hopper_decode(const GroupedGemmLaunch& launch);
// Whether `launch` takes the tiled kernel with e4m3 activations, whose producer reads block-major scales
// (grouped_gemm_reads_block_major_scales).
bool hopper_block_major_scales(const GroupedGemmLaunch& launch);
// Whether `launch` (taking the decode kernel) runs faster on rows that lie in order than on rows read in
// place through a_index: FP4 weights meeting e4m3 tokens on 64-token CTAs (other than decode batches, and
// decode batches past 24 rows an expert) take such rows by tensor copies.
bool hopper_decode_prefers_rows_in_order(const GroupedGemmLaunch& launch);
// Rows per tile for a few-row launch over weights `code` meeting e4m3 (a_fp8) or bf16 tokens, `rows` rows
// (a bound) over `experts` experts: the tokens per CTA of the decode kernel's shape for it, or 0 where
// that kernel does not take such launches.
int hopper_decode_tile_rows(WeightCode code, bool a_fp8, int64_t rows, int64_t experts);
cudaError_t launch_decode_sm90(const GroupedGemmLaunch& launch);
int hopper_decode_ctas_per_sm(WeightCode code);
// CTAs of the kernel for FP4 weights meeting e4m3 activations the current GPU keeps on one SM, for CTAs of
// `tokens` tokens (8, 16, 32 or 64; 0 for others).
int hopper_fp4_e4m3_ctas_per_sm(int tokens);
// The decode kernel's shape for launches of few CTAs (fewer to an SM, more stages each), with the most CTAs an SM
// such a launch has: BF16 weights with bf16 tokens, FP4 weights with e4m3 ones' 8-token CTAs; none for the others,
// or with STEADYMOE_DEEP_STAGES=0 (or for FP4 with STEADYMOE_FP4_THIN_CTAS_PER_SM=4, which runs every launch so).
FewCtaShape hopper_few_cta_shape(WeightCode code, bool a_fp8);

}  // namespace steadymoe::cuda
