// Device side of EarlyRoute (early_route.hpp): the routing kernel's clearing and publishing, the gate/up
// GEMM's reading.
#pragma once

#include "device_clock.cuh"
#include "early_route.hpp"

#include <cstdint>

namespace steadymoe::cuda {

// EarlyRoute (early_route.hpp): cleared, and the fence after the clearing completed, before the caller lets the
// next kernel start, so that its CTAs, which read it before they wait for this kernel, do not see an earlier
// step's flag. (A dependent launch promises no ordering of memory of its own: this rests on the fence having
// completed before the launch. A CTA that saw an earlier step's experts anyway would stop with an error at its
// check against the tile list: produce.)
__device__ __forceinline__ void retract_early_route(EarlyRoute* early) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;\n" ::"l"(&early->ready), "r"(0u) : "memory");
    __threadfence();
}

// The calling warp publishes its token's experts (ids_of: slot s's id, lanes < K; K = 0 for none): each
// valid id at its rank among them, the tile permute_one_token gives it, then lane 0 the count and, after the
// warp's barrier and a fence (cumulative: the other lanes' stores too), the flag by a release at GPU scope.
__device__ __forceinline__ void publish_early_route(EarlyRoute* early, const int32_t* ids_of, int K, int E) {
    const int lane = threadIdx.x & 31;
    const int id = lane < K ? ids_of[lane] : -1;
    int below = 0, count = 0;
    for (int s = 0; s < K; ++s) {
        const int other = ids_of[s];
        const bool valid = other >= 0 && other < E;
        below += valid && other < id, count += valid;
    }
    if (id >= 0 && id < E) early->experts[below] = id;
    __syncwarp();
    if (lane == 0) {
        early->count = count;
        __threadfence();
        asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(&early->ready), "r"(1u) : "memory");
    }
}

// Expert i of the published ones, read by one thread once the flag is set (an acquire at GPU scope; the
// values past L1): -1 where fewer were chosen, -2 where nothing was published within kEarlyRouteWaitNs.
__device__ __forceinline__ int early_route_expert(const EarlyRoute* early, int i) {
    const uint64_t start = global_ns();
    uint32_t ready = 0;
    for (;;) {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(ready) : "l"(&early->ready) : "memory");
        if (ready != 0) break;
        if (global_ns() - start > kEarlyRouteWaitNs) return -2;
        // Spaced, not back to back: a launch's CTAs asking L2 for the flag without pause made the one-token
        // routing kernel they wait for take 10.8 µs where it takes 5.6 (H100, qwen3-30b-a3b).
        __nanosleep(kEarlyRoutePollNs);
    }
    return i < __ldcg(&early->count) ? __ldcg(&early->experts[i]) : -1;
}

}  // namespace steadymoe::cuda
