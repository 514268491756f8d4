// Probe: which kinds of asynchronous copy into a stage make compute-sanitizer's racecheck report the stage
// protocol of bench/probes/racecheck_stage_protocol.cu (consumer warps read a stage with shared loads, then
// hand it back through an "empty" mbarrier; the producer's next copy into it waits for that barrier) as a
// race? Each mode fills the stage's 1024 bytes and its 32 scales with one kind of copy each:
//   0: bulk copy (cp.async.bulk) + per-thread cp.async (how the tiled kernels bring weights and scales)
//   1: tensor copy (cp.async.bulk.tensor.2d) + per-thread cp.async
//   2: bulk copy + tensor copy
//   3: tensor copy + tensor copy
//   4: bulk copy + bulk copy
// Built as build/probes/probe_racecheck_copy_kinds (CMakeLists.txt); on a Hopper, in build/probes:
//   for m in 0 1 2 3 4; do compute-sanitizer --tool racecheck ./probe_racecheck_copy_kinds $m; done
// On an H100 every mode summed right; racecheck reported 2 hazards in modes 0 and 4, 1 in modes 1 and 2, none
// in mode 3 (bench/results/2026-12-06-cuda-probes-and-release.md). So, by these counts, it takes a bulk
// copy's and a cp.async's writes to shared memory as the issuing thread's, does not follow the mbarriers that
// order them, and takes no tensor copy's writes as any thread's: only a stage brought wholly by tensor copies
// is clean to it.
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // (after the runtime's header, which brings the driver types it names)

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "../../src/kernels/cuda/async_barrier.cuh"
using namespace steadymoe::cuda;

constexpr int kStageBytes = 1024, kScales = 32, kSteps = 16;

__global__ void probe(const char* src, const float* scales, const __grid_constant__ CUtensorMap stage_map,
                      const __grid_constant__ CUtensorMap scale_map, float* out, int mode) {
#if defined(__CUDA_ARCH__)
    __shared__ __align__(128) char stage[2][kStageBytes];
    __shared__ __align__(128) float scale[2][kScales];
    __shared__ __align__(8) uint64_t full[2], empty[2];
    const bool tensor_stage = mode == 1 || mode == 3, cp_async_scales = mode <= 1,
               tensor_scales = mode == 2 || mode == 3;
    if (threadIdx.x == 0) {
        for (int s = 0; s < 2; ++s)
            barrier::init(&full[s], 1 + (cp_async_scales ? 32 : 0)), barrier::init(&empty[s], 4);
        barrier::fence_init();
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    if (warp == 4) {
        for (int c = 0; c < kSteps; ++c) {
            const int s = c % 2;
            if (c >= 2) barrier::wait(&empty[s], uint32_t((c / 2 - 1) & 1));
            if (lane == 0) {
                barrier::arrive_expect_bytes(&full[s], kStageBytes + (cp_async_scales ? 0 : kScales * 4));
                if (tensor_stage)
                    barrier::tensor_copy_2d(stage[s], &stage_map, 0, c * (kStageBytes / 256), &full[s]);
                else
                    barrier::bulk_copy(stage[s], src + c * kStageBytes, kStageBytes, &full[s]);
                if (tensor_scales)
                    barrier::tensor_copy_2d(scale[s], &scale_map, 0, c, &full[s]);
                else if (!cp_async_scales)
                    barrier::bulk_copy(scale[s], scales + c * kScales, kScales * 4, &full[s]);
            }
            if (cp_async_scales) {
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                                 barrier::shared_address(&scale[s][lane])),
                             "l"(scales + c * kScales + lane));
                barrier::arrive_after_cp_async(&full[s]);
            }
        }
        return;
    }
    float acc = 0;
    for (int c = 0; c < kSteps; ++c) {
        const int s = c % 2;
        barrier::wait(&full[s], uint32_t((c / 2) & 1));
        acc += float(stage[s][threadIdx.x * 8]) * scale[s][lane];
        __syncwarp();
        if (lane == 0) barrier::arrive(&empty[s]);
    }
    out[threadIdx.x] = acc;
#endif
}

// A 2-D map over `rows` rows of `row_elements` elements, its box `box_rows` whole rows.
static CUtensorMap row_map(void* base, CUtensorMapDataType type, int element_bytes, int row_elements,
                           int rows, int box_rows) {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
        std::printf("no tensor-map encoder\n");
        std::exit(2);
    }
    const cuuint64_t dims[2] = {cuuint64_t(row_elements), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(row_elements) * element_bytes};
    const cuuint32_t box[2] = {cuuint32_t(row_elements), cuuint32_t(box_rows)}, steps[2] = {1, 1};
    CUtensorMap map{};
    if (reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p)(
            &map, type, 2, base, dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        std::printf("tensor-map encoding failed\n");
        std::exit(2);
    }
    return map;
}

int main(int argc, char** argv) {
    const int mode = argc > 1 ? std::atoi(argv[1]) : 0;
    char* src;
    float *scales, *out;
    cudaMalloc(&src, kSteps * kStageBytes);
    cudaMalloc(&scales, kSteps * kScales * 4);
    cudaMalloc(&out, 128 * 4);
    cudaMemset(src, 1, kSteps * kStageBytes);
    static float ones[kSteps * kScales];
    for (float& x : ones) x = 1.0f;
    cudaMemcpy(scales, ones, sizeof ones, cudaMemcpyHostToDevice);
    const CUtensorMap stage_map =
        row_map(src, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, 256, kSteps * kStageBytes / 256, kStageBytes / 256);
    const CUtensorMap scale_map = row_map(scales, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, kScales, kSteps, 1);
    probe<<<1, 160>>>(src, scales, stage_map, scale_map, out, mode);
    const cudaError_t e = cudaDeviceSynchronize();
    float got[128] = {};
    cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost);
    int wrong = 0;  // every consumer thread sums kSteps bytes of 1 times scales of 1
    for (float x : got) wrong += x != float(kSteps);
    std::printf("probe mode %d: %s, %d of 128 sums wrong\n", mode, cudaGetErrorString(e), wrong);
    return e == cudaSuccess && wrong == 0 ? 0 : 1;
}
