// The built-in demo: a small DeepSeek-V4-shaped model made in memory from a fixed seed (no files,
// no downloads) — a hash-routed layer and a score-routed layer, sqrt-softplus routing with a
// selection bias, FP4 routed experts (e2m1 + E8M0 per 32), an FP8 shared expert, SwiGLU limit 10.
#pragma once

#include "steadymoe/engine/moe_layer.hpp"

#include <cstdint>
#include <vector>

namespace steadymoe {

struct DemoModelShape {
    int64_t hidden = 1024;
    int64_t intermediate = 512;
    int64_t experts = 64;
    int64_t top_k = 6;
    int64_t vocab = 4096;
    uint32_t seed = 20261129;
};

// config() of the demo (deepseek_v4 family, 2 layers, layer 0 hash-routed).
MoeConfig demo_config(const DemoModelShape& shape = {});
// Weights of one demo layer (0 = hash-routed, 1 = score-routed).
MoeLayerWeights demo_layer_weights(const DemoModelShape& shape, int64_t layer);
// Hidden states [T, H] BF16 and token ids [T] I32 for batch number `batch` (distinct per batch).
Tensor demo_hidden(const DemoModelShape& shape, int64_t tokens, uint64_t batch);
Tensor demo_token_ids(const DemoModelShape& shape, int64_t tokens, uint64_t batch);

}  // namespace steadymoe
