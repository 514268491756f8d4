// The kernels a GPU ran, with their start and end times and streams, for `bench --backend cuda --trace`:
// where a decode layer's time goes between its kernels. The layer's stage timers cannot say that, because
// their events stop the overlap of dependent launches that the layer relies on; the profiling interface's
// activity records keep it. The interface's library (libcupti) is loaded when a trace starts, so the CLI
// needs it only to trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace steadymoe::cli {

// One kernel as the GPU ran it: times in nanoseconds of the GPU's clock.
struct KernelSpan {
    std::string name;  // demangled where it could be
    uint32_t stream = 0;
    uint64_t start_ns = 0, end_ns = 0;
    int64_t blocks = 0;  // grid x * y * z
};

// The timeline of `spans` as table rows: one per kernel in start order, with its stream (numbered in order
// of first use), its start from the first kernel's, its time, its gap after the latest end of the kernels
// before it on its stream (negative: it started before one of them ended — a dependent launch, or a graph's
// branches reported on one stream) and its blocks; then the span from the first start to the last end and
// the time in it when no kernel was running.
std::vector<std::vector<std::string>> kernel_timeline(std::vector<KernelSpan> spans);
// Header of the rows kernel_timeline makes.
std::vector<std::string> kernel_timeline_header();

// A kernel's name cut to what a table row needs: no parameter list, no namespaces of this project.
std::string short_kernel_name(const std::string& demangled);

// Records every kernel the process launches between start() and stop(). Throws Unsupported where the
// profiling library cannot be loaded or refuses (the message says which), Internal for a second trace.
class KernelTrace {
  public:
    KernelTrace();
    ~KernelTrace();
    KernelTrace(const KernelTrace&) = delete;
    KernelTrace& operator=(const KernelTrace&) = delete;

    void start();
    // Waits for the GPU, then returns the kernels recorded since start(), in start order.
    std::vector<KernelSpan> stop();

  private:
    bool on_ = false;
};

}  // namespace steadymoe::cli
