#include "steadymoe/core/gpu.hpp"

namespace steadymoe {

GpuProbe probe_gpus() {
    GpuProbe p;
    p.error = "this build has no CUDA code (nvcc was not found at configure time)";
    return p;
}

}  // namespace steadymoe
