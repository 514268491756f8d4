// Reading a config.json (or DeepSeek's V4 inference config) into a MoeConfig: strict JSON field
// reading, the field mapping of each family, the defaults used for absent fields, quantization_config,
// and the bounded file read. Validation lives in config.cpp. docs/config.md states the same rules for
// users; keep the two in step.
#include "config_reader.hpp"

#include "steadymoe/core/error.hpp"
#include "steadymoe/core/files.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

namespace steadymoe::config_reader {

namespace {

using nlohmann::json;

constexpr const char* kSupportedModelTypes =
    "deepseek_v2, deepseek_v3, deepseek_v4, qwen2_moe, qwen3_moe, mixtral";

// Far beyond any real config file; turns a garbage file into a clear error instead of a huge allocation.
// The limits on the sizes a config states are checked by validation, in config.cpp.
constexpr std::uintmax_t kMaxConfigBytes = std::uintmax_t(64) << 20;
// The JSON library recurses per nesting level on some paths; a config is a few levels deep at most.
constexpr int kMaxJsonDepth = 256;

// ---------------------------------------------------------------------------------------------------
// Reading JSON values strictly.

// How a JSON value reads in an error message: its type, plus the value for numbers.
std::string json_kind(const json& v) {
    if (v.is_number_float()) {
        const double d = v.get<double>();
        // Show 8.0 as "8.0", so "must be an integer, got number 8.0" does not read as a contradiction.
        return std::isfinite(d) && d == std::trunc(d) ? fmt::format("number {:.1f}", d)
                                                      : fmt::format("number {}", d);
    }
    if (v.is_number()) return fmt::format("number {}", v.dump());
    return v.type_name();
}

// Reads typed fields of one JSON object. Every error names the origin file and the field's full name
// ("quantization_config.weight_block_size"), so a user can find the line to fix.
class Fields {
public:
    Fields(const json& object, std::string origin, std::string prefix = "")
        : obj_(object), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

    const std::string& origin() const { return origin_; }
    std::string name(std::string_view key) const { return prefix_ + std::string(key); }

    // Present with a non-null value. A null reads as absent, the way the Python loaders treat None.
    bool has(std::string_view key) const { return find(key) != nullptr; }

    std::optional<int64_t> optional_integer(std::string_view key) const {
        const json* v = find(key);
        if (!v) return std::nullopt;
        return to_integer(*v, name(key));
    }
    int64_t integer(std::string_view key) const { return to_integer(require(key), name(key)); }
    int64_t integer_or(std::string_view key, int64_t fallback) const {
        return optional_integer(key).value_or(fallback);
    }

    // Float fields take any JSON number: config writers print 2.5, 2 or 2.0 for the same value.
    double number_or(std::string_view key, double fallback) const {
        const json* v = find(key);
        if (!v) return fallback;
        if (!v->is_number()) wrong_type(key, "a number", *v);
        return v->get<double>();
    }

    bool boolean_or(std::string_view key, bool fallback) const {
        const json* v = find(key);
        if (!v) return fallback;
        if (!v->is_boolean()) wrong_type(key, "true or false", *v);
        return v->get<bool>();
    }

    std::optional<std::string> optional_string(std::string_view key) const {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_string()) wrong_type(key, "a string", *v);
        return v->get<std::string>();
    }
    std::string string(std::string_view key) const {
        require(key);
        return *optional_string(key);
    }
    std::string string_or(std::string_view key, const std::string& fallback) const {
        return optional_string(key).value_or(fallback);
    }

    // A list of integers; absent reads as empty.
    std::vector<int64_t> integer_list(std::string_view key) const {
        const json* v = find(key);
        if (!v) return {};
        if (!v->is_array()) wrong_type(key, "a list of integers", *v);
        std::vector<int64_t> out;
        out.reserve(v->size());
        for (size_t i = 0; i < v->size(); ++i)
            out.push_back(to_integer((*v)[i], fmt::format("{}[{}]", name(key), i)));
        return out;
    }

    // The nested object, or nullopt when absent.
    std::optional<Fields> object(std::string_view key) const {
        const json* v = find(key);
        if (!v) return std::nullopt;
        if (!v->is_object()) wrong_type(key, "an object", *v);
        return Fields(*v, origin_, name(key) + ".");
    }

private:
    const json* find(std::string_view key) const {
        const auto it = obj_.find(std::string(key));
        if (it == obj_.end() || it->is_null()) return nullptr;
        return &*it;
    }

    const json& require(std::string_view key) const {
        const json* v = find(key);
        SMOE_CHECK(v != nullptr, BadFormat, "{}: required field '{}' is missing", origin_, name(key));
        return *v;
    }

    int64_t to_integer(const json& v, const std::string& field) const {
        if (!v.is_number_integer()) {
            SMOE_THROW(BadFormat, "{}: field '{}' must be an integer, got {}", origin_, field, json_kind(v));
        }
        if (v.is_number_unsigned()) {
            const uint64_t u = v.get<uint64_t>();
            SMOE_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()), BadFormat,
                       "{}: field '{}' is out of range ({})", origin_, field, u);
            return int64_t(u);
        }
        return v.get<int64_t>();
    }

    [[noreturn]] void wrong_type(std::string_view key, const char* want, const json& v) const {
        SMOE_THROW(BadFormat, "{}: field '{}' must be {}, got {}", origin_, name(key), want, json_kind(v));
    }

    const json& obj_;
    std::string origin_;
    std::string prefix_;
};

// Rejects absurd nesting before the JSON library sees it (strings are skipped, escapes honoured).
void check_json_depth(const std::string& text, const std::string& origin) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            SMOE_CHECK(++depth <= kMaxJsonDepth, BadFormat, "{}: JSON nested deeper than {} levels", origin,
                       kMaxJsonDepth);
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
}

json parse_json(const std::string& text, const std::string& origin) {
    check_json_depth(text, origin);
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        // Drop the library's "[json.exception.parse_error.101] " tag; the rest says where and why.
        std::string_view what = e.what();
        if (const size_t close = what.find("] "); what.starts_with("[") && close != std::string_view::npos) {
            what.remove_prefix(close + 2);
        }
        SMOE_THROW(BadFormat, "{}: not valid JSON: {}", origin, what);
    }
}

int64_t checked_product(int64_t a, int64_t b, const std::string& origin, const char* a_name,
                        const char* b_name) {
    int64_t out = 0;
    SMOE_CHECK(!__builtin_mul_overflow(a, b, &out), BadFormat, "{}: {} ({}) x {} ({}) overflows", origin,
               a_name, a, b_name, b);
    return out;
}

// ---------------------------------------------------------------------------------------------------
// Families.

std::optional<ModelFamily> family_of(const std::string& model_type) {
    if (model_type == "deepseek_v2") return ModelFamily::DeepseekV2;
    if (model_type == "deepseek_v3") return ModelFamily::DeepseekV3;
    if (model_type == "deepseek_v4") return ModelFamily::DeepseekV4;
    if (model_type == "qwen2_moe") return ModelFamily::Qwen2Moe;
    if (model_type == "qwen3_moe") return ModelFamily::Qwen3Moe;
    if (model_type == "mixtral") return ModelFamily::Mixtral;
    return std::nullopt;
}

ScoreFunc read_score_func(const Fields& f, std::string_view key, const std::string& fallback) {
    const std::string name = f.string_or(key, fallback);
    if (name == "softmax") return ScoreFunc::Softmax;
    if (name == "sigmoid") return ScoreFunc::Sigmoid;
    if (name == "sqrtsoftplus") return ScoreFunc::SqrtSoftplus;
    SMOE_THROW(Unsupported, "{}: {} '{}' is not supported (supported: softmax, sigmoid, sqrtsoftplus)",
               f.origin(), f.name(key), name);
}

// DeepSeek's topk_method decides whether selection adds a bias and how a group is scored. Groups limit
// selection only when the method asks for them and there is more than one, exactly as the reference
// code skips the group step otherwise; the config then records n_group = topk_group = 1.
void read_deepseek_selection(const Fields& f, MoeConfig& c) {
    const bool v2 = c.family == ModelFamily::DeepseekV2;
    const bool v3 = c.family == ModelFamily::DeepseekV3;
    // V3's library config always routes with noaux_tc and defaults to 8 groups keeping 4.
    const std::string method = f.string_or("topk_method", v2 ? "greedy" : "noaux_tc");
    const int64_t n_group = f.integer_or("n_group", v3 ? 8 : 1);
    SMOE_CHECK(n_group >= 1, BadFormat, "{}: n_group ({}) must be at least 1", f.origin(), n_group);

    bool group_limited = false;
    if (method == "greedy") {
        c.group_score = GroupScore::Max;
    } else if (method == "group_limited_greedy") {
        c.group_score = GroupScore::Max;
        group_limited = true;
    } else if (method == "noaux_tc") {
        c.group_score = GroupScore::Top2Sum;
        c.selection_bias = true;
        group_limited = true;
    } else {
        SMOE_THROW(
            Unsupported,
            "{}: topk_method '{}' is not supported (supported: greedy, group_limited_greedy, noaux_tc)",
            f.origin(), method);
    }
    if (group_limited && n_group > 1) {
        c.n_group = n_group;
        c.topk_group = v3 ? f.integer_or("topk_group", 4) : f.integer("topk_group");
    }
}

void set_shared_experts(MoeConfig& c, int64_t n_shared, const std::string& origin) {
    c.n_shared_experts = n_shared;
    c.shared_intermediate_size = checked_product(n_shared, c.moe_intermediate_size, origin,
                                                 "n_shared_experts", "moe_intermediate_size");
}

// deepseek_v2 / deepseek_v3 / deepseek_v4 in Hugging Face naming. Absent optional fields take the Hugging
// Face library's defaults for that model type, so a file means what it means there.
void read_deepseek(const Fields& f, MoeConfig& c) {
    const bool v2 = c.family == ModelFamily::DeepseekV2;
    const bool v3 = c.family == ModelFamily::DeepseekV3;
    const bool v4 = c.family == ModelFamily::DeepseekV4;

    c.hidden_size = f.integer("hidden_size");
    c.moe_intermediate_size = f.integer("moe_intermediate_size");
    c.n_routed_experts = f.integer("n_routed_experts");
    c.top_k = f.integer("num_experts_per_tok");
    c.num_hidden_layers = f.integer("num_hidden_layers");
    c.vocab_size = f.integer_or("vocab_size", 0);
    set_shared_experts(c, f.integer_or("n_shared_experts", v2 ? 2 : 1), f.origin());

    c.score_func = read_score_func(f, "scoring_func", v2 ? "softmax" : v3 ? "sigmoid" : "sqrtsoftplus");
    read_deepseek_selection(f, c);
    c.norm_topk_prob = f.boolean_or("norm_topk_prob", !v2);
    c.routed_scaling_factor = f.number_or("routed_scaling_factor", v3 ? 2.5 : 1.0);

    if (v4) {
        // Every V4 layer is MoE; the first num_hash_layers route by token id. V4 clamps SwiGLU and
        // applies the routing weight before the down projection.
        c.num_hash_layers = f.integer_or("num_hash_layers", 0);
        c.swiglu_limit = f.number_or("swiglu_limit", 0.0);
        c.weight_placement = WeightPlacement::BeforeDown;
    } else {
        c.first_k_dense_replace = f.integer_or("first_k_dense_replace", v3 ? 3 : 0);
        c.moe_layer_freq = f.integer_or("moe_layer_freq", 1);
    }
}

// qwen2_moe / qwen3_moe: softmax over all experts, no bias, no groups.
void read_qwen(const Fields& f, MoeConfig& c) {
    c.hidden_size = f.integer("hidden_size");
    c.moe_intermediate_size = f.integer("moe_intermediate_size");
    // Older files say num_experts, newer ones num_local_experts; both mean the routed expert count.
    const std::optional<int64_t> num_experts = f.optional_integer("num_experts");
    const std::optional<int64_t> num_local = f.optional_integer("num_local_experts");
    SMOE_CHECK(num_experts || num_local, BadFormat,
               "{}: required field 'num_experts' (or 'num_local_experts') is missing", f.origin());
    SMOE_CHECK(!num_experts || !num_local || *num_experts == *num_local, BadFormat,
               "{}: num_experts ({}) and num_local_experts ({}) disagree", f.origin(), *num_experts,
               *num_local);
    c.n_routed_experts = num_experts ? *num_experts : *num_local;
    c.top_k = f.integer("num_experts_per_tok");
    c.num_hidden_layers = f.integer("num_hidden_layers");
    c.vocab_size = f.integer_or("vocab_size", 0);

    c.score_func = ScoreFunc::Softmax;
    c.norm_topk_prob = f.boolean_or("norm_topk_prob", false);
    c.decoder_sparse_step = f.integer_or("decoder_sparse_step", 1);
    c.mlp_only_layers = f.integer_list("mlp_only_layers");

    if (c.family == ModelFamily::Qwen2Moe) {
        // Qwen2-MoE always carries one sigmoid-gated shared expert; its width is a size, so it is required.
        const int64_t width = f.integer("shared_expert_intermediate_size");
        if (width > 0) {
            c.n_shared_experts = 1;
            c.shared_intermediate_size = width;
            c.shared_expert_gate = true;
        }
    }
}

// mixtral: intermediate_size is the expert width; softmax, top-k renormalised, every layer MoE.
void read_mixtral(const Fields& f, MoeConfig& c) {
    c.hidden_size = f.integer("hidden_size");
    c.moe_intermediate_size = f.integer("intermediate_size");
    c.n_routed_experts = f.integer("num_local_experts");
    c.top_k = f.integer("num_experts_per_tok");
    c.num_hidden_layers = f.integer("num_hidden_layers");
    c.vocab_size = f.integer_or("vocab_size", 0);
    c.score_func = ScoreFunc::Softmax;
    c.norm_topk_prob = true;
}

// ---------------------------------------------------------------------------------------------------
// Quantisation.

// FP8 checkpoints are only usable with e4m3 values and per-token (dynamic) activation scales.
void check_fp8_fields(const Fields& q, QuantizationConfig& out) {
    if (out.fmt.empty()) out.fmt = "e4m3";
    SMOE_CHECK(out.fmt == "e4m3", Unsupported, "{}: {} '{}' is not supported (only e4m3)", q.origin(),
               q.name("fmt"), out.fmt);
    if (out.activation_scheme.empty()) out.activation_scheme = "dynamic";
    SMOE_CHECK(out.activation_scheme == "dynamic", Unsupported,
               "{}: {} '{}' is not supported (only dynamic: static per-tensor scales would make a token's "
               "result depend on calibration outside it)",
               q.origin(), q.name("activation_scheme"), out.activation_scheme);
}

ExpertFormat expert_format_of(const Fields& q, QuantizationConfig& out) {
    const std::string& method = out.quant_method;
    if (method == "fp8") {
        check_fp8_fields(q, out);
        return ExpertFormat::Fp8;
    }
    if (method == "mxfp4") return ExpertFormat::Fp4;
    if (method == "nvfp4") return ExpertFormat::Nvfp4;
    if (method == "modelopt") {
        SMOE_CHECK(out.quant_algo == "NVFP4", Unsupported,
                   "{}: {} '{}' with quant_method 'modelopt' is not supported (only NVFP4)", q.origin(),
                   q.name("quant_algo"), out.quant_algo);
        return ExpertFormat::Nvfp4;
    }
    SMOE_THROW(Unsupported,
               "{}: {} '{}' is not supported (supported: fp8, mxfp4, nvfp4, modelopt with NVFP4)", q.origin(),
               q.name("quant_method"), method);
}

void read_weight_block_size(const Fields& q, QuantizationConfig& out) {
    if (!q.has("weight_block_size")) return;
    const std::vector<int64_t> block = q.integer_list("weight_block_size");
    SMOE_CHECK(block.size() == 2, BadFormat, "{}: {} must be [n, k], got {} values", q.origin(),
               q.name("weight_block_size"), block.size());
    // The FP8 kernels and the scale tensors' shapes assume DeepSeek's 128x128 blocks.
    SMOE_CHECK(block[0] == 128 && block[1] == 128, Unsupported,
               "{}: {} [{}, {}] is not supported (only [128, 128])", q.origin(), q.name("weight_block_size"),
               block[0], block[1]);
    out.weight_block_n = block[0];
    out.weight_block_k = block[1];
}

void read_quantization_config(const Fields& top, MoeConfig& c) {
    const std::optional<Fields> q = top.object("quantization_config");
    if (!q) return;
    QuantizationConfig& out = c.quantization;
    out.quant_method = q->string("quant_method");
    out.quant_algo = q->string_or("quant_algo", "");
    out.fmt = q->string_or("fmt", "");
    out.activation_scheme = q->string_or("activation_scheme", "");
    const std::string scale_fmt = q->string_or("scale_fmt", "");
    SMOE_CHECK(scale_fmt.empty() || scale_fmt == "ue8m0", Unsupported,
               "{}: {} '{}' is not supported (only ue8m0, or absent for float scales)", q->origin(),
               q->name("scale_fmt"), scale_fmt);
    out.ue8m0_scales = scale_fmt == "ue8m0";
    read_weight_block_size(*q, out);
    c.expert_format = expert_format_of(*q, out);
}

// DeepSeek-V4 stores routed experts in their own dtype ("fp4") while quantization_config describes the
// FP8 rest of the model.
void read_expert_dtype(const Fields& top, MoeConfig& c) {
    const std::optional<std::string> dtype = top.optional_string("expert_dtype");
    if (!dtype) return;
    if (*dtype == "fp4") {
        c.expert_format = ExpertFormat::Fp4;
    } else if (*dtype == "fp8") {
        // FP8 experts without a quantization_config: DeepSeek's defaults (e4m3, 128x128, dynamic).
        QuantizationConfig& q = c.quantization;
        if (q.quant_method.empty()) q.quant_method = "fp8";
        if (q.fmt.empty()) q.fmt = "e4m3";
        if (q.activation_scheme.empty()) q.activation_scheme = "dynamic";
        c.expert_format = ExpertFormat::Fp8;
    } else if (*dtype != "bf16") {
        SMOE_THROW(Unsupported, "{}: expert_dtype '{}' is not supported (supported: fp4, fp8, bf16)",
                   top.origin(), *dtype);
    }
}

// ---------------------------------------------------------------------------------------------------
// DeepSeek's own inference config (no model_type; dim, moe_inter_dim, n_activated_experts, ...).

bool is_deepseek_inference_config(const json& root) {
    return !root.contains("model_type") && root.contains("dim") && root.contains("moe_inter_dim") &&
           root.contains("n_routed_experts") && root.contains("n_activated_experts");
}

void read_deepseek_inference(const Fields& f, MoeConfig& c) {
    // Only V4's file is read this way: V3's decides whether the gate has a bias from the model width
    // alone, which a config reader should not guess. Its Hugging Face config.json says it plainly.
    const bool v4 = f.has("n_hash_layers") || f.has("swiglu_limit") ||
                    f.string_or("score_func", "") == "sqrtsoftplus";
    SMOE_CHECK(v4, Unsupported,
               "{}: a DeepSeek inference config without V4 fields (n_hash_layers, swiglu_limit, score_func "
               "sqrtsoftplus); read the model's Hugging Face config.json instead",
               f.origin());
    c.family = ModelFamily::DeepseekV4;
    c.model_type = "deepseek_v4";
    c.hidden_size = f.integer("dim");
    c.moe_intermediate_size = f.integer("moe_inter_dim");
    c.n_routed_experts = f.integer("n_routed_experts");
    c.top_k = f.integer("n_activated_experts");
    c.num_hidden_layers = f.integer("n_layers");
    c.vocab_size = f.integer_or("vocab_size", 0);
    set_shared_experts(c, f.integer_or("n_shared_experts", 1), f.origin());

    c.score_func = read_score_func(f, "score_func", "sqrtsoftplus");
    // The gate of a scored layer always has a bias, ranks groups by their top-2 sum, and renormalises
    // the top-k weights unless the scores already are a softmax.
    c.selection_bias = true;
    c.group_score = GroupScore::Top2Sum;
    const int64_t n_group = f.integer_or("n_expert_groups", 1);
    SMOE_CHECK(n_group >= 1, BadFormat, "{}: n_expert_groups ({}) must be at least 1", f.origin(), n_group);
    if (n_group > 1) {
        c.n_group = n_group;
        c.topk_group = f.integer("n_limited_groups");
    }
    c.norm_topk_prob = c.score_func != ScoreFunc::Softmax;
    c.routed_scaling_factor = f.number_or("route_scale", 1.0);
    c.num_hash_layers = f.integer_or("n_hash_layers", 0);
    c.swiglu_limit = f.number_or("swiglu_limit", 0.0);
    c.weight_placement = WeightPlacement::BeforeDown;

    // dtype "fp8": FP8 e4m3 weights in 128x128 blocks; scale_fmt "ue8m0": power-of-two scales.
    const std::string dtype = f.string_or("dtype", "bf16");
    if (dtype == "fp8") {
        c.quantization.quant_method = "fp8";
        c.quantization.fmt = "e4m3";
        c.quantization.activation_scheme = "dynamic";
        c.expert_format = ExpertFormat::Fp8;
    } else {
        SMOE_CHECK(dtype == "bf16", Unsupported, "{}: dtype '{}' is not supported (supported: bf16, fp8)",
                   f.origin(), dtype);
    }
    const std::string scale_fmt = f.string_or("scale_fmt", "");
    SMOE_CHECK(scale_fmt.empty() || scale_fmt == "ue8m0", Unsupported,
               "{}: scale_fmt '{}' is not supported (only ue8m0, or absent)", f.origin(), scale_fmt);
    c.quantization.ue8m0_scales = scale_fmt == "ue8m0";
}

void read_hugging_face(const Fields& f, MoeConfig& c) {
    c.model_type = f.string("model_type");
    const std::optional<ModelFamily> family = family_of(c.model_type);
    SMOE_CHECK(family.has_value(), Unsupported,
               "{}: model_type '{}' is not an MoE model SteadyMoE supports (supported: {})", f.origin(),
               c.model_type, kSupportedModelTypes);
    c.family = *family;
    switch (c.family) {
        case ModelFamily::DeepseekV2:
        case ModelFamily::DeepseekV3:
        case ModelFamily::DeepseekV4: read_deepseek(f, c); break;
        case ModelFamily::Qwen2Moe:
        case ModelFamily::Qwen3Moe: read_qwen(f, c); break;
        case ModelFamily::Mixtral: read_mixtral(f, c); break;
    }
    read_quantization_config(f, c);
}

}  // namespace

MoeConfig read_json_text(const std::string& text, const std::string& origin) {
    const json root = parse_json(text, origin);
    SMOE_CHECK(root.is_object(), BadFormat, "{}: expected a JSON object at the top level, got {}", origin,
               json_kind(root));
    const Fields fields(root, origin);
    MoeConfig config;
    if (is_deepseek_inference_config(root)) {
        read_deepseek_inference(fields, config);
    } else {
        read_hugging_face(fields, config);
    }
    read_expert_dtype(fields, config);
    return config;
}

// Reads a whole small file; NotFound / Io errors name the path.
std::string read_config_file(const std::filesystem::path& path) { return read_file_text(path, kMaxConfigBytes); }

}  // namespace steadymoe::config_reader
