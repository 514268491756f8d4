// What GPUs this process can see. Built from CUDA code when nvcc was found at configure time;
// otherwise it reports that the build has no CUDA.
#pragma once

#include <string>

namespace steadymoe {

struct GpuProbe {
    bool cuda_built = false;  // this build contains CUDA code
    int device_count = 0;     // visible CUDA devices (0 when none, or on error)
    std::string first_device; // e.g. "NVIDIA H200 (sm_90)"
    std::string error;        // why no device is usable, when device_count == 0
};

GpuProbe probe_gpus();

}  // namespace steadymoe
