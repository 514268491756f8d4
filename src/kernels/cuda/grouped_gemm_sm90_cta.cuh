// A CTA of the Hopper grouped GEMM (grouped_gemm_sm90.cu): its warps and shared-memory stages, its producer
// warp's copies into a stage, its consumers' MMAs, folds and register epilogue, and the parked epilogue of
// persistent CTAs with epilogue warps. sm_90a device code only, but for the layout constants, which the
// launch code sizes shared memory by.
#pragma once

#include "async_barrier.cuh"
#include "fp4_exact_tiles.hpp"
#include "grouped_gemm_stage.cuh"
#include "wgmma.cuh"

#include <cuda.h>  // CUtensorMap

#include <algorithm>

namespace steadymoe::cuda::sm90 {

using namespace stage;
using namespace wgmma;

// A CTA: kWG consumer warpgroups of 64 rows each and one producer warp (persistent CTAs with parked
// epilogues add kEpilogueWarps: kCtaThreads in grouped_gemm_sm90.cu). Two warpgroups share each weight
// stage between the 128 rows of a tile; one-warpgroup CTAs take half a tile each, two CTAs to an SM, for
// batches whose tiles hold few rows where the decode kernel (grouped_gemm_sm90_decode.cu) does not take
// them (a CTA streams weights at a limited rate: two per SM stream more). A row's MMAs are the same
// either way, so is its result. Two-warpgroup CTAs run on one of the schedules of TiledSchedule: one to
// an SM with deep pipelines, two to an SM with three stages each (a prefill launch is thousands of short
// CTAs, and one CTA's prologue and epilogue then overlap the other's MMAs), or persistent.
// Three-warpgroup CTAs take tall tiles (kHopperTallTileRows: e4m3 rows meeting FP8 weights outside decode
// batches, grouped_gemm_tall_tile_rows), persistent with parked epilogues. One warpgroup's MMAs alone run
// below the FP8 peak; with three, two can keep the tensor pipe busy while the third folds or waits for its
// stage (in the loop ladder probe three reached 0.81-0.83 of the peak per cycle, two 0.60-0.65). Their
// producer warp and three epilogue warps make a fourth warpgroup, which hands registers to the consumers
// (setmaxnreg).
template <int kWG>
struct Cta {
    static_assert(kWG >= 1 && kWG <= 3);
    static constexpr int kRows = 64 * kWG;
    static constexpr int kConsumers = 128 * kWG;
    static constexpr int kConsumerWarps = kConsumers / 32;
    static constexpr int kThreads = kConsumers + 32;
};
static_assert(Cta<2>::kRows == kHopperTileRows && Cta<3>::kRows == kHopperTallTileRows);
// A stage's scales (kScaleBytes at StageLayout::kScales): the rows' 128-block scales, then from float
// kFragmentScaleAt on the fragments' two weight scales. Row scales by cp.async are the tile's row r at r; by
// a tensor copy (block-major scales) kRows + 4 of them land from the tile's first row rounded down to a
// multiple of 4, the tile's row r at r + row0 % 4, since a tensor copy's first element must lie 16-byte
// aligned in global memory.
template <int kRows>
constexpr int kFragmentScaleAt = kRows + 4;
static_assert((kFragmentScaleAt<Cta<3>::kRows> + 2) * 4 <= kScaleBytes);
constexpr uint32_t kFullArrivals = 1 + 32;  // the producer's bulk-copy arrival and each lane's cp.async arrival
// A pipeline stage: kSub sub-stages of 64 k — A tiles, then the stored weight tiles, then the 128-block
// scales. e4m3 stages (FP8 weights meeting FP8 activations) span a whole 128-wide block, so one 16 KB
// bulk copy brings a stage's weights: a CTA's stream is limited per copy more than by the bytes in
// flight, and 8 KB copies streamed slower than bf16's 16 KB ones
// (bench/results/2026-12-01-cuda-streaming.md). The MMAs and folds are those of two 64-wide stages.
// FP4 weights meeting e4m3 activations (kConverts): block-exact weights only, stored in e4m3 order for the
// decode kernel; a stage holds a 128-wide block's two stored 64-row halves, converted to FP8 weights' tiles
// (fp4_exact_tiles.hpp) and multiplied as those are.
// Wide CTAs (kWide: bf16 weights and activations, unscaled, persistent) take 256 features a stage, two n-tiles'
// stored tiles one after the other: one m64n256 MMA reads its A rows once for both, and a stage's bytes from L2
// serve twice the products.
template <WeightCode kCode, bool kFp8A>
constexpr bool kConverts = kCode == WeightCode::Fp4 && kFp8A;
template <WeightCode kCode, bool kFp8A, int kWG, bool kWide = false>
struct StageLayout {
    static constexpr int kSub = kFp8A ? 2 : 1;
    static constexpr int kA = Cta<kWG>::kRows * a_row_bytes(kFp8A);  // one sub-stage's activation rows
    // One sub-stage's stored weights (and FP4 scales); where converted, one stored half block; wide, two tiles.
    static constexpr int kB = kConverts<kCode, kFp8A> ? kFp4E4m3BlockBytes : (kWide ? 2 : 1) * raw_b_bytes(kCode);
    static constexpr int kScales = kSub * (kA + kB);       // offset of the rows' then the fragments' scales
    static constexpr int kBytes = (kScales + kScaleBytes + 1023) / 1024 * 1024;  // 1024-aligned (swizzle atoms)
};
// Pipeline depth per weight format: as many stages as shared memory holds, so that few-token batches
// (which only stream weights) keep many bytes in flight.
// e4m3 activations halve the A tile, and FP8 weights need no widened copy: more bytes fit. Two 64-row
// CTAs share an SM's shared memory, four stages each; two 128-row CTAs, three each.
template <WeightCode kCode, bool kFp8A, int kWG, int kPerSm, bool kWide = false>
constexpr int kStages = kWide ? 4 : kWG == 1 ? 4 : kPerSm == 2 ? 3 : kFp8A ? 6 : kCode == WeightCode::Bf16 ? 6 : kCode == WeightCode::Fp8 ? 7 : 8;
// FP8 / FP4 weights meeting bf16 activations are widened to bf16 in two spare tiles (one may still be
// read by the previous stage's MMAs); converted FP4 weights take them as e4m3 tiles.
template <WeightCode kCode, bool kFp8A>
constexpr bool kWidens = kCode != WeightCode::Bf16 && !kFp8A;
template <WeightCode kCode, bool kFp8A>
constexpr bool kSpareTiles = kWidens<kCode, kFp8A> || kConverts<kCode, kFp8A>;
static_assert(fp4_tiles::kE4m3BlockBytes == kBTileBytes, "a spare tile holds a converted block");

// Parked epilogues (persistent CTAs): the consumers leave an item's 128 x 128 results (tall tiles: 192 x 128)
// in shared memory and go on to the next item's MMAs, while three epilogue warps run the item's epilogue from
// there. Rows are padded by four floats (the consumers' float2 stores still meet two-way bank conflicts;
// eight would avoid them and still leave the stages below). The stages take what shared memory holds beside
// the parked block: four in place of six for bf16 or e4m3 rows, five in place of seven or eight where FP8 or
// FP4 weights are widened.
constexpr int kParkLd = kTileN + 4;
// Parked scatters (kParkBf16; the experts' down GEMMs, whose epilogue scatters bf16 rows): the consumers
// apply each row's routing weight and round to bf16 before they park, as the register epilogue does (the same
// bits), and the epilogue warps only copy each parked row to its destination. 128 x 128 bf16 take 35 KB where
// f32 results take 68 KB: five stages of bf16 or e4m3 rows in place of four, all six of converted FP4 blocks.
// Rows are padded by eight values: a store's lanes cover eight consecutive rows, whose words then lie four
// banks apart.
constexpr int kParkLd16 = kTileN + 8;
// Parked SwiGLU outputs (ParkedForm::SwiGluBf16; the experts' gate/up GEMMs where the activations are bf16):
// the consumers run each gate/up pair through SwiGLU as the register epilogue does, and park the 64 outputs
// of a row, which the rounding to the activations' bf16 leaves exact in 16 bits (NaNs too: round_act clears
// their low half); the epilogue warps only store each row. 128 x 64 take 18 KB: six stages of bf16 or e4m3
// rows, as many as without a parked block, where f32 results leave four. Rows are padded by eight values, as
// above.
constexpr int kParkLdSwiGlu = kTileN / 2 + 8;
// What a parked epilogue leaves in shared memory: the f32 results, the bf16 values a scatter stores, or the
// bf16 outputs of SwiGLU.
enum class ParkedForm { F32Results, ScatterBf16, SwiGluBf16 };
// (a CTA of kRows rows parks as many)
template <ParkedForm kForm, int kRows = kHopperTileRows>
constexpr int kParkBytesOf = kRows * (kForm == ParkedForm::ScatterBf16  ? kParkLd16 * 2
                                      : kForm == ParkedForm::SwiGluBf16 ? kParkLdSwiGlu * 2
                                                                        : kParkLd * 4);
constexpr int kEpilogueWarps = 3;
constexpr int kSmemPerCta = 227 * 1024;  // the most shared memory a Hopper CTA may have
// Whether a CTA's blocks of block-exact FP4 weights are converted by epilogue warps (tall tiles,
// grouped_gemm_sm90.cu), not by its consumers; each spare tile then has a barrier of its own.
template <WeightCode kCode, bool kFp8A, int kWG>
constexpr bool kWarpsConvertBlocks = kConverts<kCode, kFp8A> && kWG == 3;
// Spare tiles: two (one may still be read by the MMAs before); three for tall tiles' converted FP4 blocks
// beside parked scatters or SwiGLU outputs, which two epilogue warps convert up to two blocks ahead of the
// consumers' MMAs (grouped_gemm_sm90.cu): with two, one ahead, the three consumer warpgroups, a third of a
// block apart, left the converting warps a third of a block's time.
template <WeightCode kCode, bool kFp8A, ParkedForm kForm = ParkedForm::F32Results, int kWG = 2>
constexpr int kSpareTileCount = !kSpareTiles<kCode, kFp8A>                                        ? 0
                                : kWarpsConvertBlocks<kCode, kFp8A, kWG> && kForm != ParkedForm::F32Results ? 3
                                                                                                            : 2;
template <WeightCode kCode, bool kFp8A, ParkedForm kForm = ParkedForm::F32Results, int kWG = 2>
constexpr int kParkedStages = std::min(kStages<kCode, kFp8A, 2, 1>, (kSmemPerCta - kParkBytesOf<kForm, Cta<kWG>::kRows> -
                                                                     kSpareTileCount<kCode, kFp8A, kForm, kWG> * kBTileBytes - 2 * 1024) /
                                                                        StageLayout<kCode, kFp8A, kWG>::kBytes);
static_assert(kParkedStages<WeightCode::Fp8, true> == 4 && kParkedStages<WeightCode::Bf16, false> == 4);
static_assert(kParkedStages<WeightCode::Fp8, true, ParkedForm::ScatterBf16> == 5 &&
              kParkedStages<WeightCode::Bf16, false, ParkedForm::ScatterBf16> == 5 &&
              kParkedStages<WeightCode::Fp4, true, ParkedForm::ScatterBf16> == 6);
static_assert(kParkedStages<WeightCode::Fp8, true, ParkedForm::SwiGluBf16> == kStages<WeightCode::Fp8, true, 2, 1> &&
              kParkedStages<WeightCode::Bf16, false, ParkedForm::SwiGluBf16> == kStages<WeightCode::Bf16, false, 2, 1> &&
              kParkedStages<WeightCode::Fp4, true, ParkedForm::SwiGluBf16> == kStages<WeightCode::Fp4, true, 2, 1>,
              "parked SwiGLU outputs leave every stage");
// Tall tiles: three stages beside parked f32 results, four beside parked scatters or SwiGLU outputs; of
// block-exact FP4 weights (16 KB a spare tile) two beside f32 results and two spare tiles, three beside
// parked scatters and three, four beside parked SwiGLU outputs and three.
static_assert(kParkedStages<WeightCode::Fp8, true, ParkedForm::F32Results, 3> == 3 &&
              kParkedStages<WeightCode::Fp8, true, ParkedForm::ScatterBf16, 3> == 4 &&
              kParkedStages<WeightCode::Fp8, true, ParkedForm::SwiGluBf16, 3> == 4);
static_assert(kParkedStages<WeightCode::Fp4, true, ParkedForm::F32Results, 3> == 2 &&
              kParkedStages<WeightCode::Fp4, true, ParkedForm::ScatterBf16, 3> == 3 &&
              kParkedStages<WeightCode::Fp4, true, ParkedForm::SwiGluBf16, 3> == 4);


// What a CTA of a cluster copies for the others (persistent CTAs; see grouped_gemm_sm90.cu): half of each
// stage's rows, which land in the CTAs of `row_ctas` (a bit per rank), where row_half >= 0; half of each
// stage's weights, which land in the CTAs of `weight_ctas`, where weight_half >= 0. The halves' bytes arrive
// on each receiving CTA's stage barrier as its own copies would: every CTA expects a whole stage.
struct SharedCopies {
    int row_half = -1, weight_half = -1;
    uint16_t row_ctas = 0, weight_ctas = 0;
};

// Whether a stage's rows and weights are multiplied as they land, neither widened nor converted: bf16 rows
// meeting bf16 weights (unscaled), e4m3 rows meeting FP8 weights.
template <WeightCode kCode, bool kScaled, bool kFp8A>
constexpr bool kPlainStages = (kCode == WeightCode::Bf16 && !kScaled && !kFp8A) || (kCode == WeightCode::Fp8 && kFp8A);

// Whether a stage's stored weights are one run of bytes that CTAs of a cluster can copy half each (not
// converted, widened from FP4 with separate scales, nor two n-tiles' runs).
template <WeightCode kCode, bool kFp8A, bool kWide>
constexpr bool kWeightsInOneRun = !kConverts<kCode, kFp8A> && !kWide && !(kCode == WeightCode::Fp4 && !kFp8A);

// Whether the two CTAs of a weight pair (grouped_gemm_sm90.cu: kWeightPair) can share a stage's weights, each
// copying half into both: one run of bytes on the paths with plain stages, or a converted block's two stored
// halves (block-exact FP4 meeting e4m3 rows), one each; each CTA converts its own copy.
template <WeightCode kCode, bool kScaled, bool kFp8A, bool kWide>
constexpr bool kSharedWeightStages =
    !kWide && ((kWeightsInOneRun<kCode, kFp8A, kWide> && kPlainStages<kCode, kScaled, kFp8A>) ||
               kConverts<kCode, kFp8A>);

// Three-warpgroup CTAs' registers a thread: launched at 128 (512 threads), the fourth warpgroup (producer and
// epilogue warps) gives some up and the consumers take them: no more than the CTA holds, the SM's 65536 in
// all. (With 64 for the fourth warpgroup its code spilled 4-40 bytes in each kernel; with 80 one kernel
// spills 8 bytes, 20 loaded.)
constexpr int kTallConsumerRegisters = 144, kTallOtherRegisters = 80;
static_assert(Cta<3>::kThreads + 32 * kEpilogueWarps == 512 &&
              Cta<3>::kConsumers * kTallConsumerRegisters + 128 * kTallOtherRegisters <= 512 * 128);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// setmaxnreg: every warp of the warpgroup runs the same instruction. Giving up waits for nothing; taking
// waits until the registers are free.
template <int kRegisters>
__device__ __forceinline__ void give_registers() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void take_registers() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// This CTA's rows: a tile of the launch's list, or, for one-warpgroup CTAs, half of one (blockIdx.y =
// 2 * tile + half).
template <int kWG>
__device__ __forceinline__ Tile hopper_tile(const GroupedGemmLaunch& g) {
    if constexpr (kWG == 2) {
        return tile_of_block(g);
    } else {
        Tile t = tile_of_block(g, int(blockIdx.y) >> 1);
        const int skip = (int(blockIdx.y) & 1) * 64;
        t.rows = t.rows > skip ? min(64, t.rows - skip) : 0;
        t.row0 += skip;
        return t;
    }
}

// The producer warp's view of one tile: per pipeline stage it copies the stored weight tiles (and an
// FP4 tile's e8m0 scales) with one bulk copy each, the tile's activation rows with a tensor copy per 64 k
// (given a map) or with cp.async, the stage's 128-block row scales with one tensor copy (given a map over
// block-major scales) or with cp.async, the weight scales with cp.async, and announces all of it on the
// stage's "full" barrier. A tensor copy brings the CTA's whole box of rows (or of their scales, from up to
// three rows before the tile's): past the tile's own come other tiles' rows, rows this batch left unwritten
// (stale or never set), or zeros past the matrix, whose products stay in rows the epilogue skips.
template <WeightCode kCode, bool kScaled, bool kFp8A, int kWG, bool kWide = false>
struct StageProducer {
    using L = StageLayout<kCode, kFp8A, kWG, kWide>;
    static constexpr bool kConvert = kConverts<kCode, kFp8A>;
    // Per sub-stage (wide: per n-tile of the two); where converted, per stored half block (of 128 k).
    static constexpr uint32_t kWeightBytes = kConvert ? kFp4E4m3BlockBytes
                                             : kTileN * (kCode == WeightCode::Bf16 ? kBK * 2 : kCode == WeightCode::Fp8 ? kBK : kBK / 2);
    static constexpr uint32_t kFp4ScaleBytes = kCode == WeightCode::Fp4 && !kConvert ? kTileN * 4 : 0;  // per 128-wide k block
    static constexpr uint32_t kRowScaleBytes = kFragmentScaleAt<Cta<kWG>::kRows> * 4;  // a tensor copy's box
    static_assert(L::kScales % 128 == 0, "a tensor copy lands 128-byte aligned");

    const GroupedGemmLaunch& g;
    const Tile& t;
    int lane;
    const CUtensorMap* rows_map;  // activation rows by tensor copies, or null (cp.async)
    // Block-major row scales by tensor copies, or null (cp.async). The row scales came by a 4-byte copy per
    // row, issued by the producer warp's lanes each stage: deepseek-v3's FP8 producer warp spent 44-46% of
    // its time issuing them and the two weight scales', and the consumers waited for stages 12-19% of
    // theirs, on an H100 (timers in the loop slowing it). By one tensor copy a stage its routed experts took
    // 10-11% less time at 16384 tokens (790 against 704-710 TFLOP/s), block-exact deepseek-v4-flash's 4%
    // less, the same bits (bench/results/2026-12-06-cuda-stage-accounting.md).
    const CUtensorMap* scales_map;
    SharedCopies shared;          // clustered CTAs: the halves this one copies for the others too
    const char* weights;     // this n-tile's stage tiles, contiguous (converted: its first half's blocks)
    const char* fp4_scales;  // this n-tile's e8m0 scales, kFp4ScaleBytes per 128-wide k block
    const char* scales;      // the expert's FP8 weight scales
    // Converted and wide: a stage's weights are two runs' pieces, this far apart (the n-tile's second half's
    // blocks; the next n-tile's stage tiles).
    int64_t second_run;

    __device__ __forceinline__ StageProducer(const GroupedGemmLaunch& launch, const Tile& tile, int lane_id, const CUtensorMap* map,
                                             SharedCopies halves, const CUtensorMap* scale_map)
        : g(launch), t(tile), lane(lane_id), rows_map(map), scales_map(scale_map), shared(halves) {
        if constexpr (kConvert) {  // (weight_layouts.hpp: fp4_e4m3_blocks; no w_scale)
            second_run = g.k / 128 * int64_t(kWeightBytes);
            weights = static_cast<const char*>(g.w) + int64_t(t.expert) * g.w_expert_bytes +
                      int64_t(t.n0 / kTileN) * 2 * second_run;
            scales = fp4_scales = nullptr;
        } else {
            const int64_t tiles_before = int64_t(t.n0 / kTileN) * (g.k / kBK);
            weights = static_cast<const char*>(g.w) + int64_t(t.expert) * g.w_expert_bytes + tiles_before * kWeightBytes;
            scales = static_cast<const char*>(g.w_scale) + int64_t(t.expert) * g.scale_expert_bytes;
            fp4_scales = scales + int64_t(t.n0 / kTileN) * (g.k / 128) * kFp4ScaleBytes;
            second_run = g.k / kBK * int64_t(kWeightBytes);
        }
    }

    // Stage `ks` of the tile's k range: 64-wide sub-stages kt = ks * kSub, ... (the stored weight tiles
    // of an n-tile are contiguous, so one bulk copy takes them all).
    __device__ __forceinline__ void load(char* stage, int ks, uint64_t* full) const {
        const int kt = ks * L::kSub, block = kt * kBK / 128;
        char* b_tile = stage + L::kSub * L::kA;
        // The stage that ends a 128-wide block carries the block's scales, so the fold at its end never
        // waits on memory.
        const bool carries_scales = kScaled && (L::kSub == 2 || (kt & 1));
        if (lane == 0) {
            const uint32_t scale_bytes = carries_scales && scales_map ? kRowScaleBytes : 0;
            barrier::arrive_expect_bytes(full, L::kSub * ((kWide ? 2 : 1) * kWeightBytes + (rows_map ? L::kA : 0)) + kFp4ScaleBytes +
                                                   scale_bytes);
            if (scale_bytes > 0) barrier::tensor_copy_2d(stage + L::kScales, scales_map, t.row0 & ~3, block, full);
            // One box of 64 k per sub-stage; clustered CTAs each copy half of it (their map's box) to those
            // that share their rows.
            if (rows_map && shared.row_half >= 0) {
                constexpr int kHalf = Cta<kWG>::kRows / 2;
                for (int h = 0; h < L::kSub; ++h)
                    barrier::tensor_copy_2d_multicast(stage + h * L::kA + shared.row_half * (L::kA / 2), rows_map, (kt + h) * kBK,
                                                      t.row0 + shared.row_half * kHalf, full, shared.row_ctas);
            } else if (rows_map) {
                for (int h = 0; h < L::kSub; ++h) barrier::tensor_copy_2d(stage + h * L::kA, rows_map, (kt + h) * kBK, t.row0, full);
            }
            if constexpr (kConvert || kWide) {  // the block's two stored halves; two n-tiles' stage tiles (kSub 1)
                if (kConvert && shared.weight_half >= 0) {  // weight pairs: one half each, into both CTAs
                    const int h = shared.weight_half;
                    barrier::bulk_copy_multicast(b_tile + h * kWeightBytes,
                                                 weights + h * second_run + int64_t(ks) * kWeightBytes,
                                                 kWeightBytes, full, shared.weight_ctas);
                } else {
                    for (int h = 0; h < 2; ++h)
                        barrier::bulk_copy(b_tile + h * kWeightBytes,
                                           weights + h * second_run + int64_t(ks) * kWeightBytes,
                                           kWeightBytes, full);
                }
            } else if (kWeightsInOneRun<kCode, kFp8A, kWide> && shared.weight_half >= 0) {
                constexpr uint32_t kHalf = L::kSub * kWeightBytes / 2;  // bytes: the layout does not matter to a copy
                static_assert(kHalf % 16 == 0);
                barrier::bulk_copy_multicast(b_tile + shared.weight_half * kHalf,
                                             weights + int64_t(kt) * kWeightBytes + shared.weight_half * kHalf, kHalf, full,
                                             shared.weight_ctas);
            } else {
                barrier::bulk_copy(b_tile, weights + int64_t(kt) * kWeightBytes, L::kSub * kWeightBytes, full);
            }
            if constexpr (kFp4ScaleBytes > 0)
                barrier::bulk_copy(b_tile + kWeightBytes, fp4_scales + int64_t(block) * kFp4ScaleBytes, kFp4ScaleBytes, full);
        }
        if (!rows_map) {  // (else the tensor copies above bring the rows)
            if constexpr (kFp8A) {  // e4m3 rows: lane owns 16-byte chunk lane % 4 of rows lane / 4, + 8, + 16, ...
                const int chunk = lane & 3;
#pragma unroll
                for (int h = 0; h < L::kSub; ++h) {
                    const char* src = reinterpret_cast<const char*>(g.a_fp8 + (int64_t(t.row0) + (lane >> 2)) * g.k + (kt + h) * kBK + chunk * 16);
                    const int64_t step = 8 * g.k;
                    for (int row = lane >> 2; row < t.rows; row += 8, src += step) cp_async16(stage + h * L::kA + swizzle64(row, chunk), src, true);
                }
            } else {  // bf16 rows: lane owns 16-byte chunk lane % 8 of rows lane / 8, + 4, + 8, ...
                const int k0 = kt * kBK, chunk = lane & 7;
                const char* src = reinterpret_cast<const char*>(g.a + (int64_t(t.row0) + (lane >> 3)) * g.k + k0 + chunk * 8);
                const int64_t step = 4 * g.k * 2;
                for (int row = lane >> 3; row < t.rows; row += 4, src += step) cp_async16(stage + swizzle(row, chunk), src, true);
            }
        }
        // By cp.async, only the tile's rows' scales are copied (the others were zeroed once): a stage's small
        // copies add to its time, and a decode tile has few rows (bench/results/2026-12-01-cuda-streaming.md).
        if (carries_scales) {
            char* scale_tile = stage + L::kScales;
            if (g.a_scale && !scales_map)
                for (int row = lane; row < t.rows; row += 32)
                    cp_async4(scale_tile + row * 4, g.a_scale + g.a_scale_layout.at(int64_t(t.row0) + row, block, g.k / 128), true);
            // Two weight scales serve a tile: fragment 0's for its even fragments of 8 features, fragment 1's
            // for its odd ones. Interleaved gate/up rows put gate features in the even fragments and up
            // features in the odd: a 128-wide tile holds 64 of each, from one 128-row block of each; a tile
            // of plain rows lies in one block (weight_scale_offset). Copied instead by two 16-byte bulk
            // copies from lane 0, each a run of four blocks' scales, they made deepseek-v3's gate/up 1.6-2.1%
            // slower and its down GEMM 0.4-0.8% faster on an H100
            // (bench/results/2026-12-06-cuda-tall-tiles.md): not kept.
            if (kCode == WeightCode::Fp8 && lane < 2) {
                const int64_t n = t.n0 + lane * 8;
                const bool valid = n < g.n;
                cp_async4(scale_tile + kFragmentScaleAt<Cta<kWG>::kRows> * 4 + lane * 4,
                          scales + (valid ? weight_scale_offset(g, n, block) : 0), valid);
            }
        }
        barrier::arrive_after_cp_async(full);
    }
};
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The down GEMM's scatter of two adjacent results of one row into bf16: times the row's routing weight `w`
// where `weighted` (not applied before the down GEMM), then rounded. The parked scatter takes it; the
// register epilogue writes the same operations out (the helper there changed its code's schedule), and the
// epilogue and scatter tests compare the two bit for bit.
__device__ __forceinline__ uint32_t scattered_bf16x2(float a, float b, float w, bool weighted) {
    if (weighted) a = w * a, b = w * b;
    return f32x2_to_bf16x2(a, b);
}

// A warp's 16 x 128 results (wide CTAs: 16 x 256) through the launch's epilogue straight from the
// accumulators (element 4j + r: row `row` + 8 * (r / 2), feature 8j + 2 * (lane % 4) + r % 2). SwiGLU's gate
// fragment 2f and its up partner 2f + 1 sit in the same thread.
template <int kAcc>
__device__ __forceinline__ void epilogue_from_registers(const GroupedGemmLaunch& g, const Tile& t, const float (&v)[kAcc],
                                                        int row, int lane) {
    const int q2 = 2 * (lane & 3);
    const EpilogueRow rows[2] = {epilogue_row(g, t, row), epilogue_row(g, t, row + 8)};  // each thread's two rows
    if (g.epilogue == GemmEpilogue::SwiGlu) {
#pragma unroll
        for (int f = 0; f < kAcc / 8; ++f)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                epilogue_pair(g, t, rows[h], 16 * f + q2, make_float2(v[8 * f + 2 * h], v[8 * f + 2 * h + 1]),
                              make_float2(v[8 * f + 4 + 2 * h], v[8 * f + 4 + 2 * h + 1]));
    } else if (g.epilogue == GemmEpilogue::Scatter && g.out_bf16) {
        // The down GEMM's: per row its destination and weight once, then per pair two multiplies, a
        // conversion and a store, as epilogue_pair's arithmetic (its other branches' tests per pair took as
        // many instructions as the item's MMA loop in deepseek-v3's down GEMM).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (rows[h].row < 0) continue;
            uint16_t* out = g.out_bf16 + rows[h].dest * g.ldo + t.n0 + q2;
            const int room = int(g.n - t.n0) - q2;  // pair j is stored where 8j < room (N is a multiple of 8)
            const float w = rows[h].weight;
            // (scattered_bf16x2's arithmetic, written out: this order schedules best)
#pragma unroll
            for (int j = 0; j < kAcc / 4; ++j) {
                float a = v[4 * j + 2 * h], b = v[4 * j + 2 * h + 1];
                if (!g.weight_before_down) a = w * a, b = w * b;
                if (8 * j < room) *reinterpret_cast<uint32_t*>(out + 8 * j) = f32x2_to_bf16x2(a, b);
            }
        }
    } else {
#pragma unroll
        for (int j = 0; j < kAcc / 4; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float2 pair = make_float2(v[4 * j + 2 * h], v[4 * j + 2 * h + 1]);
                epilogue_pair(g, t, rows[h], 8 * j + q2, pair, pair);
            }
    }
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A consumer thread parks its 2 x 64 results (rows `row` and `row` + 8 of the tile, accumulator layout as
// above) in the parked block, as [row][feature].
__device__ __forceinline__ void park_results(float* park, const float (&v)[64], int row, int lane) {
    const int q2 = 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            *reinterpret_cast<float2*>(park + (row + 8 * h) * kParkLd + 8 * j + q2) = make_float2(v[4 * j + 2 * h], v[4 * j + 2 * h + 1]);
}

// Epilogue warp `e` (of kEpilogueWarps) runs the launch's epilogue on rows e, e + kEpilogueWarps, ... of the
// parked block of item tile `t`. Each lane first reads what one row's epilogue needs (routing weight,
// destination), 32 rows at a time, so that their global loads are in flight together; a row's pairs then
// take the lanes: SwiGLU's 32 gate pairs one each (fragment 2f's partner is 2f + 1), the others' 64 pairs two.
// Rows go kDrainRows at a time, their values read before any is stored, so that their arithmetic interleaves.
constexpr int kDrainRows = 4;
template <int kRows>
__device__ __forceinline__ void drain_parked(const GroupedGemmLaunch& g, const Tile& t, const float* park, int e, int lane) {
    const bool swiglu = g.epilogue == GemmEpilogue::SwiGlu;
    const int first_col = swiglu ? 16 * (lane >> 2) + 2 * (lane & 3) : 2 * lane;  // (and + 64 where not SwiGLU)
    for (int base = e; base < t.rows; base += 32 * kEpilogueWarps) {
        const EpilogueRow mine = epilogue_row(g, t, base + kEpilogueWarps * lane);
        const int count = min(32, (t.rows - base + kEpilogueWarps - 1) / kEpilogueWarps);
#pragma unroll 1
        for (int i0 = 0; i0 < count; i0 += kDrainRows) {
            EpilogueRow r[kDrainRows];
            float2 v[kDrainRows][2];  // SwiGLU: gate, up; else features first_col, first_col + 64
#pragma unroll
            for (int u = 0; u < kDrainRows; ++u) {
                const int i = i0 + u;  // < 32: kDrainRows divides 32
                r[u].row = __shfl_sync(0xffffffffu, mine.row, i);
                if (i >= count) r[u].row = -1;  // past the tile's rows (or another warp's): skipped
                r[u].dest = __shfl_sync(0xffffffffu, mine.dest, i);
                r[u].weight = __shfl_sync(0xffffffffu, mine.weight, i);
                const float* row = park + min(base + kEpilogueWarps * i, kRows - 1) * kParkLd + first_col;
                v[u][0] = *reinterpret_cast<const float2*>(row);
                v[u][1] = *reinterpret_cast<const float2*>(row + (swiglu ? 8 : 64));
            }
#pragma unroll
            for (int u = 0; u < kDrainRows; ++u) {
                if (swiglu) {
                    epilogue_pair(g, t, r[u], first_col, v[u][0], v[u][1]);
                } else {
                    epilogue_pair(g, t, r[u], first_col, v[u][0], v[u][0]);
                    epilogue_pair(g, t, r[u], first_col + 64, v[u][1], v[u][1]);
                }
            }
        }
    }
}

// A consumer thread's 2 x 64 results (as park_results) through the scatter's arithmetic (scattered_bf16x2,
// with its rows' routing weights `w`) into the parked bf16 block, as [row][feature].
__device__ __forceinline__ void park_scatter_bf16(uint16_t* park, const float (&v)[64], int row, int lane, const float (&w)[2],
                                                  bool weighted) {
    const int q2 = 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
            *reinterpret_cast<uint32_t*>(park + (row + 8 * h) * kParkLd16 + 8 * j + q2) =
                scattered_bf16x2(v[4 * j + 2 * h], v[4 * j + 2 * h + 1], w[h], weighted);
}

// Epilogue warp `e` copies rows e, e + kEpilogueWarps, ... of the parked bf16 block of item tile `t` to their
// destination rows: each lane reads one row's destination, 32 rows at a time, then a row's 128 values take
// the lanes four each, 8-byte stores (parked_scatter checks that N is a multiple of 4 and the rows 8-byte
// aligned, so a lane's four are all in range or all past it).
__device__ __forceinline__ void drain_parked_scatter(const GroupedGemmLaunch& g, const Tile& t, const uint16_t* park, int e, int lane) {
    const int col = 4 * lane;
    const bool in_range = t.n0 + col < g.n;
    for (int base = e; base < t.rows; base += 32 * kEpilogueWarps) {
        const int mine = base + kEpilogueWarps * lane;
        const int64_t my_dest = mine < t.rows ? g.row_dest[t.row0 + mine] : 0;
        const int count = min(32, (t.rows - base + kEpilogueWarps - 1) / kEpilogueWarps);
#pragma unroll 4
        for (int i = 0; i < count; ++i) {
            const int64_t dest = __shfl_sync(0xffffffffu, my_dest, i);
            const uint2 v = *reinterpret_cast<const uint2*>(park + (base + kEpilogueWarps * i) * kParkLd16 + col);
            if (in_range) *reinterpret_cast<uint2*>(g.out_bf16 + dest * g.ldo + t.n0 + col) = v;
        }
    }
}

// A consumer thread's SwiGLU outputs (rows `row` and `row` + 8 of the tile: gate fragment 2f's pairs with
// their up partners in fragment 2f + 1, accumulator layout as above) through swiglu_stage — the register
// epilogue's arithmetic, with its rows' routing weights `w` where they come before the down GEMM — into the
// parked block as [row][output]: output 8f + c of a row is intermediate feature t.n0 / 2 + 8f + c. Only where
// the launch rounds to bf16 (parked_swiglu): each output is a bf16 value then, parked as its top 16 bits.
__device__ __forceinline__ void park_swiglu_bf16(uint16_t* park, const float (&v)[64], int row, int lane, const float (&w)[2],
                                                 const GroupedGemmLaunch& g) {
    const int q2 = 2 * (lane & 3);
#pragma unroll
    for (int f = 0; f < 8; ++f)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float a = swiglu_stage(v[8 * f + 2 * h], v[8 * f + 4 + 2 * h], g.swiglu_limit, g.weight_before_down, w[h], true);
            const float b = swiglu_stage(v[8 * f + 2 * h + 1], v[8 * f + 4 + 2 * h + 1], g.swiglu_limit, g.weight_before_down, w[h], true);
            *reinterpret_cast<uint32_t*>(park + (row + 8 * h) * kParkLdSwiGlu + 8 * f + q2) = __byte_perm(f32_bits(a), f32_bits(b), 0x7632);
        }
}

// Epilogue warp `e` stores rows e, e + kEpilogueWarps, ... of the parked SwiGLU outputs of item tile `t`: a
// row's 64 outputs take the lanes two each, as bf16 (out_bf16) or widened back to the f32 they were. A lane
// stores its pair where the first is in range, as epilogue_pair does (the upload keeps I = N / 2 a multiple
// of 8, so both are). The stores are those of epilogue_pair: the bf16 rounding of a bf16 value is itself,
// NaNs included (f32x2_to_bf16x2 sets the quiet bit, which round_act set already).
__device__ __forceinline__ void drain_parked_swiglu(const GroupedGemmLaunch& g, const Tile& t, const uint16_t* park, int e, int lane) {
    const int64_t j = t.n0 / 2 + 2 * lane;  // this lane's first intermediate feature
    if (j >= g.n / 2) return;
#pragma unroll 4
    for (int row = e; row < t.rows; row += kEpilogueWarps) {
        const uint32_t pair = *reinterpret_cast<const uint32_t*>(park + row * kParkLdSwiGlu + 2 * lane);
        const int64_t offset = (t.row0 + row) * g.ldo + j;
        if (g.out_bf16) *reinterpret_cast<uint32_t*>(g.out_bf16 + offset) = pair;
        else *reinterpret_cast<float2*>(g.out + offset) = bf16x2_to_f32x2(pair);
    }
}

// A 128-wide block's scales for one thread's accumulators, kept at `scales` in the block's (last) stage: the
// tile's rows' activation scales (where row_scales), then two weight scales, for the even and the odd
// fragments of 8 features (see StageProducer; converted FP4 weights' are written by the conversion:
// fp4_exact_tiles.hpp), where kWeightScales (kFragmentScaleAt). `row` is where the thread's first row of the
// tile lies among the row scales (kFragmentScaleAt says where that is). Read once the
// stage's MMAs are issued, while they run: the fold after them then waits on no shared-memory load.
struct BlockScales {
    float s[2][2];  // [fragment parity][row, row + 8]
};
template <bool kWeightScales, int kRows>
__device__ __forceinline__ BlockScales block_scales(const char* scales, bool row_scales, int row) {
    const float* row_scale = reinterpret_cast<const float*>(scales);
    const float* fragment_scale = row_scale + kFragmentScaleAt<kRows>;
    const float sa[2] = {row_scales ? row_scale[row] : 1.0f, row_scales ? row_scale[row + 8] : 1.0f};
    BlockScales b;
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
        for (int h = 0; h < 2; ++h) b.s[p][h] = __fmul_rn(sa[h], kWeightScales ? fragment_scale[p] : 1.0f);
    return b;
}

// Folds a 128-wide block's partial sums (acc) into the totals with the block's scales. From registers
// alone: tall tiles hand the block's stage back to the producer before they fold (grouped_gemm_sm90.cu).
template <bool kFp8A>
__device__ __forceinline__ void fold_block(float (&total)[64], float (&acc)[64], const BlockScales& b) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            total[j * 4 + r] = __fmaf_rn(acc[j * 4 + r], b.s[j & 1][r >> 1], total[j * 4 + r]);
            if constexpr (!kFp8A) acc[j * 4 + r] = 0.0f;  // (e4m3 MMAs start each block's sum anew)
        }
}

// A stage's e4m3 MMAs (two 64-wide sub-stages of four k32 steps; the first starts the block's sum) into
// acc, committed as one group.
template <int kSubBytesA, int kSubBytesB>
__device__ __forceinline__ void e4m3_stage_mmas(float (&acc)[64], uint64_t desc_a, uint64_t desc_b) {
    fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int ks = 0; ks < kBK / 32; ++ks)  // +32 bytes a step
            wgmma_m64n128k32_e4m3(acc, desc_a + (h * kSubBytesA + 32 * ks) / 16, desc_b + (h * kSubBytesB + 32 * ks) / 16, h > 0 || ks > 0);
    wgmma_commit();
}
#endif

}  // namespace steadymoe::cuda::sm90
