// The benchmark's peer: the same MoE layer computed the plain way, with fp32 OpenBLAS GEMMs over
// weights dequantised to fp32 once, routed exactly as SteadyMoE routed the batch. Built from
// blas_baseline.cpp when OpenBLAS is found, else from blas_baseline_none.cpp (unavailable).
#pragma once

#include <memory>
#include <string>

#include "steadymoe/core/tensor.hpp"
#include "steadymoe/model/config.hpp"
#include "steadymoe/model/weights.hpp"

namespace steadymoe::cli {

class BlasBaseline {
  public:
    virtual ~BlasBaseline() = default;
    // y [T, H] F32 for hidden [T, H] (F32 or BF16) and the routing a MoeLayer produced: per token the
    // router GEMM (its result unused: routing is taken as given, so both sides pay for it), then per
    // expert gather its tokens, gate+up GEMM, SwiGLU in fp32 (clamped and weighted before the down
    // projection when the config says so), down GEMM, weighted scatter-add; plus the shared expert.
    virtual Tensor forward(const Tensor& hidden, const Tensor& topk_ids,
                           const Tensor& topk_weights) const = 0;
};

// Dequantises every expert to fp32 (not part of any timing); nullptr when built without OpenBLAS.
// `threads` is OpenBLAS's thread count (and that of the one-off dequantisation).
std::unique_ptr<BlasBaseline> make_blas_baseline(const MoeConfig& config, const MoeLayerWeights& weights,
                                                 int threads);

// "OpenBLAS 0.3.21 sgemm (fp32)" or "baseline unavailable (built without OpenBLAS)".
std::string blas_baseline_name();

}  // namespace steadymoe::cli
