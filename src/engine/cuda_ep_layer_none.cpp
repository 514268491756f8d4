// Builds without CUDA or NCCL: the GPU expert-parallel layer refuses, saying why.
#include "steadymoe/core/error.hpp"
#include "steadymoe/engine/cuda_ep_layer.hpp"

namespace steadymoe {

struct CudaEpMoeLayer::Impl {};

const char* gpu_exchange_name(GpuExchange e) { return e == GpuExchange::Peer ? "peer" : "nccl"; }

CudaEpMoeLayer::CudaEpMoeLayer(const MoeLayer& layer, ExpertPlacement placement, Transport& bootstrap, CudaEpOptions) {
    SMOE_THROW(Unsupported, "{}", blocker(layer, placement, bootstrap.rank()));
}

CudaEpMoeLayer::~CudaEpMoeLayer() = default;

MoeOutput CudaEpMoeLayer::forward(const MoeInput&, CudaEpStats*) const {
    SMOE_THROW(Unsupported, "this build has no GPU expert parallelism");
}

const ExpertPlacement& CudaEpMoeLayer::placement() const {
    SMOE_THROW(Unsupported, "this build has no GPU expert parallelism");
}

const CudaEpOptions& CudaEpMoeLayer::options() const {
    SMOE_THROW(Unsupported, "this build has no GPU expert parallelism");
}

std::string CudaEpMoeLayer::blocker(const MoeLayer&, const ExpertPlacement&, int) {
    return "this build has no GPU expert parallelism (it needs CUDA and NCCL)";
}

}  // namespace steadymoe
