// The L2 prefetch (l2_prefetch.hpp). On Hopper each request is one bulk prefetch of kChunk bytes; before it,
// a prefetch instruction per 128-byte line.
#include "l2_prefetch.hpp"

#include "dependent_launch.cuh"

#include <algorithm>
#include <cstdint>

namespace steadymoe::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16 * 1024;  // bytes a bulk request asks for (a multiple of 16)

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const uint8_t* data, int64_t bytes) {
    // The weights were written before the layer ran: nothing to wait for, and the next kernel may start now.
    allow_next_kernel();
    const int64_t stride = int64_t(gridDim.x) * kThreads;
    for (int64_t c = int64_t(blockIdx.x) * kThreads + threadIdx.x; c * kChunk < bytes; c += stride) {
        const uint8_t* p = data + c * kChunk;
        const int64_t size = min(kChunk, bytes - c * kChunk) / 16 * 16;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (size > 0)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(uint32_t(size)) : "memory");
#else
        for (int64_t line = 0; line < size; line += 128) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p + line));
#endif
    }
}

}  // namespace

cudaError_t launch_l2_prefetch(const void* data, size_t bytes, cudaStream_t stream) {
    if (bytes < 16) return cudaSuccess;
    const int64_t chunks = (int64_t(bytes) + kChunk - 1) / kChunk;
    const unsigned blocks = unsigned(std::min<int64_t>(16, (chunks + kThreads - 1) / kThreads));
    return launch_dependent(l2_prefetch_kernel, blocks, kThreads, 0, stream, static_cast<const uint8_t*>(data),
                            int64_t(bytes));
}

}  // namespace steadymoe::cuda
