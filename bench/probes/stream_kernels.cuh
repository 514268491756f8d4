// The weight streams the streaming probes time (weight_stream_rate.cu, next_weights_prefetch.cu): a CTA reads
// its share of a buffer once, by bulk copies into a ring of stages or by 16-byte loads, with nothing else in
// the loop. Header only (the probe builds take every .cu here).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../../src/kernels/cuda/async_barrier.cuh"

namespace stream_probe {

namespace barrier = steadymoe::cuda::barrier;

constexpr int kRingOffset = 1024;  // the barriers first, then the stages (1 KB aligned)

// Regions of a buffer, each past the one before, wrapping to its start where the next would pass its end: a
// launch on a region reads memory that the launch just before it did not (unless the regions are over half
// the buffer), so that nothing it left in L2 serves this one.
struct FreshRegions {
    char* base;
    long long bytes;
    long long next = 0;
    char* take(long long n) {
        if (next + n > bytes) next = 0;
        char* p = base + next;
        next += (n + 4095) / 4096 * 4096;
        return p;
    }
};

// How a bulk stream treats L2: its copies' eviction priority, and another region it asks L2 to fetch.
struct L2Use {
    bool evict_first = false;  // the stream's copies marked first to go (they are read once)
    // Another region for L2 to fetch: this CTA's share starts at prefetch + blockIdx.x * prefetch_bytes
    const char* prefetch = nullptr;
    long long prefetch_bytes = 0;
    int prefetch_after = 0;  // issued after this many of the stream's own stages (0: at once)
};

// Where a launch's CTAs leave their first and last global-timer readings (ns): span[2 * cta] and
// span[2 * cta + 1], or nowhere (null). The launch's own time, without its launch, is the last end less the
// first start.
__device__ __forceinline__ long long global_ns() {
    long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void mark_start(long long* span) {
    if (span && threadIdx.x == 0) span[2 * blockIdx.x] = global_ns();
}
__device__ __forceinline__ void mark_end(long long* span) {
    __syncthreads();
    if (span && threadIdx.x == 0) span[2 * blockIdx.x + 1] = global_ns();
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint64_t l2_policy(bool evict_first) {
    uint64_t policy;
    if (evict_first)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    else
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ void bulk_copy_hinted(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                 uint64_t policy) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, "
        "[%3], %4;\n" ::"r"(barrier::shared_address(dst)),
        "l"(src), "r"(bytes), "r"(barrier::shared_address(bar)), "l"(policy)
        : "memory");
}
// Asks L2 to fetch `bytes` at `src` (a multiple of 16, 16-byte aligned) and keep them past lines marked first
// to go.
__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes, uint64_t policy) {
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;\n" ::"l"(src), "r"(bytes),
                 "l"(policy)
                 : "memory");
}
#endif

// A producer warp's first `pieces` lanes each copy 1/pieces of a stage into a ring of `depth` stages; one
// consumer warp waits for each stage, reads a word of it and hands it back. 64 threads.
__global__ void __launch_bounds__(64)
    bulk_stream(const char* src, long long bytes_per_cta, int stage_bytes, int pieces, int depth, L2Use l2,
                unsigned* sink, long long* span = nullptr) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    mark_start(span);
    extern __shared__ __align__(1024) char smem[];
    uint64_t* full = reinterpret_cast<uint64_t*>(smem);
    uint64_t* empty = full + depth;
    char* ring = smem + kRingOffset;
    if (threadIdx.x == 0) {
        for (int s = 0; s < depth; ++s) barrier::init(full + s, 1), barrier::init(empty + s, 1);
        barrier::fence_init();
    }
    __syncthreads();
    const char* base = src + blockIdx.x * bytes_per_cta;
    const int stages = int(bytes_per_cta / stage_bytes), piece = stage_bytes / pieces;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0) {
        const uint64_t first_to_go = l2_policy(true), kept = l2_policy(false);
        for (int i = 0; i < stages; ++i) {
            if (l2.prefetch && i == l2.prefetch_after && lane == 31) {
                constexpr long long kChunk = 16384;
                const char* region = l2.prefetch + blockIdx.x * l2.prefetch_bytes;
                for (long long b = 0; b < l2.prefetch_bytes; b += kChunk) {
                    const long long bytes = l2.prefetch_bytes - b < kChunk ? l2.prefetch_bytes - b : kChunk;
                    prefetch_l2(region + b, uint32_t(bytes), kept);
                }
            }
            const int s = i % depth;
            if (i >= depth) barrier::wait(empty + s, ((i / depth) & 1) ^ 1);  // stage i - depth handed back
            if (lane == 0) barrier::arrive_expect_bytes(full + s, uint32_t(stage_bytes));
            __syncwarp();
            if (lane < pieces) {
                char* dst = ring + s * stage_bytes + lane * piece;
                const char* from = base + i * (long long)stage_bytes + lane * piece;
                if (l2.evict_first)
                    bulk_copy_hinted(dst, from, uint32_t(piece), full + s, first_to_go);
                else
                    barrier::bulk_copy(dst, from, uint32_t(piece), full + s);
            }
        }
    } else {
        unsigned acc = 0;
        for (int i = 0; i < stages; ++i) {
            const int s = i % depth;
            barrier::wait(full + s, (i / depth) & 1);
            acc ^= *reinterpret_cast<const unsigned*>(ring + s * stage_bytes + lane * 4);
            __syncwarp();
            if (lane == 0) barrier::arrive(empty + s);
        }
        if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // (keeps the reads; the buffer holds no such word)
    }
    mark_end(span);
#endif
}

__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Every thread loads 16 bytes at a time, kUnroll loads in flight, their words XORed into a sink.
template <int kUnroll>
__global__ void __launch_bounds__(256)
    ldg_stream(const uint4* src, long long vectors_per_cta, unsigned* sink, long long* span = nullptr) {
    mark_start(span);
    const uint4* base = src + blockIdx.x * vectors_per_cta;
    unsigned acc = 0;
    for (long long i = threadIdx.x; i < vectors_per_cta; i += kUnroll * blockDim.x) {
        uint4 v[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            const long long k = i + j * blockDim.x;
            v[j] = k < vectors_per_cta ? load_streaming(base + k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
    mark_end(span);
}

}  // namespace stream_probe
