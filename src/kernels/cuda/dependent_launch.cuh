// Dependent launches, device side and the launch: each of the layer's kernels may start while the kernel
// before it on its stream ends (where dependent_launches(): dependent_launch.hpp). So a kernel launched by
// launch_dependent calls wait_for_prior_kernels() before it touches global memory (it returns once the
// kernel before has finished and its writes are visible: the order of a plain launch, so the same bits),
// and allow_next_kernel() where the kernel after it may start; begin_dependent_kernel() does both at once.
#pragma once

#include "dependent_launch.hpp"

#include <cuda_runtime.h>

#include <utility>

namespace steadymoe::cuda {

__device__ __forceinline__ void wait_for_prior_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// A dependent kernel's first statement, unless it has work that touches no global memory to do first.
__device__ __forceinline__ void begin_dependent_kernel() {
    wait_for_prior_kernels();
    allow_next_kernel();
}

// The launch attribute that lets a kernel start before the previous one on its stream ends (set to
// `on`); the kernel must call wait_for_prior_kernels() before it touches global memory.
inline cudaLaunchAttribute dependent_launch_attribute(bool on) {
    cudaLaunchAttribute a{};
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = on ? 1 : 0;
    return a;
}

// kernel<<<grid, block, smem, stream>>>(args...), as a dependent launch where dependent_launches();
// returns the launch's error, or else what an earlier asynchronous call left pending.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             Args&&... args) {
    cudaLaunchConfig_t config{};
    config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = smem, config.stream = stream;
    cudaLaunchAttribute attribute = dependent_launch_attribute(dependent_launches());
    config.attrs = &attribute, config.numAttrs = 1;
    const cudaError_t launched = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
    const cudaError_t last = cudaGetLastError();
    return launched != cudaSuccess ? launched : last;
}

}  // namespace steadymoe::cuda
