// The activation-quantisation code the CUDA gather kernels take (layer_kernels.hpp, grouped_gemm.hpp),
// by the CPU backend's rule: FP8 activations only in front of quantised weights.
#pragma once

#include "steadymoe/model/config.hpp"

#include "grouped_gemm.hpp"

namespace steadymoe::cuda {

// 0: as they are; 1: FP8 with per-128 scales kept (DeepSeek-V3); 2: FP8 with power-of-two scales folded in.
inline int activation_quant_mode(ActivationQuant a, bool quantized_weight) {
    if (!quantized_weight || a == ActivationQuant::None) return 0;
    return a == ActivationQuant::Fp8Block ? 1 : 2;
}

// Whether FP4 expert weights meet e4m3 activations on the FP8 tensor cores (so are uploaded in e4m3 order):
// FP8-quantised activations, FP8 products on tensor cores asked for, and a GPU that has them.
inline bool fp4_takes_e4m3(ActivationQuant a, bool fp8_tensor_cores) {
    return fp8_tensor_cores && activation_quant_mode(a, true) != 0 && grouped_gemm_takes_fp8_activations(WeightCode::Fp4);
}

}  // namespace steadymoe::cuda
