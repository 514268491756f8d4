#include "grouped_gemm_sm90.hpp"
#include "async_barrier.cuh"
#include "dependent_launch.cuh"
#include "env_switch.hpp"
#include "grouped_gemm_sm90_cta.cuh"
#include "grouped_gemm_stage.cuh"
#include "per_device.hpp"
#include "tensor_map.hpp"
#include "wgmma.cuh"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

namespace steadymoe::cuda {

namespace {

using namespace stage;
using namespace wgmma;
using namespace sm90;

// Warp-specialised: warps 0-7 (two warpgroups, 64 rows each; three, warps 0-11, for tall tiles: kWG 3 below)
// run the MMAs, the next warp streams the stages.
// A stage is refilled once every consumer warp has released it, so weight bytes keep flowing while the
// tensor cores work, with no block-wide barrier per stage.
// kFp8A: e4m3 activations and FP8 weights, both read by FP8 MMAs as they arrive (no widening). Their partial
// sums are folded once per 128-wide block, as for bf16: folding each MMA's k32 sum on its own halved the FP8
// tensor cores' rounding error but cost 25-45% of the speed
// (bench/results/2026-12-01-cuda-fp8-tensor-cores.md). The two warpgroups fold a block at about the same
// time; issuing their MMAs in turn through two named barriers, so that one's fold ran beside the other's
// MMAs, took deepseek-v3's gate/up 0.5-0.9% and its down GEMM 3% more time at 16384 tokens (H100): not kept
// (bench/results/2026-12-05-cuda-route-and-permute.md). In turn by completion (warpgroup 1 issuing a block's
// MMAs once warpgroup 0's were done, and the reverse): deepseek-v3's gate/up 0.9-1.2% more, its down GEMM
// level, deepseek-v4-flash's fp8 gate/up 2.1% less in one pair, not kept
// (bench/results/2026-12-06-cuda-prefill-bounds.md). Taken apart with the GPU to themselves (the shared
// expert after them), deepseek-v3's gate/up took 0.80 of its time with no copies and no folds and 0.77 with
// the copies alone, and its tensor pipe was busy 44% of the time (in a diagnostic build), where two
// warpgroups issuing these MMAs from these stages with nothing else reach the peak per cycle: the copies, the
// loop around the MMAs (its other instructions held more of the consumers' samples than their waits for MMAs
// or data) and the parked epilogue (which the consumers waited for most with no copies and no folds) each
// keep it from the peak (bench/results/2026-12-06-cuda-probes-and-release.md). Nor folding a block's sums
// while the next block's MMAs ran into a second set of 64 (the consumers took registers from the producer's
// warpgroup with setmaxnreg, blocks in runs of four so that no MMA was in flight at a loop's back edge): the
// same bits, gate/up 1.6-3.0% and down GEMM 3.4-3.5% slower at 16384 tokens, level at 1024 (H100), slower too
// where parked SwiGLU outputs left six stages (bench/results/2026-12-05-cuda-fold-behind.md). One stage fewer
// (three) cost the gate/up 0.4-2.3%, within those runs' noise. Releasing a block's stage before its fold
// (which works from registers) took deepseek-v3's gate/up 3.4% and its down GEMM 2.0% less time in a
// diagnostic build (bench/results/2026-12-06-cuda-prefill-bounds.md); written plainly, ptxas moved the fold's
// FMAs above the release's lane-0 branch. In a form that keeps the order in the machine code (an elect.sync
// arrive with no branch) it was no faster against this code on one H100: deepseek-v3's gate/up level, its
// down GEMM 1.6-3.4% slower (bench/results/2026-12-06-cuda-probes-and-release.md, which keeps the patch): not
// kept. Tall tiles (kWG 3), whose consumers wait for data 16-18% of their time and their producer for
// released stages a third of its, do release before the fold (release_elected below): deepseek-v3's routed
// experts took 0.2% less time and its layer 0.3-0.4% less in both of two pairs at 16384 tokens,
// deepseek-v4-flash's fp8 experts 0.3% less in one (H100, bench/results/2026-12-06-cuda-route-kernels.md).
// Two more changes, each measured on one H100 (bench/results/2026-12-06-cuda-loop-ladder.md, which
// keeps both patches), were not kept either. Carrying the operand descriptors from one stage to the next (a
// stage's bytes / 16 on, wrapping at the ring's end), where ptxas rebuilds stage 0's descriptors from the
// shared-memory address every block (about 14 uniform instructions before the first MMA): deepseek-v3's
// gate/up 0.2-0.9% faster, its down GEMM 0.9% faster in one pair and 2.8% slower in the other, the routed
// experts level, and two block-exact FP4 kernels spilled. Testing the next stage's full barrier while a
// block's MMAs ran, so that the next block skipped its try-wait where the stage had landed (scaled kernels
// that convert no FP4 blocks; in the loop ladder probe it took the handshake level from 0.598 to 0.636 of the
// peak): deepseek-v3's gate/up 2.8-2.9% and its down GEMM 1.7-1.8% slower.
// kPersistent: a CTA per SM (grid.x of them) walks the launch's (tile, n-block, split) items, every
// grid.x-th, with one pipeline across them: the producer loads the next item's stages while the consumers
// finish the last one and run its epilogue (from registers: the stages are not free for one; or parked, see
// kParked below). The items and their arithmetic are the same as one CTA each; only who computes them
// differs. Items handed out in turn from a counter, in groups of 8 row tiles (an n-block over the group's
// tiles, so that the CTAs running together read the same weights), took deepseek-v3's gate/up 1-6% less time
// and its down GEMM 10-17% more at 16384 tokens, qwen3's the same: not kept
// (bench/results/2026-12-02-cuda-decode-occupancy.md). Items by expert (each n-block over the expert's
// tiles in turn, from the permutation's tile offsets) took deepseek-v3's gate/up 7% more, and a lookup that
// skipped the tile count's load 3.3% more (the kernel's registers rose from 141 to 158): not kept
// (bench/results/2026-12-05-cuda-switched-paths.md).
// rows_map / by_map: activation rows by tensor copies (the map's box is the CTA's rows), where by_map.
// scales_map / scales_by_map: block-major row scales by tensor copies (the map's box is the CTA's rows and
// four more: kFragmentScaleAt), where scales_by_map (StageProducer).
// paired (persistent, by_map, launched in clusters of two): the two CTAs of a cluster take the two
// n-blocks of one (tile, n-block pair) item at a time, so they read the same rows: each copies half of a
// stage's rows (the map's box is half the CTA's rows) into both CTAs' shared memory, and a stage is
// refilled once the consumers of both have released it. Each CTA reads half the row bytes from L2: at
// 16384 tokens 4% off qwen3's gate/up GEMM, 1% off deepseek-v3's
// (bench/results/2026-12-02-cuda-prefill-clusters.md).
// kQuad (persistent, by_map, launched in clusters of four; on request, measured slower: quad_ctas): two such
// pairs take the two row tiles of a (tile pair, n-block pair) item; where both tiles hold rows of one expert,
// the two CTAs of an n-block read the same weights, and each copies half of a stage's weights into both. A
// stage is refilled once the consumers of all four have released it.
// kWeightPair (persistent, by_map, launched in clusters of two; where a weight column is long, and for
// block-exact FP4 weights only where asked: weight_pairs): the two CTAs of a cluster take the two row tiles of
// a (tile pair, n-block) item, each copying all of its own rows; where both tiles hold rows of one expert,
// each copies half of a stage's weights into both, as clusters of four do (block-exact FP4: one of a block's
// two stored halves each, and each CTA converts its own copy). Rows are a tile's own (the smaller stream: an
// expert's rows are read by every n-block of it while they sit in L2), weights are shared (the larger: read
// once a pair where a CTA each read them before).
// kParked (persistent only): parked epilogues (grouped_gemm_sm90_cta.cuh). At an item's end the consumers park
// its results and go on to the next item's MMAs while three more warps run its epilogue: the tensor cores no
// longer wait for every epilogue.
// kWG 3 (tall tiles: e4m3 rows meeting FP8 or block-exact FP4 weights in 192-row tiles;
// grouped_gemm_tall_tile_rows): three consumer warpgroups, persistent with parked epilogues only. The producer
// warp and the epilogue warps make a fourth warpgroup that gives registers up for the consumers (setmaxnreg:
// 128 a thread at launch, 144 for the consumers and 80 for the others after), in a branch of its own so that
// ptxas honours it. In the loop ladder probe three warpgroups reached 0.81-0.83 of the e4m3 peak per SM cycle
// with their stages copied, where two reached 0.60-0.65. In the kernels deepseek-v3's routed experts took
// 2.4-3.1% less time at 16384 tokens (shared expert after); the gate/up's tensor pipe was busy 52.9% of its
// time against 52.2%, its L2 75% busy and its DRAM 60% (bench/results/2026-12-06-cuda-tall-tiles.md).
// kForm (parked): what is parked (grouped_gemm_sm90_cta.cuh). F32Results: the results, which the epilogue
// warps take through the launch's epilogue. ScatterBf16 (scatters into bf16 rows: parked_scatter): the bf16
// values the scatter stores, which the epilogue warps copy to their destinations. SwiGluBf16 (SwiGLU rounded
// to bf16: parked_swiglu): the consumers' SwiGLU outputs, which the epilogue warps store.
// kWide (unscaled bf16, persistent, epilogues from registers; on request: wide_ctas): items of 256 features,
// one m64n256 MMA a k step over two n-tiles' weight tiles.
// Block-exact FP4 weights meeting e4m3 activations in batches other than decode ones (kConverts:
// hopper_fp4_exact_tiled): the FP8 path's MMAs and folds on each stage's block converted to FP8 weights'
// tiles, by the consumers of 128-row tiles and by two of the epilogue warps of tall ones (the third drains
// every parked item), which hand each converted tile over through a barrier of its own. Where two of the three
// consumer warpgroups converted, the tall kernels spilled and took 43% more time than 128-row tiles
// (bench/results/2026-12-06-cuda-tall-swiglu.md).
template <int kWG, bool kParked>
constexpr int kCtaThreads = Cta<kWG>::kThreads + (kParked ? 32 * kEpilogueWarps : 0);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Thread t's share, of kThreads converting, of a stage's block-exact FP4 block (fp4_exact_tiles.hpp: a
// thread's share is rows of a half and sub-tile) converted into a spare tile, and the block's two weight
// scales where the fold reads them, as FP8 weights' stages hold them (CTAs of kRows rows). The two consumer
// warpgroups of 128-row tiles convert, a row each; on tall tiles two of the epilogue warps, four rows each
// (the consumers' registers held the conversion's values only by spilling): a thread's row of each half and
// sub-tile in turn, each row's place no longer found from a thread index (115 instructions a row in the loop,
// where four rows found from t + 64 i took 155). Block-exact deepseek-v4-flash's routed experts then took
// 8.6% less time at 16384 tokens and 8.5% less at 8192 (shared expert after, on one H100); at 8192 tokens
// 6.0% less than on 128-row tiles (measured without this change), where they had taken 2.8% more
// (bench/results/2026-12-06-cuda-per32-profile.md).
template <class L, int kRows, int kThreads>
__device__ __forceinline__ void convert_stage(char* stage, char* tile, int t) {
    const uint8_t* stored = reinterpret_cast<const uint8_t*>(stage + L::kSub * L::kA);
    float* scales = reinterpret_cast<float*>(stage + L::kScales) + kFragmentScaleAt<kRows>;
    if constexpr (kThreads == fp4_tiles::kConvertThreads) {
        fp4_tiles::convert_row(stored, reinterpret_cast<uint8_t*>(tile), scales, t);
    } else {
        // (a thread per row of a half: its row of both halves' two sub-tiles, one after the other)
        static_assert(kThreads == fp4_tiles::kHalfRows);
#pragma unroll 1  // (the epilogue warps' 80 registers hold one row's values, not four)
        for (int i = 0; i < 4; ++i)
            fp4_tiles::convert_half_row(stored, reinterpret_cast<uint8_t*>(tile), scales, i / 2, i % 2, t);
    }
}
#endif

template <WeightCode kCode, bool kScaled, bool kFp8A, int kWG, int kPerSm, bool kPersistent, bool kParked = false, bool kWide = false,
          bool kQuad = false, ParkedForm kForm = ParkedForm::F32Results, bool kWeightPair = false>
__global__ void __launch_bounds__(kCtaThreads<kWG, kParked>, kPerSm)
    grouped_gemm_sm90_kernel(const GroupedGemmLaunch g, const __grid_constant__ CUtensorMap rows_map,
                             const __grid_constant__ CUtensorMap scales_map, const bool by_map, const bool scales_by_map,
                             const bool paired) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(!kFp8A || (kCode != WeightCode::Bf16 && kScaled));
    constexpr bool kConvert = kConverts<kCode, kFp8A>;  // block-exact FP4 weights, converted per stage
    // Tall tiles' blocks are converted by kConvertWarps of the epilogue warps (convert_stage), the others'
    // by the consumers; the epilogue warps left drain the parked items.
    static_assert(!kConvert || kWG >= 2, "a block is converted by a thread per row of each half and sub-tile, or four");
    constexpr bool kWarpsConvert = kWarpsConvertBlocks<kCode, kFp8A, kWG>;
    constexpr int kDrainWarps = kWarpsConvert ? 1 : kEpilogueWarps, kConvertWarps = kEpilogueWarps - kDrainWarps;
    static_assert(!kPersistent || kWG >= 2);
    static_assert(!kParked || kPersistent);
    static_assert(!kWide || (kCode == WeightCode::Bf16 && !kScaled && !kFp8A && kWG == 2 && kPersistent && !kParked),
                  "wide CTAs: unscaled bf16, persistent, epilogues from registers");
    static_assert(!kQuad || (kPersistent && kWeightsInOneRun<kCode, kFp8A, kWide>), "clusters of four: persistent, weights in one run");
    static_assert(
        !kWeightPair || (kPersistent && kSharedWeightStages<kCode, kScaled, kFp8A, kWide> && !kQuad),
        "weight pairs: persistent, weights in one run or two converted halves");
    static_assert(kWG < 3 || ((kCode == WeightCode::Fp8 || kConvert) && kFp8A && kParked && !kQuad),
                  "three-warpgroup CTAs: e4m3 rows meeting FP8 or block-exact FP4 weights, parked epilogues (their warps "
                  "fill the fourth warpgroup)");
    constexpr bool kTilePairs = kQuad || kWeightPair;  // a cluster takes two row tiles of an item
    static_assert(kForm == ParkedForm::F32Results || kParked, "parked scatters and SwiGLU outputs are parked epilogues");
    constexpr bool kParkBf16 = kForm == ParkedForm::ScatterBf16, kParkSwiGlu = kForm == ParkedForm::SwiGluBf16;
    constexpr int kCols = kWide ? 2 * kTileN : kTileN, kAcc = kCols / 2;  // features a CTA's item takes
    constexpr int kThreads = kCtaThreads<kWG, kParked>;
    constexpr bool kWiden = kWidens<kCode, kFp8A>;
    constexpr int kARowBytes = a_row_bytes(kFp8A);
    constexpr int kRows = Cta<kWG>::kRows, kConsumers = Cta<kWG>::kConsumers, kConsumerWarps = Cta<kWG>::kConsumerWarps;
    using L = StageLayout<kCode, kFp8A, kWG, kWide>;
    static_assert(!kWiden || (L::kSub == 1 && kWG == 2));
    // The tiles come from the permutation's output. The next kernel may start once every CTA is at its
    // (last) epilogue: where every CTA let it start at once, a many-wave launch's next kernel sat on SMs
    // waiting for the whole last wave, and deepseek-v3's layer at 128 tokens took 2.6% longer than with
    // plain launches; from the epilogue, as fast as plain launches
    // (bench/results/2026-12-02-cuda-dependent-launches.md).
    wait_for_prior_kernels();
    // The work: this CTA's tile, or (persistent) items first, first + step, ... of every item. A clustered
    // CTA's items are its cluster's: in pairs it takes n-block 2j + (rank & 1) of an item's n-block pair j,
    // in clusters of four that and row tile 2i + (rank >> 1) of the item's tile pair i, in weight pairs row
    // tile 2i + rank of the item's tile pair i.
    const int n_blocks = int((g.n + kCols - 1) / kCols), tiles = kPersistent ? tile_count(g) : 1;
    // (kQuad: launched in clusters of four; kWeightPair, or else where paired: in clusters of two)
    const int rank = kTilePairs || (kPersistent && paired) ? int(barrier::cluster_rank()) : -1;
    const int pair_rank = kQuad ? rank & 1 : kWeightPair ? -1 : rank;  // which n-block of a pair
    const int tile_half = kQuad ? rank >> 1 : kWeightPair ? rank : -1;  // which row tile of a pair
    const int n_items = pair_rank >= 0 ? n_blocks / 2 : n_blocks, units = kQuad ? 4 : rank >= 0 ? 2 : 1;
    const int tile_items = kTilePairs ? (tiles + 1) / 2 : tiles;
    const int items = kPersistent ? tile_items * n_items * g.k_splits : 1;
    const int first = kPersistent ? int(blockIdx.x) / units : 0, step = kPersistent ? int(gridDim.x) / units : 1;
    // (kTilePairs) this CTA's row tile of the tile pair of rest = w / n_items
    auto paired_tile = [&](int rest) { return 2 * (rest % tile_items) + tile_half; };
    auto item_tile = [&](int w) -> Tile {
        if constexpr (kPersistent) {
            const int rest = w / n_items, n_block = pair_rank >= 0 ? 2 * (w % n_items) + pair_rank : w % n_items;
            Tile t = tile_at(g, kTilePairs ? paired_tile(rest) : rest % tiles, kWide ? 2 * n_block : n_block, rest / tile_items);  // (n0: 128 a block)
            if (kTilePairs && t.rows == 0) {
                // An odd tile count's last tile has no partner: its CTA runs every stage all the same
                // (its cluster waits for its releases; in clusters of four the others copy into its
                // stages), on no rows, copying its partner's expert's weights (found in L2 then, where
                // another expert's would come from DRAM).
                t.expert = tile_at(g, paired_tile(rest) ^ 1, 0, 0).expert;
                t.n0 = n_block * kTileN, t.split = rest / tile_items;
                t.ktiles = int(g.k / kBK) / g.k_splits, t.kt0 = t.split * t.ktiles;
            }
            return t;
        } else {
            return hopper_tile<kWG>(g);
        }
    };
    if (first >= items) return;
    const Tile t0 = item_tile(first);
    if (t0.rows == 0 && !kTilePairs) return;
    extern __shared__ __align__(128) char smem_raw[];
    char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    constexpr int kStageBytes = L::kBytes;
    constexpr int kS = kParked ? kParkedStages<kCode, kFp8A, kForm, kWG> : kStages<kCode, kFp8A, kWG, kPerSm, kWide>;
    static_assert(kPersistent || kConsumerWarps * 16 * kParkLd * 4 <= kS * kStageBytes, "one-item CTAs' epilogue block fits in the stages");
    // Spare tiles, bf16 (converted: e4m3): two, one may still be read by the previous MMAs; tall tiles'
    // converted blocks kSpareTileCount.
    char* widened = smem + kS * kStageBytes;
    constexpr int kSpares = kSpareTileCount<kCode, kFp8A, kForm, kWG>;
    float* parked_block = reinterpret_cast<float*>(widened + kSpares * kBTileBytes);
    uint64_t* full = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(parked_block) + (kParked ? kParkBytesOf<kForm, kRows> : 0));
    uint64_t* empty = full + kS;
    // (kWarpsConvert) a barrier a spare tile: its block is converted, for the consumers
    uint64_t* converted_bars = empty + kS;
    // Parked epilogues hand each item over through two named barriers that every consumer and epilogue
    // thread meets: the consumers arrive at kParkedBarrier once they have parked an item's results, where
    // the epilogue warps wait; the epilogue warps wait at kDrainedBarrier once done with them (all but the
    // last item), as the consumers do before parking the next item's. Waiting there costs the epilogue warps
    // nothing (the next item is parked after it anyway), and racecheck reports fewer of its false hazards
    // for it than for an arrival or for mbarriers (bench/results/2026-12-05-cuda-named-handoff.md). With
    // the consumers waiting at kParkedBarrier too, it reported 95% fewer, not none, and qwen3's down GEMM
    // took 2-3% more time: not kept (bench/results/2026-12-05-cuda-route-and-permute.md). Id 1 is the
    // consumers' own barrier.
    constexpr int kParkedBarrier = 2, kDrainedBarrier = 3, kHandOffThreads = kConsumers + 32 * kDrainWarps;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kS; ++s) {
            barrier::init(&full[s], kFullArrivals);
            barrier::init(&empty[s], kConsumerWarps * units);
        }
        if constexpr (kWarpsConvert)
            for (int b = 0; b < kSpares; ++b) barrier::init(&converted_bars[b], 32 * kConvertWarps);
        barrier::fence_init();
    }
    if constexpr (kPersistent) {
        // Every row past the first item's is zeroed, with its scales (unless tensor copies bring those), before
        // the producer starts: its loads for later items may land in those rows of any stage (see the
        // consumers' zeroing below).
        for (int s = 0; s < kS; ++s) {
            char* stage = smem + s * kStageBytes;
            for (int h = 0; h < L::kSub && !by_map; ++h)  // tensor copies fill every row themselves
                for (int c = threadIdx.x; c < (kRows - t0.rows) * (kARowBytes / 16); c += kThreads)
                    *reinterpret_cast<uint4*>(stage + h * L::kA + t0.rows * kARowBytes + c * 16) = make_uint4(0, 0, 0, 0);
            if constexpr (kScaled)
                for (int row = t0.rows + threadIdx.x; row < kRows && !scales_by_map; row += kThreads)
                    reinterpret_cast<float*>(stage + L::kScales)[row] = 0.0f;
        }
        fence_async_shared();
    }
    if (rank >= 0) barrier::cluster_sync();  // the other CTAs' barriers are ready for this one's copies
    else __syncthreads();

    // Role and liveness go through a shuffle so the compiler sees them as warp-uniform: wgmma in a path
    // it thinks divergent gets serialised (each MMA waits for the one before).
    const int lane = threadIdx.x & 31;
    const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
    const int warp_id = __shfl_sync(0xffffffffu, int(threadIdx.x) / 32, 0);
    // Stages are counted across items (c): stage s = c % kS, in phase c / kS of its barriers (kept as
    // the stage and the phase's parity: the loops stay free of divisions).
    const uint32_t full_at = barrier::shared_address(full), empty_at = barrier::shared_address(empty),
                   converted_at = barrier::shared_address(converted_bars);
    if (warp_id >= kConsumerWarps) {  // the producer warp, then (parked) the epilogue warps
        // (one branch for the warps that give registers up: ptxas keeps the count at entry for code that
        // warps giving them up might reach)
        if constexpr (kWG == 3) give_registers<kTallOtherRegisters>();
        if constexpr (kParked) {
            // an epilogue warp: each item's, in turn, once its results are parked
            if (warp_id > kConsumerWarps) {
                const int e = warp_id - kConsumerWarps - 1;
                if constexpr (kWarpsConvert) {
                    if (e >= kDrainWarps) {
                        // a converting warp: every block of every item, in the producer's order, into spare tile
                        // c % kSpares (c counts blocks) once its copy has landed and the consumers' MMAs of block
                        // c - kSpares, which read that tile, are done (they release its stage then: its empty
                        // barrier's phase); each thread then arrives at the tile's converted barrier. (A stage's
                        // empty barrier reaches that phase's successor only once block c - kSpares + kS is
                        // converted: with kSpares <= kS never before this wait.)
                        static_assert(kSpares >= 2 && kSpares <= kS);
                        const int t_conv = (e - kDrainWarps) * 32 + lane;
                        // block c's stage and tile, block c - kSpares's stage; the stages' phases' parities
                        // (block -kSpares: round -1)
                        int s = 0, s_before = kS - kSpares, spare = 0, c = 0;
                        uint32_t parity = 0, parity_before = 1;
                        for (int w = first; w < items; w += step) {
                            const Tile t = w == first ? t0 : item_tile(w);
                            for (int kt = 0; kt < t.ktiles / L::kSub; ++kt, ++c) {
                                barrier::wait(full_at + 8 * s, parity);
                                if (c >= kSpares) barrier::wait(empty_at + 8 * s_before, parity_before);
                                convert_stage<L, kRows, 32 * kConvertWarps>(smem + s * kStageBytes,
                                                                            widened + spare * kBTileBytes, t_conv);
                                fence_async_shared();  // the converted tile, for the MMAs' (async) proxy
                                barrier::arrive(converted_at + 8 * spare);
                                if (++spare == kSpares) spare = 0;
                                if (++s == kS) s = 0, parity ^= 1;
                                if (++s_before == kS) s_before = 0, parity_before ^= 1;
                            }
                        }
                        if (rank >= 0) barrier::cluster_sync();  // see the consumers' end
                        return;
                    }
                }
                // (where other warps convert, the one epilogue warp drains every part of each item)
                const auto drain = [&](const Tile& t, int part) {
                    if constexpr (kParkBf16)
                        drain_parked_scatter(g, t, reinterpret_cast<const uint16_t*>(parked_block), part, lane);
                    else if constexpr (kParkSwiGlu)
                        drain_parked_swiglu(g, t, reinterpret_cast<const uint16_t*>(parked_block), part, lane);
                    else
                        drain_parked<kRows>(g, t, parked_block, part, lane);
                };
                for (int w = first; w < items; w += step) {
                    const Tile t = w == first ? t0 : item_tile(w);
                    barrier::sync_threads(kParkedBarrier, kHandOffThreads);
                    if constexpr (kWarpsConvert)
                        for (int part = 0; part < kEpilogueWarps; ++part) drain(t, part);
                    else
                        drain(t, e);
                    __syncwarp();
                    if (w + step < items) barrier::sync_threads(kDrainedBarrier, kHandOffThreads);
                }
                if (rank >= 0) barrier::cluster_sync();  // see the consumers' end
                return;
            }
        }
        // the producer warp
        int s = 0;
        uint32_t parity = 0, rounds = 0;  // the phase's parity; whether a round of kS stages has passed
        for (int w = first; w < items; w += step) {
            const Tile t = w == first ? t0 : item_tile(w);
            SharedCopies halves;  // (row_half: -1 unless clustered)
            halves.row_half = pair_rank, halves.row_ctas = kQuad ? uint16_t(0b11 << (rank & 2)) : uint16_t(0b11);
            if constexpr (kTilePairs) {  // the item's other tile holds rows of the same expert: its weights are this one's
                const Tile other = tile_at(g, paired_tile(w / n_items) ^ 1, 0, 0);
                if (t.rows > 0 && other.rows > 0 && other.expert == t.expert)
                    halves.weight_half = tile_half, halves.weight_ctas = kQuad ? uint16_t(0b101 << pair_rank) : uint16_t(0b11);
            }
            const StageProducer<kCode, kScaled, kFp8A, kWG, kWide> producer(g, t, lane, by_map ? &rows_map : nullptr, halves,
                                                                            scales_by_map ? &scales_map : nullptr);
            const int ktiles = t.ktiles / L::kSub;  // stages (a split's k range is a multiple of 128)
            for (int kt = 0; kt < ktiles; ++kt) {
                if (rounds) barrier::wait(empty_at + 8 * s, parity ^ 1);
                producer.load(smem + s * kStageBytes, t.kt0 / L::kSub + kt, &full[s]);
                if (++s == kS) s = 0, parity ^= 1, rounds = 1;
            }
        }
        if (rank >= 0) barrier::cluster_sync();  // see the consumers' end
        return;
    }
    if constexpr (kWG == 3) take_registers<kTallConsumerRegisters>();

    const int warp = (threadIdx.x / 32) & 3;

    // Rows the live warpgroups read but no token fills are zeroed once in every stage, with their
    // scales (a row's products never reach another row, but the MMAs and folds should not read
    // uninitialised memory). The producer never writes them for this tile, so this runs alongside its
    // first loads. (Persistent CTAs zeroed them before the producer started; a later item may find
    // an earlier item's rows there, whose products stay in rows the epilogue skips.)
    // Tensor copies fill every row of the box themselves (the scales too where they come so).
    const int read_rows = kPersistent ? t0.rows : t0.rows <= 64 ? 64 : kRows, zeroed_a_rows = by_map ? t0.rows : read_rows;
    for (int s = 0; s < kS; ++s) {
        char* stage = smem + s * kStageBytes;
        for (int h = 0; h < L::kSub; ++h)
            for (int c = threadIdx.x; c < (zeroed_a_rows - t0.rows) * (kARowBytes / 16); c += kConsumers)
                *reinterpret_cast<uint4*>(stage + h * L::kA + t0.rows * kARowBytes + c * 16) = make_uint4(0, 0, 0, 0);
        if constexpr (kScaled)
            for (int row = t0.rows + threadIdx.x; row < read_rows && !scales_by_map; row += kConsumers)
                reinterpret_cast<float*>(stage + L::kScales)[row] = 0.0f;
    }
    fence_async_shared();
    barrier::sync_threads(1, kConsumers);

    // A warp is done with a stage once its MMAs have read it and (scaled) its block's scales are loaded
    // (block_scales); clustered, it tells every CTA's producer (those copy rows or weights into this CTA's
    // stage).
    auto release = [&](int s) {
        __syncwarp();
        if (lane == 0) {
            barrier::arrive(empty_at + 8 * s);
            if (rank >= 0) barrier::arrive_in(empty_at + 8 * s, uint32_t(rank ^ 1));
            if constexpr (kQuad) barrier::arrive_in(empty_at + 8 * s, uint32_t(rank ^ 2)), barrier::arrive_in(empty_at + 8 * s, uint32_t(rank ^ 3));
        }
    };
    // release's arrivals with no branch (barrier::warp_arrive). Tall tiles release a block's stage so,
    // before its fold: behind a lane-0 branch ptxas moves the fold's FMAs above the arrival. Never in
    // clusters of four (kQuad): tall tiles are not quads.
    auto release_elected = [&](int s) {
        __syncwarp();
        if (rank < 0) barrier::warp_arrive(empty_at + 8 * s);
        else barrier::warp_arrive(empty_at + 8 * s, rank ^ 1);
    };
    // Stage 0's operand descriptors: stage s's are s * kStageBytes / 16 on.
    constexpr int kAtom = kFp8A ? 512 : 1024;
    const uint64_t desc_a0 = smem_descriptor<kAtom>(smem + wg * 64 * kARowBytes), desc_b0 = smem_descriptor<kAtom>(smem + L::kSub * L::kA);
    int s = 0, last = kS - 1;  // this stage and the one before
    uint32_t parity = 0;
    int spare = 0;        // converted: the spare tile that this stage's block takes (they alternate, across items too)
    uint32_t spare_parity = 0;  // kWarpsConvert: the phase's parity of the spare's converted barrier
    bool converted = false;  // converted: whether this thread converted its rows of this stage's block already
    Tile t = t0;
    for (int w = first; w < items; w += step) {
        // The next item's tile is read from global memory now and used an item later (persistent CTAs): its
        // loads no longer hold up the item's first MMAs.
        const Tile next = kPersistent && w + step < items ? item_tile(w + step) : t;
        const int ktiles = t.ktiles / L::kSub;
        // Warpgroup-uniform: a warpgroup of padding rows skips its MMAs.
        const bool live = __shfl_sync(0xffffffffu, int(wg * 64 < t.rows), 0) != 0;
        // Where the tile's row 0 lies among a stage's row scales (kFragmentScaleAt).
        const int scale_shift = scales_by_map ? t.row0 & 3 : 0;
        // Parked scatters and SwiGLU outputs: this thread's two rows' routing weights (SwiGLU's where the
        // launch has them: 1 else, as epilogue_row's), asked for now and used after the MMAs.
        [[maybe_unused]] float row_weights[2] = {0.0f, 0.0f};
        if constexpr (kParkBf16 || kParkSwiGlu) {
            const int row = wg * 64 + warp * 16 + (lane >> 2);
#pragma unroll
            for (int h = 0; h < 2; ++h)
                if (row + 8 * h < t.rows) row_weights[h] = kParkSwiGlu && !g.row_weight ? 1.0f : g.row_weight[t.row0 + row + 8 * h];
        }
        float acc[kAcc];
        float total[kScaled ? 64 : 1];
#pragma unroll
        for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
#pragma unroll
        for (int i = 0; i < (kScaled ? 64 : 1); ++i) total[i] = 0.0f;

        for (int kt = 0; kt < ktiles; ++kt) {
            barrier::wait(full_at + 8 * s, parity);
            // The producer's cp.async rows, for the MMAs' (async) proxy. Tensor and bulk copies write
            // through that proxy already (and the folds' scale reads are ordinary loads): no fence then.
            if (!by_map) fence_async_shared();
            const char* stage = smem + s * kStageBytes;
            const uint64_t stage_offset = uint64_t(s * kStageBytes / 16);
            uint64_t desc_b = desc_b0 + stage_offset;
            if constexpr (kWiden) {
                barrier::sync_threads(1, kConsumers);  // both warpgroups are past the MMAs of the stage before the last
                char* target = widened + ((kS % 2 == 1 ? int(parity) : 0) ^ (s & 1)) * kBTileBytes;  // one stage's, the next's
                widen_stage<kCode, kConsumers>(stage + L::kA, target, (t.kt0 + kt) * kBK);
                desc_b = smem_descriptor<1024>(target);
                fence_async_shared();
                barrier::sync_threads(1, kConsumers);
            }
            if constexpr (kWarpsConvert) {
                // The converting warps' block (every consumer waits, live or not: the stage goes back to the
                // producer only once they are done with it)
                barrier::wait(converted_at + 8 * spare, spare_parity);
                desc_b = smem_descriptor<512>(widened + spare * kBTileBytes);
            } else if constexpr (kConvert) {
                // A block is converted while the MMAs of the block before it run (below) where its copy has
                // landed by then, else here (an item's first always). Past this barrier every thread's rows of it
                // are in its spare tile, and both warpgroups are past the MMAs of the block before (which read
                // the other spare tile).
                if (kt == 0 || !converted)
                    convert_stage<L, kRows, kConsumers>(smem + s * kStageBytes, widened + spare * kBTileBytes, int(threadIdx.x));
                fence_async_shared();  // the converted tile, for the MMAs' (async) proxy
                barrier::sync_threads(1, kConsumers);
                desc_b = smem_descriptor<512>(widened + spare * kBTileBytes);
            }
            if (live) {
                const uint64_t desc_a = desc_a0 + stage_offset;
                if constexpr (kFp8A) {
                    e4m3_stage_mmas<L::kA, kConvert ? fp4_tiles::kE4m3SubTileBytes : L::kB>(acc, desc_a, desc_b);
                } else {
                    fence_operands(acc);
                    wgmma_fence();
#pragma unroll
                    for (int ks = 0; ks < kBK / 16; ++ks) {  // +32 bytes
                        if constexpr (kWide) wgmma_m64n256k16(acc, desc_a + 2 * ks, desc_b + 2 * ks);
                        else wgmma_m64n128k16(acc, desc_a + 2 * ks, desc_b + 2 * ks);
                    }
                    wgmma_commit();
                }
            }
            if constexpr (kWarpsConvert) {
                if (++spare == kSpares) spare = 0, spare_parity ^= 1;
            } else if constexpr (kConvert) {
                // The next block, into the other spare tile, while this one's MMAs run — if its copy has landed:
                // waiting for it would hold this block's fold and its stage's release.
                spare ^= 1;
                const int next = s + 1 == kS ? 0 : s + 1;
                converted = kt + 1 < ktiles && barrier::completed(full_at + 8 * next, next == 0 ? parity ^ 1 : parity);
                if (converted)
                    convert_stage<L, kRows, kConsumers>(smem + next * kStageBytes, widened + spare * kBTileBytes, int(threadIdx.x));
            }
            if constexpr (kScaled) {
                if (L::kSub == 2 || (kt & 1)) {  // the end of a 128-wide block: fold its partial sums with their scales
                    if (live) {
                        // (the scales are read while the MMAs run)
                        const BlockScales scales = block_scales<kCode == WeightCode::Fp8 || kConvert, kRows>(
                            stage + L::kScales, kFp8A || g.a_scale, scale_shift + wg * 64 + warp * 16 + (lane >> 2));
                        wgmma_wait<0>();
                        fence_operands(acc);
                        if constexpr (kWG == 3) {
                            // (the fold works from registers: the stage goes back to the producer first)
                            if (L::kSub == 1) release_elected(last);
                            release_elected(s);
                        }
                        fold_block<kFp8A>(total, acc, scales);
                    }
                    if (kWG != 3 || !live) {
                        if (L::kSub == 1) release(last);
                        release(s);
                    }
                }
            } else {
                if (live) wgmma_wait<1>();
                if (kt > 0) release(last);
            }
            last = s;
            if (++s == kS) s = 0, parity ^= 1;
        }
        if (live) {
            wgmma_wait<0>();
            fence_operands(acc);
        }
        if constexpr (kPersistent) {
            if (!kScaled && ktiles > 0) release(last);  // the item's last stage: its MMAs are done
            if (w + step >= items) allow_next_kernel();
            if constexpr (kParked) {
                // The block is free once the epilogue warps are done with the item before.
                if (w != first) barrier::sync_threads(kDrainedBarrier, kHandOffThreads);
                if (live) {
                    const int row = wg * 64 + warp * 16 + (lane >> 2);
                    // (the totals of scaled launches, else the sums: parked CTAs take 128 features)
                    const float(&result)[64] = [&]() -> const float(&)[64] {
                        if constexpr (kScaled) return total;
                        else return acc;
                    }();
                    if constexpr (kParkBf16) {
                        park_scatter_bf16(reinterpret_cast<uint16_t*>(parked_block), result, row, lane, row_weights,
                                          !g.weight_before_down);
                    } else if constexpr (kParkSwiGlu) {
                        park_swiglu_bf16(reinterpret_cast<uint16_t*>(parked_block), result, row, lane, row_weights, g);
                    } else {
                        park_results(parked_block, result, row, lane);
                    }
                }
                __syncwarp();
                barrier::arrive_threads(kParkedBarrier, kHandOffThreads);
            } else if (live) {
                const int row = wg * 64 + warp * 16 + (lane >> 2);
                if constexpr (kScaled) epilogue_from_registers(g, t, total, row, lane);
                else epilogue_from_registers(g, t, acc, row, lane);
            }
            t = next;
            continue;
        }
        // Every MMA has read its stage and no copy is in flight: the stages are free for the epilogue.
        allow_next_kernel();
        barrier::sync_threads(1, kConsumers);
        if (!live) return;

        // Epilogue through shared memory: each warp parks its 16 x 128 block there with fixed register
        // indices, then one rolled loop applies the epilogue. Unrolled over the registers, the epilogue's
        // code would be a hundred kilobytes, fetched cold by every launch — longer than a decode GEMM's
        // whole weight stream. Accumulator layout: element 4j + r is row (lane/4 + 8*(r/2)) of the warp's
        // 16, feature (8j + 2*(lane%4) + r%2).
        constexpr int kLd = kParkLd;  // floats per parked row, padded as the parked block's
        float* block = reinterpret_cast<float*>(smem) + (wg * 4 + warp) * 16 * kLd;
        const float* result = kScaled ? total : acc;
#pragma unroll
        for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                block[((lane >> 2) + 8 * (r >> 1)) * kLd + 8 * j + 2 * (lane & 3) + (r & 1)] = result[4 * j + r];
        __syncwarp();
        const bool swiglu = g.epilogue == GemmEpilogue::SwiGlu;
#pragma unroll 1
        for (int row = 0; row < 16; ++row) {  // each lane takes pairs lane and lane + 32 of every row
            const EpilogueRow target = epilogue_row(g, t, wg * 64 + warp * 16 + row);
            if (target.row < 0) break;  // the tile's rows end here
            for (int col = 2 * lane; col < kTileN; col += 64) {
                if (swiglu && (col / 8) % 2 == 1) continue;  // an up fragment: read beside its gate fragment
                const float* v = block + row * kLd + col;
                const float* up = swiglu ? v + 8 : v;  // gate fragment 2f's up partner is fragment 2f + 1
                epilogue_pair(g, t, target, col, make_float2(v[0], v[1]), make_float2(up[0], up[1]));
            }
        }
    }  // items
    // A clustered CTA leaves only with the others: their consumers still arrive on this CTA's barriers.
    if (rank >= 0) barrier::cluster_sync();
#else
    __trap();  // wgmma needs sm_90a
#endif
}

template <WeightCode kCode, bool kFp8A, int kWG, int kPerSm, bool kParked = false, bool kWide = false,
          ParkedForm kForm = ParkedForm::F32Results>
constexpr int kSmemStages = kParked ? kParkedStages<kCode, kFp8A, kForm, kWG> : kStages<kCode, kFp8A, kWG, kPerSm, kWide>;
template <WeightCode kCode, bool kFp8A, int kWG, int kPerSm, bool kParked = false, bool kWide = false,
          ParkedForm kForm = ParkedForm::F32Results>
constexpr int kSmemBytes = kSmemStages<kCode, kFp8A, kWG, kPerSm, kParked, kWide, kForm> * StageLayout<kCode, kFp8A, kWG, kWide>::kBytes +
                           kSpareTileCount<kCode, kFp8A, kForm, kWG> * kBTileBytes + (kParked ? kParkBytesOf<kForm, Cta<kWG>::kRows> : 0) +
                           2 * kSmemStages<kCode, kFp8A, kWG, kPerSm, kParked, kWide, kForm> * int(sizeof(uint64_t)) +
                           (kWarpsConvertBlocks<kCode, kFp8A, kWG> ? kSpareTileCount<kCode, kFp8A, kForm, kWG> * int(sizeof(uint64_t)) : 0) +  // converted barriers
                           1024;  // barriers, alignment
static_assert(kSmemBytes<WeightCode::Fp8, true, 1, 2> == kSmemBytes<WeightCode::Bf16, false, 1, 2>);

// Whether activation rows (bf16 or e4m3) come by tensor copies where the launch says how many rows its
// input holds (the same bits either way); STEADYMOE_ROW_TENSOR_COPIES=0 keeps the producer warp's cp.async,
// to compare. Not in few-row launches: a copy brings the CTA's whole box of rows where cp.async brings only
// the tile's, and a decode tile holds a few (bench/results/2026-12-02-cuda-prefill-schedules.md).
bool row_tensor_copies(const GroupedGemmLaunch& g) {
    static const bool none = env_equals("STEADYMOE_ROW_TENSOR_COPIES", "0");
    return !none && g.a_rows > 0 && !g.few_rows;
}

// Whether STEADYMOE_PAIRED_CTAS=0 keeps every persistent CTA out of clusters (pairs_ctas, weight_pairs).
bool clusters_off() {
    static const bool none = env_equals("STEADYMOE_PAIRED_CTAS", "0");
    return none;
}

// Whether persistent launches pair their CTAs in clusters of two that share their rows' copies (the
// kernel's `paired`), where the rows come by tensor copies and the n-blocks pair up: the same bits either
// way; STEADYMOE_PAIRED_CTAS=0 keeps every CTA on its own (no weight pairs either: clusters_off), to compare.
bool pairs_ctas(const GroupedGemmLaunch& g, int n_blocks) {
    return !clusters_off() && row_tensor_copies(g) && n_blocks % 2 == 0;
}

// Whether such pairs take two row tiles of an item at a time, in clusters of four (the kernel's kQuad): where
// the two tiles hold rows of the same expert, each pair copies half of every stage's weights into both pairs'
// shared memory, as each CTA copies half of its rows into its pair's. STEADYMOE_QUAD_CTAS=1 asks for them, on
// the paths that have them (kQuadPath), unless STEADYMOE_WEIGHT_PAIRS=1 asks for weight pairs; the same bits
// either way. Off unless asked: on an H200 they halved deepseek-v3's routed gate/up DRAM reads at 16384
// tokens (31.2 to 14.8 GB) but ran 30 clusters (120 CTAs) where pairs run 132 CTAs, and took 9-12% more time,
// each working SM's tensor pipe as busy as before (bench/results/2026-12-05-cuda-parked-scatter.md).
bool quad_ctas() {
    static const bool on = env_equals("STEADYMOE_QUAD_CTAS", "1");
    return on;
}

// Whether persistent launches on kQuadPath's paths (and those whose SwiGLU outputs are parked, where the rows
// and weights are bf16 or the tiles tall, which never run in clusters of four; and those of block-exact FP4
// weights meeting e4m3 rows: kSharedWeightStages), with their rows by tensor copies, run in clusters of two
// that take two row tiles of an item and share the weights' copies (the kernel's kWeightPair); the same bits
// either way. Pairs that share the rows' copies read each weight block once a CTA; clusters of four share the
// weights too but left 12 SMs idle; clusters of two fit every SM. By default where a weight column's run in
// an item holds at least kWeightPairColumnBytes (k / k_splits x the weights' element bytes). On an H100 at
// 16384 tokens (bench/results/2026-12-05-cuda-weight-pairs.md) they took 6-9% off deepseek-v3's FP8 gate/up
// (7 KiB columns; DRAM reads 27.4 to 16.7 GB) and 5.4% off deepseek-v4-flash's (4 KiB), and took less time for
// deepseek-v3's bf16 down GEMM (4 KiB) in all three pairs run (the bench's split; with its gate/up in pairs
// too, the split gave the down GEMM more time in every run since, the routed experts 10-13% less); they made
// qwen3-30b-a3b's bf16 down GEMM (1.5 KiB) 3.1-3.7% slower, and deepseek-v3's FP8 down GEMM (2 KiB) from 0.8%
// faster to 6.5% slower. Parked SwiGLU outputs take them from kSwiGluWeightPairColumnBytes: with them
// qwen3-30b-a3b's bf16 gate/up (4 KiB) took 2.6-2.8% more time, and deepseek-v3's routed bf16 experts
// (gate/up 14 KiB, down 4 KiB) 10-13% less (bench/results/2026-12-05-cuda-fp4-swiglu-pairs.md, calls 1 and
// 2); with them on deepseek-v4-flash's bf16 gate/up (8 KiB) and down GEMM (4 KiB) its routed experts took 20-22%
// less (bench/results/2026-12-06-cuda-fused-tails.md, call 3). Block-exact FP4 weights take them
// only where asked (each CTA of a pair copies one of a block's two stored halves into both and converts its
// own): on deepseek-v4-flash's gate/up alone (the FP8 tiles of its columns hold 4 KiB) its routed experts
// took 0.7-0.8% more time (the gate/up 0.5-0.6% less, the down GEMM after it more), and on both GEMMs 1.9% more
// (that file, calls 1 and 3). Tall tiles' gate/ups that park their SwiGLU outputs take them from
// kWeightPairColumnBytes, as those that park f32 results: in pairs that shared the rows' copies deepseek-v3's
// FP8 gate/up (7 KiB) read 23.6 GB from DRAM (83% busy); in weight pairs it took 4.5% less time than so,
// deepseek-v4-flash's (4 KiB) 0.6% less (bench/results/2026-12-06-cuda-tall-swiglu.md, calls 6 and 7, one
// run each). STEADYMOE_WEIGHT_PAIRS=1 asks for them on every such launch (and before clusters of four),
// =0 on none.
bool weight_pairs_asked() {
    static const bool on = env_equals("STEADYMOE_WEIGHT_PAIRS", "1");
    return on;
}
bool weight_pairs(int64_t column_bytes, int64_t least_column_bytes) {
    static const bool off = env_equals("STEADYMOE_WEIGHT_PAIRS", "0");
    return !clusters_off() && !off && (weight_pairs_asked() || column_bytes >= least_column_bytes);
}

std::atomic<uint64_t> paired_launches{0}, quad_launches{0}, weight_pair_launches{0}, parked_scatters{0}, parked_swiglus{0},
    scale_map_launches{0}, tall_launches{0};

// A launch attribute: clusters of `ctas` CTAs along x.
cudaLaunchAttribute cluster_dimension(unsigned ctas) {
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = ctas, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
    return cluster;
}

// Clusters of kCtas CTAs of `kernel` that run at once on the current GPU (asked once per device; 0 where the
// query fails): a persistent launch of more would run its last clusters after the others.
template <auto kKernel, int kCtas>
int concurrent_clusters(int threads, int smem) {
    static PerDeviceAnswers counts;
    return counts.get(
        [&](int) {
            cudaLaunchConfig_t config{};
            config.gridDim = dim3(unsigned(hopper_sm_count() / kCtas * kCtas), 1, 1);
            config.blockDim = dim3(unsigned(threads), 1, 1);
            config.dynamicSmemBytes = size_t(smem);
            cudaLaunchAttribute cluster = cluster_dimension(kCtas);
            config.attrs = &cluster, config.numAttrs = 1;
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, kKernel, &config) != cudaSuccess) cudaGetLastError();  // the launch goes unpaired
            return n;
        },
        0);
}

// The paths whose persistent launches may run in clusters of four (quad_ctas) or in weight pairs
// (weight_pairs; those of block-exact FP4 weights too: kSharedWeightStages): unscaled bf16 rows meeting bf16
// weights and e4m3 rows meeting FP8 weights, prefill's two paths whose stages' weights come straight from L2.
template <WeightCode kCode, bool kScaled, bool kFp8A, bool kPersistent, bool kWide>
constexpr bool kQuadPath = kPersistent && !kWide && kWeightsInOneRun<kCode, kFp8A, kWide> && kPlainStages<kCode, kScaled, kFp8A>;

template <WeightCode kCode, bool kScaled, bool kFp8A, int kWG, int kPerSm, bool kPersistent = false, bool kParked = false,
          bool kWide = false, ParkedForm kForm = ParkedForm::F32Results>
cudaError_t launch_typed(const GroupedGemmLaunch& g) {
    constexpr int kSmem = kSmemBytes<kCode, kFp8A, kWG, kPerSm, kParked, kWide, kForm>;
    static_assert((kSmem + 1024) * kPerSm <= 228 * 1024 && kSmem <= kSmemPerCta, "the CTAs of an SM must fit its shared memory");
    constexpr auto kernel = grouped_gemm_sm90_kernel<kCode, kScaled, kFp8A, kWG, kPerSm, kPersistent, kParked, kWide, false, kForm>;
    // Whether this launch may run in clusters of four, and in weight pairs (those and block-exact FP4 meeting
    // e4m3 rows). Clusters of four never with parked SwiGLU outputs (kernels fewer to build, for a pairing
    // measured slower without them); weight pairs with them only where they park by default (bf16 rows
    // meeting bf16 weights: the bf16 gate/ups; tall tiles).
    constexpr bool kBf16Plain = kCode == WeightCode::Bf16 && !kScaled && !kFp8A;
    constexpr bool kQuads = kQuadPath<kCode, kScaled, kFp8A, kPersistent, kWide> && kForm != ParkedForm::SwiGluBf16 && kWG < 3;
    constexpr bool kWeightPairs = kPersistent && kSharedWeightStages<kCode, kScaled, kFp8A, kWide> &&
                                  (kForm != ParkedForm::SwiGluBf16 || kBf16Plain || kWG == 3);
    // (where !kQuads the first, where !kWeightPairs the second: kernels the other launches build, never
    // launched)
    constexpr auto quad_kernel = grouped_gemm_sm90_kernel<kCode, kScaled, kFp8A, kWG, kPerSm, kPersistent, kParked, kWide, kQuads,
                                                          kQuads ? kForm : ParkedForm::F32Results>;
    constexpr ParkedForm kPairForm = kWeightPairs ? kForm : ParkedForm::F32Results;
    constexpr auto weight_pair_kernel =
        grouped_gemm_sm90_kernel<kCode, kScaled, kFp8A, kWG, kPerSm, kPersistent, kParked, kWide, false,
                                 kPairForm, kWeightPairs>;
    constexpr int kThreads = kCtaThreads<kWG, kParked>;
    dim3 grid = tile_grid(g);
    if (kWide) grid.x = unsigned((g.n + 2 * kTileN - 1) / (2 * kTileN));  // 256 features an item
    const bool clustered = kPersistent && pairs_ctas(g, int(grid.x));
    // (clusters of four where asked, unless weight pairs are asked for too)
    const bool try_quads = kQuads && clustered && quad_ctas() && !weight_pairs_asked();
    // A weight column's bytes in an item, or (block-exact FP4: only where asked, measured slower) none.
    const int64_t column_bytes =
        kConverts<kCode, kFp8A> ? 0 : g.k / g.k_splits * (kCode == WeightCode::Fp8 ? 1 : 2);
    const int64_t least_column_bytes =
        kForm == ParkedForm::SwiGluBf16 && kWG < 3 ? kSwiGluWeightPairColumnBytes : kWeightPairColumnBytes;
    const bool try_weight_pairs =
        kWeightPairs && !try_quads && row_tensor_copies(g) && weight_pairs(column_bytes, least_column_bytes);
    if (const cudaError_t err = allow_shared_memory<kernel>(kSmem); err != cudaSuccess) return err;
    if (try_quads)
        if (const cudaError_t err = allow_shared_memory<quad_kernel>(kSmem); err != cudaSuccess) return err;
    if (try_weight_pairs)
        if (const cudaError_t err = allow_shared_memory<weight_pair_kernel>(kSmem); err != cudaSuccess) return err;
    const int quads = try_quads ? concurrent_clusters<quad_kernel, 4>(kThreads, kSmem) : 0;
    const int weight_paired = try_weight_pairs ? concurrent_clusters<weight_pair_kernel, 2>(kThreads, kSmem) : 0;
    const int pairs = clustered && quads == 0 && weight_paired == 0 ? concurrent_clusters<kernel, 2>(kThreads, kSmem) : 0;
    CUtensorMap rows_map{};
    const bool by_map = row_tensor_copies(g) && encode_row_map(rows_map, kFp8A ? static_cast<const void*>(g.a_fp8) : g.a, g.a_rows, g.k,
                                                               kFp8A ? RowElement::E4m3 : RowElement::Bf16,
                                                               Cta<kWG>::kRows / (pairs + quads > 0 ? 2 : 1));
    const int cluster = !by_map ? 0 : quads > 0 ? 4 : pairs + weight_paired > 0 ? 2 : 0;
    CUtensorMap scales_map{};
    const bool scales_by_map = g.a_scale_layout.block_major_rows > 0 &&
                               encode_scale_map(scales_map, g.a_scale, g.a_scale_layout.block_major_rows, g.k / 128,
                                                kFragmentScaleAt<Cta<kWG>::kRows>);
    const int64_t items = int64_t(grid.x) * grid.y * grid.z;
    if (cluster == 4)  // items of two n-blocks and two tiles
        grid = dim3(unsigned(4 * std::min<int64_t>(int64_t(grid.x / 2) * ((grid.y + 1) / 2) * grid.z, quads)), 1, 1);
    else if (cluster == 2 && weight_paired > 0)  // items of two tiles
        grid = dim3(unsigned(2 * std::min<int64_t>(int64_t(grid.x) * ((grid.y + 1) / 2) * grid.z, weight_paired)), 1, 1);
    else if (cluster == 2)  // as many clusters as run at once, or fewer where the batch's bound has fewer items
        grid = dim3(unsigned(2 * std::min<int64_t>(items / 2, pairs)), 1, 1);
    else if (kPersistent)  // as many CTAs as fit at once, or fewer
        grid = dim3(unsigned(std::min<int64_t>(items, int64_t(hopper_sm_count()) * kPerSm)), 1, 1);
    else
        grid.y *= 2 / kWG;  // one-warpgroup CTAs: two per tile
    cudaLaunchConfig_t config{};
    config.gridDim = grid, config.blockDim = dim3(kThreads, 1, 1), config.dynamicSmemBytes = size_t(kSmem), config.stream = g.stream;
    cudaLaunchAttribute attributes[2] = {dependent_launch_attribute(dependent_launches()), cluster_dimension(unsigned(cluster))};
    config.attrs = attributes, config.numAttrs = cluster > 0 ? 2 : 1;
    const auto launch = [&](auto launched_kernel, bool paired) {
        return cudaLaunchKernelEx(&config, launched_kernel, g, rows_map, scales_map, by_map, scales_by_map, paired);
    };
    const cudaError_t launched = cluster == 4                          ? launch(quad_kernel, true)
                                 : cluster == 2 && weight_paired > 0 ? launch(weight_pair_kernel, true)
                                                                     : launch(kernel, cluster == 2);
    const cudaError_t last = cudaGetLastError();  // as the launches before: clears what the launch left pending
    const bool ran = launched == cudaSuccess && last == cudaSuccess;
    auto count = [&](std::atomic<uint64_t>& launches, bool counted) {
        if (ran && counted) launches.fetch_add(1, std::memory_order_relaxed);
    };
    count(cluster == 4 ? quad_launches : weight_paired > 0 ? weight_pair_launches : paired_launches, cluster > 0);
    count(parked_scatters, kForm == ParkedForm::ScatterBf16);
    count(parked_swiglus, kForm == ParkedForm::SwiGluBf16);
    count(scale_map_launches, scales_by_map);
    count(tall_launches, kWG == 3);
    return launched != cudaSuccess ? launched : last;
}

// Whether a persistent launch parks its epilogues (the kernel's kParked): where an item spans at least 32
// blocks of 128 k, outside few-row launches (which stream weights: stages matter most there, and parking was
// measured only at 16384 tokens). Parking costs stages (four of six for bf16 or e4m3 rows, two or three of
// seven or eight where weights are widened): at 16384 tokens it took deepseek-v3's routed
// gate/up (56 blocks an item) 8.5-8.7% less time, and its down GEMM (16 blocks) 14% more, qwen3's gate/up
// (16 blocks) 16% more (bench/results/2026-12-03-cuda-parked-epilogues.md). STEADYMOE_PARKED_EPILOGUES=0 never
// parks them, =1 always (as the Parked schedule does), to compare (the same bits).
bool parked_epilogues(const GroupedGemmLaunch& g) {
    static const bool never = env_equals("STEADYMOE_PARKED_EPILOGUES", "0"), always = env_equals("STEADYMOE_PARKED_EPILOGUES", "1");
    return !never && (always || (!g.few_rows && g.k / g.k_splits >= 32 * 128));
}

// The paths whose persistent scatters may park their results as bf16 (parked_scatter): bf16 rows meeting bf16
// weights, and e4m3 rows meeting FP8 weights or block-exact FP4 ones converted to FP8 tiles.
template <WeightCode kCode, bool kScaled, bool kFp8A>
constexpr bool kParkScatterPath = (kCode == WeightCode::Bf16 && !kScaled && !kFp8A) || kFp8A;

// Whether a persistent scatter launch into bf16 rows (the experts' down GEMMs) parks its results as the bf16
// values it stores (the kernel's kParkBf16; the consumers weight and round them as the register epilogue
// does: the same bits), outside few-row launches, where epilogues parked as f32 (parked_epilogues) are not
// asked for. Measured on an H200 at 16384 tokens against the register epilogue: qwen3's down GEMM took
// 752-756 against 905-915 µs, deepseek-v3's 4889-5154 against 5828-6091, block-exact deepseek-v4-flash's
// 3208-3210 against 3627-3649 (routed ×0.925-0.960; the same output bits)
// (bench/results/2026-12-05-cuda-parked-scatter.md). STEADYMOE_PARKED_SCATTER=0 keeps the register epilogue,
// to compare.
bool parked_scatter(const GroupedGemmLaunch& g) {
    static const bool off = env_equals("STEADYMOE_PARKED_SCATTER", "0");
    const bool aligned = reinterpret_cast<uintptr_t>(g.out_bf16) % 8 == 0 && g.ldo % 4 == 0 && g.n % 4 == 0;  // 8-byte stores
    return !off && g.epilogue == GemmEpilogue::Scatter && g.out_bf16 && aligned && !g.few_rows;
}

// Whether a persistent SwiGLU launch (the experts' gate/up GEMMs) parks its SwiGLU outputs (the kernel's
// SwiGluBf16 form: the consumers run SwiGLU as the register epilogue does, the same bits), where the launch
// rounds them to bf16 (so that 16 bits hold each), outside few-row launches, on the paths of
// kParkScatterPath, before epilogues parked as f32 (parked_epilogues) or the Parked schedule. The parked
// block leaves every stage (six of bf16 or e4m3 rows, where f32 results leave four) and the epilogue warps
// only store. By default for bf16 rows meeting bf16 weights, whose register epilogue held up the next item's
// MMAs: on an H100, qwen3's routed gate/up took 1498.4 and 1499.1 µs against 1719.9 and 1723.1 at 16384
// tokens (routed experts x0.92), x0.96 at 1024; e4m3 rows meeting FP8 weights (deepseek-v3, whose gate/up
// parks f32 results) took 10-12% more time so (bench/results/2026-12-05-cuda-measured-switches.md).
// By default for tall tiles too, where f32 results leave three stages and SwiGLU outputs four: on an H100 at
// 16384 tokens deepseek-v4-flash's FP8 gate/up took 20.5% less time so (its routed experts 13.6% less),
// deepseek-v3's level at 16384 tokens (0.1% more) and 5.0% less at 4096, before they took weight pairs
// (bench/results/2026-12-06-cuda-tall-swiglu.md, calls 1 and 2; weight_pairs).
// STEADYMOE_PARKED_SWIGLU=1 parks them on every path that has the form, =0 on none.
bool parked_swiglu(const GroupedGemmLaunch& g) {
    static const bool on = env_equals("STEADYMOE_PARKED_SWIGLU", "1"), off = env_equals("STEADYMOE_PARKED_SWIGLU", "0");
    const bool bf16 = g.code == WeightCode::Bf16 && !g.scaled && g.a_fp8 == nullptr, tall = g.tile_m > kHopperTileRows;
    return (on || ((bf16 || tall) && !off)) && g.epilogue == GemmEpilogue::SwiGlu && g.round_bf16 && !g.few_rows;
}

// Whether an unscaled bf16 persistent launch takes wide CTAs (kWide: 256 features an item, one m64n256 MMA
// per k step reading its rows once for both halves; the same sums, so the same bits): with
// STEADYMOE_WIDE_CTAS=1, where the features are a multiple of 256 and the launch is not a few-row one, nor
// one whose epilogues are parked (those are asked first: parked_swiglu, parked_epilogues; so bf16 gate/up
// launches take them only with STEADYMOE_PARKED_SWIGLU=0). Off unless asked: qwen3's routed experts took 7%
// more time so at 16384 tokens, its gate/up GEMM 15% more and its down GEMM 6% less, the same bits, before
// its SwiGLU outputs were parked (bench/results/2026-12-05-cuda-switched-paths.md). STEADYMOE_WIDE_CTAS=down
// asks for them in scatter launches (the experts' down GEMMs) only. Scatters into bf16 rows park their
// results unless STEADYMOE_PARKED_SCATTER=0 (asked first: parked_scatter), and then take no wide CTAs.
bool wide_ctas(const GroupedGemmLaunch& g) {
    static const bool on = env_equals("STEADYMOE_WIDE_CTAS", "1"), down = env_equals("STEADYMOE_WIDE_CTAS", "down");
    return (on || (down && g.epilogue == GemmEpilogue::Scatter)) && !g.few_rows && g.n % (2 * kTileN) == 0;
}

// STEADYMOE_TILED_SCHEDULE names a schedule for every tiled launch (to compare them; the bits are the
// same), or Automatic where it is unset or names none.
TiledSchedule schedule_from_environment() {
    static const TiledSchedule chosen = [] {
        const std::pair<const char*, TiledSchedule> names[] = {
            {"per-tile", TiledSchedule::PerTile}, {"two-per-sm", TiledSchedule::TwoPerSm}, {"persistent", TiledSchedule::Persistent},
            {"parked", TiledSchedule::Parked}};
        for (const auto& [name, schedule] : names)
            if (env_equals("STEADYMOE_TILED_SCHEDULE", name)) return schedule;
        return TiledSchedule::Automatic;
    }();
    return chosen;
}

// A launch on 128-row CTAs (two warpgroups), or on tall tiles' 192-row CTAs (three warpgroups, persistent with
// parked epilogues whatever the schedule); few-row launches the decode kernel does not take run
// half_launch's 64-row CTAs. Scaled
// launches keep one CTA to an SM: their fold's second set of 64 accumulators does not fit two CTAs'
// registers without spilling (TwoPerSm falls back to PerTile).
// Automatic takes what measured fastest on an H200 (bench/results/2026-12-02-cuda-prefill-schedules.md):
// persistent CTAs for scaled launches and for the experts' (SwiGLU and scatter epilogues), their epilogues
// parked where items are long (parked_epilogues); two CTAs to an SM for the others (stores: the router's
// GEMM, 29.3 against 36.2 µs persistent for qwen3 at 4096 tokens). The bf16 down GEMM ran two to an SM while
// the scatter was slow in the persistent epilogue; with the scatter from registers, persistent CTAs took
// qwen3's at 16384 tokens 913.4 against 1152.3 µs (bench/results/2026-12-04-cuda-combine-and-schedule.md).
template <WeightCode kCode, bool kScaled, bool kFp8A = false>
cudaError_t launch_tiled(const GroupedGemmLaunch& g) {
    // tall tiles (launch_grouped_gemm checked that the launch may take them)
    if (g.tile_m > kHopperTileRows) {
        if constexpr ((kCode == WeightCode::Fp8 || kConverts<kCode, kFp8A>) && kFp8A) {
            if (parked_swiglu(g)) return launch_typed<kCode, kScaled, kFp8A, 3, 1, true, true, false, ParkedForm::SwiGluBf16>(g);
            if (parked_scatter(g)) return launch_typed<kCode, kScaled, kFp8A, 3, 1, true, true, false, ParkedForm::ScatterBf16>(g);
            return launch_typed<kCode, kScaled, kFp8A, 3, 1, true, true>(g);
        }
        return cudaErrorInvalidValue;
    }
    TiledSchedule schedule = g.schedule == TiledSchedule::Automatic ? schedule_from_environment() : g.schedule;
    if (schedule == TiledSchedule::Automatic)
        schedule = kScaled || g.epilogue != GemmEpilogue::Store ? TiledSchedule::Persistent : TiledSchedule::TwoPerSm;
    if constexpr (kParkScatterPath<kCode, kScaled, kFp8A>)
        if ((schedule == TiledSchedule::Persistent || schedule == TiledSchedule::Parked) && parked_swiglu(g))
            return launch_typed<kCode, kScaled, kFp8A, 2, 1, true, true, false, ParkedForm::SwiGluBf16>(g);
    if (schedule == TiledSchedule::Parked || (schedule == TiledSchedule::Persistent && parked_epilogues(g)))
        return launch_typed<kCode, kScaled, kFp8A, 2, 1, true, true>(g);
    if constexpr (kParkScatterPath<kCode, kScaled, kFp8A>)
        if (schedule == TiledSchedule::Persistent && parked_scatter(g))
            return launch_typed<kCode, kScaled, kFp8A, 2, 1, true, true, false, ParkedForm::ScatterBf16>(g);
    if constexpr (kCode == WeightCode::Bf16 && !kScaled && !kFp8A)
        if (schedule == TiledSchedule::Persistent && wide_ctas(g)) return launch_typed<kCode, kScaled, kFp8A, 2, 1, true, false, true>(g);
    if (schedule == TiledSchedule::Persistent) return launch_typed<kCode, kScaled, kFp8A, 2, 1, true>(g);
    if constexpr (!kScaled)
        if (schedule == TiledSchedule::TwoPerSm) return launch_typed<kCode, kScaled, kFp8A, 2, 2>(g);
    return launch_typed<kCode, kScaled, kFp8A, 2, 1>(g);
}
template <WeightCode kCode, bool kScaled, bool kFp8A = false>
cudaError_t half_launch(const GroupedGemmLaunch& g) {
    return launch_typed<kCode, kScaled, kFp8A, 1, 2>(g);
}

__global__ void sm90a_probe_kernel(int* has_wgmma) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *has_wgmma = 1;
#else
    *has_wgmma = 0;
#endif
}

// Whether the kernels of this build run wgmma on the current GPU: a Hopper, a build for sm_90a, and
// no STEADYMOE_GEMM_KERNEL=mma in the environment.
bool probe_hopper() {
    if (env_equals("STEADYMOE_GEMM_KERNEL", "mma")) return false;
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    if (major != 9 || minor != 0) return false;
    int* flag = nullptr;
    int host = 0;
    if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    sm90a_probe_kernel<<<1, 1>>>(flag);
    const bool ok = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(flag);
    cudaGetLastError();  // a build without sm_90 code fails the launch: that means no
    return ok && host == 1;
}

}  // namespace

int hopper_sm_count() {
    static PerDeviceAnswers counts;
    return counts.get(
        [](int device) {
            int n = 0;
            if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) cudaGetLastError();
            return n;
        },
        1);
}

bool hopper_few_row_kernels() {
    static const bool enabled = !env_equals("STEADYMOE_FEW_ROW_KERNELS", "0");
    return enabled;
}

// One-warpgroup CTAs only where no weight tile is widened: those paths keep their shared memory for the
// widened copies. (Few-row launches reach them only where the decode kernel does not take them.)
bool hopper_half_tiles(const GroupedGemmLaunch& g) {
    return hopper_few_row_kernels() && g.few_rows && (g.code == WeightCode::Bf16 || g.a_fp8) && 2 * int64_t(g.max_tiles) <= 65535;
}

uint64_t hopper_paired_launches() { return paired_launches.load(std::memory_order_relaxed); }
uint64_t hopper_scale_map_launches() { return scale_map_launches.load(std::memory_order_relaxed); }
uint64_t hopper_tall_launches() { return tall_launches.load(std::memory_order_relaxed); }
uint64_t hopper_quad_launches() { return quad_launches.load(std::memory_order_relaxed); }
uint64_t hopper_parked_scatters() { return parked_scatters.load(std::memory_order_relaxed); }
uint64_t hopper_parked_swiglus() { return parked_swiglus.load(std::memory_order_relaxed); }
uint64_t hopper_weight_pair_launches() { return weight_pair_launches.load(std::memory_order_relaxed); }

int hopper_few_row_ctas_per_sm() {
    constexpr auto kernel = grouped_gemm_sm90_kernel<WeightCode::Fp8, true, true, 1, 2, false>;
    constexpr int kSmem = kSmemBytes<WeightCode::Fp8, true, 1, 2>;
    int ctas = 0;
    if (allow_shared_memory<kernel>(kSmem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, Cta<1>::kThreads, kSmem) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return ctas;
}

// Asked once per device: a process may drive GPUs of more than one kind.
bool hopper_gemm_available() {
    static PerDeviceAnswers answers;
    return answers.get([](int) { return probe_hopper() ? 1 : 0; }, 0) == 1;
}

bool hopper_fp4_exact_tiled() {
    static const bool on = !env_equals("STEADYMOE_FP4_EXACT_TILED", "0");
    return on;
}

bool hopper_fp4_exact_tiles(const GroupedGemmLaunch& g) {
    return g.code == WeightCode::Fp4 && g.fp4_block_exact && !g.few_rows && hopper_fp4_exact_tiled();
}

bool hopper_block_major_scales(const GroupedGemmLaunch& g) {
    if (!g.a_fp8 || !g.a_scale || hopper_decode(g) || hopper_half_tiles(g)) return false;
    // (launch_grouped_gemm_sm90's tiled launches of e4m3 rows)
    return g.code == WeightCode::Fp8 || hopper_fp4_exact_tiles(g);
}

cudaError_t launch_grouped_gemm_sm90(const GroupedGemmLaunch& g) {
    if (hopper_decode(g)) return launch_decode_sm90(g);
    const bool half = hopper_half_tiles(g);
    if (g.a_fp8) {
        if (!g.a_scale) return cudaErrorInvalidValue;
        if (hopper_fp4_exact_tiles(g) && !half)
            return launch_tiled<WeightCode::Fp4, true, true>(g);
        if (g.code != WeightCode::Fp8) return cudaErrorInvalidValue;
        return half ? half_launch<WeightCode::Fp8, true, true>(g) : launch_tiled<WeightCode::Fp8, true, true>(g);
    }
    if (half && g.code == WeightCode::Bf16)
        return g.scaled ? half_launch<WeightCode::Bf16, true>(g) : half_launch<WeightCode::Bf16, false>(g);
    switch (g.code) {
    case WeightCode::Bf16: return g.scaled ? launch_tiled<WeightCode::Bf16, true>(g) : launch_tiled<WeightCode::Bf16, false>(g);
    case WeightCode::Fp8: return launch_tiled<WeightCode::Fp8, true>(g);
    case WeightCode::Fp4: return g.scaled ? launch_tiled<WeightCode::Fp4, true>(g) : launch_tiled<WeightCode::Fp4, false>(g);
    }
    return cudaErrorInvalidValue;
}

}  // namespace steadymoe::cuda
