#include <cstdint>
#include "kernels/cuda/wgmma.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using namespace steadymoe::cuda::wgmma;
__device__ __forceinline__ void mmas(float (&acc)[64], uint64_t da, uint64_t db) {
#if FENCE_IN
    fence_operands(acc);
#endif
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_m64n128k32_e4m3(acc, da + 2 * ks, db + 2 * ks, ks > 0);
    wgmma_commit();
}
__device__ __forceinline__ void fold(float (&total)[64], float (&acc)[64], float s) {
#if FENCE_OUT
    fence_operands(acc);
#endif
#pragma unroll
    for (int i = 0; i < 64; ++i) total[i] = __fmaf_rn(acc[i], s, total[i]);
}
#endif
__global__ void __launch_bounds__(256, 1) k(float* out, uint64_t da, uint64_t db, int n, const float* sc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    float a0[64], a1[64], total[64];
    for (int i = 0; i < 64; ++i) total[i] = 0;
    float held = 0;
#if VARIANT == 1
    int kt = 0;
    for (; kt + 1 < n; kt += 2) {
        mmas(a0, da + kt, db);
        if (kt > 0) { wgmma_wait<1>(); fold(total, a1, held); }
        held = sc[kt];
        mmas(a1, da + kt + 1, db);
        wgmma_wait<1>(); fold(total, a0, held);
        held = sc[kt + 1];
    }
    wgmma_wait<0>(); fold(total, a1, held);
#elif VARIANT == 2  // peeled first block
    mmas(a0, da, db);
    held = sc[0];
    for (int kt = 1; kt + 1 < n; kt += 2) {
        mmas(a1, da + kt, db);
        wgmma_wait<1>(); fold(total, a0, held);
        held = sc[kt];
        mmas(a0, da + kt + 1, db);
        wgmma_wait<1>(); fold(total, a1, held);
        held = sc[kt + 1];
    }
    wgmma_wait<0>(); fold(total, a0, held);
#elif VARIANT == 3  // straight line, no loop
    mmas(a0, da, db);
    mmas(a1, da + 1, db);
    wgmma_wait<1>(); fold(total, a0, sc[0]);
    mmas(a0, da + 2, db);
    wgmma_wait<1>(); fold(total, a1, sc[1]);
    wgmma_wait<0>(); fold(total, a0, sc[2]);
#endif
    for (int i = 0; i < 64; ++i) out[threadIdx.x * 64 + i] = total[i];
#endif
}
