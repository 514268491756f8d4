// Built when OpenBLAS is absent: the benchmark still runs SteadyMoE and says the peer is missing.
#include "blas_baseline.hpp"

namespace steadymoe::cli {

std::unique_ptr<BlasBaseline> make_blas_baseline(const MoeConfig&, const MoeLayerWeights&, int) {
    return nullptr;
}

std::string blas_baseline_name() { return "baseline unavailable (built without OpenBLAS)"; }

}  // namespace steadymoe::cli
