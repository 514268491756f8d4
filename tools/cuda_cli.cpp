#include "cuda_cli.hpp"

#include "steadymoe/core/error.hpp"

#if STEADYMOE_HAVE_CUDA
#include "steadymoe/engine/cuda_moe_layer.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#endif

#include <memory>

namespace steadymoe::cli {

std::string resolve_backend(const std::string& requested, bool gpu_capable, const std::string& why_not) {
    SMOE_CHECK(requested == "auto" || requested == "cpu" || requested == "cuda", InvalidArgument,
               "--backend: unknown backend '{}' (available: auto, cpu, cuda)", requested);
    if (requested == "cpu") return "cpu";
#if STEADYMOE_HAVE_CUDA
    std::string why;
    const bool gpu = cuda::device_available(&why);
    if (requested == "auto") return gpu && gpu_capable ? "cuda" : "cpu";
    SMOE_CHECK(gpu, Unsupported, "--backend cuda: the CUDA backend needs a GPU: {}", why);
    SMOE_CHECK(gpu_capable, Unsupported, "--backend cuda: {}", why_not);
    return "cuda";
#else
    (void)gpu_capable, (void)why_not;
    SMOE_CHECK(requested == "auto", Unsupported,
               "--backend cuda: this build has no CUDA code (nvcc was not found when it was configured)");
    return "cpu";
#endif
}

#if STEADYMOE_HAVE_CUDA

namespace {
// A CPU layer and its GPU copy, kept together: the GPU layer refers to the CPU one. Never moved.
struct GpuLayer {
    MoeLayer cpu;
    CudaMoeLayer gpu;
    GpuLayer(MoeLayer layer, int64_t graph_max_tokens) : cpu(std::move(layer)), gpu(cpu) {
        if (graph_max_tokens >= 0) gpu.set_graph_max_tokens(graph_max_tokens);
    }
};
}  // namespace

LayerForward cuda_layer_forward(const MoeLayer& layer, int64_t graph_max_tokens) {
    auto gpu = std::make_shared<CudaMoeLayer>(layer);
    if (graph_max_tokens >= 0) gpu->set_graph_max_tokens(graph_max_tokens);
    return [gpu](const MoeInput& in) { return gpu->forward(in); };
}

InvarianceRunner cuda_invariance_runner(const MoeLayer& layer) {
    auto graphs = std::make_shared<CudaMoeLayer>(layer);
    auto propagating = std::make_shared<GpuLayer>(layer.with_nonfinite(NonFinitePolicy::Propagate), -1);
    auto eager = std::make_shared<CudaMoeLayer>(layer);
    eager->set_graph_max_tokens(0);
    InvarianceRunner runner;
    runner.forward = [graphs](const MoeInput& in) { return graphs->forward(in); };
    runner.forward_propagating = [propagating](const MoeInput& in) { return propagating->gpu.forward(in); };
    runner.variants.push_back({"GPU, no CUDA graphs", 64, [eager](const MoeInput& in) { return eager->forward(in); }});
    return runner;
}

#else

LayerForward cuda_layer_forward(const MoeLayer&, int64_t) {
    SMOE_THROW(Unsupported, "--backend cuda: this build has no CUDA code");
}

InvarianceRunner cuda_invariance_runner(const MoeLayer&) {
    SMOE_THROW(Unsupported, "--backend cuda: this build has no CUDA code");
}

#endif

}  // namespace steadymoe::cli
