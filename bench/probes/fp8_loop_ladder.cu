// Probe: what each part of the e4m3 tiled kernels' consumer loop costs, built up from bare MMAs. A CTA an SM,
// two consumer warpgroups (64 rows each of a 128 x 128 tile) and a producer warp, over a ring of six stages
// laid out as the kernels lay them (two 64-wide sub-stages of e4m3 rows, then of weights, then the scales);
// then three warpgroups (a 192 x 128 tile) over five stages, and two over five.
// Each level adds one part to the one before:
//   0 mma:       each warpgroup issues a 128-wide block's four m64n128k32 MMAs and waits for them (stage 0)
//   1 fold:      + the block's scales read from the stage and the 64 sums folded into totals
//   2 handshake: + the full / empty mbarriers of the stage ring, the producer arriving with nothing copied
//   3 copies:    + the producer bulk-copying each stage (32 KiB of operands and the scales) from a few images
//                  that stay in L2
// An item is 56 blocks (k = 7168); at its end each thread stores one sum of its totals. Reported per level:
// FLOP per SM cycle (the slowest consumer thread 0's clock64 span), its share of the e4m3 dense peak (8192),
// TFLOP/s by events. Levels 1 and 2 run again with warpgroup 1 starting 300 cycles after warpgroup 0: where
// that is faster, the two warpgroups' folds and releases falling together cost the tensor pipe time. Levels 2
// and 3 run again with the next stage's full barrier tested while a block's MMAs run (its wait at the loop's
// top skipped where the stage had landed): where that is faster, the wait's own latency before each block's
// MMAs costs the pipe time (the compiler also issues those rows' MMAs with more instructions between them,
// twice the moves to uniform registers); and level 2 once with both, to see whether the two gains add up.
// Where it differs from the kernels: ptxas puts the release's arrive before the fold's FMAs here (the kernels
// release after them); one weight scale a block, where the kernels' FP8 folds read two (two scale products a
// thread here, four there); level 3 copies each stage whole by one bulk copy, with no rows by tensor copies,
// no weights shared by a CTA pair and about twice the kernels' L2 bytes per cycle at full speed, so it may be
// bound by L2; there are no parked epilogues; and the probe works its descriptors out in general registers
// and moves them to uniform ones each block (the kernels build them in uniform registers); at levels 2 and 3
// that includes each block's stage address arithmetic, so some of the handshake levels' cost may be the
// probe's own.
// Built as build/probes/probe_fp8_loop_ladder (CMakeLists.txt); run it on a Hopper. Results:
// bench/results/2026-12-06-cuda-loop-ladder.md.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "../../src/kernels/cuda/async_barrier.cuh"
#include "../../src/kernels/cuda/wgmma.cuh"
#include "probe_timing.cuh"

using namespace steadymoe::cuda;

constexpr int kCols = 128, kSubK = 64, kBlocksPerItem = 56, kImages = 8, kMaxWG = 3;
constexpr int kSubB = kCols * kSubK;  // bytes of one 64-wide sub-stage of weights

// The ring of kWG consumer warpgroups (64 rows each) and kStages stages.
template <int kWG, int kStages>
struct Ring {
    static constexpr int kRows = 64 * kWG;
    static constexpr int kSubA = kRows * kSubK;                  // bytes of one 64-wide sub-stage of rows
    static constexpr int kScaleOffset = 2 * (kSubA + kSubB);      // row scales [kRows], then the weight scale
    static constexpr int kCopyBytes = kScaleOffset + (kRows + 16) * 4;
    static constexpr int kStageBytes = (kCopyBytes + 1023) / 1024 * 1024;
    // Three consumer warpgroups and a producer warp (13 warps) would give each thread 128 registers: an SM
    // sub-partition's 16K registers serve the four warps that one of them holds. So three take a whole
    // producer warpgroup (of which one warp works), and move registers to the consumers (setmaxnreg).
    static constexpr int kThreads = kWG * 128 + (kWG == 3 ? 128 : 32);
    static_assert(kCopyBytes % 16 == 0, "a bulk copy moves a multiple of 16 bytes");
    static_assert(kStages * kStageBytes + 1024 <= 227 * 1024, "the ring and the barriers fit an SM's shared memory");
};
constexpr int kMaxThreads = Ring<kMaxWG, 5>::kThreads;
constexpr int kMaxStageBytes = Ring<kMaxWG, 5>::kStageBytes;  // the largest stage: the copied images' stride

template <int kLevel, bool kStagger, bool kEarly, int kWG = 2, int kStages = 6>
__global__ void __launch_bounds__(Ring<kWG, kStages>::kThreads, 1)
    ladder(const char* images, int items, float* sink, long long* cycles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using R = Ring<kWG, kStages>;
    constexpr int kRows = R::kRows, kSubA = R::kSubA, kScaleOffset = R::kScaleOffset, kCopyBytes = R::kCopyBytes,
                  kStageBytes = R::kStageBytes, kThreads = R::kThreads;
    extern __shared__ __align__(1024) char smem[];
    __shared__ __align__(8) uint64_t full[kStages], empty[kStages];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = warp / 4;
    // Random finite e4m3 operands (codes of at most 0x3f: no NaN) and scales of 1 in every stage, for the
    // levels that copy nothing.
    for (int i = threadIdx.x; i < kStages * kStageBytes / 4; i += blockDim.x) {
        const int at = i * 4 % kStageBytes;
        reinterpret_cast<uint32_t*>(smem)[i] =
            at < kScaleOffset ? (hashed_word(uint32_t(i), blockIdx.x) & 0x3f3f3f3fu) : 0x3f800000u;
    }
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) barrier::init(&full[s], 1), barrier::init(&empty[s], 4 * kWG);
        barrier::fence_init();
    }
    wgmma::fence_async_shared();
    __syncthreads();
    const int blocks = items * kBlocksPerItem;
    // (three warpgroups: 384 x 152 + 128 x 56 = the SM's 65536 registers; each branch takes its own, or ptxas
    // keeps the count at entry for code both reach)
    if (warp >= 4 * kWG) {  // the producer warp (levels 2 and 3), and three idle warps with three warpgroups
        if constexpr (kWG == 3) asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
        if (warp == 4 * kWG && kLevel >= 2) {
            for (int b = 0; b < blocks; ++b) {
                const int s = b % kStages;
                if (b >= kStages) barrier::wait(&empty[s], uint32_t((b / kStages - 1) & 1));
                if (lane == 0) {
                    if constexpr (kLevel >= 3) {
                        barrier::arrive_expect_bytes(&full[s], kCopyBytes);
                        barrier::bulk_copy(smem + s * kStageBytes,
                                           images + int64_t(b % kImages) * kMaxStageBytes, kCopyBytes, &full[s]);
                    } else {
                        barrier::arrive(&full[s]);
                    }
                }
            }
        }
        return;
    }
    if constexpr (kWG == 3) asm volatile("setmaxnreg.inc.sync.aligned.u32 152;\n" ::: "memory");
    const uint32_t base = barrier::shared_address(smem);
    const int row = wg * 64 + (warp % 4) * 16 + lane / 4;  // this thread's first row (and row + 8)
    float acc[64], total[64];
    for (float& x : total) x = 0.f;
    const long long t0 = clock64();
    if (kStagger && wg > 0) {  // warpgroup w about w / kWG of a block's MMA time behind warpgroup 0
        const long long until = t0 + (kWG == 2 ? 300 : 256 * wg);
        while (clock64() < until) {
        }
    }
    // kEarly: whether the next stage's data was seen to have landed while this block's MMAs ran
    bool next_landed = false;
    for (int b = 0; b < blocks; ++b) {
        const int s = kLevel >= 2 ? b % kStages : 0;
        if constexpr (kLevel >= 2)
            if (!next_landed) barrier::wait(&full[s], uint32_t((b / kStages) & 1));
        const uint32_t stage = base + s * kStageBytes;
        const uint64_t a0 = wgmma::smem_descriptor<512>(stage + wg * 64 * kSubK),
                       b0 = wgmma::smem_descriptor<512>(stage + 2 * kSubA);
        wgmma::wgmma_fence();
        for (int sub = 0; sub < 2; ++sub)
            for (int k = 0; k < 2; ++k)
                wgmma::wgmma_m64n128k32_e4m3(acc, a0 + sub * (kSubA >> 4) + 2 * k,
                                             b0 + sub * (kSubB >> 4) + 2 * k, sub + k > 0);
        wgmma::wgmma_commit();
        float scale[2] = {1.f, 1.f};
        if constexpr (kLevel >= 1) {
            const float* scales = reinterpret_cast<const float*>(smem + s * kStageBytes + kScaleOffset);
            const float w = scales[kRows];
            scale[0] = scales[row] * w, scale[1] = scales[row + 8] * w;
        }
        if constexpr (kEarly && kLevel >= 2)
            next_landed = b + 1 < blocks &&
                          barrier::completed(barrier::shared_address(&full[(b + 1) % kStages]),
                                             uint32_t(((b + 1) / kStages) & 1));
        wgmma::wgmma_wait<0>();
        wgmma::fence_operands(acc);
        if constexpr (kLevel >= 1) {
#pragma unroll
            for (int i = 0; i < 64; ++i) total[i] = __fmaf_rn(acc[i], scale[(i >> 1) & 1], total[i]);
        } else {
#pragma unroll
            for (int i = 0; i < 64; ++i) total[i] = acc[i];  // (moves, which the compiler may drop)
        }
        if constexpr (kLevel >= 2) {
            __syncwarp();
            if (lane == 0) barrier::arrive(&empty[s]);
        }
        if ((b + 1) % kBlocksPerItem == 0) {  // an item's end: one store a thread keeps the totals alive
            float sum = 0.f;
            for (float& x : total) sum += x, x = 0.f;
            sink[(int64_t(blockIdx.x) * kThreads + threadIdx.x) * 2 + (b / kBlocksPerItem) % 2] = sum;
        }
    }
    const long long t1 = clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
#endif
}

template <int kLevel, bool kStagger = false, bool kEarly = false, int kWG = 2, int kStages = 6>
void run(const char* name, const char* images, int sms, int items, float* sink, long long* cycles) {
    using R = Ring<kWG, kStages>;
    const int smem = kStages * R::kStageBytes;
    auto* kernel = ladder<kLevel, kStagger, kEarly, kWG, kStages>;
    const TimedLaunch t = time_launch(kernel, smem, sms, cycles, [&](bool warm_up) {
        kernel<<<sms, R::kThreads, smem>>>(images, warm_up ? 2 : items, sink, cycles);
    });
    const double flop_per_cta = double(kWG) * items * kBlocksPerItem * 2.0 * 64 * kCols * 128;
    const double per_cycle = flop_per_cta / double(t.most_cycles);
    const char* late = !kStagger ? "" : kWG == 2 ? ", warpgroup 1 started 300 cycles late" : ", warpgroup w started 256 w cycles late";
    std::printf("| %d %s, %d warpgroups, %d stages%s%s | %.0f | %.3f | %.0f | %s |\n", kLevel, name, kWG, kStages, late,
                kEarly ? ", the next stage's barrier tested while the MMAs run" : "", per_cycle,
                per_cycle / 8192, flop_per_cta * sms / (t.ms * 1e-3) / 1e12, cudaGetErrorString(t.status));
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    char* images;
    float* sink;
    long long* cycles;
    cudaMalloc(&images, kImages * kMaxStageBytes);
    cudaMalloc(&sink, sms * kMaxThreads * 2 * 4);
    cudaMalloc(&cycles, sms * 8);
    // The copied images: random finite e4m3 operands, scales of 1.
    // (a word is an operand below the smaller ring's scales, 1.0f from the larger's: a ring of fewer rows reads
    // a few operand words of the larger ring's image as its scales, and scales of 1.0f as operands, which
    // change the sums, not the pace)
    static uint32_t host[kImages * kMaxStageBytes / 4];
    for (int i = 0; i < kImages * kMaxStageBytes / 4; ++i) {
        const bool operand = i * 4 % kMaxStageBytes < Ring<kMaxWG, 5>::kScaleOffset;
        host[i] = operand ? (hashed_word(uint32_t(i), 0) & 0x3f3f3f3fu) : 0x3f800000u;
    }
    cudaMemcpy(images, host, sizeof host, cudaMemcpyHostToDevice);
    const int items = 40;
    std::printf("| level | FLOP / SM cycle | of peak | TFLOP/s | status |\n|---|---|---|---|---|\n");
    run<0>("mma", images, sms, items, sink, cycles);
    run<1>("fold", images, sms, items, sink, cycles);
    run<2>("handshake", images, sms, items, sink, cycles);
    run<3>("copies", images, sms, items, sink, cycles);
    // Do the two warpgroups, folding and handing back at the same moments, leave the tensor pipe idle then?
    run<1, true>("fold", images, sms, items, sink, cycles);
    run<2, true>("handshake", images, sms, items, sink, cycles);
    // Does the stage wait's own latency, paid before each block's MMAs can start, cost the pipe time? And do
    // the two gains (a late warpgroup, the early test) add up?
    run<2, false, true>("handshake", images, sms, items, sink, cycles);
    run<3, false, true>("copies", images, sms, items, sink, cycles);
    run<2, true, true>("handshake", images, sms, items, sink, cycles);
    // Three consumer warpgroups (a 192 x 128 tile, five stages: six do not fit): one warpgroup's MMAs alone run
    // at 0.815 of the peak (bench/results/2026-12-06-cuda-probes-and-release.md), so where two take turns the
    // pipe slows whenever one folds or waits; with three, two can keep it busy while the third does. Two
    // warpgroups on five stages beside them, for the ring's depth.
    run<0, false, false, 3, 5>("mma", images, sms, items, sink, cycles);
    run<1, false, false, 3, 5>("fold", images, sms, items, sink, cycles);
    run<2, false, false, 3, 5>("handshake", images, sms, items, sink, cycles);
    run<3, false, false, 3, 5>("copies", images, sms, items, sink, cycles);
    run<1, true, false, 3, 5>("fold", images, sms, items, sink, cycles);
    run<2, true, false, 3, 5>("handshake", images, sms, items, sink, cycles);
    run<3, true, false, 3, 5>("copies", images, sms, items, sink, cycles);
    run<2, false, false, 2, 5>("handshake", images, sms, items, sink, cycles);
    run<3, false, false, 2, 5>("copies", images, sms, items, sink, cycles);
    // Three warpgroups over four and three stages: what the kernels' parked scatters and parked f32 results leave.
    run<3, false, false, 3, 4>("copies", images, sms, items, sink, cycles);
    run<3, false, false, 3, 3>("copies", images, sms, items, sink, cycles);
    return 0;
}
