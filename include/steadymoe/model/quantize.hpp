// The quantiser: bf16/f32 weights to FP8 (128x128 blocks), MXFP4 (e2m1 + E8M0 per 32) and NVFP4
// (e2m1 + E4M3 per 16 + F32 global), and whole checkpoints converted expert by expert.
#pragma once

#include "steadymoe/model/weights.hpp"

#include <filesystem>
#include <functional>
#include <string>

namespace steadymoe {

// How an E8M0 shared exponent is chosen for a block whose largest magnitude is amax.
enum class E8M0Rounding {
    Down,  // OCP MX spec: 2^(floor(log2 amax) - emax_elem); values beyond the grid saturate
    Up,    // DeepSeek-V4: the smallest power of two >= amax / max_elem; nothing ever clips
};

enum class QuantTarget { Fp8, Mxfp4, Nvfp4 };

// w is row-major [rows, cols] float32. Non-finite input is rejected (InvalidArgument, naming `name`
// and the element). The result owns its tensors and validates.
//   Fp8: scale = amax/448 per 128x128 block (F32, stored as weight_scale_inv), or with ue8m0 the
//        power of two at or above it (F8_E8M0) — the V3 and V4 conventions.
WeightMatrix quantize_fp8(const float* w, int64_t rows, int64_t cols, bool ue8m0, const std::string& name);
WeightMatrix quantize_mxfp4(const float* w, int64_t rows, int64_t cols, E8M0Rounding rounding,
                            const std::string& name);
WeightMatrix quantize_nvfp4(const float* w, int64_t rows, int64_t cols, const std::string& name);

struct QuantizeOptions {
    QuantTarget target = QuantTarget::Fp8;
    E8M0Rounding rounding = E8M0Rounding::Up;  // for Mxfp4 (and ue8m0 Fp8 is always Up)
    bool fp8_ue8m0 = false;                    // Fp8: E8M0 scales instead of F32
    // Expert matrices converted at once, each on one thread and holding a float copy of its matrix (the same
    // bytes for any count); 0: as many as a parallel region started here would have (OMP_NUM_THREADS where
    // set, else every hardware thread); at most 16 either way.
    int threads = 0;
    // Called after each tensor is written: (done, total, tensor name).
    std::function<void(size_t, size_t, const std::string&)> progress;
};

// Converts every routed-expert matrix of every MoE layer of the checkpoint in `in_dir` (stored in any
// format: quantised inputs are dequantised exactly first; several matrices at once, options.threads) and
// writes a complete checkpoint to `out_dir`: other tensors copied unchanged, config.json
// with quantization_config / expert format updated. Files are written to temporary names and
// renamed, so an interrupted run leaves no partial file under a final name.
void quantize_checkpoint(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                         const QuantizeOptions& options);

const char* quant_target_name(QuantTarget t);

}  // namespace steadymoe
