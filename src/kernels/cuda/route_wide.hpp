// The routing kernel for a decode step's few tokens (route_wide.cu): a block per token, a thread per
// expert; the same ids and weights, bit for bit, as routing.cu's kernel of a warp per token.
#pragma once

#include "routing.hpp"

namespace steadymoe::cuda {

// Whether launch_route picks the wide kernel: for up to 64 tokens (a block each) of more than 128 experts.
// Measured at one token (bench/results/2026-12-03-cuda-route-and-fork.md): 4.8 µs against the warp kernel's
// 9.4 for deepseek-v4-flash's 256 experts, 6.6 against 11.6 for deepseek-v3's; 5.2 against 4.2 for qwen3's
// 128, whose lanes hold 4 experts each.
inline bool wide_route_pays(const RouteLaunch& launch) { return launch.tokens <= 64 && launch.experts > 128; }

// Checked by launch_route: experts, top_k and groups within its limits, tokens > 0.
cudaError_t launch_route_wide(const RouteLaunch& launch);
// Token 0's routing, then the permutation of its pairs (permute_small.cuh), in one block: checked by
// launch_route_and_permute (one token, at most 128 pairs).
cudaError_t launch_route_wide_and_permute(const RouteLaunch& launch, int32_t tile_m, const PermutationOut& out);

}  // namespace steadymoe::cuda
