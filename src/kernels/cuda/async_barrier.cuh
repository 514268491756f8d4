// Shared-memory transaction barriers (mbarrier) and the bulk copies that complete on them, for the
// warp-specialised Hopper kernels: a producer warp fills pipeline stages, consumer warpgroups wait on a
// stage's "full" barrier and release it on its "empty" barrier. sm_90 device code only.
#pragma once

#include <cstdint>

namespace steadymoe::cuda::barrier {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

__device__ __forceinline__ uint32_t shared_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// `arrivals` arrive operations complete a phase (besides any transaction bytes it expects).
__device__ __forceinline__ void init(uint64_t* bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(arrivals) : "memory");
}
// Makes initialised barriers visible to the other threads and to the asynchronous proxy.
__device__ __forceinline__ void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// (Each barrier operation also takes the barrier's shared-memory address: a loop that works it out once
// spares the conversion per use.)
__device__ __forceinline__ void arrive(uint32_t bar) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory"); }
__device__ __forceinline__ void arrive(uint64_t* bar) { arrive(shared_address(bar)); }

// One arrival that also announces `bytes` still to come from bulk copies completing on this barrier.
__device__ __forceinline__ void arrive_expect_bytes(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
                 : "memory");
}

// An arrival made when all this thread's earlier cp.async copies have landed; it counts as one of
// the phase's arrivals (.noinc).
__device__ __forceinline__ void arrive_after_cp_async(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar)) : "memory");
}

// Waits until the phase of the given parity has completed.
__device__ __forceinline__ void wait(uint32_t address, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n"
            ".reg .pred p;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n"
            "}\n"
            : "=r"(done)
            : "r"(address), "r"(parity)
            : "memory");
    } while (!done);
}
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) { wait(shared_address(bar), parity); }
// Whether the phase of the given parity has completed, without waiting.
__device__ __forceinline__ bool completed(uint32_t address, uint32_t parity) {
    uint32_t done = 0;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(address), "r"(parity)
        : "memory");
    return done != 0;
}

// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory in
// one asynchronous operation that completes its bytes on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     shared_address(dst)),
                 "l"(src), "r"(bytes), "r"(shared_address(bar))
                 : "memory");
}

// Copies the box at (x, y) (x the inner coordinate, in elements) of the tensor map at `map` (a
// __grid_constant__ kernel parameter) into shared memory, laid out and swizzled as the map says,
// completing its bytes on `bar`. Box rows outside the tensor arrive as zeros and count all the same.
__device__ __forceinline__ void tensor_copy_2d(void* dst, const void* map, int x, int y, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            shared_address(dst)),
        "l"(map), "r"(x), "r"(y), "r"(shared_address(bar))
        : "memory");
}

// Clusters of two or four CTAs, where a producer's copy lands in several CTAs' shared memory (multicast) and
// each CTA's consumers release a stage to every producer that writes it.

// This CTA's rank in its cluster.
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

// Every thread of the cluster that has not exited: what one CTA wrote before (its barriers' initialisation,
// its last remote arrivals) is seen by the other CTAs after.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// An arrival on the barrier at the same place in the shared memory of the cluster's CTA `rank`, with the
// barrier's default semantics (release at CTA scope). It hands a stage back to that CTA's producer once this
// warp's reads of it are issued (its MMAs waited for, its loads issued: the arrival's release orders them
// before it), which is what keeps that producer's next copy from overwriting them. A release at cluster scope
// would also wait for every earlier store of the thread, the epilogue's included: once per stage, it doubled
// prefill GEMM times (bench/results/2026-12-02-cuda-prefill-clusters.md).
__device__ __forceinline__ void arrive_in(uint32_t bar, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}

// One arrival from the calling warp (all of its lanes call it) on `bar`, and, where rank >= 0, one on the
// barrier at the same place in the cluster's CTA `rank` (as arrive_in, and with its semantics): a lane chosen
// by elect.sync arrives, with no branch around it, so the compiler keeps the arrivals where they stand among
// the warp's other instructions (behind a lane-0 branch ptxas moved later arithmetic above them).
__device__ __forceinline__ void warp_arrive(uint32_t bar, int rank = -1) {
    if (rank < 0) {
        asm volatile(
            "{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\n"
            "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar)
            : "memory");
    } else {
        uint32_t remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(uint32_t(rank)));
        asm volatile(
            "{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
            "@p mbarrier.arrive.shared::cluster.b64 _, [%1];\n}\n" ::"r"(bar),
            "r"(remote)
            : "memory");
    }
}

// tensor_copy_2d into the same place of the shared memory of every CTA in `ctas` (a bit per rank), each
// completing its bytes on its own barrier at `bar`'s place.
__device__ __forceinline__ void tensor_copy_2d_multicast(void* dst, const void* map, int x, int y, uint64_t* bar, uint16_t ctas) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(
            shared_address(dst)),
        "l"(map), "r"(x), "r"(y), "r"(shared_address(bar)), "h"(ctas)
        : "memory");
}

// bulk_copy into the same place of the shared memory of every CTA in `ctas` (a bit per rank), each completing
// its bytes on its own barrier at `bar`'s place.
__device__ __forceinline__ void bulk_copy_multicast(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint16_t ctas) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;\n" ::"r"(
                     shared_address(dst)),
                 "l"(src), "r"(bytes), "r"(shared_address(bar)), "h"(ctas)
                 : "memory");
}

// Named barrier `id` (0 is __syncthreads'), met by `threads` threads (whole warps): sync_threads waits for
// them all; arrive_threads counts the calling warp in and goes on. The waiters see what the arriving threads
// stored before arriving.
__device__ __forceinline__ void sync_threads(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void arrive_threads(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

#endif

}  // namespace steadymoe::cuda::barrier
