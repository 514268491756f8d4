// The activation-quantisation code the CUDA gather kernels take (layer_kernels.hpp, grouped_gemm.hpp),
// by the CPU backend's rule: FP8 activations only in front of quantised weights.
#pragma once

#include "steadymoe/model/config.hpp"

namespace steadymoe::cuda {

// 0: as they are; 1: FP8 with per-128 scales kept (DeepSeek-V3); 2: FP8 with power-of-two scales folded in.
inline int activation_quant_mode(ActivationQuant a, bool quantized_weight) {
    if (!quantized_weight || a == ActivationQuant::None) return 0;
    return a == ActivationQuant::Fp8Block ? 1 : 2;
}

}  // namespace steadymoe::cuda
