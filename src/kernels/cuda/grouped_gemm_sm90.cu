#include "grouped_gemm_sm90.hpp"
#include "grouped_gemm_stage.cuh"

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace steadymoe::cuda {

namespace {

using namespace stage;

constexpr int kRows = kHopperTileRows;
constexpr int kThreads = 256;  // two warpgroups, 64 rows each
// Pipeline depth per weight format: as many stages as shared memory holds, so that few-token batches
// (which only stream weights) keep many bytes in flight.
template <WeightCode kCode>
constexpr int kStages = kCode == WeightCode::Bf16 ? 6 : kCode == WeightCode::Fp8 ? 7 : 8;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the wgmma helpers exist for sm_90a device code only
// A K-major bf16 operand tile with 128-byte rows in the 128-byte swizzle (8-row, 1024-byte atoms).
__device__ __forceinline__ uint64_t smem_descriptor(const void* tile) {
    const uint32_t address = smem_u32(tile);
    return uint64_t((address & 0x3FFFF) >> 4)  // start address
           | (uint64_t(1) << 16)                // leading byte offset (unused for swizzled K-major)
           | (uint64_t(1024 >> 4) << 32)        // stride byte offset: one 8-row atom
           | (uint64_t(1) << 62);               // 128-byte swizzle
}

// D (64 x 128, f32) += A (64 x 16) . B (128 x 16)^T, both bf16 K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, 1, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Shared-memory writes by ordinary stores and cp.async become visible to the wgmma (async) proxy.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator accesses across the asynchronous MMAs.
__device__ __forceinline__ void fence_operands(float (&d)[64]) {
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#endif

template <WeightCode kCode, bool kScaled>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_sm90_kernel(const GroupedGemmLaunch g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const Tile t = tile_of_block(g);
    if (t.rows == 0) return;
    extern __shared__ __align__(128) char smem_raw[];
    char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    constexpr int kStageBytes = stage_bytes(kCode, kRows);
    constexpr int kS = kStages<kCode>;
    char* widened = smem + kS * kStageBytes;  // two bf16 tiles: one may still be read by the previous MMAs

    const int wg = threadIdx.x / 128, lane = threadIdx.x & 31, warp = (threadIdx.x / 32) & 3;
    const bool live = wg * 64 < t.rows;  // warpgroup-uniform: a warpgroup of padding rows skips its MMAs

    float acc[64];
    float total[kScaled ? 64 : 1];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < (kScaled ? 64 : 1); ++i) total[i] = 0.0f;

    // Stage kt + kS - 2 is loaded while the MMAs of stage kt - 1 may still run: the slot it reuses
    // belonged to stage kt - 2, whose MMAs have completed.
    const StageLoader<kCode, kScaled, kRows, kThreads> loader(g, t);
    loader.zero_padding_rows(smem, kStageBytes, kS, t.rows);
    const int ktiles = int(g.k / kBK);
#pragma unroll
    for (int s = 0; s < kS - 2; ++s) {
        if (s < ktiles) loader.load(smem + s * kStageBytes, s * kBK);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<kS - 3>();
        const char* stage = smem + (kt % kS) * kStageBytes;
        const char* b_tile = stage + kRows * kRowBytes;
        if constexpr (kCode != WeightCode::Bf16) {
            __syncthreads();
            char* target = widened + (kt & 1) * kBTileBytes;
            widen_stage<kCode, kThreads>(b_tile, target, kt * kBK);
            b_tile = target;
        }
        fence_async_shared();
        __syncthreads();
        if (live) {
            const uint64_t desc_a = smem_descriptor(stage + wg * 64 * kRowBytes), desc_b = smem_descriptor(b_tile);
            fence_operands(acc);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kBK / 16; ++ks) wgmma_m64n128k16(acc, desc_a + 2 * ks, desc_b + 2 * ks);  // +32 bytes
            wgmma_commit();
        }
        const int next = kt + kS - 2;
        if (next < ktiles) loader.load(smem + (next % kS) * kStageBytes, next * kBK);
        cp_async_commit();
        if (!live) continue;
        bool folded = false;
        if constexpr (kScaled) {
            if (kt & 1) {  // the end of a 128-wide block: fold its partial sums with their scales
                wgmma_wait<0>();
                fence_operands(acc);
                const float* row_scale = stage_scales<kCode, kRows>(stage);
                const float* fragment_scale = row_scale + kRows;
                const int row = wg * 64 + warp * 16 + (lane >> 2);
                const float sa[2] = {g.a_scale ? row_scale[row] : 1.0f, g.a_scale ? row_scale[row + 8] : 1.0f};
#pragma unroll
                for (int j = 0; j < 16; ++j) {
                    const float sw = kCode == WeightCode::Fp8 ? fragment_scale[j] : 1.0f;
#pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        total[j * 4 + r] = __fmaf_rn(acc[j * 4 + r], __fmul_rn(sa[r >> 1], sw), total[j * 4 + r]);
                        acc[j * 4 + r] = 0.0f;
                    }
                }
                folded = true;
            }
        }
        if (!folded) wgmma_wait<1>();
    }
    if (live) {
        wgmma_wait<0>();
        fence_operands(acc);
    }
    cp_async_wait<0>();
    if (!live) return;

    // Epilogue. Accumulator layout: element 4j + r is row (16*warp + lane/4 + 8*(r/2)) of the
    // warpgroup's 64, feature (8j + 2*(lane%4) + r%2).
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (g.epilogue == GemmEpilogue::SwiGlu && (j & 1)) continue;
            const float* v = kScaled ? &total[j * 4] : &acc[j * 4];
            const float* up = kScaled ? &total[((j + 1) & 15) * 4] : &acc[((j + 1) & 15) * 4];
            epilogue_pair(g, t, wg * 64 + warp * 16 + (lane >> 2) + h * 8, j * 8 + (lane & 3) * 2,
                          make_float2(v[2 * h], v[2 * h + 1]), make_float2(up[2 * h], up[2 * h + 1]));
        }
#else
    __trap();  // wgmma needs sm_90a
#endif
}

template <WeightCode kCode, bool kScaled>
cudaError_t launch_typed(const GroupedGemmLaunch& g) {
    constexpr int kSmem = smem_bytes(kCode, kRows, kStages<kCode>) + (kCode == WeightCode::Bf16 ? 0 : kBTileBytes);
    const cudaError_t err = cudaFuncSetAttribute(grouped_gemm_sm90_kernel<kCode, kScaled>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
    const dim3 grid = tile_grid(g);
    grouped_gemm_sm90_kernel<kCode, kScaled><<<grid, kThreads, kSmem, g.stream>>>(g);
    return cudaGetLastError();
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
    const char* forced = std::getenv("STEADYMOE_GEMM_KERNEL");
    if (forced && std::strcmp(forced, "mma") == 0) return false;
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

bool hopper_gemm_available() {
    static std::once_flag once;
    static bool available = false;
    std::call_once(once, [] { available = probe_hopper(); });
    return available;
}

cudaError_t launch_grouped_gemm_sm90(const GroupedGemmLaunch& g) {
    switch (g.code) {
    case WeightCode::Bf16: return g.scaled ? launch_typed<WeightCode::Bf16, true>(g) : launch_typed<WeightCode::Bf16, false>(g);
    case WeightCode::Fp8: return launch_typed<WeightCode::Fp8, true>(g);
    case WeightCode::Fp4: return g.scaled ? launch_typed<WeightCode::Fp4, true>(g) : launch_typed<WeightCode::Fp4, false>(g);
    }
    return cudaErrorInvalidValue;
}

}  // namespace steadymoe::cuda
