#include "steadymoe/core/gpu.hpp"

#include <cuda_runtime.h>

namespace steadymoe {

GpuProbe probe_gpus() {
    GpuProbe p;
    p.cuda_built = true;
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        p.error = cudaGetErrorString(err);
        return p;
    }
    p.device_count = count;
    if (count > 0) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
            p.first_device = std::string(prop.name) + " (sm_" + std::to_string(prop.major * 10 + prop.minor) + ")";
    } else {
        p.error = "no CUDA device is visible";
    }
    return p;
}

}  // namespace steadymoe
