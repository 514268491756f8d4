// The MoE layer on one CUDA GPU (the portable path, any sm_80+ GPU). It shares the CPU layer's
// checks, routing and work list (MoeLayer::begin_batch / route_batch), uploads the CPU layer's
// decoded weights once, and runs the router GEMM, the expert stages and the combine on the GPU.
// Every stage is row-local and its arithmetic depends only on the model's sizes, so a token's output
// bytes do not depend on the batch. Against the CPU backend: identical routing (the GEMMs agree bit for
// bit) and outputs within rounding (the GPU's expf differs from the host's exp).
#pragma once

#include "steadymoe/engine/moe_layer.hpp"

#include <memory>

namespace steadymoe {

class CudaMoeLayer {
public:
    // Uploads `layer`'s weights; `layer` must outlive this object. Throws OutOfMemory naming the
    // tensor that did not fit, or Unsupported when no CUDA device is visible.
    explicit CudaMoeLayer(const MoeLayer& layer);
    ~CudaMoeLayer();
    CudaMoeLayer(CudaMoeLayer&&) noexcept;

    MoeOutput forward(const MoeInput& input) const;
    const MoeLayer& layer() const { return layer_; }

private:
    struct Device;
    const MoeLayer& layer_;
    std::unique_ptr<Device> device_;
};

}  // namespace steadymoe
