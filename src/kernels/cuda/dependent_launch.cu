#include "dependent_launch.hpp"

#include "env_switch.hpp"
#include "per_device.hpp"

#include <cuda_runtime.h>

namespace steadymoe::cuda {

namespace {

thread_local bool asked = false;

__global__ void ptx_version_probe_kernel() {}

// Whether the current GPU runs this build's kernels from code for sm_90 or later (asked once per device):
// a Hopper, and kernels compiled with their wait (dependent_launch.cuh compiles it for sm_90+ only; a
// build for older GPUs alone runs there from their PTX, without it).
bool device_takes_dependent_launches() {
    static PerDeviceAnswers answers;
    return answers.get(
               [](int device) {
                   int major = 0;
                   cudaFuncAttributes probe{};
                   if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
                       cudaFuncGetAttributes(&probe, ptx_version_probe_kernel) != cudaSuccess) {
                       cudaGetLastError();
                       return 0;
                   }
                   return major >= 9 && probe.ptxVersion >= 90 ? 1 : 0;
               },
               0) > 0;
}

}  // namespace

bool dependent_launches_available() {
    static const bool off = env_equals("STEADYMOE_DEPENDENT_LAUNCHES", "0");
    return !off && device_takes_dependent_launches();
}

bool dependent_launches() { return asked && dependent_launches_available(); }

DependentLaunchScope::DependentLaunchScope(bool on) : before_(asked) { asked = on; }

DependentLaunchScope::~DependentLaunchScope() { asked = before_; }

}  // namespace steadymoe::cuda
