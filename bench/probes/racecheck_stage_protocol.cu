// Probe: does compute-sanitizer's racecheck report a stage written by a bulk copy and by cp.async, read
// by consumer warps with shared loads, and reused through full / empty mbarriers — the tiled GEMM
// kernel's stage protocol — as a race? (racecheck reported such hazards in that kernel's FP8-weight
// paths: bench/results/2026-12-02-cuda-prefill-tma.md.) Built as build/probes/probe_racecheck_stage_protocol
// (CMakeLists.txt); on a Hopper, in build/probes:
//   compute-sanitizer --tool racecheck ./probe_racecheck_stage_protocol
// On an H200 it reported 2 hazards (WAR: the consumers' loads against the producer's next copies), though
// the barriers order them: bench/results/2026-12-02-cuda-prefill-clusters.md.
#include <cstdio>
#include <cstdint>
#include "../../src/kernels/cuda/async_barrier.cuh"
using namespace steadymoe::cuda;

__global__ void probe(const char* src, const float* scales, float* out, int steps) {
#if defined(__CUDA_ARCH__)
    __shared__ __align__(128) char stage[2][1024];
    __shared__ float scale[2][32];
    __shared__ __align__(8) uint64_t full[2], empty[2];
    if (threadIdx.x == 0) {
        for (int s = 0; s < 2; ++s) barrier::init(&full[s], 1 + 32), barrier::init(&empty[s], 4);
        barrier::fence_init();
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    if (warp == 4) {
        for (int c = 0; c < steps; ++c) {
            const int s = c % 2;
            if (c >= 2) barrier::wait(&empty[s], uint32_t((c / 2 - 1) & 1));
            if (lane == 0) {
                barrier::arrive_expect_bytes(&full[s], 1024);
                barrier::bulk_copy(stage[s], src + c * 1024, 1024, &full[s]);
            }
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(barrier::shared_address(&scale[s][lane])), "l"(scales + c * 32 + lane));
            barrier::arrive_after_cp_async(&full[s]);
        }
        return;
    }
    float acc = 0;
    for (int c = 0; c < steps; ++c) {
        const int s = c % 2;
        barrier::wait(&full[s], uint32_t((c / 2) & 1));
        acc += float(stage[s][threadIdx.x * 8]) * scale[s][lane];
        __syncwarp();
        if (lane == 0) barrier::arrive(&empty[s]);
    }
    out[threadIdx.x] = acc;
#endif
}

int main() {
    const int steps = 16;
    char* src; float *scales, *out;
    cudaMalloc(&src, steps * 1024); cudaMalloc(&scales, steps * 32 * 4); cudaMalloc(&out, 128 * 4);
    cudaMemset(src, 1, steps * 1024); cudaMemset(scales, 0, steps * 32 * 4);
    probe<<<1, 160>>>(src, scales, out, steps);
    const cudaError_t e = cudaDeviceSynchronize();
    std::printf("probe: %s\n", cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : 1;
}
