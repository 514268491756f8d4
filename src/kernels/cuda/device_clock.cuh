// The GPU's global timer, in nanoseconds: for waits bounded in time.
#pragma once

#include <cstdint>

namespace steadymoe::cuda {

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

}  // namespace steadymoe::cuda
