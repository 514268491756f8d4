#include <cstdint>
#include "kernels/cuda/wgmma.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using namespace steadymoe::cuda::wgmma;
__device__ __forceinline__ void mmas(float (&acc)[64], uint64_t da, uint64_t db) {
    fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_m64n128k32_e4m3(acc, da + 2 * ks, db + 2 * ks, ks > 0);
    wgmma_commit();
}
__device__ __forceinline__ void fold(float (&total)[64], float (&acc)[64], float s) {
    fence_operands(acc);
#pragma unroll
    for (int i = 0; i < 64; ++i) total[i] = __fmaf_rn(acc[i], s, total[i]);
}
template <int kN>
__device__ __forceinline__ void group(float (&total)[64], float (&sums)[2][64], uint64_t da, uint64_t db, const float* sc, int kt) {
    float held = 0;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
        mmas(sums[j & 1], da + kt + j, db);
        if (j > 0) { wgmma_wait<1>(); fold(total, sums[(j - 1) & 1], held); }
        held = sc[kt + j];
    }
    wgmma_wait<0>(); fold(total, sums[(kN - 1) & 1], held);
}
#endif
__global__ void __launch_bounds__(256, 1) k(float* out, uint64_t da, uint64_t db, int n, const float* sc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    float sums[2][64], total[64];
    for (int i = 0; i < 64; ++i) total[i] = 0;
    int kt = 0;
    for (; kt + G <= n; kt += G) group<G>(total, sums, da, db, sc, kt);
    const int r = n - kt;
    if (r == 1) group<1>(total, sums, da, db, sc, kt);
    else if (r == 2) group<2>(total, sums, da, db, sc, kt);
    else if (r == 3) group<3>(total, sums, da, db, sc, kt);
    for (int i = 0; i < 64; ++i) out[threadIdx.x * 64 + i] = total[i];
#endif
}
