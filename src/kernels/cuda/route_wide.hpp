// The routing kernel for a decode step's few tokens (route_wide.cu): a block per token, a thread per
// expert; the same ids and weights, bit for bit, as routing.cu's kernel of a warp per token.
#pragma once

#include "routing.hpp"

namespace steadymoe::cuda {

// Tokens up to which launch_route picks the wide kernel (one block each).
inline constexpr int64_t kWideRouteMaxTokens = 64;

// Checked by launch_route: experts, top_k and groups within its limits, tokens > 0.
cudaError_t launch_route_wide(const RouteLaunch& launch);

}  // namespace steadymoe::cuda
