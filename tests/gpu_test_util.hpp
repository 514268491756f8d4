// Checks shared by the GPU layer tests.
#pragma once

#include "steadymoe/engine/cuda_moe_layer.hpp"

#include <string>

namespace steadymoe::test {

// The small layers of the GPU tests: H, I, experts, top-k, the shared expert's width.
constexpr int64_t kH = 256, kI = 256, kE = 8, kK = 2, kShared = 128;

// A DeepSeek-V3-style layer (sigmoid + bias, 2 groups of 4 / top-1, norm, x2.5) with one shared
// expert, weights from the benchmark streams stored in `format` ("bf16", "fp8", "fp4"; "fp4-fp8": FP4
// experts meeting FP8 activations under power-of-two scales, as DeepSeek-V4 runs them).
MoeConfig tensor_core_config(const std::string& format);
// Its weights; `routing` (when set) replaces the config, its expert count included.
MoeLayer tensor_core_layer(const std::string& format, const MoeConfig* routing = nullptr);
// Routing variants of the bf16 config: "softmax", "group-max", "sqrt-softplus", "group-top2".
MoeConfig routing_variant(const std::string& name);

// What CudaMoeLayer::fp4_arithmetic() says of a layer whose FP4 matrices all take the block-exact arithmetic on
// this GPU: the arithmetic's name, then the tiled kernel for other batches than decode ones where it takes
// them (unless STEADYMOE_FP4_EXACT_TILED=0).
std::string block_exact_fp4_arithmetic();

// The two outputs route every token identically (ids, weights and expert loads, bit for bit).
void expect_same_routing_bits(const MoeOutput& a, const MoeOutput& b);
// ... and the same output bytes.
void expect_same_bytes(const MoeOutput& a, const MoeOutput& b);

// Probe tokens alone vs first, middle and last of a batch of `size` filler tokens: identical bytes.
void expect_batch_invariant_on_gpu(const CudaMoeLayer& gpu, const MoeInput& probe, int64_t size);

}  // namespace steadymoe::test
