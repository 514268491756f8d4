// KernelTrace in a build without CUDA, or without the profiling interface's headers: it says so.
#include "kernel_trace.hpp"

#include "steadymoe/core/error.hpp"

namespace steadymoe::cli {

KernelTrace::KernelTrace() = default;
KernelTrace::~KernelTrace() = default;

void KernelTrace::start() {
    SMOE_THROW(Unsupported, "kernel trace: this build has no profiling interface (CUDA's libcupti headers were "
                            "not found when it was configured)");
}

std::vector<KernelSpan> KernelTrace::stop() { SMOE_THROW(Internal, "kernel trace: stop() without start()"); }

}  // namespace steadymoe::cli
