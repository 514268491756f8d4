// MoeConfig: the consistency checks every config must pass, the per-layer questions, describe() and the
// enum names. Reading the JSON is in config_reader.cpp. docs/config.md states the same rules for users;
// keep the two in step.
#include "steadymoe/model/config.hpp"

#include "config_reader.hpp"
#include "steadymoe/core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <system_error>

namespace steadymoe {

namespace {

// Limits far beyond any real model. They keep products of sizes inside int64 for the code downstream
// and turn a garbage file into a clear error instead of a huge allocation.
constexpr int64_t kMaxWidth = int64_t(1) << 24;    // hidden size, expert widths
constexpr int64_t kMaxExperts = int64_t(1) << 20;  // routed experts
constexpr int64_t kMaxLayers = int64_t(1) << 16;
constexpr int64_t kMaxVocab = int64_t(1) << 31;    // rows of a hash layer's tid2eid table

// ---------------------------------------------------------------------------------------------------
// Validation.

// The names a family's config.json uses for the expert count and width, so messages quote the file.
struct FieldNames {
    const char* experts;
    const char* width;
};

FieldNames field_names(ModelFamily family) {
    switch (family) {
        case ModelFamily::Qwen2Moe:
        case ModelFamily::Qwen3Moe: return {"num_experts", "moe_intermediate_size"};
        case ModelFamily::Mixtral: return {"num_local_experts", "intermediate_size"};
        default: return {"n_routed_experts", "moe_intermediate_size"};
    }
}

void check_size(int64_t value, int64_t limit, const std::string& origin, const char* name) {
    SMOE_CHECK(value > 0, BadFormat, "{}: {} ({}) must be positive", origin, name, value);
    SMOE_CHECK(value <= limit, BadFormat, "{}: {} ({}) is implausibly large (limit {})", origin, name, value,
               limit);
}

void validate_sizes(const MoeConfig& c, const std::string& origin) {
    const FieldNames names = field_names(c.family);
    check_size(c.hidden_size, kMaxWidth, origin, "hidden_size");
    check_size(c.moe_intermediate_size, kMaxWidth, origin, names.width);
    check_size(c.n_routed_experts, kMaxExperts, origin, names.experts);
    SMOE_CHECK(c.top_k >= 1, BadFormat, "{}: num_experts_per_tok ({}) must be at least 1", origin, c.top_k);
    SMOE_CHECK(c.top_k <= c.n_routed_experts, BadFormat, "{}: num_experts_per_tok ({}) exceeds {} ({})",
               origin, c.top_k, names.experts, c.n_routed_experts);
    check_size(c.num_hidden_layers, kMaxLayers, origin, "num_hidden_layers");
    SMOE_CHECK(c.vocab_size >= 0 && c.vocab_size <= kMaxVocab, BadFormat,
               "{}: vocab_size ({}) must be between 0 and {}", origin, c.vocab_size, kMaxVocab);
}

void validate_shared(const MoeConfig& c, const std::string& origin) {
    SMOE_CHECK(c.n_shared_experts >= 0, BadFormat, "{}: n_shared_experts ({}) must not be negative", origin,
               c.n_shared_experts);
    SMOE_CHECK(c.shared_intermediate_size >= 0 && c.shared_intermediate_size <= kMaxWidth, BadFormat,
               "{}: the shared experts' width ({}) must be between 0 and {}", origin,
               c.shared_intermediate_size, kMaxWidth);
    SMOE_CHECK(
        (c.n_shared_experts > 0) == (c.shared_intermediate_size > 0), BadFormat,
        "{}: n_shared_experts ({}) and the shared experts' width ({}) must both be zero or both positive",
        origin, c.n_shared_experts, c.shared_intermediate_size);
    SMOE_CHECK(!c.shared_expert_gate || c.n_shared_experts > 0, BadFormat,
               "{}: a shared expert gate needs a shared expert", origin);
}

void validate_groups(const MoeConfig& c, const std::string& origin) {
    const char* experts = field_names(c.family).experts;
    SMOE_CHECK(c.n_group >= 1, BadFormat, "{}: n_group ({}) must be at least 1", origin, c.n_group);
    if (c.n_group == 1) return;  // no group limit
    SMOE_CHECK(c.n_routed_experts % c.n_group == 0, BadFormat, "{}: {} ({}) is not divisible by n_group ({})",
               origin, experts, c.n_routed_experts, c.n_group);
    SMOE_CHECK(c.topk_group >= 1 && c.topk_group <= c.n_group, BadFormat,
               "{}: topk_group ({}) must be between 1 and n_group ({})", origin, c.topk_group, c.n_group);
    const int64_t per_group = c.n_routed_experts / c.n_group;
    SMOE_CHECK(c.top_k <= c.topk_group * per_group, BadFormat,
               "{}: num_experts_per_tok ({}) exceeds the experts in the kept groups: topk_group ({}) x {} "
               "experts per group = {}",
               origin, c.top_k, c.topk_group, per_group, c.topk_group * per_group);
    SMOE_CHECK(
        c.group_score != GroupScore::Top2Sum || per_group >= 2, BadFormat,
        "{}: the top-2-sum group score needs at least 2 experts per group, but {} ({}) / n_group ({}) = {}",
        origin, experts, c.n_routed_experts, c.n_group, per_group);
}

void validate_routing_numbers(const MoeConfig& c, const std::string& origin) {
    SMOE_CHECK(std::isfinite(c.routed_scaling_factor) && c.routed_scaling_factor > 0, BadFormat,
               "{}: routed_scaling_factor ({}) must be finite and positive", origin, c.routed_scaling_factor);
    SMOE_CHECK(std::isfinite(c.swiglu_limit) && c.swiglu_limit >= 0, BadFormat,
               "{}: swiglu_limit ({}) must be finite and not negative (0 turns the clamp off)", origin,
               c.swiglu_limit);
}

void validate_layers(const MoeConfig& c, const std::string& origin) {
    SMOE_CHECK(c.first_k_dense_replace >= 0, BadFormat, "{}: first_k_dense_replace ({}) must not be negative",
               origin, c.first_k_dense_replace);
    SMOE_CHECK(c.moe_layer_freq >= 1, BadFormat, "{}: moe_layer_freq ({}) must be at least 1", origin,
               c.moe_layer_freq);
    SMOE_CHECK(c.decoder_sparse_step >= 1, BadFormat, "{}: decoder_sparse_step ({}) must be at least 1",
               origin, c.decoder_sparse_step);
    for (const int64_t layer : c.mlp_only_layers) {
        SMOE_CHECK(layer >= 0, BadFormat, "{}: mlp_only_layers holds a negative layer ({})", origin, layer);
    }
    SMOE_CHECK(c.num_hash_layers >= 0, BadFormat, "{}: num_hash_layers ({}) must not be negative", origin,
               c.num_hash_layers);
    SMOE_CHECK(c.num_hash_layers <= c.num_hidden_layers, BadFormat,
               "{}: num_hash_layers ({}) exceeds num_hidden_layers ({})", origin, c.num_hash_layers,
               c.num_hidden_layers);
    SMOE_CHECK(c.num_hash_layers == 0 || c.vocab_size > 0, BadFormat,
               "{}: num_hash_layers ({}) needs vocab_size > 0 for the token-id table", origin,
               c.num_hash_layers);
    bool any_moe = false;
    for (int64_t layer = 0; layer < c.num_hidden_layers && !any_moe; ++layer) any_moe = c.is_moe_layer(layer);
    SMOE_CHECK(any_moe, BadFormat,
               "{}: none of the {} layers has an MoE block (check first_k_dense_replace, moe_layer_freq, "
               "decoder_sparse_step, mlp_only_layers)",
               origin, c.num_hidden_layers);
}

void validate_quantization(const MoeConfig& c, const std::string& origin) {
    const QuantizationConfig& q = c.quantization;
    if (c.expert_format != ExpertFormat::Fp8) return;
    SMOE_CHECK(q.weight_block_n == 128 && q.weight_block_k == 128, BadFormat,
               "{}: FP8 experts need weight_block_size [128, 128], not [{}, {}]", origin, q.weight_block_n,
               q.weight_block_k);
    SMOE_CHECK(q.fmt == "e4m3", BadFormat, "{}: FP8 experts need fmt e4m3, not '{}'", origin, q.fmt);
}

void validate_config(const MoeConfig& c, const std::string& origin) {
    validate_sizes(c, origin);
    validate_shared(c, origin);
    validate_groups(c, origin);
    validate_routing_numbers(c, origin);
    validate_layers(c, origin);
    validate_quantization(c, origin);
}

// ---------------------------------------------------------------------------------------------------
// Describing.

// "0,2-5,7-47 every 2nd": runs of consecutive layers as a-b, longer strided runs with their stride.
std::string compress_layers(const std::vector<int64_t>& layers) {
    std::string out;
    size_t i = 0;
    while (i < layers.size()) {
        if (!out.empty()) out += ",";
        size_t j = i + 1;
        if (j < layers.size()) {
            const int64_t step = layers[j] - layers[i];
            while (j + 1 < layers.size() && layers[j + 1] - layers[j] == step) ++j;
            const size_t run = j - i + 1;
            if (step == 1 && run >= 2) {
                out += fmt::format("{}-{}", layers[i], layers[j]);
                i = j + 1;
                continue;
            }
            if (run >= 3) {
                out += fmt::format("{}-{} every {}", layers[i], layers[j], step);
                i = j + 1;
                continue;
            }
        }
        out += fmt::format("{}", layers[i]);
        ++i;
    }
    return out.empty() ? "none" : out;
}

std::string describe_shared(const MoeConfig& c) {
    if (c.n_shared_experts == 0) return "no shared expert";
    return fmt::format("shared {} (width {}{})", c.n_shared_experts, c.shared_intermediate_size,
                       c.shared_expert_gate ? ", sigmoid-gated" : "");
}

std::string describe_groups(const MoeConfig& c) {
    if (c.n_group <= 1) return "no groups";
    return fmt::format("{} groups keep {} by {}", c.n_group, c.topk_group,
                       c.group_score == GroupScore::Top2Sum ? "top-2 sum" : "max");
}

// Longer than expert_format_name() on purpose: describe() is read by people and spells out the element
// and scale layout, while the short names are identifiers for JSON output and messages. Tests pin both.
const char* expert_format_text(ExpertFormat f) {
    switch (f) {
        case ExpertFormat::Dense: return "dense (as stored)";
        case ExpertFormat::Fp8: return "fp8 e4m3, scale per 128x128 block";
        case ExpertFormat::Fp4: return "fp4 e2m1, e8m0 scale per 32";
        case ExpertFormat::Nvfp4: return "nvfp4 e2m1, e4m3 scale per 16 and an f32 global scale";
    }
    return "?";
}

// The routed experts' format, then what quantization_config says (for V4 it covers the FP8 rest).
std::string describe_weights(const MoeConfig& c) {
    std::string text = fmt::format("experts {}", expert_format_text(c.expert_format));
    const QuantizationConfig& q = c.quantization;
    if (!q.quant_method.empty()) {
        text += fmt::format("; quantization_config {}", q.quant_method);
        if (!q.quant_algo.empty()) text += " " + q.quant_algo;
        if (q.quant_method == "fp8")
            text += fmt::format(" {} {}x{}", q.fmt, q.weight_block_n, q.weight_block_k);
        if (q.ue8m0_scales) text += ", ue8m0 scales";
    }
    return text;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------

bool MoeConfig::is_moe_layer(int64_t layer) const {
    if (layer < 0 || layer >= num_hidden_layers || n_routed_experts <= 0) return false;
    switch (family) {
        case ModelFamily::DeepseekV2:
        case ModelFamily::DeepseekV3:
            return layer >= first_k_dense_replace && moe_layer_freq > 0 && layer % moe_layer_freq == 0;
        case ModelFamily::DeepseekV4:
        case ModelFamily::Mixtral: return true;
        case ModelFamily::Qwen2Moe:
        case ModelFamily::Qwen3Moe:
            return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0 &&
                   std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
    }
    return false;
}

bool MoeConfig::is_hash_layer(int64_t layer) const { return layer < num_hash_layers && is_moe_layer(layer); }

ActivationQuant MoeConfig::native_activation_quant() const {
    switch (expert_format) {
        case ExpertFormat::Fp8:
            return quantization.ue8m0_scales ? ActivationQuant::Fp8Pow2 : ActivationQuant::Fp8Block;
        // DeepSeek-V4 multiplies its FP4 experts with FP8 activations under power-of-two scales.
        case ExpertFormat::Fp4:
            return family == ModelFamily::DeepseekV4 ? ActivationQuant::Fp8Pow2 : ActivationQuant::None;
        case ExpertFormat::Dense:
        case ExpertFormat::Nvfp4: return ActivationQuant::None;
    }
    return ActivationQuant::None;
}

void MoeConfig::validate() const { validate_config(*this, "config.json"); }

std::string MoeConfig::describe() const {
    std::vector<int64_t> moe_layers, hash_layers;
    // Bounded, so describing a hand-built config that was never validated cannot run away.
    for (int64_t layer = 0; layer < std::min(num_hidden_layers, kMaxLayers); ++layer) {
        if (is_moe_layer(layer)) moe_layers.push_back(layer);
        if (is_hash_layer(layer)) hash_layers.push_back(layer);
    }
    std::string out;
    out += fmt::format("model:    {}, {} layer{}, vocab {}\n", model_family_name(family), num_hidden_layers,
                       num_hidden_layers == 1 ? "" : "s", vocab_size);
    out += fmt::format("experts:  H={} I={} E={} K={}, {}\n", hidden_size, moe_intermediate_size,
                       n_routed_experts, top_k, describe_shared(*this));
    out +=
        fmt::format("routing:  {} scores, {}, {}, {}, scale {}\n", score_func_name(score_func),
                    selection_bias ? "biased selection" : "unbiased selection", describe_groups(*this),
                    norm_topk_prob ? "top-k renormalised" : "top-k not renormalised", routed_scaling_factor);
    out += fmt::format("layers:   MoE {} ({} of {})", compress_layers(moe_layers), moe_layers.size(),
                       num_hidden_layers);
    if (!hash_layers.empty()) out += fmt::format(", hash-routed {}", compress_layers(hash_layers));
    out += "\n";
    out +=
        fmt::format("swiglu:   {}, routing weight {} the down projection\n",
                    swiglu_limit > 0 ? fmt::format("clamped at {}", swiglu_limit) : std::string("no clamp"),
                    weight_placement == WeightPlacement::BeforeDown ? "before" : "after");
    out += fmt::format("weights:  {}; activations {}\n", describe_weights(*this),
                       activation_quant_name(native_activation_quant()));
    return out;
}

MoeConfig MoeConfig::from_json_text(const std::string& text, const std::string& origin) {
    MoeConfig config = config_reader::read_json_text(text, origin);
    validate_config(config, origin);
    return config;
}

MoeConfig MoeConfig::from_file(const std::filesystem::path& config_json) {
    std::filesystem::path path = config_json;
    std::error_code ec;
    // A model directory is accepted too: its config.json is the file meant.
    if (std::filesystem::is_directory(path, ec)) path /= "config.json";
    return from_json_text(config_reader::read_config_file(path), path.string());
}

const char* score_func_name(ScoreFunc f) {
    switch (f) {
        case ScoreFunc::Softmax: return "softmax";
        case ScoreFunc::Sigmoid: return "sigmoid";
        case ScoreFunc::SqrtSoftplus: return "sqrtsoftplus";
    }
    return "?";
}

const char* activation_quant_name(ActivationQuant a) {
    switch (a) {
        case ActivationQuant::None: return "none";
        case ActivationQuant::Fp8Block: return "fp8 (per-128 scale)";
        case ActivationQuant::Fp8Pow2: return "fp8 (per-128 power-of-two scale)";
    }
    return "?";
}

const char* expert_format_name(ExpertFormat f) {
    switch (f) {
        case ExpertFormat::Dense: return "dense";
        case ExpertFormat::Fp8: return "fp8";
        case ExpertFormat::Fp4: return "fp4";
        case ExpertFormat::Nvfp4: return "nvfp4";
    }
    return "?";
}

const char* model_family_name(ModelFamily f) {
    switch (f) {
        case ModelFamily::DeepseekV2: return "deepseek_v2";
        case ModelFamily::DeepseekV3: return "deepseek_v3";
        case ModelFamily::DeepseekV4: return "deepseek_v4";
        case ModelFamily::Qwen2Moe: return "qwen2_moe";
        case ModelFamily::Qwen3Moe: return "qwen3_moe";
        case ModelFamily::Mixtral: return "mixtral";
    }
    return "?";
}

}  // namespace steadymoe
