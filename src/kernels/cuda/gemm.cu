#include "gemm_launch.hpp"

#include <cuda_runtime.h>

#include <cstdint>

namespace steadymoe::cuda {

namespace {

constexpr int kPanel = 32;  // one warp lane per output feature of a panel (the CPU panel width)
constexpr int kRows = 8;                       // rows of A per warp: each lane keeps 8 chains
constexpr int kWarpsPerBlock = 4;

template <bool kBf16>
__device__ __forceinline__ float panel_value(const void* panels, int64_t index) {
    if constexpr (kBf16) {
        const uint16_t bits = static_cast<const uint16_t*>(panels)[index];
        return __uint_as_float(uint32_t(bits) << 16);  // exact widening, as on the CPU
    } else {
        return static_cast<const float*>(panels)[index];
    }
}

// One warp computes kRows rows x 32 output features of one panel. Lane j owns feature p*32 + j and
// runs, for each of its rows, exactly the CPU's sequence of fmas.
template <bool kBf16>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemm_panels_kernel(const float* __restrict__ a, const float* __restrict__ a_scale, int64_t m, int64_t K,
                       const void* __restrict__ panels, const float* __restrict__ w_scale, int64_t N, float* c,
                       int64_t ldc, int64_t kblock, bool scaled) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // built for sm_80 and newer only
#else
    const int lane = threadIdx.x & 31;
    const int64_t warp = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
    const int64_t panel_count = (N + kPanel - 1) / kPanel;
    const int64_t row_tiles = (m + kRows - 1) / kRows;
    if (warp >= panel_count * row_tiles) return;
    const int64_t p = warp % panel_count, r0 = (warp / panel_count) * kRows;
    const int64_t n = p * kPanel + lane;
    const int64_t nkb = (K + 127) / 128;  // 128-wide scale blocks
    const int64_t base = p * K * kPanel + lane;

    float total[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) total[i] = 0.0f;
    for (int64_t k0 = 0, kb = 0; k0 < K; k0 += kblock, ++kb) {
        const int64_t k1 = min(K, k0 + kblock);
        float acc[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) acc[i] = 0.0f;
        for (int64_t k = k0; k < k1; ++k) {
            const float w = panel_value<kBf16>(panels, base + k * kPanel);
#pragma unroll
            for (int i = 0; i < kRows; ++i) {
                const float av = r0 + i < m ? a[(r0 + i) * K + k] : 0.0f;
                acc[i] = __fmaf_rn(av, w, acc[i]);
            }
        }
        if (!scaled) {
#pragma unroll
            for (int i = 0; i < kRows; ++i) total[i] = acc[i];
            continue;
        }
        const float sw = w_scale ? w_scale[n * nkb + kb] : 1.0f;
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            const float sa = (a_scale && r0 + i < m) ? a_scale[(r0 + i) * nkb + kb] : 1.0f;
            total[i] = __fmaf_rn(acc[i], __fmul_rn(sa, sw), total[i]);
        }
    }
    if (n >= N) return;
#pragma unroll
    for (int i = 0; i < kRows; ++i)
        if (r0 + i < m) c[(r0 + i) * ldc + n] = total[i];
#endif
}

}  // namespace

cudaError_t launch_gemm_panels(const GemmLaunch& g) {
    const int64_t warps = ((g.n + kPanel - 1) / kPanel) * ((g.m + kRows - 1) / kRows);
    const unsigned blocks = unsigned((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
    if (g.f32_panels)
        gemm_panels_kernel<false><<<blocks, kWarpsPerBlock * 32, 0, g.stream>>>(
            g.a, g.a_scale, g.m, g.k, g.panels, g.w_scale, g.n, g.c, g.ldc, g.kblock, g.scaled);
    else
        gemm_panels_kernel<true><<<blocks, kWarpsPerBlock * 32, 0, g.stream>>>(
            g.a, g.a_scale, g.m, g.k, g.panels, g.w_scale, g.n, g.c, g.ldc, g.kblock, g.scaled);
    return cudaGetLastError();
}

}  // namespace steadymoe::cuda
