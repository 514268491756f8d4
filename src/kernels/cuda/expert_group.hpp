// Expert weights on the GPU for the tensor-core path, in the width they are stored in (bf16, FP8,
// FP4): a group is a set of experts of one shape and format held in one allocation per projection,
// so one grouped-GEMM launch reaches all of them. Gate and up rows are interleaved by 8 so one tile
// holds matching gate and up features and SwiGLU runs in the GEMM's epilogue.
#pragma once

#include "steadymoe/kernels/cuda/runtime.hpp"
#include "steadymoe/model/weights.hpp"

#include "grouped_gemm.hpp"

#include <string>
#include <vector>

namespace steadymoe::cuda {

// One projection of every expert of a group: expert e's matrix starts e * expert_bytes into `data`, in
// the GEMM's stage-tile layout (expert_group.cpp: tile_matrix), so each stage is one contiguous load.
struct DeviceMatrixSet {
    WeightCode code = WeightCode::Bf16;
    bool quantized = false;      // FP8 or FP4 (the activations may be quantised to FP8 for it)
    int64_t n = 0;               // output features (2I for interleaved gate/up)
    int64_t k = 0;               // input features, a multiple of 128
    int32_t fp8_half_blocks = 0; // interleaved FP8 gate/up: 128-row blocks per half
    // FP4 weights laid out for the kernel for FP4 weights meeting e4m3 activations: per 64 rows one run of
    // 128-wide k blocks, each its codes (each 32-wide group's permuted within it) then its exponents, and
    // no `scale` (expert_group.cpp: fp4_e4m3_blocks); only such launches may read them.
    bool fp4_e4m3_order = false;
    // FP4 in e4m3 order uploaded block-exact (upload_expert_group; fp4_blocks.hpp): each row's exponents of a
    // block are its groups' shifts and the block's exponent, and its codes are packed for a byte table
    // (fp4_e4m3_word.hpp); its products take the FP8 kernels' arithmetic.
    bool fp4_block_exact = false;
    int64_t expert_bytes = 0;
    int64_t scale_expert_bytes = 0;
    DeviceBuffer data;
    DeviceBuffer scale;          // FP8: f32 block scales; FP4: e8m0 per (n-tile, 128-k block) [128][4]
};

struct DeviceExpertGroup {
    int64_t experts = 0;
    int64_t intermediate = 0;
    DeviceMatrixSet gate_up;  // [experts][2I][H], gate and up interleaved by 8 rows
    DeviceMatrixSet down;     // [experts][H][I]
};

// Why these experts cannot take the tensor-core path ("" when they can): mixed shapes or formats,
// a format without an exact bf16 widening (NVFP4, f16/f32 dense), sizes not multiples of 128, or FP4
// scales outside the range bf16 represents exactly.
std::string tensor_core_blocker(const std::vector<const ExpertWeights*>& experts);

// Whether FP4 weights meeting e4m3 activations take the block-exact arithmetic, the FP8 kernels'
// (STEADYMOE_FP4_BLOCK_EXACT=1): not by default. On the decode kernel, which widens FP4 codes in registers,
// deepseek-v4-flash's routed experts took 11-17% more time with it at 1 and 8 tokens and 6.5% less at 4096
// and 16384: a block's four MMAs add to one sum one after the other, where the per-32 arithmetic's four run
// at once (bench/results/2026-12-04-cuda-fp4-block-exact.md).
bool fp4_block_exact_requested();

// Why these experts cannot take the block-exact arithmetic ("" when they can): an FP4 matrix without the
// exact e4m3 form per 128 x 128 block (fp4_blocks.hpp), named.
std::string fp4_block_exact_blocker(const std::vector<const ExpertWeights*>& experts);

// Uploads the experts (which must pass tensor_core_blocker), FP4 ones in e4m3 order where asked (for GEMMs
// that take e4m3 activations: fp4_takes_e4m3), and then block-exact where asked: every FP4 matrix must be
// (else Unsupported, naming it). Throws OutOfMemory naming `what`.
DeviceExpertGroup upload_expert_group(const std::vector<const ExpertWeights*>& experts, const std::string& what,
                                      bool fp4_e4m3_order = false, bool fp4_block_exact = fp4_block_exact_requested());

// A dense bf16 matrix [n][k] (the router) as a one-expert set.
DeviceMatrixSet upload_bf16_matrix(const Tensor& matrix, const std::string& what);

}  // namespace steadymoe::cuda
