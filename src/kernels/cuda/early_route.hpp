// A decode step's chosen experts, handed from the routing kernel to the routed gate/up GEMM before the routing
// kernel ends. At one token the gate/up GEMM's CTAs start while the routing runs (dependent launches) and wait
// for it to end before they read their tiles; only then do their weights' copies start, though a tile's
// expert is known once the selection is, about a microsecond before the routing kernel writes the weights and
// the permutation and ends. So the routing kernel publishes the one token's experts as soon as it has chosen
// them, in ascending order, which is the order of the permutation's tiles (one row each: permute_one_token);
// the gate/up GEMM's CTAs read their tile's expert from there and start their first stages' weight copies,
// then wait for the routing kernel as before and read everything else after it. The same tiles, the same bits.
#pragma once

#include <cstdint>

namespace steadymoe::cuda {

// In device memory, zeroed at allocation. The routing kernel clears `ready` before the gate/up GEMM may start
// (with a fence, so that no CTA of that GEMM can see a step's flag from before), then writes `count` and
// `experts` and sets `ready` with a release.
struct EarlyRoute {
    uint32_t ready;
    int32_t count;         // experts chosen (0 for a masked token)
    int32_t experts[32];   // ascending: tile i's expert
};

// How long a gate/up CTA waits for the experts before it waits for the routing kernel instead (which is
// always right, only later): far longer than a one-token routing kernel takes, so that only a fault leaves
// a CTA there.
inline constexpr uint64_t kEarlyRouteWaitNs = 50'000;
// Between a CTA's looks at the flag (at least; the GPU may sleep longer).
inline constexpr uint32_t kEarlyRoutePollNs = 200;

}  // namespace steadymoe::cuda
