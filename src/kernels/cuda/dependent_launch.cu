#include "dependent_launch.hpp"

#include "env_switch.hpp"

#include <cuda_runtime.h>

#include <atomic>

namespace steadymoe::cuda {

namespace {

thread_local bool asked = false;

__global__ void ptx_version_probe_kernel() {}

// Whether the current GPU runs this build's kernels from code for sm_90 or later (asked once per device):
// a Hopper, and kernels compiled with their wait (dependent_launch.cuh compiles it for sm_90+ only; a
// build for older GPUs alone runs there from their PTX, without it).
bool device_takes_dependent_launches() {
    static std::atomic<int> answers[64] = {};  // 0: not asked yet, 1: yes, -1: no
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) {
        cudaGetLastError();
        return false;
    }
    int answer = answers[device].load(std::memory_order_relaxed);
    if (answer == 0) {
        int major = 0;
        cudaFuncAttributes probe{};
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
            cudaFuncGetAttributes(&probe, ptx_version_probe_kernel) != cudaSuccess) {
            cudaGetLastError();
            major = 0;
        }
        answer = major >= 9 && probe.ptxVersion >= 90 ? 1 : -1;
        answers[device].store(answer, std::memory_order_relaxed);
    }
    return answer > 0;
}

}  // namespace

bool dependent_launches() {
    static const bool off = env_equals("STEADYMOE_DEPENDENT_LAUNCHES", "0");
    return asked && !off && device_takes_dependent_launches();
}

DependentLaunchScope::DependentLaunchScope(bool on) : before_(asked) { asked = on; }

DependentLaunchScope::~DependentLaunchScope() { asked = before_; }

}  // namespace steadymoe::cuda
