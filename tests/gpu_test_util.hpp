// Checks shared by the GPU layer tests.
#pragma once

#include "steadymoe/engine/cuda_moe_layer.hpp"

namespace steadymoe::test {

// The two outputs route every token identically (ids, weights and expert loads, bit for bit).
void expect_same_routing_bits(const MoeOutput& a, const MoeOutput& b);

// Probe tokens alone vs first, middle and last of a batch of `size` filler tokens: identical bytes.
void expect_batch_invariant_on_gpu(const CudaMoeLayer& gpu, const MoeInput& probe, int64_t size);

}  // namespace steadymoe::test
