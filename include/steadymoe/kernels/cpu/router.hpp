// Routing on the CPU: scores from router logits, biased selection with optional group limits or a
// token-id hash table, canonical top-k order, weights. Each token is routed independently.
#pragma once

#include "steadymoe/model/config.hpp"

#include <cstdint>

namespace steadymoe::cpu {

struct RouterParams {
    const MoeConfig* config = nullptr;
    bool hash = false;                 // route by tid2eid[token_id] (table order) instead of top-k
    int64_t tokens = 0;
    const float* logits = nullptr;     // [T][E] fp32
    const float* bias = nullptr;       // [E] selection bias, or null
    const int32_t* tid2eid = nullptr;  // [vocab][K] for hash routing
    const int64_t* token_ids = nullptr;  // [T] (already range-checked)
    const uint8_t* active = nullptr;   // [T] 1 = route this token, 0 = masked
    int32_t* topk_ids = nullptr;       // out [T][K]; -1 for masked tokens
    float* topk_weights = nullptr;     // out [T][K]; 0 for masked tokens
};

// How a family turns the selected experts' scores into weights: divide by their sum (plus 1e-20 for
// DeepSeek-V2/V3), then multiply by `scale` (1 when the family does not scale).
struct WeightRule {
    bool normalise = false;
    bool eps = false;
    float scale = 1.0f;
};
WeightRule weight_rule(const MoeConfig& config);

// Canonical slot order: selection score descending, expert id ascending on exact ties; NaN scores
// rank below every number. Hash layers keep the table's order.
void route_tokens(const RouterParams& params, int64_t begin, int64_t end);

}  // namespace steadymoe::cpu
