// The expert stage on the CPU: for every expert, gather its tokens, run gate/up, SwiGLU, down, and
// write each (token, slot) contribution, rounded to the activation dtype, into the slot buffer.
#pragma once

#include "steadymoe/kernels/cpu/activation.hpp"
#include "steadymoe/kernels/cpu/gemm.hpp"

#include <cstdint>
#include <vector>

namespace steadymoe::cpu {

struct PackedExpert {
    PackedWeight gate;  // [I, H]
    PackedWeight up;    // [I, H]
    PackedWeight down;  // [H, I]
    size_t bytes() const { return gate.bytes() + up.bytes() + down.bytes(); }
};

// The weights of one expert decoded for the CPU kernels (check_packable first).
PackedExpert pack_expert(const ExpertWeights& w);
// Throws BadFormat where pack_expert would refuse the expert: gate, up and down not all quantised or all
// dense.
void check_packable(const ExpertWeights& w);

// One expert's work for one batch: the rows it reads, where each result goes, and its weight.
struct ExpertJob {
    const PackedExpert* expert = nullptr;
    float swiglu_limit = 0.0f;
    bool weight_before_down = false;       // DeepSeek-V4: weight scales SwiGLU output (fp32)
    std::vector<int64_t> tokens;           // input rows, ascending
    std::vector<int64_t> destinations;     // output rows (in `out`), one per token
    std::vector<float> weights;            // routing weight per token (1 for shared experts)
};

struct ExpertStageParams {
    const float* hidden = nullptr;  // [T][H] exact activation values
    int64_t hidden_size = 0;
    ActDType act_dtype = ActDType::F32;
    ActivationQuant act_quant = ActivationQuant::None;  // applied to quantised experts only
    // Set when every job's expert is quantised and the sender of `hidden` already quantised it (rows that
    // came over the wire as FP8): hidden holds the operand values quantize_row_fp8 gives (act_quant must
    // be an FP8 mode), and hidden_scales [T][ceil(H / 128)] its kept scales (Fp8Block; null otherwise).
    // The gather copies them instead of quantising again: the same values, since quantising is a function
    // of the row alone.
    bool hidden_quantised = false;
    const float* hidden_scales = nullptr;
    float* out = nullptr;           // [rows][H] contributions, rounded to act_dtype
    int threads = 1;
};

// Runs every job; each output row is written exactly once. Threads split work by (job, panel),
// which never changes any row's arithmetic.
void run_expert_jobs(const ExpertStageParams& params, const std::vector<ExpertJob>& jobs);

// C[rows][N] = A . W^T over all of A's rows, split across threads by (panel, tile).
void parallel_gemm(const PackedActivations& a, const PackedWeight& w, float* c, int64_t ldc, int threads);

}  // namespace steadymoe::cpu

namespace steadymoe::cpu {

// A layer's weights decoded into GEMM panels (MoeLayer decodes each expert the first time a batch needs it).
struct PackedLayer {
    PackedWeight router;
    std::vector<PackedExpert> experts;
    bool has_shared = false;
    PackedExpert shared;
    size_t bytes() const;
};

}  // namespace steadymoe::cpu
