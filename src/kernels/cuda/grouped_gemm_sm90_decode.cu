// The weights-as-A kernel on Hopper: the weights are the MMAs' A operand and the tokens their B operand, 64
// weight rows and a few tokens to a CTA. It runs decode batches (BF16 weights and FP8 weights meeting e4m3
// tokens read by the MMAs from their stage as stored; FP4 weights widened from e2m1 codes straight into
// registers) and every batch of FP4 weights meeting e4m3 tokens (widened to e4m3; 8 to 64 tokens to a CTA
// in decode batches, by their rows an expert, 64 in others), which no other kernel multiplies (but
// block-exact ones in other batches: hopper_fp4_exact_tiled).
//
// Why a kernel of its own: the tiled kernel (grouped_gemm_sm90.cu) multiplies 64 or 128 rows, mostly
// padding in a decode batch, against 128 features per CTA. Its activation tiles take shared memory from
// the weights' stages (two CTAs to an SM), and a layer's decode GEMM is a few hundred such CTAs:
// deepseek-v3's gate/up and its shared expert's at one token were 288, one wave and a tenth
// (bench/results/2026-12-02-cuda-dependent-launches.md). Here N counts tokens (8 to 64 to a CTA), so a
// stage is mostly weights, and a CTA takes half an n-tile: twice the CTAs, three to five to an SM.
// FP4 weights widened into a shared bf16 tile between block barriers left the weight stream at 0.12-0.18 of
// the memory floor (bench/results/2026-12-01-cuda-decode-fp4.md); here each thread widens the codes its
// MMA fragment needs (no shared stores, no block barrier).
//
// The bits: every product is the same exact product, summed by the same tensor-core steps in ascending
// k with the same fp32 accumulator (16 k a step for bf16, 32 for e4m3), and the 128-block fold (when
// scaled) is the same multiply and fma — whichever operand the weights are and however many columns an
// MMA has (tests/test_cuda_grouped_gemm.cpp compares this kernel's output with the tiled kernel's, bit
// for bit). So a decode batch gives a token the bits a prefill batch gives it. FP4 weights meeting e4m3
// tokens have their own arithmetic (fp4_e4m3_block; block-exact weights fp4_exact::stage, the FP8
// weights'), the same at every CTA width.
#include "async_barrier.cuh"
#include "dependent_launch.cuh"
#include "early_route.cuh"
#include "env_switch.hpp"
#include "grouped_gemm_sm90.hpp"
#include "grouped_gemm_sm90_fp4_e4m3.cuh"
#include "grouped_gemm_sm90_fp4_exact.cuh"
#include "grouped_gemm_stage.cuh"
#include "tensor_map.hpp"
#include "wgmma.cuh"

#include <algorithm>
#include <initializer_list>

namespace steadymoe::cuda {

namespace {

using namespace stage;
using namespace wgmma;
using namespace fp4_e4m3;

constexpr int kFeatures = 64;  // weight rows per CTA: one warpgroup's M, half a stored n-tile
constexpr int kTokenParkLd = kFeatures + 4;  // floats a token of parked results (padded against bank conflicts)
constexpr int kConsumers = 128, kThreads = kConsumers + 32;
constexpr uint32_t kFullArrivals = 1 + 32;  // the producer's bulk-copy arrival and each lane's cp.async one

// A CTA's shape and its stage's layout: the weights' format, the tokens' form (e4m3 codes or bf16), tokens
// per CTA (the MMAs' N), 128-wide k blocks per stage, stages, CTAs to an SM. The stages take what the CTAs'
// shares of shared memory hold. A stage: the tokens (per block, kSubs swizzled 64-k tiles of kTokens rows),
// the weights (per block, the CTA's half of kSubs stored tiles, then FP4's e8m0 exponents [kFeatures][4]),
// the tokens' 128-block scales (per block), FP8's two weight scales (the even and the odd fragments of 8
// features: gate and up where rows interleave).
// FP4 with bf16 tokens keeps four CTAs of four stages (three with five stages measured the same: widening
// on the integer pipe, not latency, bounds it — bench/results/2026-12-01-cuda-decode-fp4.md).
// FP4 meeting e4m3 tokens (kFp4E4m3) takes every batch size: 8 to 64 tokens to a CTA in decode batches (by
// their rows an expert: hopper_decode_tile_rows), 64 in others. 8-token CTAs run six to an SM, three stages
// each (within 64 registers, no MMA serialised: fp4_e4m3_block): at 8 and 128 tokens deepseek-v4-flash's
// routed experts ran at 0.62 and 0.71 of the memory floor on them (before the unserialised MMAs and
// five-operation widening), against 0.55 and 0.62 on four to an SM of four stages, the same at one token.
// Fewer to an SM lost every time: six stages, three to an SM, 9-12% slower than four of four
// (bench/results/2026-12-02-cuda-decode-tiles.md); three to an SM with two consumer warpgroups taking
// alternate stages, 13-40% slower gate/up GEMMs, or with four blocks a stage, 4-22% slower
// (bench/results/2026-12-02-cuda-decode-stages.md). Its weights are stored as one contiguous run per CTA
// (expert_group.cpp), so a stage's weights — codes and exponents of kBlocks blocks — come by one bulk copy:
// a CTA's stream is limited per copy (bench/results/2026-12-01-cuda-streaming.md), and three copies of 2 KB,
// 2 KB and 256 bytes a stage left it at 0.22-0.43 of the memory floor
// (bench/results/2026-12-02-cuda-fp4-e4m3.md).
// kSmCtas > 0: that many CTAs to an SM, each with as many stages as its share of shared memory holds; 0: the
// format's rule below. kExact: FP4 x e4m3 shapes for block-exact weights (the FP8 arithmetic:
// grouped_gemm_sm90_fp4_exact.cuh), the same layout and occupancy as their per-32 twins.
template <WeightCode kCode, bool kE4m3, int kTokensPerCta, int kSmCtas = 0, bool kExact = false>
struct DecodeShape {
    static constexpr WeightCode kFormat = kCode;
    static constexpr bool kE4m3Tokens = kE4m3;
    static constexpr bool kFp4E4m3 = kCode == WeightCode::Fp4 && kE4m3;  // per-32 folds (fp4_e4m3_block) unless kBlockExact
    static constexpr bool kBlockExact = kFp4E4m3 && kExact;
    static constexpr int kTokens = kTokensPerCta;
    static constexpr int kBlocks = kFp4E4m3 && kTokens <= 16 ? 2 : 1;
    static constexpr int kCtasPerSm = kSmCtas > 0 ? kSmCtas
                                      : kFp4E4m3 && kTokens > 16 ? 3
                                      : kCode == WeightCode::Fp4 ? 4
                                      : kCode == WeightCode::Bf16 ? 3 : 5;
    static constexpr bool kBlocksAtOnce = kFp4E4m3 && !kBlockExact && kTokens == 8 && kCtasPerSm == 4;  // fp4_e4m3_block_pair
    // Two blocks' MMAs interleaved (fp4_exact::stage) where their registers fit without serialising the MMAs
    // (ptxas notice C7512 at five and six CTAs to an SM)
    static constexpr bool kExactPairs = kBlockExact && kBlocks == 2 && kCtasPerSm <= 4;
    // Takes the routing kernel's early experts (GroupedGemmLaunch::early_route; unscaled launches only): the
    // shape of one token's bf16 gate/up launches of few CTAs (Bf16Deep below). Not the others: compiled into
    // them, the experts' wait and its block barrier in the prologue moved their k loops' descriptor arithmetic
    // off the uniform datapath (66 to 139 instructions a stage for the 16-token CTAs five to an SM, 92 to 193
    // for scaled ones; bench/results/2026-12-08-cuda-early-route.md). (e4m3 tokens' shapes never meet it: their
    // quantisation kernel runs between the routing and the gate/up.)
    static constexpr bool kTakesEarlyRoute = kCode == WeightCode::Bf16 && !kE4m3 && kTokens == 16 && kSmCtas == 2;
    static constexpr int kAcc = kTokens / 2;  // accumulators per thread of an m64 x kTokens MMA
    static constexpr int kTokenRowBytes = a_row_bytes(kE4m3Tokens);
    static constexpr int kWeightRowBytes = kCode == WeightCode::Bf16 ? kRowBytes : kCode == WeightCode::Fp8 ? kBK : kBK / 2;
    static constexpr int kHalfTileBytes = kFeatures * kWeightRowBytes;  // this CTA's rows of a stored tile
    static constexpr int kExpBytes = kCode == WeightCode::Fp4 ? kFeatures * 4 : 0;  // per block
    static constexpr int kBlockWeightBytes = kSubs * kHalfTileBytes + kExpBytes;   // codes, then exponents
    static constexpr int kTokenTileBytes = kTokens * kTokenRowBytes;
    static constexpr int kCodesOffset = kBlocks * kSubs * kTokenTileBytes;
    static constexpr int kTokenScaleOffset = kCodesOffset + kBlocks * kBlockWeightBytes;
    static constexpr int kWeightScaleOffset = kTokenScaleOffset + kBlocks * kTokens * 4;
    static constexpr int kStageBytes = (kWeightScaleOffset + 8 + 1023) / 1024 * 1024;  // 1024-aligned (swizzle atoms)
    // A CTA's share of the SM's shared memory, less the 1 KB the GPU keeps per CTA: the GPU allots it in 128-byte
    // units, that 1 KB included (with 45616 bytes and that 1 KB, 16-token CTAs ran four to an SM, not five).
    static constexpr int kShareBytes = 228 * 1024 / kCtasPerSm / 128 * 128 - 1024;
    // kSmCtas > 0: as many stages (each with its two barriers) as the share holds beside 1 KB of alignment.
    static constexpr int kStages = kSmCtas > 0                   ? (kShareBytes - 1024) / (kStageBytes + 2 * int(sizeof(uint64_t)))
                                   : kFp4E4m3 && kTokens > 16 ? 5
                                   : kCode == WeightCode::Fp4 ? 4
                                                              : 3;
    // Held token scales (FP4 meeting e4m3 tokens in decode batches): the 128-block scales of the CTA's whole k
    // range, copied once beside the stages and barriers as [block][kScaleLd] (padded by 2 so that a lane's pair
    // of tokens stays one 8-byte read), in the rest of the CTA's share of shared memory — kHeldBlocks blocks of
    // them; a launch with more blocks to a CTA copies them per stage (launch_typed decides). Against copies per
    // stage, deepseek-v4-flash's routed experts took 3.2%, 3.5%, 3.8% and 0.9% less time at 1, 8, 128 and 256
    // tokens. Not in the others: 64-token CTAs (made room for by 512-byte stages) were 7.7% slower at
    // 16384 tokens with the producer copying them before its first stage's arrival and 1.7% with the consumers
    // copying them at their start; FP8's 32-token CTAs held deepseek-v3's down GEMM's scales and were level
    // (bench/results/2026-12-03-cuda-held-scales.md).
    static constexpr bool kHoldsScales = kFp4E4m3 && kTokens <= 16;
    static constexpr int kScaleLd = kTokens + 2;
    static constexpr int kHeldScaleOffset = kStages * kStageBytes + 2 * kStages * int(sizeof(uint64_t));
    static constexpr int kHeldBlocks = kHoldsScales ? (kShareBytes - kHeldScaleOffset - 1024) / (kScaleLd * 4) : 0;
    static constexpr int kSmemBytes = kHeldScaleOffset + kHeldBlocks * kScaleLd * 4 + 1024;  // + alignment
    static_assert(kBlocks == 1 || kFp4E4m3, "other stages hold one block");
    static_assert(!kBlocksAtOnce || kBlocks == 2, "fp4_e4m3_block_pair multiplies a stage's two blocks");
    static_assert(!kExactPairs || kBlocks == 2, "fp4_exact::stage multiplies a stage's two blocks at once");
    static_assert(!kHoldsScales || kHeldBlocks >= 16, "held scales cover a 2048-wide k at least");
    static_assert(kTokenScaleOffset % 8 == 0 && kHeldScaleOffset % 8 == 0 && kScaleLd % 2 == 0, "token scales are read in pairs");
    static_assert((kSmemBytes + 1024 + 127) / 128 * 128 * kCtasPerSm <= 228 * 1024, "the CTAs of an SM must fit its shared memory");
    static_assert(kTokens * kTokenParkLd * 4 <= kStages * kStageBytes, "the epilogue parks its results in the stages");
    static_assert(kCodesOffset % 1024 == 0 && kHalfTileBytes % 1024 == 0 && kTokenTileBytes % (kE4m3Tokens ? 512 : 1024) == 0,
                  "swizzle atoms stay aligned");
    static_assert(kBlockWeightBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
    static_assert(!kFp4E4m3 || kBlockWeightBytes == kFp4E4m3BlockBytes, "the layout expert_group.cpp uploads");
};
// BF16, FP8 and 16-token FP4 x e4m3 CTAs run five, seven and five to an SM with two, two and three
// stages. Against three, five and four with three, three and four, the routed experts took less time:
// qwen3's 4% and 6% at 8 and 256 tokens (3% more at one), deepseek-v3's 9%, 2% and 1% at 1, 8 and 128,
// deepseek-v4-flash's 5% at 256 (bench/results/2026-12-02-cuda-decode-occupancy.md).
// STEADYMOE_DECODE_CTAS_PER_SM=fewer keeps the old shapes, to compare (the same bits).
using Bf16Decode = DecodeShape<WeightCode::Bf16, false, 16, 5>;
using Fp8Decode = DecodeShape<WeightCode::Fp8, true, 32, 7>;
// FP8 weights meeting e4m3 tokens in launches whose tiles hold at most 8 rows (hopper_decode_tile_rows: a
// batch of at most 8 rows, so no expert has more; one token's routed experts, a shared expert's batches of up
// to 8 tokens): 8-token CTAs, whose folds read and scale 4 accumulators a thread, not 16 (87 instructions from
// a stage's wait to its release, not 133), seven to an SM with three stages of 10 KB. deepseek-v4-flash's layer
// took 0.9% less at 8 tokens, its experts alone 9% less at one token (the shared expert bounds those; the
// routed experts bound the layer: bench/results/2026-12-03-cuda-thin-fp8.md). The same CTAs three to an SM with
// seven stages, for launches of at most a CTA an SM, made its shared expert's gate/up 1.5 times as fast at one
// token but the layer 1 µs slower (the routed experts beside them slowed).
// The MMAs' sums do not depend on their width (docs/determinism.md), the folds are the same per element: the
// same bits. STEADYMOE_FP8_THIN_CTAS=0 keeps 32-token CTAs, to compare.
using Fp8Thin = DecodeShape<WeightCode::Fp8, true, 8, 7>;
// FP8 weights meeting e4m3 tokens in decode batches whose experts average more than kFp8WiderAbove rows
// (deepseek-v3's at 1024 tokens: 32 an expert): tiles of 64 rows on 64-token CTAs, four to an SM (their
// registers) with three stages, where 32-token CTAs took each expert past 32 rows in two, each streaming the
// same weights (as bf16's Bf16Wider). The same bits. STEADYMOE_FP8_WIDE_DECODE=0 keeps 32-row tiles, to
// compare.
using Fp8Wider = DecodeShape<WeightCode::Fp8, true, 64, 4>;
constexpr int64_t kFp8WiderAbove = 24;
// BF16 launches of at most two CTAs an SM (qwen3's experts at one token: 192 and 256 CTAs; routers): two to
// an SM with five stages (80 KB of weights in flight a CTA) in place of five with two: qwen3's one-token layer
// took 0.4-0.7 µs less (bench/results/2026-12-03-cuda-thin-fp8.md). The same MMAs: the same bits.
using Bf16Deep = DecodeShape<WeightCode::Bf16, false, 16, 2>;
constexpr int kBf16DeepLaunchCtasPerSm = 2;  // the launches that take it: at most this many CTAs an SM (few_ctas)
// BF16 decode batches whose experts average more than kBf16WideAbove rows (qwen3's at 256 tokens: 16 an
// expert): tiles of 32 rows on 32-token CTAs, four to an SM with two stages; more than kBf16WiderAbove: 64
// rows on 64-token CTAs, three to an SM with two stages. On 16-token CTAs an expert of 17 to 32 rows takes
// two CTAs per 64 features, each streaming the same weights. The MMAs' sums do not depend on their width
// (docs/determinism.md): the same bits. STEADYMOE_BF16_WIDE_DECODE=0 keeps 16-row tiles, =32 at most 32, to
// compare.
using Bf16Wide = DecodeShape<WeightCode::Bf16, false, 32, 4>;
using Bf16Wider = DecodeShape<WeightCode::Bf16, false, 64, 3>;
constexpr int64_t kBf16WideAbove = 8, kBf16WiderAbove = 24;
using Fp4Decode = DecodeShape<WeightCode::Fp4, false, 32>;
// The FP4 x e4m3 shapes, for the per-32 arithmetic (kExact false) and for block-exact weights (true): the same
// shapes, taken by the same rules (launch_fp4_e4m3).
template <bool kExact>
struct Fp4E4m3Shapes {
    using Thin = DecodeShape<WeightCode::Fp4, true, 8, 6, kExact>;  // decode batches of at most 4 rows per expert
    // 8-token FP4 x e4m3 CTAs four to an SM, four stages each, with the registers (up to 102) of a stage's
    // eight MMAs in flight (fp4_e4m3_block_pair). Launches of at most three CTAs an SM take them
    // (deepseek-v4-flash's routed experts at one token: 384 CTAs a GEMM): its one-token layer took 54.5-55.5
    // µs against 56.9-57.1 on six to an SM, its routed gate/up 20.5-20.9 against 21.8-22.0 in the traces
    // (bench/results/2026-12-04-cuda-fp4-four.md). In launches of more (8 tokens: 3072 CTAs a gate/up) they
    // were 2.9% slower than six to an SM; STEADYMOE_FP4_THIN_CTAS_PER_SM=4 runs them there too, to compare.
    // Three to an SM with six stages took all of an SM's shared memory, so the shared expert's CTAs found no
    // room beside them (that one-token gate/up took 25-31 µs). STEADYMOE_DEEP_STAGES=0 keeps launches of few
    // CTAs six to an SM, to compare (the same bits).
    using ThinFour = DecodeShape<WeightCode::Fp4, true, 8, 0, kExact>;
    using Narrow = DecodeShape<WeightCode::Fp4, true, 16, 5, kExact>;       // other decode batches
    // Decode batches whose experts average more than kFp4MidAbove rows (deepseek-v4-flash's at 768 tokens:
    // 18): 32-token CTAs, four to an SM, where 16-token ones took each expert past 16 rows in two, each
    // streaming the expert's weights; more than kFp4WideAbove, the 64-token ones (Wide) as in other batches.
    // STEADYMOE_FP4_WIDE_DECODE=0 keeps 16, =32 at most 32, to compare (the same bits).
    using Mid = DecodeShape<WeightCode::Fp4, true, 32, 4, kExact>;
    using NarrowFewer = DecodeShape<WeightCode::Fp4, true, 16, 0, kExact>;  // STEADYMOE_DECODE_CTAS_PER_SM=fewer
    using Wide = DecodeShape<WeightCode::Fp4, true, 64, 0, kExact>;         // the others
};
using Fp4E4m3Thin = Fp4E4m3Shapes<false>::Thin;
using Fp4E4m3ThinFour = Fp4E4m3Shapes<false>::ThinFour;
constexpr int kThinFourLaunchCtasPerSm = 3;  // the launches that take it: at most this many CTAs an SM (few_ctas)
using Fp4E4m3Narrow = Fp4E4m3Shapes<false>::Narrow;
using Fp4E4m3Mid = Fp4E4m3Shapes<false>::Mid;
constexpr int64_t kFp4MidAbove = 12, kFp4WideAbove = 24;
using Fp4E4m3Wide = Fp4E4m3Shapes<false>::Wide;
using Bf16DecodeFewer = DecodeShape<WeightCode::Bf16, false, 16>;
using Fp8DecodeFewer = DecodeShape<WeightCode::Fp8, true, 32>;
using Fp4E4m3NarrowFewer = Fp4E4m3Shapes<false>::NarrowFewer;
static_assert(Fp4E4m3Thin::kTokens >= kMinTileRows && Bf16Decode::kTokens >= kMinTileRows, "hopper_decode_tile_rows");

// A launch's row tiles hold at most tile_m rows (grouped_gemm.hpp): so many CTAs of kTokens share each.
__host__ __device__ inline int decode_chunks(const GroupedGemmLaunch& g, int tokens) {
    return ((g.tile_m > 0 ? g.tile_m : kHopperTileRows) + tokens - 1) / tokens;
}

// A launch's grid for CTAs of `tokens` tokens: x = 2 * n-tile + half, y = decode_chunks * tile + chunk, z = split.
inline dim3 decode_grid(const GroupedGemmLaunch& g, int tokens) {
    return dim3(unsigned((g.n + kTileN - 1) / kTileN * (kTileN / kFeatures)), unsigned(g.max_tiles * decode_chunks(g, tokens)),
                unsigned(g.k_splits));
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// This CTA's rows and features: blockIdx.x = 2 * n-tile + half, blockIdx.y = decode_chunks * tile + chunk.
// The layer cuts a decode batch into tiles as tall as its CTAs (hopper_decode_tile_rows): one chunk each, no
// CTA for rows a tile cannot hold. Other launches (the router's, expert parallelism's, 128-row tiles) take
// a tile in chunks.
// Tile by tile, so the chunks of a tile with more rows than one CTA takes run together and share its weights
// in L2. (Chunk by chunk — every tile's first chunk dispatched before the CTAs that find no rows — qwen3's
// bf16 experts at 8 to 256 tokens were 10-23% slower than the previous session's tile-by-tile figures, on
// another machine: not an A/B, so undone rather than kept; bench/results/2026-12-02-cuda-fp4-e4m3.md.)
template <int kTokens, bool kPastL1 = false>
__device__ __forceinline__ Tile decode_tile(const GroupedGemmLaunch& g) {
    const int chunks = decode_chunks(g, kTokens);
    Tile t = tile_of_block<kPastL1>(g, int(blockIdx.y) / chunks);
    const int skip = int(blockIdx.y) % chunks * kTokens;
    t.rows = t.rows > skip ? min(kTokens, t.rows - skip) : 0;
    t.row0 += skip;
    t.n0 = int(blockIdx.x) * kFeatures;
    if (t.n0 >= g.n) t.rows = 0;  // the padding half of the last n-tile
    return t;
}

// Whether this CTA's tile has a row by the routing kernel's early experts (GroupedGemmLaunch::early_route: tile
// i is the i-th expert, with one row, row i), asked by one thread once they are published. False where it has
// none (no i-th expert, a chunk past the row, the padding half of an n-tile) or nothing was published in time:
// such a CTA waits for the routing kernel and takes its tile from the list, as without early experts (so no
// CTA leaves on the early experts' word alone).
template <int kTokens>
__device__ __forceinline__ bool early_route_has_row(const GroupedGemmLaunch& g) {
    const int chunks = decode_chunks(g, kTokens);
    return int(blockIdx.y) % chunks == 0 && int(blockIdx.x) * kFeatures < g.n &&
           early_route_expert(g.early_route, int(blockIdx.y) / chunks) >= 0;
}

// That tile, but its expert, which only the producer needs (and reads: produce).
template <int kTokens>
__device__ __forceinline__ Tile early_route_tile(const GroupedGemmLaunch& g) {
    const int ktiles = int(g.k / kBK) / g.k_splits, split = int(blockIdx.z);
    return {-1, int(blockIdx.y) / decode_chunks(g, kTokens), 1, int(blockIdx.x) * kFeatures, split, split * ktiles, ktiles};
}

// A stage's 128-wide k blocks: ks * kBlocks onwards of the tile's k range, as many as are left (a split's k
// range is a multiple of 128, not always of kBlocks blocks).
template <class S>
__device__ __forceinline__ int stage_blocks(const Tile& t, int ks) {
    return min(S::kBlocks, t.ktiles / kSubs - ks * S::kBlocks);
}

// Where row `row` of tile `t` lies in the launch's rows (a / a_fp8 / a_scale): at a_index[row0 + row]
// where the launch reads its rows in place (GroupedGemmLaunch::a_index), else at row0 + row; rows past the
// tile's are never read (-1).
__device__ __forceinline__ int32_t source_row(const GroupedGemmLaunch& g, const Tile& t, int row) {
    if (row >= t.rows) return -1;
    return g.a_index ? g.a_index[t.row0 + row] : t.row0 + row;
}

// The producer warp: per stage, the weights by bulk copies (FP4 meeting e4m3 tokens: one for the stage's
// blocks; else one per stored tile's half and one for FP4's exponents), the tokens' rows by cp.async or
// (given rows_map) by a tensor copy per 64 k, the tokens' scales (and FP8's weight scales) by cp.async, all
// announced on the stage's "full" barrier; the tokens' scales not where the consumers hold them (`held`). A
// tensor copy brings the CTA's whole box of rows: past the chunk's own come other tiles' rows (or zeros past
// the matrix), whose products stay in columns the epilogue skips.
// With g.tiles_before_wait the weights of the first stages (as many as there are) are on their way before the
// producer waits for the kernel before it: the weights are no kernel's output, and at a few tokens a GEMM is
// mostly the latency of its first copies, which then overlaps the kernel before it (the gate/up GEMM, for
// the down GEMM). Each such stage's barrier expects all of its bytes at once: its phase ends only when its
// rows have come too.
template <class S, bool kScaled>
__device__ __forceinline__ void produce(const GroupedGemmLaunch& g, Tile t, char* smem, uint64_t* full,
                                        uint64_t* empty, int stages, bool held, const CUtensorMap* rows_map,
                                        bool tiles_early, bool routed_early) {
    constexpr WeightCode kCode = S::kFormat;
    // (published before the block's barrier that told this CTA its tile has a row: read past L1)
    if (routed_early) t.expert = __ldcg(&g.early_route->experts[t.row0]);
    const int lane = threadIdx.x & 31, half = int(blockIdx.x) & 1, n_tile = t.n0 / kTileN;
    const char* weights = static_cast<const char*>(g.w) + int64_t(t.expert) * g.w_expert_bytes;
    // In e4m3 order this CTA's blocks are one run; else its half of each stored tile, and FP4's exponents
    // (or FP8's scales) beside them in w_scale.
    constexpr int kStoredTileBytes = kTileN * S::kWeightRowBytes;  // a stored tile: kTileN rows
    const char *codes = nullptr, *blocks = nullptr, *scales = nullptr, *exps = nullptr;
    if constexpr (S::kFp4E4m3) {
        blocks = weights + int64_t(t.n0 / kFeatures) * (g.k / 128) * S::kBlockWeightBytes;
    } else {
        codes = weights + int64_t(n_tile) * (g.k / kBK) * kStoredTileBytes + half * S::kHalfTileBytes;
        scales = static_cast<const char*>(g.w_scale) + int64_t(t.expert) * g.scale_expert_bytes;
        if constexpr (S::kExpBytes > 0) exps = scales + int64_t(n_tile) * (g.k / 128) * (kTileN * 4) + half * S::kExpBytes;
    }
    // Stage ks's barrier told of all its bytes, and its weights' copies (lane 0).
    const auto expect_and_copy_weights = [&](int ks) {
        const int s = ks % S::kStages, first = t.kt0 / kSubs + ks * S::kBlocks;
        const int count = stage_blocks<S>(t, ks);
        char* stage = smem + s * S::kStageBytes;
        const int row_bytes = rows_map ? kSubs * S::kTokenTileBytes : 0;  // (copied after the wait)
        barrier::arrive_expect_bytes(&full[s], count * (S::kBlockWeightBytes + row_bytes));
        if constexpr (S::kFp4E4m3) {
            barrier::bulk_copy(stage + S::kCodesOffset, blocks + int64_t(first) * S::kBlockWeightBytes,
                               count * S::kBlockWeightBytes, &full[s]);
        } else {
            for (int h = 0; h < kSubs; ++h)
                barrier::bulk_copy(stage + S::kCodesOffset + h * S::kHalfTileBytes,
                                   codes + int64_t(first * kSubs + h) * kStoredTileBytes, S::kHalfTileBytes,
                                   &full[s]);
            if constexpr (S::kExpBytes > 0)
                barrier::bulk_copy(stage + S::kCodesOffset + kSubs * S::kHalfTileBytes,
                                   exps + int64_t(first) * (kTileN * 4), S::kExpBytes, &full[s]);
        }
    };
    const int early = tiles_early ? min(stages, S::kStages) : 0;
    for (int ks = 0; ks < early && lane == 0; ++ks) expect_and_copy_weights(ks);
    wait_for_prior_kernels();  // (decode_cta waited already where the tiles are the kernel before's work)
    // A tile taken from the routing kernel's early experts must be the list's: read now, compared once the
    // stages are asked for (not before: the rows' copies do not wait for these loads).
    const Tile listed = routed_early ? decode_tile<S::kTokens>(g) : t;
    // The rows this lane copies (and those whose scales it copies): where they lie in a / a_fp8 / a_scale,
    // read after the wait (a_index is the permutation's, as the tiles are, but not read past L1).
    constexpr int kRowStep = S::kE4m3Tokens ? 8 : 4, kLanesPerRow = 32 / kRowStep, kLaneRows = S::kTokens / kRowStep;
    constexpr int kScaleRows = (S::kTokens + 31) / 32;
    const int chunk = lane % kLanesPerRow;
    int32_t source[kLaneRows], scale_source[kScaleRows];
#pragma unroll
    for (int j = 0; j < kLaneRows; ++j) source[j] = source_row(g, t, lane / kLanesPerRow + j * kRowStep);
#pragma unroll
    for (int j = 0; j < kScaleRows; ++j) scale_source[j] = source_row(g, t, lane + 32 * j);
    for (int ks = 0; ks < stages; ++ks) {
        const int s = ks % S::kStages, first = t.kt0 / kSubs + ks * S::kBlocks, count = stage_blocks<S>(t, ks);
        if (ks >= S::kStages) barrier::wait(&empty[s], uint32_t((ks / S::kStages - 1) & 1));
        char* stage = smem + s * S::kStageBytes;
        if (lane == 0) {
            if (ks >= early) expect_and_copy_weights(ks);
            if (rows_map)
                for (int b = 0; b < count; ++b)
                    for (int h = 0; h < kSubs; ++h)
                        barrier::tensor_copy_2d(stage + (b * kSubs + h) * S::kTokenTileBytes, rows_map, ((first + b) * kSubs + h) * kBK, t.row0,
                                                &full[s]);
        }
        for (int b = 0; b < (rows_map ? 0 : count); ++b)
            for (int h = 0; h < kSubs; ++h) {
                char* tile = stage + (b * kSubs + h) * S::kTokenTileBytes;
                const int kt = (first + b) * kSubs + h;
#pragma unroll
                for (int j = 0; j < kLaneRows; ++j) {
                    const int row = lane / kLanesPerRow + j * kRowStep;
                    if (row >= t.rows) break;
                    if constexpr (S::kE4m3Tokens)  // e4m3 rows: lane owns 16-byte chunk lane % 4 of rows lane / 4, + 8, ...
                        cp_async16(tile + swizzle64(row, chunk), g.a_fp8 + int64_t(source[j]) * g.k + kt * kBK + chunk * 16, true);
                    else  // bf16 rows: lane owns 16-byte chunk lane % 8 of rows lane / 8, + 4, ...
                        cp_async16(tile + swizzle(row, chunk), g.a + int64_t(source[j]) * g.k + kt * kBK + chunk * 8, true);
                }
            }
        if (kScaled && g.a_scale && !held)
            for (int b = 0; b < count; ++b)
#pragma unroll
                for (int j = 0; j < kScaleRows; ++j) {
                    const int row = lane + 32 * j;
                    if (row >= t.rows) break;
                    cp_async4(stage + S::kTokenScaleOffset + (b * S::kTokens + row) * 4, g.a_scale + int64_t(scale_source[j]) * (g.k / 128) + first + b,
                              true);
                }
        if (kCode == WeightCode::Fp8 && lane < 2) {  // fragment `lane`'s weight scale: that of every even / odd fragment
            const int64_t n = t.n0 + lane * 8;
            const bool valid = n < g.n;
            cp_async4(stage + S::kWeightScaleOffset + lane * 4, scales + (valid ? weight_scale_offset(g, n, first) : 0), valid);
        }
        barrier::arrive_after_cp_async(&full[s]);
    }
    // (never without a fault: the experts published for another step, or a routing of other tiles)
    if (listed.expert != t.expert || listed.row0 != t.row0 || listed.rows != t.rows) __trap();
}

// One weight row's codes for two 16-wide k steps (2p, 2p + 1) of a stored 64-k tile, widened to the
// MMA's A fragment: the row's k (2q, 2q + 1) and (2q + 8, 2q + 9) of each step, q = lane % 4.
// `words` are the row's 32 bytes (k 0..63, two codes a byte, low nibble first); the scale is byte
// `group` (their 32-wide group) of the row's e8m0 `exponents`. Returns (step 2p: k 2q.., k 2q+8..;
// step 2p+1: the same).
__device__ __forceinline__ uint4 widen_fragments(const uint32_t (&words)[8], int p, uint32_t select, uint32_t exponents,
                                                 uint32_t group) {
    // Step s's bytes are words 2s (k 16s .. 16s+7) and 2s + 1 (k 16s+8 ..): this lane's byte q of each.
    const uint32_t first = __byte_perm(words[4 * p], words[4 * p + 1], select);
    const uint32_t second = __byte_perm(words[4 * p + 2], words[4 * p + 3], select);
    return e2m1x8_to_bf16x8(__byte_perm(first, second, 0x5410), bf16_pair_scale(exponents, group));
}

// A stage's MMAs into acc (thread rows `row` and row + 8 of the CTA's features), committed as one group.
template <class S>
__device__ __forceinline__ void stage_mmas(float (&acc)[S::kAcc], const char* stage, int row, int lane) {
    static_assert(!S::kFp4E4m3, "fp4_e4m3_block");
    if constexpr (S::kFormat == WeightCode::Fp4) {
        const int q = lane & 3;
        const uint32_t select = uint32_t(q) | uint32_t(q + 4) << 4;
        const uint32_t* stage_exps = reinterpret_cast<const uint32_t*>(stage + S::kCodesOffset + kSubs * S::kHalfTileBytes);
        const uint32_t exps[2] = {stage_exps[row], stage_exps[row + 8]};
        uint32_t a[kSubs * 4][4];  // the A fragments of the stage's eight 16-wide k steps
#pragma unroll
        for (int h = 0; h < kSubs; ++h) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {  // rows row, row + 8: fragment registers r and r + 2
                const uint4* codes = reinterpret_cast<const uint4*>(stage + S::kCodesOffset + h * S::kHalfTileBytes + (row + 8 * r) * S::kWeightRowBytes);
                const uint4 lo = codes[0], hi = codes[1];
                const uint32_t words[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
                for (int p = 0; p < 2; ++p) {  // 32-wide group 2h + p: steps 4h + 2p and 4h + 2p + 1
                    const uint4 v = widen_fragments(words, p, select, exps[r], 2 * h + p);
                    a[4 * h + 2 * p][r] = v.x, a[4 * h + 2 * p][r + 2] = v.y;
                    a[4 * h + 2 * p + 1][r] = v.z, a[4 * h + 2 * p + 1][r + 2] = v.w;
                }
            }
        }
        fence_operands(acc);
#pragma unroll
        for (int step = 0; step < kSubs * 4; ++step)  // the fragments are written before the fence
#pragma unroll
            for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[step][i])::"memory");
        wgmma_fence();
#pragma unroll
        for (int step = 0; step < kSubs * 4; ++step)
            wgmma_m64n32k16_rs(acc, a[step], smem_descriptor<1024>(stage + (step / 4) * S::kTokenTileBytes) + 2 * (step % 4));  // +32 bytes
    } else {
        constexpr int kAtom = S::kE4m3Tokens ? 512 : 1024, kStep = S::kE4m3Tokens ? 32 : 16;  // k per MMA, 32 bytes either way
        const uint64_t desc_w = smem_descriptor<kAtom>(stage + S::kCodesOffset), desc_t = smem_descriptor<kAtom>(stage);
        fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (int h = 0; h < kSubs; ++h)
#pragma unroll
            for (int step = 0; step < kBK / kStep; ++step) {
                const uint64_t a = desc_w + (h * S::kHalfTileBytes + 32 * step) / 16, b = desc_t + (h * S::kTokenTileBytes + 32 * step) / 16;
                if constexpr (S::kE4m3Tokens && S::kTokens == 8) wgmma_m64n8k32_e4m3(acc, a, b, h > 0 || step > 0);  // the first starts the block's sum
                else if constexpr (S::kE4m3Tokens && S::kTokens == 64)
                    wgmma_m64n64k32_e4m3(acc, a, b, h > 0 || step > 0);
                else if constexpr (S::kE4m3Tokens) wgmma_m64n32k32_e4m3(acc, a, b, h > 0 || step > 0);
                else if constexpr (S::kTokens == 64)
                    wgmma_m64n64k16(acc, a, b);
                else if constexpr (S::kTokens == 32)
                    wgmma_m64n32k16(acc, a, b);
                else wgmma_m64n16k16(acc, a, b);
            }
    }
    wgmma_commit();
}

// The consumers, while the producer's first stages are in flight: the tokens' 128-block scales of the CTA's
// whole k range into `held` ([block][S::kScaleLd]; zeros for rows past the chunk's), in place of the
// producer's 4-byte copies per stage and row. a_scale is [rows][k/128]: warp w takes rows w, w + 4, ..., its
// lanes a row's run of blocks, so each warp-wide copy reads whole sectors; per stage, each row's scale took a
// sector of its own (at 16384 tokens the profiler put most of the 64-token CTAs' excess global sectors, 19%, and
// shared wavefronts, 34%, on those copies: bench/results/2026-12-03-cuda-indexed-rows.md). (The producer warp
// copying them all before its first stage's arrival was slower: DecodeShape::kHoldsScales.)
template <class S>
__device__ __forceinline__ void hold_token_scales(const GroupedGemmLaunch& g, const Tile& t, float* held) {
    constexpr int kWarps = kConsumers / 32, kWarpRows = S::kTokens / kWarps;
    static_assert(kWarpRows <= 32, "a lane holds each of its warp's rows' source");
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const int blocks = t.ktiles / kSubs, first = t.kt0 / kSubs;
    const int32_t lane_source = lane < kWarpRows ? source_row(g, t, warp + kWarps * lane) : -1;  // one index load a lane
#pragma unroll
    for (int i = 0; i < kWarpRows; ++i) {
        const int row = warp + kWarps * i;
        const int32_t source = __shfl_sync(0xFFFFFFFFu, lane_source, i);
        const float* run = g.a_scale + int64_t(source) * (g.k / 128) + first;
        for (int b = lane; b < blocks; b += 32) {
            if (row < t.rows) cp_async4(held + b * S::kScaleLd + row, run + b, true);
            else held[b * S::kScaleLd + row] = 0.0f;
        }
    }
    cp_async_commit();
    cp_async_wait<0>();  // then the consumers' barrier shows every thread's copies to all of them
}

// The epilogue of 64-token CTAs, from their results parked as [token][feature] (kTokenParkLd floats a token):
// warp w takes tokens w, w + 4, ..., w + 60, each token's pairs of adjacent features a lane each (SwiGLU: its
// 16 gate pairs, two tokens at a time; else its 32 pairs), through the tiled kernel's epilogue_pair. Each
// token's row data (where it lies, where it goes, its routing weight) are read once, lane m reading the
// warp's token m's, and handed to the lanes by shuffles. (Read per pair, those global loads were what the
// down GEMM's epilogue waited on most, and SwiGLU's loop skipped every other pair, an up fragment: at 16384
// tokens the epilogue took a fifth of deepseek-v4-flash's gate/up instructions,
// bench/results/2026-12-06-cuda-per32-profile.md; this way its routed experts took 9.7% and 8.0% less time at
// 16384 and 4096 tokens, bench/results/2026-12-06-cuda-wide-epilogue.md.) The same pairs through the same
// arithmetic: the same bits.
__device__ __forceinline__ void wide_epilogue(const GroupedGemmLaunch& g, const Tile& t, const float* park) {
    constexpr int kWarps = kConsumers / 32, kWarpTokens = 64 / kWarps;  // (64-token CTAs)
    static_assert(kWarpTokens <= 32, "a lane holds each of its warp's tokens' row data");
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const EpilogueRow mine = lane < kWarpTokens ? epilogue_row(g, t, warp + kWarps * lane) : EpilogueRow{};
    const bool swiglu = g.epilogue == GemmEpilogue::SwiGlu;
    const int lane_tokens = swiglu ? 2 : 1;  // tokens an iteration
    // this lane's pair of each token: gate fragments 2f (features 16f .. 16f + 7), four pairs each, for SwiGLU
    const int col = swiglu ? lane % 16 / 4 * 16 + lane % 4 * 2 : 2 * lane;
#pragma unroll 1
    for (int j = 0; j < kWarpTokens && warp + kWarps * j < t.rows; j += lane_tokens) {
        const int m = j + (swiglu ? lane / 16 : 0);  // the warp's token m: tile row warp + kWarps * m
        EpilogueRow r;
        r.row = __shfl_sync(0xFFFFFFFFu, mine.row, m);
        r.dest = __shfl_sync(0xFFFFFFFFu, mine.dest, m);
        r.weight = __shfl_sync(0xFFFFFFFFu, mine.weight, m);
        const float* v = park + (warp + kWarps * m) * kTokenParkLd + col;
        const float* up = swiglu ? v + 8 : v;  // gate fragment 2f's up partner is fragment 2f + 1
        epilogue_pair<Bf16Rounding::Hardware>(g, t, r, col, make_float2(v[0], v[1]), make_float2(up[0], up[1]));
    }
}
#endif

// A CTA of the kernel, its token rows by the producer's cp.async or (given rows_map) by tensor copies.
template <class S, bool kScaled>
__device__ __forceinline__ void decode_cta(const GroupedGemmLaunch& g, bool hold_scales, const CUtensorMap* rows_map) {
    // The tiles come from the permutation's output: wait for the kernel before this one first, unless
    // tiles_before_wait (the tiles are older: the producer waits after its first weights' copies, the
    // consumers below) or the routing kernel before published this CTA's tile early (early_route: the same).
    // The next kernel starts at the epilogue, or here with early_dependents.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr WeightCode kCode = S::kFormat;
    static_assert(!S::kE4m3Tokens || kScaled, "e4m3 tokens come with their scales");
    extern __shared__ __align__(128) char smem_raw[];
    char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    // Thread 0 waits for the experts; the block takes its answer through shared memory (a word no copy has
    // reached yet), read back as one value for every thread, so that the compiler keeps what follows from the
    // tile on the uniform datapath (a block vote's answer took the k loops from 65 to 140 instructions a stage).
    bool routed_early = false;
    if (S::kTakesEarlyRoute && !kScaled && g.early_route) {
        int* answer = reinterpret_cast<int*>(smem);
        if (threadIdx.x == 0) *answer = early_route_has_row<S::kTokens>(g);
        __syncthreads();
        routed_early = *answer != 0;
    }
    const bool tiles_early = g.tiles_before_wait || routed_early;
    if (!tiles_early) wait_for_prior_kernels();
    // (a CTA on early experts lets the next kernel start only once its consumers have waited: that kernel may
    // read this one's tile list before its own wait, which the routing kernel is still writing)
    if (g.early_dependents && !routed_early) allow_next_kernel();
    const Tile t = routed_early ? early_route_tile<S::kTokens>(g)
                   : tiles_early ? decode_tile<S::kTokens, true>(g)
                                 : decode_tile<S::kTokens>(g);
    if (t.rows == 0) return;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + S::kStages * S::kStageBytes);
    uint64_t* empty = full + S::kStages;
    const int stages = (t.ktiles / kSubs + S::kBlocks - 1) / S::kBlocks;  // a split's k range is a multiple of 128
    // Held token scales (launch_typed decides: the same for every CTA of the launch), else per stage.
    float* held = S::kHeldBlocks > 0 && hold_scales ? reinterpret_cast<float*>(smem + S::kHeldScaleOffset) : nullptr;

    if (threadIdx.x == 0) {
        for (int s = 0; s < S::kStages; ++s) {
            barrier::init(&full[s], kFullArrivals);
            barrier::init(&empty[s], kConsumers / 32);
        }
        barrier::fence_init();
    }
    __syncthreads();
    if (threadIdx.x >= kConsumers) {
        produce<S, kScaled>(g, t, smem, full, empty, stages, held != nullptr, rows_map, tiles_early, routed_early);
        return;
    }

    // Token rows past the chunk's are never loaded: zero them (and their scales) once in every stage.
    // A row's products never reach another row, but the MMAs should not read uninitialised memory.
    // (Tensor copies fill every row of their box.)
    for (int s = 0; s < S::kStages; ++s) {
        char* stage = smem + s * S::kStageBytes;
        for (int h = 0; h < (rows_map ? 0 : S::kBlocks * kSubs); ++h)
            for (int c = threadIdx.x; c < (S::kTokens - t.rows) * (S::kTokenRowBytes / 16); c += kConsumers)
                *reinterpret_cast<uint4*>(stage + h * S::kTokenTileBytes + t.rows * S::kTokenRowBytes + c * 16) = make_uint4(0, 0, 0, 0);
        for (int b = 0; b < S::kBlocks && !held; ++b)
            for (int row = t.rows + threadIdx.x; row < S::kTokens; row += kConsumers)
                reinterpret_cast<float*>(stage + S::kTokenScaleOffset)[b * S::kTokens + row] = 0.0f;
    }
    wait_for_prior_kernels();  // (where it waited above, it returns at once)
    // (a CTA on early experts lets the next kernel start here; for others it is a repeat, which does nothing.
    // Asked only there, it moved the k loop of one token's shape off the uniform datapath: 65 to 141)
    if (g.early_dependents) allow_next_kernel();
    if (held) hold_token_scales<S>(g, t, held);
    fence_async_shared();
    barrier::sync_threads(1, kConsumers);

    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, q = lane & 3;
    const int row = warp * 16 + (lane >> 2);  // this thread's weight rows: row and row + 8
    float acc[S::kFp4E4m3 ? 1 : S::kAcc], total[kScaled ? S::kAcc : 1];  // (fp4_e4m3_block keeps its own sums)
#pragma unroll
    for (int i = 0; i < (S::kFp4E4m3 ? 1 : S::kAcc); ++i) acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < (kScaled ? S::kAcc : 1); ++i) total[i] = 0.0f;

    for (int ks = 0; ks < stages; ++ks) {
        const int s = ks % S::kStages;
        barrier::wait(&full[s], uint32_t((ks / S::kStages) & 1));
        // The producer's cp.async rows (generic-proxy writes), for the MMAs' (async-proxy) reads. With tensor
        // copies of the rows no byte an MMA reads is written by the generic proxy (the other cp.async copies,
        // of scales, are read by ordinary loads): no fence then (it was a memory barrier and 6 of the per-32
        // loop's 300 instructions a block; deepseek-v4-flash's routed experts took 1.6% less time without it
        // at 4096 and 16384 tokens: bench/results/2026-12-06-cuda-wide-epilogue.md).
        if (!rows_map) fence_async_shared();
        const char* stage = smem + s * S::kStageBytes;
        const StageScales scales = held ? StageScales{held + ks * S::kBlocks * S::kScaleLd, S::kScaleLd}
                                        : StageScales{reinterpret_cast<const float*>(stage + S::kTokenScaleOffset), S::kTokens};
        if constexpr (S::kBlockExact) {
            fp4_exact::stage<S>(total, stage, scales, stage_blocks<S>(t, ks), row, lane);
        } else if constexpr (S::kFp4E4m3) {
            fp4_e4m3_stage<S>(total, stage, scales, stage_blocks<S>(t, ks), row, lane);
        } else {
            stage_mmas<S>(acc, stage, row, lane);
            wgmma_wait<0>();
            fence_operands(acc);
            if constexpr (kScaled) {  // the end of a 128-wide block: fold its partial sums with their scales, as the tiled kernel does
                const float* token_scale = scales.scales;  // (one block a stage)
                const float* weight_scale = reinterpret_cast<const float*>(stage + S::kWeightScaleOffset);
#pragma unroll
                for (int i = 0; i < S::kAcc; ++i) {
                    const float sa = S::kE4m3Tokens || g.a_scale ? token_scale[8 * (i / 4) + 2 * q + (i & 1)] : 1.0f;
                    const float scale = kCode == WeightCode::Fp8 ? __fmul_rn(sa, weight_scale[i / 2 % 2]) : sa;  // row + 8 is the odd fragment
                    total[i] = __fmaf_rn(acc[i], scale, total[i]);
                    if constexpr (!S::kE4m3Tokens) acc[i] = 0.0f;  // (e4m3 MMAs start each block's sum anew)
                }
            }
        }
        __syncwarp();
        if (lane == 0) barrier::arrive(&empty[s]);
    }
    // Every MMA has read its stage and no copy is in flight: park the results in the stages as
    // [token][feature], then run the tiled kernel's epilogue on adjacent feature pairs. Accumulator
    // layout: element 4j + r is weight row (row + 8 * (r / 2)), token 8j + 2q + r % 2.
    if (!g.early_dependents) allow_next_kernel();
    barrier::sync_threads(1, kConsumers);
    float* park = reinterpret_cast<float*>(smem);
    const float* result = kScaled ? total : acc;
#pragma unroll
    for (int i = 0; i < S::kAcc; ++i) park[(8 * (i / 4) + 2 * q + (i & 1)) * kTokenParkLd + row + 8 * (i / 2 % 2)] = result[i];
    barrier::sync_threads(1, kConsumers);
    if constexpr (S::kTokens == 64) {
        wide_epilogue(g, t, park);
        return;
    }
    const bool swiglu = g.epilogue == GemmEpilogue::SwiGlu;
#pragma unroll 1
    for (int i = threadIdx.x; i < t.rows * (kFeatures / 2); i += kConsumers) {
        const int token = i / (kFeatures / 2), col = i % (kFeatures / 2) * 2;
        if (swiglu && (col / 8) % 2 == 1) continue;  // an up fragment: read beside its gate fragment
        const float* v = park + token * kTokenParkLd + col;
        const float* up = swiglu ? v + 8 : v;  // gate fragment 2f's up partner is fragment 2f + 1
        // (CTAs of at most 32 tokens round to bf16 by the codec's integer operations: stage_math.cuh says why)
        epilogue_pair<Bf16Rounding::Codec>(g, t, token, col, make_float2(v[0], v[1]), make_float2(up[0], up[1]));
    }
#else
    __trap();  // wgmma needs sm_90a
#endif
}

template <class S, bool kScaled>
__global__ void __launch_bounds__(kThreads, S::kCtasPerSm) decode_kernel(const GroupedGemmLaunch g, bool hold_scales) {
    decode_cta<S, kScaled>(g, hold_scales, nullptr);
}
template <class S, bool kScaled>
__global__ void __launch_bounds__(kThreads, S::kCtasPerSm)
    decode_kernel_rows_by_map(const GroupedGemmLaunch g, bool hold_scales, const __grid_constant__ CUtensorMap rows_map) {
    decode_cta<S, kScaled>(g, hold_scales, &rows_map);
}

// Whether launches copy the tokens' scales per stage even where their CTAs could hold them
// (STEADYMOE_HELD_TOKEN_SCALES=0, to compare: the same bits).
bool scales_per_stage() {
    static const bool per_stage = env_equals("STEADYMOE_HELD_TOKEN_SCALES", "0");
    return per_stage;
}

// Whether the 64-token CTAs of FP4 weights meeting e4m3 tokens take their rows by tensor copies where the
// rows lie in order (not read through a_index), and the layer gathers them so
// (hopper_decode_prefers_rows_in_order). The producer's cp.async of 64 rows a stage held those CTAs back:
// deepseek-v4-flash's routed experts took 17% and 14% less time at 16384 and 4096 tokens with copies
// (bench/results/2026-12-04-cuda-fp4-row-copies.md). STEADYMOE_FP4_ROW_COPIES=0 keeps cp.async of rows read
// in place, to compare (the same bits).
bool fp4_row_copies() {
    static const bool on = !env_equals("STEADYMOE_FP4_ROW_COPIES", "0");
    return on;
}

template <class S, bool kScaled>
cudaError_t launch_typed(const GroupedGemmLaunch& g) {
    const dim3 grid = decode_grid(g, S::kTokens);
    // A CTA's k range: k / k_splits, a multiple of 128.
    const bool hold_scales = g.a_scale && g.k / 128 / g.k_splits <= S::kHeldBlocks && !scales_per_stage();
    if constexpr (S::kFp4E4m3 && S::kTokens == 64) {  // a box of the CTA's 64 rows per 64 k
        CUtensorMap rows_map{};
        if (fp4_row_copies() && g.a_rows > 0 && !g.a_index && encode_row_map(rows_map, g.a_fp8, g.a_rows, g.k, RowElement::E4m3, S::kTokens)) {
            constexpr auto kernel = decode_kernel_rows_by_map<S, kScaled>;
            const cudaError_t err = allow_shared_memory<kernel>(S::kSmemBytes);
            if (err != cudaSuccess) return err;
            return launch_dependent(kernel, grid, kThreads, S::kSmemBytes, g.stream, g, hold_scales, rows_map);
        }
    }
    constexpr auto kernel = decode_kernel<S, kScaled>;
    const cudaError_t err = allow_shared_memory<kernel>(S::kSmemBytes);
    if (err != cudaSuccess) return err;
    return launch_dependent(kernel, grid, kThreads, S::kSmemBytes, g.stream, g, hold_scales);
}

template <class S>
int ctas_per_sm() {
    constexpr auto kernel = decode_kernel<S, true>;
    int ctas = 0;
    if (allow_shared_memory<kernel>(S::kSmemBytes) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kThreads, S::kSmemBytes) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return ctas;
}

// The tokens of the shortest of a format's decode CTAs (`shapes`, their tokens ascending) that hold a tile
// of tile_m rows, as hopper_decode_tile_rows cuts a decode batch; `otherwise` where none does (or tile_m is
// 0: the GPU's tiles), whose CTAs take a tile in chunks.
int cta_tokens_for(int32_t tile_m, std::initializer_list<int> shapes, int otherwise) {
    for (const int tokens : shapes)
        if (tile_m > 0 && tile_m <= tokens) return tokens;
    return otherwise;
}

// How tall a format's decode tiles may grow where its batch's experts average many rows (taller_tile_rows):
// to 64 rows, or with its switch (STEADYMOE_BF16_WIDE_DECODE, _FP8_, _FP4_) =32 to 32 and =0 not at all.
enum class TallerTiles { UpTo64, UpTo32, None };
TallerTiles taller_tiles_switch(const char* name) {
    return env_equals(name, "0")    ? TallerTiles::None
           : env_equals(name, "32") ? TallerTiles::UpTo32
                                    : TallerTiles::UpTo64;
}
TallerTiles taller_tiles(WeightCode code) {
    static const TallerTiles bf16 = taller_tiles_switch("STEADYMOE_BF16_WIDE_DECODE"),
                             fp8 = taller_tiles_switch("STEADYMOE_FP8_WIDE_DECODE"),
                             fp4 = taller_tiles_switch("STEADYMOE_FP4_WIDE_DECODE");
    return code == WeightCode::Bf16 ? bf16 : code == WeightCode::Fp8 ? fp8 : fp4;
}

// A decode batch's tile rows where its `rows` rows over `experts` experts average more than `mid_above` an
// expert (32) or `wide_above` (64), as `taller` allows; `narrow` (the format's own CTAs) otherwise. An
// expert of more rows than its CTAs hold takes several per 64 features, each streaming its weights.
int taller_tile_rows(int narrow, int64_t mid_above, int64_t wide_above, int64_t rows, int64_t experts,
                     TallerTiles taller) {
    if (taller == TallerTiles::UpTo64 && rows > wide_above * experts) return 64;
    if (taller != TallerTiles::None && rows > mid_above * experts) return std::max(narrow, 32);
    return narrow;
}

// The tokens per CTA of a launch of FP4 weights meeting e4m3 tokens: in decode batches where few-row
// kernels are on, as many as its tiles hold (8, 16, 32 or 64: hopper_decode_tile_rows), 16 in taller tiles;
// 64 in others — the same bits.
int fp4_e4m3_tokens(const GroupedGemmLaunch& g) {
    if (!g.few_rows || !hopper_few_row_kernels()) return Fp4E4m3Wide::kTokens;
    return cta_tokens_for(
        g.tile_m, {Fp4E4m3Thin::kTokens, Fp4E4m3Narrow::kTokens, Fp4E4m3Mid::kTokens, Fp4E4m3Wide::kTokens},
        Fp4E4m3Narrow::kTokens);
}

// Whether every launch of 8-token CTAs runs them four to an SM of four stages (STEADYMOE_FP4_THIN_CTAS_PER_SM=4,
// to compare: the same bits), not only those of at most three CTAs an SM, rather than six of three.
bool thin_four() {
    static const bool four = env_equals("STEADYMOE_FP4_THIN_CTAS_PER_SM", "4");
    return four;
}

// Whether the BF16, FP8 and 16-token FP4 x e4m3 decode shapes run their old, fewer CTAs to an SM
// (STEADYMOE_DECODE_CTAS_PER_SM=fewer).
bool fewer_ctas() {
    static const bool fewer = env_equals("STEADYMOE_DECODE_CTAS_PER_SM", "fewer");
    return fewer;
}

// Whether FP8 launches whose tiles hold at most 8 rows take 8-token CTAs (STEADYMOE_FP8_THIN_CTAS=0: 32, to
// compare; the same bits).
bool fp8_thin() {
    static const bool thin = !env_equals("STEADYMOE_FP8_THIN_CTAS", "0");
    return thin;
}

// Whether launches of few CTAs take the shapes with fewer CTAs to an SM and more stages each (Bf16Deep,
// Fp4E4m3ThinFour): not with STEADYMOE_DEEP_STAGES=0, to compare.
bool deep_stages() {
    static const bool on = !env_equals("STEADYMOE_DEEP_STAGES", "0");
    return on;
}

// Whether a launch of CTAs of `tokens` tokens has at most `per_sm` of them an SM, so that it takes such a shape.
bool few_ctas(const GroupedGemmLaunch& g, int tokens, int per_sm) {
    const dim3 grid = decode_grid(g, tokens);
    return deep_stages() && int64_t(grid.x) * grid.y * grid.z <= int64_t(per_sm) * hopper_sm_count();
}

// The tokens per CTA of a BF16, FP8 or FP4-with-bf16-tokens launch: as many as its tiles hold where
// hopper_decode_tile_rows cut them for a shape, else the format's own (a CTA takes a taller tile in chunks).
int decode_tokens(const GroupedGemmLaunch& g) {
    if (g.code == WeightCode::Bf16)
        return cta_tokens_for(g.tile_m, {Bf16Decode::kTokens, Bf16Wide::kTokens, Bf16Wider::kTokens},
                              Bf16Decode::kTokens);
    if (g.code == WeightCode::Fp8)
        return cta_tokens_for(g.tile_m, {Fp8Thin::kTokens, Fp8Decode::kTokens, Fp8Wider::kTokens},
                              Fp8Decode::kTokens);
    return Fp4Decode::kTokens;
}

}  // namespace

// The weight formats the decode kernel takes: FP4 with bf16 tokens (the tiled kernel's 64-row CTAs
// have none), BF16 with bf16 tokens and FP8 with e4m3 tokens unless STEADYMOE_DECODE_KERNEL=tiled keeps
// those on the tiled kernel's 64-row CTAs, to compare (the same bits). (FP4 with e4m3 tokens takes this
// kernel in every batch: hopper_decode.)
bool hopper_decode_takes(WeightCode code) {
    static const bool tiled = env_equals("STEADYMOE_DECODE_KERNEL", "tiled");
    return hopper_few_row_kernels() && (code == WeightCode::Fp4 || !tiled);
}

namespace {

// Whether decode batches of weights `code` meeting e4m3 (a_fp8) or bf16 tokens take this kernel's shapes of
// decode_tokens: FP8 weights with e4m3 tokens, BF16 and FP4 weights with bf16 ones. (FP4 weights
// meeting e4m3 tokens take it in every batch, in shapes of their own: fp4_e4m3_tokens.)
bool decode_form(WeightCode code, bool a_fp8) { return hopper_decode_takes(code) && (code == WeightCode::Fp8) == a_fp8; }

}  // namespace

// Tiles as tall as the CTAs: with 128-row tiles a launch's grid held a CTA for every 16 rows a tile might
// have, most of which found none in a decode batch (deepseek-v4-flash's gate/up at 8 tokens: 24576 CTAs for
// 3072 with rows). STEADYMOE_DECODE_TILES=full keeps 128-row tiles and STEADYMOE_FP4_THIN_CTAS=0 16-token
// CTAs for FP4 weights where experts average at most 12 rows, to compare (the same bits).
int hopper_decode_tile_rows(WeightCode code, bool a_fp8, int64_t rows, int64_t experts) {
    static const bool full = env_equals("STEADYMOE_DECODE_TILES", "full"), thin = !env_equals("STEADYMOE_FP4_THIN_CTAS", "0");
    if (full || !hopper_few_row_kernels()) return 0;
    // 8-token CTAs where experts average at most 4 rows: deepseek-v4-flash's gate/up at 8 and 128 tokens
    // (about 0.2 and 3 rows an expert) ran 8% and 7% faster on them than on 16-token ones, at 256 (6 an
    // expert, so more experts past 8 rows: two CTAs) 4% slower (bench/results/2026-12-02-cuda-decode-tiles.md).
    if (code == WeightCode::Fp4 && a_fp8) {
        if (thin && rows <= 4 * experts) return Fp4E4m3Thin::kTokens;
        return taller_tile_rows(Fp4E4m3Narrow::kTokens, kFp4MidAbove, kFp4WideAbove, rows, experts,
                                taller_tiles(code));
    }
    if (!decode_form(code, a_fp8)) return 0;
    // (FP8 weights take this kernel with e4m3 tokens only: decode_form)
    if (code == WeightCode::Fp8) {
        if (fp8_thin() && rows <= Fp8Thin::kTokens) return Fp8Thin::kTokens;
        return taller_tile_rows(Fp8Decode::kTokens, kFp8WiderAbove, kFp8WiderAbove, rows, experts,
                                taller_tiles(code));
    }
    if (code == WeightCode::Bf16)
        return taller_tile_rows(Bf16Decode::kTokens, kBf16WideAbove, kBf16WiderAbove, rows, experts,
                                taller_tiles(code));
    return Fp4Decode::kTokens;
}

bool hopper_decode_prefers_rows_in_order(const GroupedGemmLaunch& g) {
    return g.code == WeightCode::Fp4 && g.a_fp8 && fp4_e4m3_tokens(g) == Fp4E4m3Wide::kTokens && fp4_row_copies();
}

bool hopper_decode(const GroupedGemmLaunch& g) {
    if (g.code == WeightCode::Fp4 && g.a_fp8) {
        // Only this kernel multiplies them, but for block-exact weights in batches other than decode ones where
        // the tiled kernel takes those (hopper_fp4_exact_tiled).
        if (hopper_fp4_exact_tiles(g)) return false;
        return g.a_scale && int64_t(g.max_tiles) * decode_chunks(g, fp4_e4m3_tokens(g)) <= 65535;
    }
    if (!g.few_rows || !decode_form(g.code, g.a_fp8) || (g.a_fp8 && !g.a_scale)) return false;
    return int64_t(g.max_tiles) * decode_chunks(g, decode_tokens(g)) <= 65535;  // grid.y
}

namespace {

// FP4 x e4m3 launches, per-32 or block-exact, on the same shapes by the same rules. (Block-exact weights on
// four to an SM in every decode launch, two blocks' MMAs interleaved, were slower than on six at 8 tokens:
// bench/results/2026-12-04-cuda-fp4-block-exact.md, call 2.)
template <bool kExact>
cudaError_t launch_fp4_e4m3(const GroupedGemmLaunch& g) {
    using Shapes = Fp4E4m3Shapes<kExact>;
    switch (fp4_e4m3_tokens(g)) {
    case Fp4E4m3Thin::kTokens:
        if (thin_four() || few_ctas(g, Fp4E4m3ThinFour::kTokens, kThinFourLaunchCtasPerSm))
            return launch_typed<typename Shapes::ThinFour, true>(g);
        return launch_typed<typename Shapes::Thin, true>(g);
    case Fp4E4m3Narrow::kTokens:
        return fewer_ctas() ? launch_typed<typename Shapes::NarrowFewer, true>(g) : launch_typed<typename Shapes::Narrow, true>(g);
    case Fp4E4m3Mid::kTokens: return launch_typed<typename Shapes::Mid, true>(g);
    default: return launch_typed<typename Shapes::Wide, true>(g);
    }
}

// A launch of shape S, folding per 128-wide block where the launch is scaled.
template <class S>
cudaError_t launch_scaled_or_not(const GroupedGemmLaunch& g) {
    return g.scaled ? launch_typed<S, true>(g) : launch_typed<S, false>(g);
}

}  // namespace

cudaError_t launch_decode_sm90(const GroupedGemmLaunch& g) {
    switch (g.code) {
    case WeightCode::Bf16:
        switch (decode_tokens(g)) {
        case Bf16Wider::kTokens: return launch_scaled_or_not<Bf16Wider>(g);
        case Bf16Wide::kTokens: return launch_scaled_or_not<Bf16Wide>(g);
        default: break;
        }
        if (few_ctas(g, Bf16Deep::kTokens, kBf16DeepLaunchCtasPerSm))
            return launch_scaled_or_not<Bf16Deep>(g);
        return fewer_ctas() ? launch_scaled_or_not<Bf16DecodeFewer>(g) : launch_scaled_or_not<Bf16Decode>(g);
    case WeightCode::Fp8:
        switch (decode_tokens(g)) {
        case Fp8Thin::kTokens: return launch_typed<Fp8Thin, true>(g);
        case Fp8Wider::kTokens: return launch_typed<Fp8Wider, true>(g);
        default: return fewer_ctas() ? launch_typed<Fp8DecodeFewer, true>(g) : launch_typed<Fp8Decode, true>(g);
        }
    case WeightCode::Fp4:
        if (!g.a_fp8) return launch_scaled_or_not<Fp4Decode>(g);
        return g.fp4_block_exact ? launch_fp4_e4m3<true>(g) : launch_fp4_e4m3<false>(g);
    }
    return cudaErrorInvalidValue;
}

int hopper_decode_ctas_per_sm(WeightCode code) {
    switch (code) {
    case WeightCode::Bf16: return fewer_ctas() ? ctas_per_sm<Bf16DecodeFewer>() : ctas_per_sm<Bf16Decode>();
    case WeightCode::Fp8: return fewer_ctas() ? ctas_per_sm<Fp8DecodeFewer>() : ctas_per_sm<Fp8Decode>();
    case WeightCode::Fp4: return ctas_per_sm<Fp4Decode>();
    }
    return 0;
}

FewCtaShape hopper_few_cta_shape(WeightCode code, bool a_fp8) {
    if (!deep_stages()) return {};
    if (code == WeightCode::Bf16 && !a_fp8) return {ctas_per_sm<Bf16Deep>(), kBf16DeepLaunchCtasPerSm};
    if (code == WeightCode::Fp4 && a_fp8 && !thin_four()) return {ctas_per_sm<Fp4E4m3ThinFour>(), kThinFourLaunchCtasPerSm};
    return {};
}

int hopper_fp4_e4m3_ctas_per_sm(int tokens) {
    switch (tokens) {
    case Fp4E4m3Thin::kTokens: return thin_four() ? ctas_per_sm<Fp4E4m3ThinFour>() : ctas_per_sm<Fp4E4m3Thin>();
    case Fp4E4m3Narrow::kTokens: return fewer_ctas() ? ctas_per_sm<Fp4E4m3NarrowFewer>() : ctas_per_sm<Fp4E4m3Narrow>();
    case Fp4E4m3Mid::kTokens: return ctas_per_sm<Fp4E4m3Mid>();
    case Fp4E4m3Wide::kTokens: return ctas_per_sm<Fp4E4m3Wide>();
    }
    return 0;
}

}  // namespace steadymoe::cuda
