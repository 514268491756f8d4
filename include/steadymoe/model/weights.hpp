// Expert weights in the formats checkpoints ship, kept as stored (no conversion at load time).
#pragma once

#include "steadymoe/core/tensor.hpp"
#include "steadymoe/model/config.hpp"

#include <array>
#include <string>
#include <vector>

namespace steadymoe {

// Block sizes fixed by the formats.
inline constexpr int64_t kFp8BlockSize = 128;  // 128x128 weight blocks, 1x128 activation groups
inline constexpr int64_t kMxBlockSize = 32;    // e2m1 values sharing one E8M0 scale (along K)
inline constexpr int64_t kNvfp4BlockSize = 16; // e2m1 values sharing one E4M3 scale (along K)

// Every e4m3 code's value (e4m3_to_f32) and every e2m1 code's (e2m1_to_f32), for host loops that decode many
// codes: a lookup costs less than the conversions' branches on codes a branch predictor sees as random.
const std::array<float, 256>& e4m3_code_values();
const std::array<float, 16>& e2m1_code_values();

// One linear layer's weight, [rows = out features, cols = in features], as the checkpoint stores it.
//   Dense: data BF16 / F16 / F32 [rows, cols]
//   Fp8:   data F8_E4M3 [rows, cols]; scale F32 or F8_E8M0 [ceil(rows/128), ceil(cols/128)]
//   Fp4:   data I8/U8 [rows, cols/2], two e2m1 per byte along K, low nibble first;
//          scale F8_E8M0 [rows, cols/32]
//   Nvfp4: data as Fp4; scale F8_E4M3 [rows, cols/16]; global_scale multiplies every value
struct WeightMatrix {
    ExpertFormat format = ExpertFormat::Dense;
    int64_t rows = 0;
    int64_t cols = 0;
    Tensor data;
    Tensor scale;
    float global_scale = 1.0f;
    std::string name;  // the checkpoint tensor it came from, for messages

    // Checks dtypes and shapes against rows/cols and the format; throws BadFormat naming `name`.
    void validate() const;
    // Checks that every stored value and scale is finite (no NaN codes); throws BadFormat naming the
    // tensor and the first bad element.
    void check_finite() const;
    // Row r dequantised to float32. Exact for Dense, Fp4 and the per-16 part of Nvfp4; for Fp8 it
    // is value * scale rounded once to float32.
    void dequantize_row(int64_t r, float* out) const;
    // Bytes the stored weight occupies (data + scales).
    size_t stored_bytes() const { return data.nbytes() + (scale.defined() ? scale.nbytes() : 0); }
};

struct ExpertWeights {
    WeightMatrix gate;  // [I, H]
    WeightMatrix up;    // [I, H]
    WeightMatrix down;  // [H, I]

    // False for an expert a partial layer (MoeLayerWeights::partial) did not load.
    bool held() const { return gate.data.defined(); }
    size_t stored_bytes() const { return gate.stored_bytes() + up.stored_bytes() + down.stored_bytes(); }
};

// Everything one MoE layer needs, checked against the config.
struct MoeLayerWeights {
    int64_t layer = 0;
    Tensor router;          // [E, H], BF16 / F16 / F32 as stored
    Tensor selection_bias;  // [E] F32, or undefined
    Tensor tid2eid;         // [vocab, K] I32 for hash layers (ids checked), or undefined
    std::vector<ExpertWeights> experts;
    // Only some routed experts are loaded (the rest have no tensors): an expert-parallel rank's share.
    bool partial = false;
    bool has_shared = false;
    ExpertWeights shared;   // [Is, H] / [H, Is]
    Tensor shared_gate;     // [H] F32 (Qwen2-MoE shared_expert_gate), or undefined

    size_t stored_bytes() const;
};

// Checks a layer's weights against the config: tensor shapes and dtypes, every matrix's [rows, cols]
// (routed [I, H] / [H, I], shared [Is, H] / [H, Is]), tid2eid ids in [0, E), bias and shared gate
// sizes. Throws InvalidArgument naming the tensor. Cheap: it reads no weight values except tid2eid.
void validate_layer_weights(const MoeConfig& config, const MoeLayerWeights& weights);

class Checkpoint;
// Reads layer L's MoE weights by the family's tensor names; detects each matrix's format from the
// tensors present. Throws NotFound / BadFormat naming the tensor at fault. With `held`, only the routed
// experts e with held[e] are read and the result is partial (an expert-parallel rank's share).
MoeLayerWeights load_moe_layer(const Checkpoint& ckpt, int64_t layer, const std::vector<bool>* held = nullptr);

}  // namespace steadymoe
