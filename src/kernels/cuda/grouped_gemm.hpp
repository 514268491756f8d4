// The boundary between host code and the tensor-core grouped GEMM: plain pointers and sizes only, so
// the .cu file needs no host library headers.
//
// One launch computes C = A . W_e^T for every expert e of a group at once. A holds the experts' input
// rows one expert after another (bf16 bits); a tile list names, for every tile of rows, its expert, first
// row and number of valid rows. The arithmetic of one output element is fixed by (N, K, format) alone:
// bf16 operands (every FP8 / FP4 weight and FP8 activation value is exact in bf16), fp32 accumulation in
// 16-wide k steps in ascending k, and — when a 128-block scale applies — one partial sum per 128-wide k
// block folded as c = fma(p, s_a * s_w, c). On Hopper, FP8 weights meeting FP8 activations (a_fp8)
// multiply on the FP8 tensor cores instead: the same 128-block partial sums and fold, with the partial
// sums accumulated by the tensor cores (exact products, summed with fewer bits than fp32). FP4 weights
// meeting FP8 activations on Hopper follow DeepSeek-V4: one tensor-core sum per 32-wide k group (one e8m0
// scale), scaled by the weight's 2^(e - 127) into a block sum (fp32 fma, in ascending groups; the e4m3
// forms of the codes are 2^-6 times their values), and each block sum folded as c = fma(b, 64 * s_a, c);
// block-exact FP4 weights (fp4_block_exact: exact in e4m3 per 128 x 128 block, on request) take the FP8
// weights' arithmetic instead. Which runs depends on the GPU, the format and that request, never on the
// batch. No row's result depends on another's, so a token's bits do not depend on which tile, or how full a
// tile, it lands in.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "early_route.hpp"
#include "scale_layout.hpp"

namespace steadymoe::cuda {

inline constexpr int kTileN = 128;  // output features per tile
// k values per stored weight tile (weight_layouts.hpp) and per pipeline (sub-)stage of the kernels that read them.
inline constexpr int kStageK = 64;
// Row tiles one launch takes: the kernel for FP4 weights meeting e4m3 activations gives a tile two rows of
// CTAs (64 tokens each) in a grid of at most 65535 rows.
inline constexpr int64_t kMaxLaunchTiles = 65535 / 2;
// FP4 weights in e4m3 order (DeviceMatrixSet::fp4_e4m3_order): bytes of one 128-wide k block of 64 rows (half an
// n-tile), the codes (64 x 64) then the e8m0 exponents (64 x 4; block-exact weights: each row's shift word).
inline constexpr int kFp4E4m3HalfRows = kTileN / 2;
inline constexpr int kFp4E4m3CodeBytes = kFp4E4m3HalfRows * 128 / 2;
inline constexpr int kFp4E4m3BlockBytes = kFp4E4m3CodeBytes + kFp4E4m3HalfRows * 4;

// Rows of A per tile on this GPU (128 on Hopper, 64 elsewhere): a tile list holds at most this many, but for
// tall tiles.
int grouped_gemm_tile_rows();
// The shortest tiles any launch takes (grouped_gemm_decode_tile_rows).
inline constexpr int kMinTileRows = 8;

// Weights are stored per expert as n-tiles of kTileN rows (zero rows pad the last), each a run of K/64
// stage tiles of kTileN rows x 64 k values, contiguous (weight_layouts.hpp: tile_matrix); FP4 weights for e4m3
// activations in e4m3 order instead (kFp4E4m3BlockBytes, weight_layouts.hpp: fp4_e4m3_blocks, no w_scale).
enum class WeightCode : int {
    Bf16 = 0,  // bf16 stage tiles, pre-swizzled as the shared-memory stage holds them
    Fp8 = 1,   // e4m3 stage tiles, in wgmma's 64-byte swizzle; f32 scales [ceil(N/128)][K/128] (see fp8_half_blocks)
    Fp4 = 2,   // e2m1 stage tiles, row-major, low nibble first (or in e4m3 order: expert_group.hpp); e8m0
               // scales per (n-tile, 128-k block) [128][4]
};

// Rows per tile for a few-row launch (GroupedGemmLaunch::few_rows) over weights `code` meeting e4m3
// (a_fp8) or bf16 activations, with at most `rows` rows over `experts` experts: on a Hopper, the tokens per
// CTA of its decode kernel (8 to 64, taller where experts average more rows), so that the launch's grid
// holds no CTA for rows a tile cannot have;
// else grouped_gemm_tile_rows(). Any height up to that gives the same bits.
int grouped_gemm_decode_tile_rows(WeightCode code, bool a_fp8, int64_t rows, int64_t experts);
// Rows per tile where launches outside decode batches of weights `code` (block-exact FP4 where
// fp4_block_exact) meeting e4m3 activations (a_fp8) may take tall tiles, or 0: 192 for FP8 weights and for
// block-exact FP4 ones on the tiled kernel (grouped_gemm_fp4_exact_tiled) on a Hopper, where three-warpgroup
// CTAs multiply them (grouped_gemm_sm90_cta.cuh; the same bits: a row's MMAs and folds do not depend on its
// tile), unless STEADYMOE_TALL_TILES=0. A launch of such tiles (tile_m) takes no k split. On an H100
// deepseek-v3's routed experts took 2.4-3.1% less time so at 16384 tokens (shared expert after) and 9.9% less
// at 4096, deepseek-v4-flash's FP8 experts as much as on 128-row tiles
// (bench/results/2026-12-06-cuda-tall-tiles.md) while their gate/ups parked f32 results, and 13.6% less than
// so once they parked their SwiGLU outputs (bench/results/2026-12-06-cuda-tall-swiglu.md). Block-exact FP4
// weights: two of the epilogue warps convert each block (grouped_gemm_sm90.cu), and the layer takes tall
// tiles for them only where experts average more rows than the GPU's tile (group_tiles): at 16384 tokens
// block-exact deepseek-v4-flash's routed experts took 3.1% less time so (shared expert after), at 4096 21-22%
// more (bench/results/2026-12-06-cuda-converting-warps.md); 11% less at 16384 and 6% less at 8192 once the
// converting threads took a row of each half and sub-tile in turn (against 128-row tiles measured without
// that change: bench/results/2026-12-06-cuda-per32-profile.md). Where two consumer warpgroups converted them,
// 43% more than on 128-row tiles at 16384 (those kernels spilled 120-148 bytes a thread:
// 2026-12-06-cuda-tall-swiglu.md).
int grouped_gemm_tall_tile_rows(WeightCode code, bool a_fp8, bool fp4_block_exact = false);

enum class GemmEpilogue : int {
    Store = 0,    // out[row][n] = c (f32, row stride ldo)
    SwiGlu = 1,   // W rows interleave gate and up by 8; out[row][j] = SwiGLU(gate_j, up_j) (f32)
    Scatter = 2,  // out[row_dest[row]][n] = round(w * c) or round(c) (f32)
};

// How the Hopper kernel schedules a launch on its 128-row CTAs (the bits are the same; tests and
// benchmarks compare them). Launches of tall tiles (grouped_gemm_tall_tile_rows) take none of these: they run
// persistent three-warpgroup CTAs with parked epilogues, whatever the schedule or STEADYMOE_TILED_SCHEDULE
// and STEADYMOE_PARKED_EPILOGUES say.
enum class TiledSchedule : int {
    Automatic = 0,   // STEADYMOE_TILED_SCHEDULE if set, else the fastest measured for the launch
    PerTile = 1,     // one CTA per tile and n-block, one to an SM, deep pipelines
    TwoPerSm = 2,    // two to an SM with shallower pipelines (unscaled launches; scaled ones run PerTile)
    Persistent = 3,  // one CTA per SM walking every (tile, n-block) with one pipeline
    Parked = 4,      // Persistent, its epilogues parked for epilogue warps whatever the launch's k
};

struct GroupedGemmLaunch {
    // Tiles: up to max_tiles of them; tiles at or past *tile_count are skipped.
    const int32_t* tile_expert = nullptr;
    const int32_t* tile_row0 = nullptr;
    const int32_t* tile_rows = nullptr;
    const int32_t* tile_count = nullptr;
    int32_t max_tiles = 0;
    // Rows per tile of the list (its permutation's tile_m): at most grouped_gemm_tile_rows(), or
    // grouped_gemm_tall_tile_rows() where the launch may take tall tiles; 0 means grouped_gemm_tile_rows().
    int32_t tile_m = 0;
    // Instead of a tile list (a dense GEMM, as the router's): tile i covers rows i * identity_tile_rows
    // onwards of rows [0, identity_rows), expert 0 — no list to build in a launch of its own.
    int64_t identity_rows = 0;
    int32_t identity_tile_rows = 0;
    // A hint that the tiles hold few rows (a decode batch): Hopper then runs the decode kernel (the
    // weights as the MMAs' first operand, 8 to 64 tokens per CTA, by tile_m), or two 64-row CTAs per tile
    // where that kernel does not take the launch. FP4 weights meeting e4m3 activations take the decode kernel
    // in every launch: 8 to 64 tokens per CTA with the hint (by tile_m), 64 without. Each row's MMAs and
    // folds are the same either way, so the hint may follow the batch size.
    bool few_rows = false;
    TiledSchedule schedule = TiledSchedule::Automatic;
    // Dependent launches (dependent_launch.hpp) in the decode kernel. tiles_before_wait: the tile list was
    // written before a kernel between it and this launch on its stream that waits for the kernel before it
    // before letting the next start (every gather kernel does; early_dependents does not), so the list is
    // complete when this launch's kernel starts: the CTAs read it (past L1) and start their weights' copies
    // before waiting for the kernel before them. early_dependents: the launch after this one does so, so let
    // it start once this launch's CTAs have begun, not at their epilogues.
    bool tiles_before_wait = false;
    bool early_dependents = false;
    // A decode launch right after a routing kernel that publishes its one token's experts there
    // (RouteLaunch::early): each CTA takes its tile's expert from it (tile i: the i-th expert, one row, row i)
    // and starts its first stages' weight copies before waiting for the routing kernel, as with
    // tiles_before_wait; then it reads the tile list after the wait as without, and stops with an error where
    // the two differ. Only unscaled bf16 launches of few CTAs (one token's gate/up) take it on Hopper; others
    // wait as they do without it. Null: none.
    const EarlyRoute* early_route = nullptr;

    const uint16_t* a = nullptr;    // [rows][k] bf16 bits
    // Rows `a` (or `a_fp8`) holds (its allocation), or 0: with it, Hopper may load row tiles by tensor
    // copies, which read rows past a tile's own (never past a_rows).
    int64_t a_rows = 0;
    const float* a_scale = nullptr;  // [rows][k/128], or null (scale 1); or as a_scale_layout says
    // Block-major scales ([k/128][rows]) only where grouped_gemm_reads_block_major_scales says so; other
    // launches with them are refused.
    ScaleLayout a_scale_layout;
    // Instead of `a`: e4m3 codes [rows][k] with their scales in a_scale — only where
    // grouped_gemm_takes_fp8_activations(code) says so.
    const uint8_t* a_fp8 = nullptr;
    // Or null: row r of the tiles is row a_index[r] of `a` (or `a_fp8`) and of a_scale, read in place
    // where the launch's kernel reads rows so (grouped_gemm_reads_indexed_rows; others refuse the launch),
    // which spares a gather kernel's launch and its copy.
    const int32_t* a_index = nullptr;

    WeightCode code = WeightCode::Bf16;
    // FP4 weights stored in e4m3 order (DeviceMatrixSet::fp4_e4m3_order): such weights must meet e4m3
    // activations (a_fp8) and FP4 weights meeting them must be so stored; a launch that mixes them is refused.
    bool fp4_e4m3_order = false;
    // FP4 weights in e4m3 order that are block-exact (DeviceMatrixSet::fp4_block_exact): their products take
    // the FP8 kernels' arithmetic (grouped_gemm_sm90_fp4_exact.cuh). It must be the weights' own flag.
    bool fp4_block_exact = false;
    const void* w = nullptr;         // expert e at w + e * w_expert_bytes
    int64_t w_expert_bytes = 0;
    const void* w_scale = nullptr;   // expert e at w_scale + e * scale_expert_bytes
    int64_t scale_expert_bytes = 0;
    // Fp8 with interleaved gate/up rows: 128-row blocks of the gate come first, then the up's.
    int32_t fp8_half_blocks = 0;
    int64_t n = 0;
    int64_t k = 0;                   // a multiple of 128
    // Store only: k_splits blocks each sum K / k_splits (a multiple of 128) of the products, split z
    // writing its partial sums at out + z * split_stride, summed in split order by their reader (the routing
    // kernel reads the router's this way: routing.hpp). The split is part of
    // the arithmetic: it must depend on the shape alone, never on the batch.
    int32_t k_splits = 1;
    int64_t split_stride = 0;
    bool scaled = false;             // fold per 128-wide k block (FP8 weights or FP8 activations)

    GemmEpilogue epilogue = GemmEpilogue::Store;
    float* out = nullptr;
    // SwiGlu and Scatter with round_bf16: the outputs as bf16 bits here instead of `out` (they are rounded
    // to bf16 already, so the same values in half the bytes; a bf16 SwiGLU output is the down GEMM's input
    // as it is). ldo counts elements either way.
    uint16_t* out_bf16 = nullptr;
    int64_t ldo = 0;
    const float* row_weight = nullptr;  // SwiGlu (weight before down) and Scatter
    const int64_t* row_dest = nullptr;  // Scatter
    float swiglu_limit = 0.0f;          // <= 0: none
    bool weight_before_down = false;
    bool round_bf16 = false;            // round stage outputs to bf16 (the activation dtype)

    cudaStream_t stream = nullptr;
};

cudaError_t launch_grouped_gemm(const GroupedGemmLaunch& launch);

// Whether `launch` with a_index set would run (on a Hopper, where its launch takes the decode kernel: FP4
// weights meeting e4m3 activations in every batch, BF16 and FP8 weights in few-row ones), and not with
// STEADYMOE_INDEXED_ROWS=0, which keeps the layer's gathers to compare (the same bits).
bool grouped_gemm_reads_indexed_rows(const GroupedGemmLaunch& launch);
// Whether `launch` may hold its scales block-major (a_scale_layout): e4m3 activations on a Hopper where the
// launch takes the tiled kernel (not the decode kernel, nor 64-row CTAs), which copies each stage's 128 row
// scales by one tensor copy in place of a 4-byte copy per row (the same bits either way).
bool grouped_gemm_reads_block_major_scales(const GroupedGemmLaunch& launch);
// Whether `launch` runs faster on its rows gathered in order than read in place (it still takes them in
// place): FP4 weights meeting e4m3 activations on 64-token CTAs (batches other than decode ones, and decode
// batches past 24 rows an expert), which take rows in order by tensor copies (STEADYMOE_FP4_ROW_COPIES=0:
// by cp.async, and read in place, to compare; the same bits).
bool grouped_gemm_prefers_rows_in_order(const GroupedGemmLaunch& launch);

// How many of the tiled kernel's 64-row CTAs (few_rows launches the decode kernel does not take) the
// current GPU keeps on one SM: 2 on a Hopper, 0 where the kernel has none.
int grouped_gemm_few_row_ctas_per_sm();
// How many CTAs of the decode kernel (few_rows on a Hopper: the weights as the MMAs' first operand) the
// current GPU keeps on one SM for weights `code`: 5 for BF16, 7 for FP8 (with e4m3 activations), 4 for
// FP4 (with bf16 activations; with e4m3 ones see grouped_gemm_fp4_e4m3_ctas_per_sm); 0 where few-row
// launches over `code` do not take it (not a Hopper, STEADYMOE_FEW_ROW_KERNELS=0, or for BF16 and FP8
// STEADYMOE_DECODE_KERNEL=tiled, which keeps them on the tiled kernel's 64-row CTAs).
int grouped_gemm_decode_ctas_per_sm(WeightCode code);

// A decode-kernel shape that launches of few CTAs take in place of the usual one (fewer CTAs to an SM, more
// stages each): its CTAs per SM, and the most CTAs an SM (of the usual shape's size) a launch may have to take it.
struct FewCtaShape {
    int ctas_per_sm = 0;  // 0: no such shape
    int launch_ctas_per_sm = 0;
};
// That shape for few-row launches over weights `code` meeting e4m3 (a_fp8) or bf16 tokens on the current GPU: BF16
// weights with bf16 tokens (qwen3's experts at one token, the routers), FP4 weights with e4m3 tokens in 8-token
// CTAs (deepseek-v4-flash's routed experts at one token); none elsewhere.
FewCtaShape grouped_gemm_few_cta_shape(WeightCode code, bool a_fp8);

// Launches so far in this process that ran on Hopper's persistent CTAs paired in clusters of two, which
// copy each stage's rows once for both (where rows come by tensor copies and the 128-wide n-blocks pair up,
// unless they run in weight pairs below; STEADYMOE_PAIRED_CTAS=0 turns both off), and those that ran in
// clusters of four, two such pairs on two row tiles that also copy each stage's weights once for both where
// the tiles share an expert (STEADYMOE_QUAD_CTAS=1 asks for them, unless STEADYMOE_WEIGHT_PAIRS=1 asks for
// weight pairs). The bits are the same either way: tests read these to know which they ran.
uint64_t grouped_gemm_paired_launches();
uint64_t grouped_gemm_quad_launches();
// Launches so far whose persistent scatter into bf16 rows parked its results as bf16 for epilogue warps (the
// default; STEADYMOE_PARKED_SCATTER=0 keeps the register epilogue; the same bits either way).
uint64_t grouped_gemm_parked_scatter_launches();
// Launches so far whose row scales came by tensor copies (block-major: a_scale_layout; where the map's encoding
// fails they come by 4-byte copies, the same bits).
uint64_t grouped_gemm_scale_map_launches();
// Launches so far on tall tiles' three-warpgroup CTAs (grouped_gemm_tall_tile_rows).
uint64_t grouped_gemm_tall_launches();
// Launches so far whose persistent SwiGLU epilogue parked its outputs as bf16 for epilogue warps (bf16 rows
// meeting bf16 weights and tall tiles unless STEADYMOE_PARKED_SWIGLU=0; every path with =1; the same bits
// either way).
uint64_t grouped_gemm_parked_swiglu_launches();
// Launches so far in clusters of two whose CTAs took two row tiles of an item and shared its weights' copies
// (weight pairs): persistent launches of unscaled bf16 rows meeting bf16 weights or e4m3 rows meeting FP8
// weights whose rows come by tensor copies (not few-row launches; parked SwiGLU outputs only of bf16 ones
// and of tall tiles), where a weight column's run in an item (k / k_splits x the weights' element bytes)
// holds at least kWeightPairColumnBytes, or kSwiGluWeightPairColumnBytes where 128-row tiles' SwiGLU outputs
// are parked
// (STEADYMOE_WEIGHT_PAIRS=1 asks for them on every such launch and on those of block-exact FP4 weights
// meeting e4m3 rows, =0 and STEADYMOE_PAIRED_CTAS=0 on none; the same bits either way).
inline constexpr int64_t kWeightPairColumnBytes = 4096;
inline constexpr int64_t kSwiGluWeightPairColumnBytes = 8192;
uint64_t grouped_gemm_weight_pair_launches();

// Whether the GEMM over weights `code` takes FP8 activations as e4m3 codes (a_fp8): FP8 and FP4 weights
// on a Hopper, unless STEADYMOE_FP8_TENSOR_CORES=0 in the environment keeps them on the bf16 tensor cores
// (to compare the two). Elsewhere FP8 activations travel as their exact bf16 values. FP4 weights meeting
// e4m3 activations must be stored in e4m3 order (expert_group.hpp: DeviceMatrixSet::fp4_e4m3_order).
bool grouped_gemm_takes_fp8_activations(WeightCode code);
// CTAs per SM of the kernel for FP4 weights meeting e4m3 activations (the weights as the MMAs' first
// operand, every batch size) whose CTAs take `tokens` tokens: 8, 16 or 32 in decode batches, 64 in others; 0
// where there is none.
int grouped_gemm_fp4_e4m3_ctas_per_sm(int tokens);
// Whether block-exact FP4 weights meeting e4m3 activations take the tiled kernel in batches other than decode
// ones (a Hopper, unless STEADYMOE_FP4_EXACT_TILED=0; the same bits): tests and benchmarks say which they ran.
bool grouped_gemm_fp4_exact_tiled();

}  // namespace steadymoe::cuda
