// Dependent launches, host side: whether kernels launched by launch_dependent (dependent_launch.cuh) may
// start before the kernel before them on their stream ends. The layer asks for them where its batch runs
// as a CUDA graph (decode sizes, where launch gaps are a large share of a layer of a few microseconds a
// kernel); prefill batches, launched one kernel at a time, measured 2-4% slower with them on an H200
// (deepseek-v3, 4096 tokens: bench/results/2026-12-02-cuda-dependent-launches.md).
#pragma once

namespace steadymoe::cuda {

// Inside a DependentLaunchScope that asked for them, on Hopper or later running this build's sm_90+ code
// (asked once per device), and unless STEADYMOE_DEPENDENT_LAUNCHES=0 (to compare; the same bits).
bool dependent_launches();
// Whether a scope that asks for them gets them: the same without the scope (for reports).
bool dependent_launches_available();

// Asks for dependent launches (or not) on this thread for its lifetime, then restores what was asked before.
class DependentLaunchScope {
  public:
    explicit DependentLaunchScope(bool on);
    ~DependentLaunchScope();
    DependentLaunchScope(const DependentLaunchScope&) = delete;
    DependentLaunchScope& operator=(const DependentLaunchScope&) = delete;

  private:
    bool before_;
};

}  // namespace steadymoe::cuda
