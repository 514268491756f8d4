// The CPU GEMM every projection uses: C[m][n] = sum_k A[m][k] * W[n][k].
//
// Determinism: each output element is one fused-multiply-add chain over k in ascending order, per
// block of `kblock` k values; each block's partial sum p is folded in as c = fma(p, s, c) with the
// block's scale s (activation scale x weight scale; 1 when none). Nothing in that sequence depends
// on m, on the tile an element falls in, or on the thread that computes it — so a token's row is
// bitwise the same whatever else is in the batch. Vector and scalar builds use the same sequence.
#pragma once

#include "steadymoe/model/weights.hpp"

#include <cstdint>
#include <vector>

namespace steadymoe::cpu {

inline constexpr int64_t kPanelWidth = 32;  // output features per packed weight panel (NR)
inline constexpr int64_t kTileRows = 12;    // activation rows per micro-tile (MR)

// A weight matrix decoded once into panels of kPanelWidth output features, k-major:
// panel p holds W[p*32 + j][k] at [k][j]. Every stored format decodes EXACTLY into bf16 panels
// (e2m1 x E8M0, e2m1 x E4M3, e4m3 x E8M0 and bf16 all fit bf16's 8-bit significand); F32 and F16
// weights keep f32 panels. Scales that cannot fold exactly (FP8 with F32 block scales, the NVFP4
// global scale) stay in `block_scale`, applied per 128-wide k block.
struct PackedWeight {
    int64_t rows = 0;  // N
    int64_t cols = 0;  // K
    bool f32_panels = false;
    std::vector<uint16_t> bf16;  // [panels][K][32] when !f32_panels
    std::vector<float> f32;      // [panels][K][32] when f32_panels
    // Per output row and 128-wide k block: [N][ceil(K/128)], or empty when every scale folded.
    std::vector<float> block_scale;
    bool quantized = false;  // the source was FP8/FP4/NVFP4 (activation quantisation applies)

    int64_t panels() const { return (rows + kPanelWidth - 1) / kPanelWidth; }
    int64_t k_blocks() const { return (cols + 127) / 128; }
    size_t bytes() const { return bf16.size() * 2 + f32.size() * 4 + block_scale.size() * 4; }
};

PackedWeight pack_weight(const WeightMatrix& w);
// A plain row-major matrix (router weights: BF16 / F16 / F32 [N, K]).
PackedWeight pack_dense(const Tensor& w, const std::string& name);

// Activations for one GEMM: `rows` rows of K float values (the operand's exact values), and
// optionally a per-row, per-128-block scale (FP8 activations with non-power-of-two scales).
struct ActivationRows {
    const float* values = nullptr;       // [rows][K], row stride K
    const float* block_scale = nullptr;  // [rows][ceil(K/128)] or null
    int64_t rows = 0;
    int64_t cols = 0;
};

// Activations re-laid as tiles of kTileRows rows, k-major ([tile][K][8]); rows past the end are
// zero. Packed once per GEMM operand and shared by every thread working on it.
struct PackedActivations {
    int64_t rows = 0;
    int64_t cols = 0;
    std::vector<float> tiles;        // [tiles][K][8]
    std::vector<float> block_scale;  // [tiles][ceil(K/128)][8], empty when unscaled

    int64_t tile_count() const { return (rows + kTileRows - 1) / kTileRows; }
};

void pack_activations(const ActivationRows& a, PackedActivations& out);

// C = A . W^T for output features [panel_begin*32, panel_end*32) ∩ [0, N) and activation tiles
// [tile_begin, tile_end); C row r (of A) starts at c + r * ldc.
void gemm_tiles(const PackedActivations& a, const PackedWeight& w, int64_t panel_begin, int64_t panel_end,
                int64_t tile_begin, int64_t tile_end, float* c, int64_t ldc);

// Which instruction set the kernel was built for ("avx512", "scalar").
const char* gemm_isa();

}  // namespace steadymoe::cpu
