// FP4 weights in decode batches on Hopper: the weights are the MMAs' A operand, widened from e2m1 codes
// straight into registers, and the tokens are the B operand, 32 to a CTA.
//
// Why a kernel of its own: the tiled kernel (grouped_gemm_sm90.cu) widens each stage's weights into a
// shared bf16 tile between two block barriers and then multiplies them against 64 or 128 rows of
// mostly padding; a decode batch streams 4 KB of codes per stage that way, and the widening, the
// barriers and the padded MMAs left the weight stream at 0.12-0.18 of the memory floor
// (bench/results/2026-12-01-cuda-decode-fp4.md). Here each thread widens the codes its MMA fragment
// needs (no shared stores, no block barrier), and N counts tokens, not padded rows.
//
// The bits: every product is the same exact bf16 product, summed by the same 16-wide tensor-core steps
// in ascending k with the same fp32 accumulator, and the 128-block fold (when scaled) is the same fma
// — whichever operand the weights are (tests/test_cuda_grouped_gemm.cpp compares this kernel's output
// with the tiled kernel's, bit for bit). So a decode batch still gives a token the bits a prefill
// batch gives it.
#include "async_barrier.cuh"
#include "dependent_launch.cuh"
#include "grouped_gemm_sm90.hpp"
#include "grouped_gemm_stage.cuh"
#include "wgmma.cuh"

namespace steadymoe::cuda {

namespace {

using namespace stage;
using namespace wgmma;

constexpr int kFeatures = 64;                             // weight rows per CTA: one warpgroup's M
constexpr int kTokens = 32;                               // token rows per CTA: the MMAs' N
constexpr int kChunksPerTile = kHopperTileRows / kTokens;  // CTAs per row tile (most exit at once)
constexpr int kSubs = 2;                                  // stored 64-k tiles per stage: one 128-k block
// Four CTAs to an SM, four stages each (three with five stages measured the same: widening on the
// integer pipe, not latency, bounds this kernel — bench/results/2026-12-01-cuda-decode-fp4.md).
constexpr int kConsumers = 128, kThreads = kConsumers + 32, kCtasPerSm = 4, kStages = 4;
constexpr uint32_t kFullArrivals = 1 + 32;  // the producer's bulk-copy arrival and each lane's cp.async one

constexpr int kCodeRowBytes = kBK / 2;                       // one weight row of a stored 64-k tile
constexpr int kHalfTileBytes = kFeatures * kCodeRowBytes;    // this CTA's rows of a stored tile
constexpr int kStoredTileBytes = kTileN * kCodeRowBytes;     // a stored tile: kTileN rows
constexpr int kExpBlockBytes = kTileN * 4;                   // an n-tile's e8m0 exponents per 128-k block
// A stage: the tokens (two swizzled 64-k tiles of kTokens bf16 rows), the weight codes (two half tiles),
// their exponents [kFeatures][4], the tokens' 128-block scales.
constexpr int kTokenTileBytes = kTokens * kRowBytes;
constexpr int kCodesOffset = kSubs * kTokenTileBytes;
constexpr int kExpOffset = kCodesOffset + kSubs * kHalfTileBytes;
constexpr int kTokenScaleOffset = kExpOffset + kFeatures * 4;
constexpr int kStageBytes = (kTokenScaleOffset + kTokens * 4 + 1023) / 1024 * 1024;  // 1024-aligned (swizzle atoms)
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * int(sizeof(uint64_t)) + 1024;  // + barriers, alignment
static_assert((kSmemBytes + 1024) * kCtasPerSm <= 228 * 1024, "the CTAs of an SM must fit its shared memory");
static_assert(kTokens * (kFeatures + 4) * 4 <= kStages * kStageBytes, "the epilogue parks its results in the stages");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// This CTA's rows and features: blockIdx.x = 2 * n-tile + half, blockIdx.y = kChunksPerTile * tile + chunk.
__device__ __forceinline__ Tile decode_tile(const GroupedGemmLaunch& g) {
    Tile t = tile_of_block(g, int(blockIdx.y) / kChunksPerTile);
    const int skip = int(blockIdx.y) % kChunksPerTile * kTokens;
    t.rows = t.rows > skip ? min(kTokens, t.rows - skip) : 0;
    t.row0 += skip;
    t.n0 = int(blockIdx.x) * kFeatures;
    if (t.n0 >= g.n) t.rows = 0;  // the padding half of the last n-tile
    return t;
}

// The producer warp: per stage, one bulk copy per stored tile's half and one for the exponents, the
// tokens' rows (and scales) by cp.async, all announced on the stage's "full" barrier.
template <bool kScaled>
__device__ __forceinline__ void produce(const GroupedGemmLaunch& g, const Tile& t, char* smem, uint64_t* full,
                                        uint64_t* empty, int stages) {
    const int lane = threadIdx.x & 31, half = int(blockIdx.x) & 1, n_tile = t.n0 / kTileN;
    const char* codes = static_cast<const char*>(g.w) + int64_t(t.expert) * g.w_expert_bytes +
                        int64_t(n_tile) * (g.k / kBK) * kStoredTileBytes + half * kHalfTileBytes;
    const char* exps = static_cast<const char*>(g.w_scale) + int64_t(t.expert) * g.scale_expert_bytes +
                       int64_t(n_tile) * (g.k / 128) * kExpBlockBytes + half * kFeatures * 4;
    for (int ks = 0; ks < stages; ++ks) {
        const int s = ks % kStages, kt = t.kt0 + ks * kSubs, block = kt / kSubs;
        if (ks >= kStages) barrier::wait(&empty[s], uint32_t((ks / kStages - 1) & 1));
        char* stage = smem + s * kStageBytes;
        if (lane == 0) {
            barrier::arrive_expect_bytes(&full[s], kSubs * kHalfTileBytes + kFeatures * 4);
            for (int h = 0; h < kSubs; ++h)
                barrier::bulk_copy(stage + kCodesOffset + h * kHalfTileBytes, codes + int64_t(kt + h) * kStoredTileBytes,
                                   kHalfTileBytes, &full[s]);
            barrier::bulk_copy(stage + kExpOffset, exps + int64_t(block) * kExpBlockBytes, kFeatures * 4, &full[s]);
        }
        const int chunk = lane & 7;  // lane owns 16-byte chunk lane % 8 of rows lane / 8, + 4, + 8, ...
        for (int h = 0; h < kSubs; ++h) {
            const char* src = reinterpret_cast<const char*>(g.a + (int64_t(t.row0) + (lane >> 3)) * g.k + (kt + h) * kBK + chunk * 8);
            for (int row = lane >> 3; row < t.rows; row += 4, src += 4 * g.k * 2)
                cp_async16(stage + h * kTokenTileBytes + swizzle(row, chunk), src, true);
        }
        if (kScaled && g.a_scale)
            for (int row = lane; row < t.rows; row += 32)
                cp_async4(stage + kTokenScaleOffset + row * 4, g.a_scale + (int64_t(t.row0) + row) * (g.k / 128) + block, true);
        barrier::arrive_after_cp_async(&full[s]);
    }
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
#endif

template <bool kScaled>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) fp4_decode_kernel(const GroupedGemmLaunch g) {
    wait_for_prior_kernels();  // the tiles come from the permutation's output; the next kernel starts at the epilogue
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const Tile t = decode_tile(g);
    if (t.rows == 0) return;
    extern __shared__ __align__(128) char smem_raw[];
    char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
    uint64_t* empty = full + kStages;
    const int stages = t.ktiles / kSubs;  // a split's k range is a multiple of 128

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            barrier::init(&full[s], kFullArrivals);
            barrier::init(&empty[s], kConsumers / 32);
        }
        barrier::fence_init();
    }
    __syncthreads();
    if (threadIdx.x >= kConsumers) {
        produce<kScaled>(g, t, smem, full, empty, stages);
        return;
    }

    // Token rows past the chunk's are never loaded: zero them (and their scales) once in every stage.
    // A row's products never reach another row, but the MMAs should not read uninitialised memory.
    for (int s = 0; s < kStages; ++s) {
        char* stage = smem + s * kStageBytes;
        for (int h = 0; h < kSubs; ++h)
            for (int c = threadIdx.x; c < (kTokens - t.rows) * (kRowBytes / 16); c += kConsumers)
                *reinterpret_cast<uint4*>(stage + h * kTokenTileBytes + t.rows * kRowBytes + c * 16) = make_uint4(0, 0, 0, 0);
        for (int row = t.rows + threadIdx.x; row < kTokens; row += kConsumers)
            reinterpret_cast<float*>(stage + kTokenScaleOffset)[row] = 0.0f;
    }
    fence_async_shared();
    barrier::sync_threads(1, kConsumers);

    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, q = lane & 3;
    const int row = warp * 16 + (lane >> 2);  // this thread's weight rows: row and row + 8
    const uint32_t select = uint32_t(q) | uint32_t(q + 4) << 4;
    float acc[16], total[kScaled ? 16 : 1];
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < (kScaled ? 16 : 1); ++i) total[i] = 0.0f;

    for (int ks = 0; ks < stages; ++ks) {
        const int s = ks % kStages;
        barrier::wait(&full[s], uint32_t((ks / kStages) & 1));
        fence_async_shared();  // the producer's cp.async rows, for the MMAs' (async) proxy
        const char* stage = smem + s * kStageBytes;
        const uint32_t exps[2] = {*reinterpret_cast<const uint32_t*>(stage + kExpOffset + row * 4),
                                  *reinterpret_cast<const uint32_t*>(stage + kExpOffset + (row + 8) * 4)};
        uint32_t a[kSubs * 4][4];  // the A fragments of the stage's eight 16-wide k steps
#pragma unroll
        for (int h = 0; h < kSubs; ++h) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {  // rows row, row + 8: fragment registers r and r + 2
                const uint4* codes = reinterpret_cast<const uint4*>(stage + kCodesOffset + h * kHalfTileBytes + (row + 8 * r) * kCodeRowBytes);
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
            wgmma_m64n32k16_rs(acc, a[step], smem_descriptor<1024>(stage + (step / 4) * kTokenTileBytes) + 2 * (step % 4));  // +32 bytes
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands(acc);
        if constexpr (kScaled) {  // the end of a 128-wide block: fold its partial sums with the tokens' scales
            const float* token_scale = reinterpret_cast<const float*>(stage + kTokenScaleOffset);
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const float sa = g.a_scale ? token_scale[8 * (i / 4) + 2 * q + (i & 1)] : 1.0f;
                total[i] = __fmaf_rn(acc[i], sa, total[i]);
                acc[i] = 0.0f;
            }
        }
        __syncwarp();
        if (lane == 0) barrier::arrive(&empty[s]);
    }
    // Every MMA has read its stage and no copy is in flight: park the results in the stages as
    // [token][feature], then run the tiled kernel's epilogue on adjacent feature pairs. Accumulator
    // layout: element 4j + r is weight row (row + 8 * (r / 2)), token 8j + 2q + r % 2.
    allow_next_kernel();
    barrier::sync_threads(1, kConsumers);
    constexpr int kLd = kFeatures + 4;  // floats per parked token, padded against bank conflicts
    float* park = reinterpret_cast<float*>(smem);
    const float* result = kScaled ? total : acc;
#pragma unroll
    for (int i = 0; i < 16; ++i) park[(8 * (i / 4) + 2 * q + (i & 1)) * kLd + row + 8 * (i / 2 % 2)] = result[i];
    barrier::sync_threads(1, kConsumers);
    const bool swiglu = g.epilogue == GemmEpilogue::SwiGlu;
#pragma unroll 1
    for (int i = threadIdx.x; i < t.rows * (kFeatures / 2); i += kConsumers) {
        const int token = i / (kFeatures / 2), col = i % (kFeatures / 2) * 2;
        if (swiglu && (col / 8) % 2 == 1) continue;  // an up fragment: read beside its gate fragment
        const float* v = park + token * kLd + col;
        const float* up = swiglu ? v + 8 : v;  // gate fragment 2f's up partner is fragment 2f + 1
        epilogue_pair(g, t, token, col, make_float2(v[0], v[1]), make_float2(up[0], up[1]));
    }
#else
    __trap();  // wgmma needs sm_90a
#endif
}

template <bool kScaled>
cudaError_t launch_typed(const GroupedGemmLaunch& g) {
    const cudaError_t err = allow_shared_memory<fp4_decode_kernel<kScaled>>(kSmemBytes);
    if (err != cudaSuccess) return err;
    const dim3 grid(unsigned((g.n + kTileN - 1) / kTileN * (kTileN / kFeatures)), unsigned(g.max_tiles * kChunksPerTile),
                    unsigned(g.k_splits));
    return launch_dependent(fp4_decode_kernel<kScaled>, grid, kThreads, kSmemBytes, g.stream, g);
}

}  // namespace

bool hopper_fp4_decode(const GroupedGemmLaunch& g) {
    return hopper_few_row_kernels() && g.few_rows && g.code == WeightCode::Fp4 && !g.a_fp8 &&
           int64_t(g.max_tiles) * kChunksPerTile <= 65535;
}

cudaError_t launch_fp4_decode_sm90(const GroupedGemmLaunch& g) {
    return g.scaled ? launch_typed<true>(g) : launch_typed<false>(g);
}

}  // namespace steadymoe::cuda
