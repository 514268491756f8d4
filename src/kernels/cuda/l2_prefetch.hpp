// Warming the L2 cache with weights a stream will read soon: a hint, never a change to any result.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace steadymoe::cuda {

// Asks the L2 cache to fetch `bytes` from `data` (device memory that no kernel writes meanwhile, 16-byte
// aligned) and returns without waiting for it, as a dependent launch (dependent_launch.hpp) that lets the
// next kernel on `stream` start at once: the kernel after it waits for this one, which ends when its
// requests are issued, not served. Nothing is launched for zero bytes.
cudaError_t launch_l2_prefetch(const void* data, size_t bytes, cudaStream_t stream);

}  // namespace steadymoe::cuda
