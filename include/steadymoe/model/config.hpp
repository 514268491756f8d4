// MoeConfig: everything about a model's MoE layers that the engine needs, read from a Hugging Face
// config.json (deepseek_v2, deepseek_v3, deepseek_v4, qwen2_moe, qwen3_moe, mixtral).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace steadymoe {

enum class ModelFamily { DeepseekV2, DeepseekV3, DeepseekV4, Qwen2Moe, Qwen3Moe, Mixtral };

enum class ScoreFunc {
    Softmax,       // softmax over all experts
    Sigmoid,       // sigmoid per expert
    SqrtSoftplus,  // sqrt(softplus(logit)), DeepSeek-V4
};

enum class GroupScore {
    Max,      // a group's score is its best expert's (DeepSeek-V2 group_limited_greedy)
    Top2Sum,  // the sum of its two best experts' selection scores (DeepSeek-V3 noaux_tc)
};

// Where the routing weight multiplies the expert: V3/Qwen/Mixtral scale the expert's output;
// V4 scales the SwiGLU activation before the down projection (in fp32).
enum class WeightPlacement { AfterDown, BeforeDown };

// How the checkpoint's routed experts are stored.
enum class ExpertFormat {
    Dense,  // BF16 / F16 / F32 as stored
    Fp8,    // e4m3 with a scale per 128x128 block (F32 weight_scale_inv, or F8_E8M0 scale)
    Fp4,    // e2m1 packed two per byte, E8M0 scale per 32 along K (DeepSeek-V4, MXFP4)
    Nvfp4,  // e2m1 packed, E4M3 scale per 16 along K, F32 global scale
};

// How activations enter quantised expert GEMMs.
enum class ActivationQuant {
    None,      // keep activations in bf16/f32
    Fp8Block,  // e4m3 per token per 128 values, scale amax/448 (DeepSeek-V3)
    Fp8Pow2,   // the same with the scale rounded up to a power of two (ue8m0; DeepSeek-V4)
};

struct QuantizationConfig {
    std::string quant_method;       // "" when the checkpoint is not quantised
    std::string quant_algo;         // quant_method "modelopt": "NVFP4"
    std::string fmt;                // "e4m3"
    bool ue8m0_scales = false;      // scale_fmt == "ue8m0"
    int64_t weight_block_n = 128;   // weight_block_size[0]
    int64_t weight_block_k = 128;   // weight_block_size[1]
    std::string activation_scheme;  // "dynamic"
};

struct MoeConfig {
    ModelFamily family = ModelFamily::DeepseekV3;
    std::string model_type;

    int64_t hidden_size = 0;             // H
    int64_t moe_intermediate_size = 0;   // I, one routed expert's width
    int64_t n_routed_experts = 0;        // E
    int64_t top_k = 0;                   // K
    int64_t n_shared_experts = 0;        // shared experts fused into one MLP of width shared_intermediate_size
    int64_t shared_intermediate_size = 0;
    bool shared_expert_gate = false;     // Qwen2-MoE: sigmoid(x . w) scales the shared expert

    ScoreFunc score_func = ScoreFunc::Softmax;
    bool selection_bias = false;         // e_score_correction_bias (V3) / gate.bias (V4)
    int64_t n_group = 1;                 // group-limited selection when n_group > 1
    int64_t topk_group = 1;
    GroupScore group_score = GroupScore::Max;
    bool norm_topk_prob = false;
    double routed_scaling_factor = 1.0;
    int64_t num_hash_layers = 0;         // V4: the first layers route by tid2eid[token_id]
    int64_t vocab_size = 0;
    double swiglu_limit = 0.0;           // V4: clamp gate <= limit, |up| <= limit (0: off)
    WeightPlacement weight_placement = WeightPlacement::AfterDown;

    int64_t num_hidden_layers = 0;
    int64_t first_k_dense_replace = 0;   // DeepSeek: layers below this are dense
    int64_t moe_layer_freq = 1;          // DeepSeek: every moe_layer_freq-th layer is MoE
    int64_t decoder_sparse_step = 1;     // Qwen: (L + 1) % step == 0 is MoE
    std::vector<int64_t> mlp_only_layers;  // Qwen: these layers are dense

    ExpertFormat expert_format = ExpertFormat::Dense;
    QuantizationConfig quantization;

    // Whether layer L has an MoE block, and whether it routes by token-id hash.
    bool is_moe_layer(int64_t layer) const;
    bool is_hash_layer(int64_t layer) const;
    // The activation arithmetic a quantised checkpoint was made for.
    ActivationQuant native_activation_quant() const;

    // Throws Error(BadFormat) naming the first inconsistent field.
    void validate() const;
    // A short human-readable summary, several lines.
    std::string describe() const;

    static MoeConfig from_json_text(const std::string& text, const std::string& origin = "config.json");
    static MoeConfig from_file(const std::filesystem::path& config_json);
};

const char* score_func_name(ScoreFunc f);
const char* activation_quant_name(ActivationQuant a);
const char* expert_format_name(ExpertFormat f);
const char* model_family_name(ModelFamily f);

}  // namespace steadymoe
