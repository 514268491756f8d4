// Timing shared by the probes that report FLOP per SM cycle: one launch timed by events, each CTA's thread 0
// having written its clock64 span to cycles[blockIdx.x]; and the hashed words they fill operands with. Header
// only (the probe builds take every .cu here).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

// Word `i` of a hashed operand image (`seed`: the CTA, so that CTAs hold different data); callers mask it to
// finite codes.
__host__ __device__ inline uint32_t hashed_word(uint32_t i, uint32_t seed) {
    uint32_t h = i * 2654435761u + 0x9e3779b9u * seed;
    h ^= h >> 15, h *= 0x85ebca6bu, h ^= h >> 13;
    return h;
}

// What one timed launch gave: its status (the attribute's, the launch's or the run's first error), its time
// by events, and the slowest CTA's cycles.
struct TimedLaunch {
    cudaError_t status = cudaSuccess;
    float ms = 0.f;
    long long most_cycles = 0;
};

// Sets `kernel`'s dynamic shared memory to `smem` bytes, runs `launch` once to warm up, then once timed;
// `launch` launches the kernel over `ctas` CTAs, which write their spans to `cycles`.
template <class Kernel, class Launch>
TimedLaunch time_launch(Kernel kernel, int smem, int ctas, const long long* cycles, Launch launch) {
    TimedLaunch t;
    t.status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (t.status != cudaSuccess) return t;
    launch(true);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    cudaEventRecord(e0);
    launch(false);
    cudaEventRecord(e1);
    t.status = cudaGetLastError();
    const cudaError_t ran = cudaEventSynchronize(e1);
    if (t.status == cudaSuccess) t.status = ran;
    cudaEventElapsedTime(&t.ms, e0, e1);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    std::vector<long long> spans(static_cast<size_t>(ctas));
    cudaMemcpy(spans.data(), cycles, spans.size() * sizeof(long long), cudaMemcpyDeviceToHost);
    t.most_cycles = *std::max_element(spans.begin(), spans.end());
    return t;
}
