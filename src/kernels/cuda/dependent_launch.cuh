// Dependent launches: the layer's kernels follow one another on a stream, and each one's launch (and its
// CTAs' start) can overlap the end of the kernel before it. A kernel launched by launch_dependent may start
// while the previous kernel on its stream still runs, so it calls wait_for_prior_kernels() before it
// touches global memory (that wait returns once the previous kernel has finished and its writes are
// visible: the same order as a plain launch, so the same bits), then allow_next_kernel() so that the
// kernel after it may start early in turn: begin_dependent_kernel() does both. In a decode layer of a few microseconds per kernel, launch
// gaps are a large share of the time.
#pragma once

#include "env_switch.hpp"

#include <cuda_runtime.h>

#include <atomic>
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

// Whether launches on the current GPU may overlap the kernel before them: Hopper and later (asked once per
// device), unless STEADYMOE_DEPENDENT_LAUNCHES=0 (to compare; the bits are the same either way).
inline bool dependent_launches() {
    static const bool off = env_equals("STEADYMOE_DEPENDENT_LAUNCHES", "0");
    static std::atomic<int> answers[64] = {};  // 0: not asked yet, 1: yes, -1: no
    int device = 0;
    if (off || cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return false;
    int answer = answers[device].load(std::memory_order_relaxed);
    if (answer == 0) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
            cudaGetLastError();
            major = 0;
        }
        answer = major >= 9 ? 1 : -1;
        answers[device].store(answer, std::memory_order_relaxed);
    }
    return answer > 0;
}

// The launch attribute that lets a kernel start before the previous one on its stream ends (set to
// `on`); `kernel` must begin with wait_for_prior_kernels().
inline cudaLaunchAttribute dependent_launch_attribute(bool on) {
    cudaLaunchAttribute a{};
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = on ? 1 : 0;
    return a;
}

// kernel<<<grid, block, smem, stream>>>(args...) as a dependent launch; returns the launch's error, or
// else what an earlier asynchronous call left pending.
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
