// Probe: how fast do warpgroup MMAs run from shared memory with the tiled GEMM kernel's operand layouts, with
// nothing else in the loop (no copies, no folds)? Each CTA (one an SM) runs `warpgroups` warpgroups; each
// issues a 128-wide k block's MMAs (m64n128, A and B K-major in shared memory), commits them, and waits for
// them, `blocks` times. Reported per layout: FLOP per SM cycle (clock64 in each CTA), against the tensor
// cores' dense peak per SM cycle (8192 for e4m3, 4096 for bf16), TFLOP/s by events, and the mean SM clock
// (the slowest CTA's cycles over the launch's time). Operands are zeros, or random finite values (which
// draw more power), in short runs and in runs long enough for the clocks to settle.
//   e4m3-sw64:  e4m3 in 64-byte rows (the 64-wide stages of the e4m3 kernels), 64-byte swizzle, 4 x k32
//   e4m3-sw128: e4m3 in 128-byte rows (a whole 128-wide block a row), 128-byte swizzle, 4 x k32
//   bf16-sw128: bf16 in 128-byte rows (the bf16 kernels' stages), 128-byte swizzle, 8 x k16
// With `overlap` 1 a warpgroup waits for the previous block's MMAs only (wait_group 1), not its own.
// Built as build/probes/probe_wgmma_operand_rate (CMakeLists.txt); run it on a Hopper.
// On an H100 (bench/results/2026-12-06-cuda-probes-and-release.md) two or three warpgroups ran every layout
// at the peak per SM cycle (8190-8192 FLOP for e4m3, 4095-4096 for bf16), waiting for each block's MMAs or
// not; one warpgroup 0.82 (e4m3) and 0.90 (bf16). So neither the e4m3 stages' 64-byte rows nor the wait per
// block keep the tiled kernels' MMAs from the peak. (That run's random e4m3 operands held NaN codes, from a
// mask since mended; its random bf16 operands were finite and held the peak per cycle too.)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "../../src/kernels/cuda/wgmma.cuh"
#include "probe_timing.cuh"

using namespace steadymoe::cuda::wgmma;

enum class Layout { E4m3Sw64, E4m3Sw128, Bf16Sw128 };

template <Layout kLayout, bool kOverlap>
__global__ void __launch_bounds__(384, 1) rate(int blocks, bool random, float* sink, long long* cycles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) char smem[];
    const int wg = threadIdx.x / 128;
    // Per warpgroup 64 A rows; B 128 rows after the A rows of three warpgroups. Row bytes: 64 or 128.
    constexpr int kRow = kLayout == Layout::E4m3Sw64 ? 64 : 128, kAtom = kRow * 8;
    // The 64-byte layout holds a block as two 64-wide sub-tiles, each A then B.
    constexpr int kSubBytes = (3 * 64 + 128) * kRow;
    // Zeros, or (random) hashed finite values: e4m3 codes of at most 0x3f (no NaN, 0x7f / 0xff), bf16 values
    // of exponent below 0x7f (|x| < 2).
    constexpr uint32_t kFinite = kLayout == Layout::Bf16Sw128 ? 0x3f7f3f7fu : 0x3f3f3f3fu;
    for (int i = threadIdx.x; i < 2 * kSubBytes / 4; i += blockDim.x) {
        reinterpret_cast<uint32_t*>(smem)[i] = random ? (hashed_word(uint32_t(i), blockIdx.x) & kFinite) : 0u;
    }
    fence_async_shared();
    __syncthreads();
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    const uint64_t a0 = smem_descriptor<kAtom>(base + wg * 64 * kRow),
                   b0 = smem_descriptor<kAtom>(base + 3 * 64 * kRow);
    float acc[64];
    for (float& x : acc) x = 0.f;
    const long long t0 = clock64();
    for (int blk = 0; blk < blocks; ++blk) {
        wgmma_fence();
        if constexpr (kLayout == Layout::E4m3Sw64) {
            for (int sub = 0; sub < 2; ++sub)
                for (int k = 0; k < 2; ++k)
                    wgmma_m64n128k32_e4m3(acc, a0 + sub * (kSubBytes >> 4) + 2 * k,
                                          b0 + sub * (kSubBytes >> 4) + 2 * k, true);
        } else if constexpr (kLayout == Layout::E4m3Sw128) {
            for (int k = 0; k < 4; ++k) wgmma_m64n128k32_e4m3(acc, a0 + 2 * k, b0 + 2 * k, true);
        } else {
            for (int sub = 0; sub < 2; ++sub)
                for (int k = 0; k < 4; ++k)
                    wgmma_m64n128k16(acc, a0 + sub * (kSubBytes >> 4) + 2 * k,
                                     b0 + sub * (kSubBytes >> 4) + 2 * k);
        }
        wgmma_commit();
        if constexpr (kOverlap)
            wgmma_wait<1>();
        else
            wgmma_wait<0>();
    }
    wgmma_wait<0>();
    fence_operands(acc);
    const long long t1 = clock64();
    float s = 0;
    for (float x : acc) s += x;
    sink[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the MMAs
    if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
#endif
}

template <Layout kLayout, bool kOverlap>
void run(const char* name, int warpgroups, int sms, float* sink, long long* cycles, bool random = false,
         int blocks = 4000) {
    const int smem = 2 * (3 * 64 + 128) * (kLayout == Layout::E4m3Sw64 ? 64 : 128);
    const TimedLaunch t = time_launch(rate<kLayout, kOverlap>, smem, sms, cycles, [&](bool warm_up) {
        rate<kLayout, kOverlap><<<sms, 128 * warpgroups, smem>>>(warm_up ? 10 : blocks, random, sink, cycles);
    });
    const double flop_per_cta = double(warpgroups) * blocks * 2.0 * 64 * 128 * 128;
    const double peak = kLayout == Layout::Bf16Sw128 ? 4096 : 8192,
                 per_cycle = flop_per_cta / double(t.most_cycles);
    std::printf("| %s | %s | %d | %d | %d | %.0f | %.3f | %.0f | %.0f | %s |\n", name,
                random ? "random" : "zeros", warpgroups, int(kOverlap), blocks, per_cycle, per_cycle / peak,
                flop_per_cta * sms / (t.ms * 1e-3) / 1e12, double(t.most_cycles) / (t.ms * 1e3),
                cudaGetErrorString(t.status));
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    float* sink;
    long long* cycles;
    cudaMalloc(&sink, sms * 384 * 4);
    cudaMalloc(&cycles, sms * 8);
    std::printf(
        "| layout | operands | warpgroups | overlap | blocks | FLOP / SM cycle | of peak | TFLOP/s | MHz | "
        "status |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n");
    for (int wgs = 1; wgs <= 3; ++wgs) {
        run<Layout::E4m3Sw64, false>("e4m3-sw64", wgs, sms, sink, cycles);
        run<Layout::E4m3Sw128, false>("e4m3-sw128", wgs, sms, sink, cycles);
        run<Layout::Bf16Sw128, false>("bf16-sw128", wgs, sms, sink, cycles);
    }
    run<Layout::E4m3Sw64, true>("e4m3-sw64", 2, sms, sink, cycles);
    run<Layout::E4m3Sw128, true>("e4m3-sw128", 2, sms, sink, cycles);
    run<Layout::Bf16Sw128, true>("bf16-sw128", 2, sms, sink, cycles);
    // Long runs, so that the clocks settle where the tensor cores' power takes them.
    run<Layout::E4m3Sw64, false>("e4m3-sw64", 2, sms, sink, cycles, false, 200000);
    run<Layout::E4m3Sw64, false>("e4m3-sw64", 2, sms, sink, cycles, true, 200000);
    run<Layout::E4m3Sw64, false>("e4m3-sw64", 2, sms, sink, cycles, true, 4000);
    run<Layout::Bf16Sw128, false>("bf16-sw128", 2, sms, sink, cycles, false, 100000);
    run<Layout::Bf16Sw128, false>("bf16-sw128", 2, sms, sink, cycles, true, 100000);
    return 0;
}
