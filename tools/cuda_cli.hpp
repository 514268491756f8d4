// The CLI's view of the CUDA backend, compiled into every build: which backend a command runs on
// (`--backend auto` takes the GPU when one is visible and the build has CUDA code), and the layer on a
// GPU as the commands use it. In a build without CUDA, asking for the GPU throws Unsupported.
#pragma once

#include "steadymoe/engine/invariance.hpp"
#include "steadymoe/engine/moe_layer.hpp"

#include <string>

namespace steadymoe::cli {

// "cpu" or "cuda" for --backend auto|cpu|cuda. `gpu_capable`: whether this use of the command can run
// on a GPU at all (auto stays on the CPU when it cannot; an explicit cuda is refused with `why_not`).
std::string resolve_backend(const std::string& requested, bool gpu_capable = true, const std::string& why_not = "");

// `layer` on the GPU (tensor-core path when its formats allow), as a forward function; `layer` must
// outlive it. graph_max_tokens < 0 keeps the default.
LayerForward cuda_layer_forward(const MoeLayer& layer, int64_t graph_max_tokens = -1);

// The invariance battery's runner for the GPU: the layer with CUDA graphs for decode-sized batches, the
// NaN case on a copy that propagates non-finite inputs, and one variant — launches without graphs — on
// a batch of 64 tokens.
InvarianceRunner cuda_invariance_runner(const MoeLayer& layer);

}  // namespace steadymoe::cli
