// MoeConfig: the goldens' config.json files, one synthetic config per family, the layer tables, and a
// matrix of broken configs that must fail with the right error kind and a message naming the field.
#include "steadymoe/core/error.hpp"
#include "steadymoe/model/config.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace steadymoe {
namespace {

using nlohmann::json;

MoeConfig parse(const json& j) { return MoeConfig::from_json_text(j.dump()); }

// Runs fn, which must throw steadymoe::Error of `kind` whose message contains every needle.
void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::vector<std::string>& needles) {
    try {
        fn();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << "kind " << error_kind_name(e.kind()) << ", message: " << e.what();
        for (const std::string& needle : needles) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
                << "message lacks '" << needle << "': " << e.what();
        }
        return;
    }
    ADD_FAILURE() << "no steadymoe::Error thrown";
}

std::vector<int64_t> moe_layers(const MoeConfig& c) {
    std::vector<int64_t> out;
    for (int64_t layer = -1; layer <= c.num_hidden_layers; ++layer) {
        if (c.is_moe_layer(layer)) out.push_back(layer);
    }
    return out;
}

std::vector<int64_t> hash_layers(const MoeConfig& c) {
    std::vector<int64_t> out;
    for (int64_t layer = -1; layer <= c.num_hidden_layers; ++layer) {
        if (c.is_hash_layer(layer)) out.push_back(layer);
    }
    return out;
}

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

// ---------------------------------------------------------------------------------------------------
// Goldens.

TEST(ConfigGolden, DeepseekV3Tiny) {
    const MoeConfig c = MoeConfig::from_file(test::golden_dir() / "deepseek-v3-tiny" / "config.json");
    EXPECT_EQ(c.family, ModelFamily::DeepseekV3);
    EXPECT_EQ(c.model_type, "deepseek_v3");
    EXPECT_EQ(c.hidden_size, 256);
    EXPECT_EQ(c.moe_intermediate_size, 128);
    EXPECT_EQ(c.n_routed_experts, 16);
    EXPECT_EQ(c.top_k, 4);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.shared_intermediate_size, 128);
    EXPECT_FALSE(c.shared_expert_gate);
    // No scoring_func / topk_method in the file: the library's V3 routing (sigmoid, noaux_tc) applies.
    EXPECT_EQ(c.score_func, ScoreFunc::Sigmoid);
    EXPECT_TRUE(c.selection_bias);
    EXPECT_EQ(c.n_group, 4);
    EXPECT_EQ(c.topk_group, 2);
    EXPECT_EQ(c.group_score, GroupScore::Top2Sum);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
    EXPECT_EQ(c.num_hash_layers, 0);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.swiglu_limit, 0.0);
    EXPECT_EQ(c.weight_placement, WeightPlacement::AfterDown);
    EXPECT_EQ(c.num_hidden_layers, 2);
    EXPECT_EQ(c.first_k_dense_replace, 1);
    EXPECT_EQ(c.moe_layer_freq, 1);
    EXPECT_EQ(moe_layers(c), (std::vector<int64_t>{1}));
    EXPECT_TRUE(hash_layers(c).empty());
    EXPECT_EQ(c.expert_format, ExpertFormat::Dense);
    EXPECT_EQ(c.quantization.quant_method, "");
    EXPECT_EQ(c.native_activation_quant(), ActivationQuant::None);
}

TEST(ConfigGolden, Qwen3MoeTiny) {
    const MoeConfig c = MoeConfig::from_file(test::golden_dir() / "qwen3-moe-tiny" / "config.json");
    EXPECT_EQ(c.family, ModelFamily::Qwen3Moe);
    EXPECT_EQ(c.model_type, "qwen3_moe");
    EXPECT_EQ(c.hidden_size, 192);
    EXPECT_EQ(c.moe_intermediate_size, 96);
    EXPECT_EQ(c.n_routed_experts, 12);  // from num_local_experts
    EXPECT_EQ(c.top_k, 3);
    EXPECT_EQ(c.n_shared_experts, 0);
    EXPECT_EQ(c.shared_intermediate_size, 0);
    EXPECT_FALSE(c.shared_expert_gate);
    EXPECT_EQ(c.score_func, ScoreFunc::Softmax);
    EXPECT_FALSE(c.selection_bias);
    EXPECT_EQ(c.n_group, 1);
    EXPECT_EQ(c.topk_group, 1);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
    EXPECT_EQ(c.num_hash_layers, 0);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.weight_placement, WeightPlacement::AfterDown);
    EXPECT_EQ(c.num_hidden_layers, 1);
    EXPECT_EQ(c.decoder_sparse_step, 1);
    EXPECT_TRUE(c.mlp_only_layers.empty());
    EXPECT_EQ(moe_layers(c), (std::vector<int64_t>{0}));
    EXPECT_EQ(c.expert_format, ExpertFormat::Dense);
    EXPECT_EQ(c.native_activation_quant(), ActivationQuant::None);
}

void expect_golden_v4(const MoeConfig& c) {
    EXPECT_EQ(c.family, ModelFamily::DeepseekV4);
    EXPECT_EQ(c.model_type, "deepseek_v4");
    EXPECT_EQ(c.hidden_size, 256);
    EXPECT_EQ(c.moe_intermediate_size, 384);
    EXPECT_EQ(c.n_routed_experts, 16);
    EXPECT_EQ(c.top_k, 4);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.shared_intermediate_size, 384);
    EXPECT_FALSE(c.shared_expert_gate);
    EXPECT_EQ(c.score_func, ScoreFunc::SqrtSoftplus);
    EXPECT_TRUE(c.selection_bias);  // scored layers; hash layers never use it
    EXPECT_EQ(c.n_group, 1);
    EXPECT_EQ(c.topk_group, 1);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
    EXPECT_EQ(c.num_hash_layers, 1);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_DOUBLE_EQ(c.swiglu_limit, 10.0);
    EXPECT_EQ(c.weight_placement, WeightPlacement::BeforeDown);
    EXPECT_EQ(c.num_hidden_layers, 2);
    EXPECT_EQ(moe_layers(c), (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(hash_layers(c), (std::vector<int64_t>{0}));
    EXPECT_EQ(c.expert_format, ExpertFormat::Fp4);
    EXPECT_EQ(c.quantization.quant_method, "fp8");
    EXPECT_EQ(c.quantization.fmt, "e4m3");
    EXPECT_TRUE(c.quantization.ue8m0_scales);
    EXPECT_EQ(c.quantization.weight_block_n, 128);
    EXPECT_EQ(c.quantization.weight_block_k, 128);
    EXPECT_EQ(c.quantization.activation_scheme, "dynamic");
    EXPECT_EQ(c.native_activation_quant(), ActivationQuant::Fp8Pow2);
}

TEST(ConfigGolden, DeepseekV4Tiny) {
    expect_golden_v4(MoeConfig::from_file(test::golden_dir() / "deepseek-v4-tiny" / "config.json"));
}

TEST(ConfigGolden, DeepseekV4InferenceConfigReadsTheSame) {
    expect_golden_v4(MoeConfig::from_file(test::golden_dir() / "deepseek-v4-tiny" / "inference_config.json"));
}

TEST(ConfigGolden, DirectoryMeansItsConfigJson) {
    const MoeConfig c = MoeConfig::from_file(test::golden_dir() / "deepseek-v3-tiny");
    EXPECT_EQ(c.family, ModelFamily::DeepseekV3);
    EXPECT_EQ(c.n_routed_experts, 16);
}

TEST(ConfigGolden, DescribeNamesTheEssentials) {
    const std::string v3 = MoeConfig::from_file(test::golden_dir() / "deepseek-v3-tiny").describe();
    EXPECT_TRUE(contains(v3, "deepseek_v3")) << v3;
    EXPECT_TRUE(contains(v3, "H=256 I=128 E=16 K=4")) << v3;
    EXPECT_TRUE(contains(v3, "sigmoid")) << v3;
    EXPECT_TRUE(contains(v3, "4 groups keep 2 by top-2 sum")) << v3;
    EXPECT_TRUE(contains(v3, "scale 2.5")) << v3;
    EXPECT_TRUE(contains(v3, "MoE 1 (1 of 2)")) << v3;

    const std::string v4 = MoeConfig::from_file(test::golden_dir() / "deepseek-v4-tiny").describe();
    EXPECT_TRUE(contains(v4, "sqrtsoftplus")) << v4;
    EXPECT_TRUE(contains(v4, "MoE 0-1 (2 of 2), hash-routed 0")) << v4;
    EXPECT_TRUE(contains(v4, "clamped at 10")) << v4;
    EXPECT_TRUE(contains(v4, "before the down projection")) << v4;
    EXPECT_TRUE(contains(v4, "experts fp4 e2m1, e8m0 scale per 32")) << v4;
    EXPECT_TRUE(contains(v4, "quantization_config fp8 e4m3 128x128, ue8m0 scales")) << v4;
    EXPECT_TRUE(contains(v4, "power-of-two")) << v4;
}

// ---------------------------------------------------------------------------------------------------
// One synthetic config per family.

TEST(ConfigFamilies, DeepseekV2GroupLimitedGreedy) {
    const MoeConfig c = parse({{"model_type", "deepseek_v2"},
                               {"hidden_size", 5120},
                               {"moe_intermediate_size", 1536},
                               {"n_routed_experts", 160},
                               {"num_experts_per_tok", 6},
                               {"n_shared_experts", 2},
                               {"topk_method", "group_limited_greedy"},
                               {"n_group", 8},
                               {"topk_group", 3},
                               {"routed_scaling_factor", 16.0},
                               {"first_k_dense_replace", 1},
                               {"moe_layer_freq", 1},
                               {"num_hidden_layers", 60},
                               {"vocab_size", 102400}});
    EXPECT_EQ(c.family, ModelFamily::DeepseekV2);
    EXPECT_EQ(c.score_func, ScoreFunc::Softmax);  // V2 default
    EXPECT_FALSE(c.selection_bias);
    EXPECT_EQ(c.n_group, 8);
    EXPECT_EQ(c.topk_group, 3);
    EXPECT_EQ(c.group_score, GroupScore::Max);
    EXPECT_FALSE(c.norm_topk_prob);  // V2 default
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 16.0);
    EXPECT_EQ(c.n_shared_experts, 2);
    EXPECT_EQ(c.shared_intermediate_size, 3072);
    EXPECT_EQ(c.weight_placement, WeightPlacement::AfterDown);
    EXPECT_FALSE(c.is_moe_layer(0));
    EXPECT_TRUE(c.is_moe_layer(1));
    EXPECT_TRUE(c.is_moe_layer(59));
    EXPECT_FALSE(c.is_moe_layer(60));
    EXPECT_EQ(c.expert_format, ExpertFormat::Dense);
}

TEST(ConfigFamilies, DeepseekV2GreedyIgnoresGroups) {
    // Greedy selection never limits groups, whatever n_group says; null fields read as absent.
    const MoeConfig c = parse({{"model_type", "deepseek_v2"},
                               {"hidden_size", 2048},
                               {"moe_intermediate_size", 1408},
                               {"n_routed_experts", 64},
                               {"num_experts_per_tok", 6},
                               {"n_group", 8},
                               {"topk_group", nullptr},
                               {"norm_topk_prob", nullptr},
                               {"num_hidden_layers", 27}});
    EXPECT_EQ(c.n_group, 1);
    EXPECT_EQ(c.topk_group, 1);
    EXPECT_FALSE(c.selection_bias);
    EXPECT_FALSE(c.norm_topk_prob);
    EXPECT_EQ(c.n_shared_experts, 2);  // the library default for V2
    EXPECT_EQ(moe_layers(c).size(), 27u);
}

json full_deepseek_v3() {
    return {{"model_type", "deepseek_v3"},
            {"hidden_size", 7168},
            {"moe_intermediate_size", 2048},
            {"n_routed_experts", 256},
            {"num_experts_per_tok", 8},
            {"n_shared_experts", 1},
            {"n_group", 8},
            {"topk_group", 4},
            {"topk_method", "noaux_tc"},
            {"scoring_func", "sigmoid"},
            {"norm_topk_prob", true},
            {"routed_scaling_factor", 2.5},
            {"first_k_dense_replace", 3},
            {"moe_layer_freq", 1},
            {"num_hidden_layers", 61},
            {"vocab_size", 129280},
            {"quantization_config",
             {{"activation_scheme", "dynamic"},
              {"fmt", "e4m3"},
              {"quant_method", "fp8"},
              {"weight_block_size", {128, 128}}}}};
}

TEST(ConfigFamilies, DeepseekV3FullSize) {
    const MoeConfig c = parse(full_deepseek_v3());
    EXPECT_EQ(c.family, ModelFamily::DeepseekV3);
    EXPECT_EQ(c.hidden_size, 7168);
    EXPECT_EQ(c.moe_intermediate_size, 2048);
    EXPECT_EQ(c.n_routed_experts, 256);
    EXPECT_EQ(c.top_k, 8);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.shared_intermediate_size, 2048);
    EXPECT_EQ(c.score_func, ScoreFunc::Sigmoid);
    EXPECT_TRUE(c.selection_bias);
    EXPECT_EQ(c.n_group, 8);
    EXPECT_EQ(c.topk_group, 4);
    EXPECT_EQ(c.group_score, GroupScore::Top2Sum);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
    EXPECT_EQ(c.num_hidden_layers, 61);
    EXPECT_EQ(c.first_k_dense_replace, 3);
    EXPECT_EQ(c.expert_format, ExpertFormat::Fp8);
    EXPECT_EQ(c.quantization.quant_method, "fp8");
    EXPECT_EQ(c.quantization.fmt, "e4m3");
    EXPECT_FALSE(c.quantization.ue8m0_scales);
    EXPECT_EQ(c.quantization.weight_block_n, 128);
    EXPECT_EQ(c.quantization.weight_block_k, 128);
    EXPECT_EQ(c.quantization.activation_scheme, "dynamic");
    EXPECT_EQ(c.native_activation_quant(), ActivationQuant::Fp8Block);

    const std::string text = c.describe();
    EXPECT_TRUE(contains(text, "MoE 3-60 (58 of 61)")) << text;
    EXPECT_TRUE(contains(text, "8 groups keep 4 by top-2 sum")) << text;
    EXPECT_TRUE(contains(text, "quantization_config fp8 e4m3 128x128")) << text;
    EXPECT_TRUE(contains(text, "biased selection")) << text;
}

TEST(ConfigFamilies, DeepseekV3Ue8m0ScalesMeanPowerOfTwoActivations) {
    json j = full_deepseek_v3();
    j["quantization_config"]["scale_fmt"] = "ue8m0";
    const MoeConfig c = parse(j);
    EXPECT_TRUE(c.quantization.ue8m0_scales);
    EXPECT_EQ(c.native_activation_quant(), ActivationQuant::Fp8Pow2);
}

TEST(ConfigFamilies, DeepseekV3LibraryDefaults) {
    // Only the sizes given: routing follows the library's V3 defaults (8 groups keep 4, x2.5, 3 dense).
    const MoeConfig c = parse({{"model_type", "deepseek_v3"},
                               {"hidden_size", 64},
                               {"moe_intermediate_size", 32},
                               {"n_routed_experts", 32},
                               {"num_experts_per_tok", 4},
                               {"num_hidden_layers", 5}});
    EXPECT_EQ(c.score_func, ScoreFunc::Sigmoid);
    EXPECT_TRUE(c.selection_bias);
    EXPECT_EQ(c.n_group, 8);
    EXPECT_EQ(c.topk_group, 4);
    EXPECT_EQ(c.group_score, GroupScore::Top2Sum);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.5);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(moe_layers(c), (std::vector<int64_t>{3, 4}));
}

TEST(ConfigFamilies, Qwen2MoeSharedExpertGateAndSparseStep) {
    const MoeConfig c = parse({{"model_type", "qwen2_moe"},
                               {"hidden_size", 2048},
                               {"moe_intermediate_size", 1408},
                               {"num_experts", 60},
                               {"num_experts_per_tok", 4},
                               {"shared_expert_intermediate_size", 5632},
                               {"decoder_sparse_step", 2},
                               {"mlp_only_layers", {3, 7}},
                               {"num_hidden_layers", 8},
                               {"vocab_size", 151936}});
    EXPECT_EQ(c.family, ModelFamily::Qwen2Moe);
    EXPECT_EQ(c.n_routed_experts, 60);
    EXPECT_EQ(c.top_k, 4);
    EXPECT_EQ(c.n_shared_experts, 1);
    EXPECT_EQ(c.shared_intermediate_size, 5632);
    EXPECT_TRUE(c.shared_expert_gate);
    EXPECT_EQ(c.score_func, ScoreFunc::Softmax);
    EXPECT_FALSE(c.selection_bias);
    EXPECT_FALSE(c.norm_topk_prob);  // library default
    EXPECT_EQ(c.n_group, 1);
    EXPECT_EQ(c.decoder_sparse_step, 2);
    EXPECT_EQ(c.mlp_only_layers, (std::vector<int64_t>{3, 7}));
    // (L + 1) % 2 == 0 gives 1, 3, 5, 7; 3 and 7 are dense by mlp_only_layers.
    EXPECT_EQ(moe_layers(c), (std::vector<int64_t>{1, 5}));
    EXPECT_TRUE(contains(c.describe(), "MoE 1,5 (2 of 8)")) << c.describe();
    EXPECT_TRUE(contains(c.describe(), "sigmoid-gated")) << c.describe();
}

TEST(ConfigFamilies, Qwen2MoeWithoutSharedExpert) {
    const MoeConfig c = parse({{"model_type", "qwen2_moe"},
                               {"hidden_size", 64},
                               {"moe_intermediate_size", 32},
                               {"num_experts", 8},
                               {"num_experts_per_tok", 2},
                               {"shared_expert_intermediate_size", 0},
                               {"decoder_sparse_step", 2},
                               {"mlp_only_layers", nullptr},
                               {"num_hidden_layers", 8}});
    EXPECT_EQ(c.n_shared_experts, 0);
    EXPECT_FALSE(c.shared_expert_gate);
    EXPECT_TRUE(contains(c.describe(), "MoE 1-7 every 2 (4 of 8)")) << c.describe();
}

TEST(ConfigFamilies, Qwen3MoeNumExperts) {
    const MoeConfig c = parse({{"model_type", "qwen3_moe"},
                               {"hidden_size", 2048},
                               {"moe_intermediate_size", 768},
                               {"num_experts", 128},
                               {"num_experts_per_tok", 8},
                               {"norm_topk_prob", true},
                               {"num_hidden_layers", 48}});
    EXPECT_EQ(c.family, ModelFamily::Qwen3Moe);
    EXPECT_EQ(c.n_routed_experts, 128);
    EXPECT_EQ(c.n_shared_experts, 0);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(moe_layers(c).size(), 48u);
}

TEST(ConfigFamilies, Mixtral) {
    const MoeConfig c = parse({{"model_type", "mixtral"},
                               {"hidden_size", 4096},
                               {"intermediate_size", 14336},
                               {"num_local_experts", 8},
                               {"num_experts_per_tok", 2},
                               {"num_hidden_layers", 32},
                               {"vocab_size", 32000}});
    EXPECT_EQ(c.family, ModelFamily::Mixtral);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.moe_intermediate_size, 14336);
    EXPECT_EQ(c.n_routed_experts, 8);
    EXPECT_EQ(c.top_k, 2);
    EXPECT_EQ(c.n_shared_experts, 0);
    EXPECT_EQ(c.score_func, ScoreFunc::Softmax);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_FALSE(c.selection_bias);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
    EXPECT_EQ(moe_layers(c).size(), 32u);
    EXPECT_EQ(c.native_activation_quant(), ActivationQuant::None);
}

json deepseek_v4_with_hash_layers() {
    return {{"model_type", "deepseek_v4"},
            {"hidden_size", 512},
            {"moe_intermediate_size", 256},
            {"n_routed_experts", 32},
            {"num_experts_per_tok", 6},
            {"n_shared_experts", 1},
            {"routed_scaling_factor", 2},  // an integer where a float is meant
            {"num_hash_layers", 3},
            {"swiglu_limit", 7},
            {"num_hidden_layers", 6},
            {"vocab_size", 1000},
            {"expert_dtype", "fp4"},
            {"quantization_config", {{"quant_method", "fp8"}, {"scale_fmt", "ue8m0"}}}};
}

TEST(ConfigFamilies, DeepseekV4HashLayers) {
    const MoeConfig c = parse(deepseek_v4_with_hash_layers());
    EXPECT_EQ(c.family, ModelFamily::DeepseekV4);
    EXPECT_EQ(c.score_func, ScoreFunc::SqrtSoftplus);
    EXPECT_TRUE(c.selection_bias);
    EXPECT_EQ(c.n_group, 1);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 2.0);
    EXPECT_DOUBLE_EQ(c.swiglu_limit, 7.0);
    EXPECT_EQ(c.weight_placement, WeightPlacement::BeforeDown);
    EXPECT_EQ(moe_layers(c), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(hash_layers(c), (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(c.expert_format, ExpertFormat::Fp4);
    EXPECT_EQ(c.quantization.fmt, "e4m3");  // fp8's default
    EXPECT_EQ(c.native_activation_quant(), ActivationQuant::Fp8Pow2);
    EXPECT_TRUE(contains(c.describe(), "hash-routed 0-2")) << c.describe();
}

TEST(ConfigFamilies, QuantMethods) {
    json mx = deepseek_v4_with_hash_layers();
    mx.erase("expert_dtype");
    mx["model_type"] = "mixtral";
    mx["intermediate_size"] = 256;
    mx["num_local_experts"] = 32;
    mx["quantization_config"] = {{"quant_method", "mxfp4"}};
    MoeConfig c = parse(mx);
    EXPECT_EQ(c.expert_format, ExpertFormat::Fp4);
    EXPECT_EQ(c.native_activation_quant(), ActivationQuant::None);  // only V4 pairs FP4 with FP8 activations

    mx["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}};
    c = parse(mx);
    EXPECT_EQ(c.expert_format, ExpertFormat::Nvfp4);
    EXPECT_EQ(c.quantization.quant_algo, "NVFP4");
    EXPECT_EQ(c.native_activation_quant(), ActivationQuant::None);

    mx["quantization_config"] = {{"quant_method", "nvfp4"}};
    EXPECT_EQ(parse(mx).expert_format, ExpertFormat::Nvfp4);

    mx["quantization_config"] = nullptr;  // null reads as "not quantised"
    EXPECT_EQ(parse(mx).expert_format, ExpertFormat::Dense);
}

TEST(ConfigFamilies, Names) {
    EXPECT_STREQ(score_func_name(ScoreFunc::Softmax), "softmax");
    EXPECT_STREQ(score_func_name(ScoreFunc::Sigmoid), "sigmoid");
    EXPECT_STREQ(score_func_name(ScoreFunc::SqrtSoftplus), "sqrtsoftplus");
    EXPECT_STREQ(expert_format_name(ExpertFormat::Dense), "dense");
    EXPECT_STREQ(expert_format_name(ExpertFormat::Fp8), "fp8");
    EXPECT_STREQ(expert_format_name(ExpertFormat::Fp4), "fp4");
    EXPECT_STREQ(expert_format_name(ExpertFormat::Nvfp4), "nvfp4");
    EXPECT_STREQ(model_family_name(ModelFamily::DeepseekV2), "deepseek_v2");
    EXPECT_STREQ(model_family_name(ModelFamily::DeepseekV3), "deepseek_v3");
    EXPECT_STREQ(model_family_name(ModelFamily::DeepseekV4), "deepseek_v4");
    EXPECT_STREQ(model_family_name(ModelFamily::Qwen2Moe), "qwen2_moe");
    EXPECT_STREQ(model_family_name(ModelFamily::Qwen3Moe), "qwen3_moe");
    EXPECT_STREQ(model_family_name(ModelFamily::Mixtral), "mixtral");
}

// ---------------------------------------------------------------------------------------------------
// Layer tables.

struct LayerCase {
    const char* name;
    json patch;  // merged over a small valid config of the family
    std::vector<int64_t> moe;
    std::vector<int64_t> hash;
};

json small_config(const std::string& model_type) {
    // Carries every family's size names; each family reads only its own.
    return {{"model_type", model_type},
            {"hidden_size", 64},
            {"moe_intermediate_size", 32},
            {"intermediate_size", 32},
            {"n_routed_experts", 8},
            {"num_experts", 8},
            {"num_local_experts", 8},
            {"num_experts_per_tok", 2},
            {"num_hidden_layers", 8},
            {"shared_expert_intermediate_size", 0},
            {"topk_method", "greedy"},
            {"vocab_size", 100}};
}

TEST(ConfigLayers, Tables) {
    const std::vector<std::pair<std::string, LayerCase>> cases = {
        {"deepseek_v3", {"v3 dense first 2", {{"first_k_dense_replace", 2}}, {2, 3, 4, 5, 6, 7}, {}}},
        {"deepseek_v2",
         {"v2 every 3rd from 1", {{"first_k_dense_replace", 1}, {"moe_layer_freq", 3}}, {3, 6}, {}}},
        {"deepseek_v2", {"v2 all", {{"first_k_dense_replace", 0}}, {0, 1, 2, 3, 4, 5, 6, 7}, {}}},
        {"deepseek_v4", {"v4 no hash", {}, {0, 1, 2, 3, 4, 5, 6, 7}, {}}},
        {"deepseek_v4", {"v4 hash 2", {{"num_hash_layers", 2}}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1}}},
        {"deepseek_v4",
         {"v4 all hash", {{"num_hash_layers", 8}}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}}},
        {"qwen3_moe", {"qwen step 1", {}, {0, 1, 2, 3, 4, 5, 6, 7}, {}}},
        {"qwen3_moe", {"qwen step 4", {{"decoder_sparse_step", 4}}, {3, 7}, {}}},
        {"qwen3_moe", {"qwen mlp only", {{"mlp_only_layers", {0, 5, 9}}}, {1, 2, 3, 4, 6, 7}, {}}},
        {"mixtral", {"mixtral", {}, {0, 1, 2, 3, 4, 5, 6, 7}, {}}},
    };
    for (const auto& [model_type, lc] : cases) {
        SCOPED_TRACE(lc.name);
        json j = small_config(model_type);
        if (lc.patch.is_object()) j.merge_patch(lc.patch);  // a brace-initialised {} is null, not a patch
        const MoeConfig c = parse(j);
        EXPECT_EQ(moe_layers(c), lc.moe);
        EXPECT_EQ(hash_layers(c), lc.hash);
        EXPECT_FALSE(c.is_moe_layer(-1));
        EXPECT_FALSE(c.is_moe_layer(8));
        EXPECT_FALSE(c.is_hash_layer(-1));
    }
}

// ---------------------------------------------------------------------------------------------------
// Validation of hand-built configs.

TEST(ConfigValidate, HandBuilt) {
    MoeConfig c;
    expect_error([&] { c.validate(); }, ErrorKind::BadFormat, {"hidden_size (0) must be positive"});
    c.hidden_size = 64;
    c.moe_intermediate_size = 32;
    c.n_routed_experts = 8;
    c.top_k = 2;
    c.num_hidden_layers = 2;
    EXPECT_NO_THROW(c.validate());
    c.n_shared_experts = 1;
    expect_error([&] { c.validate(); }, ErrorKind::BadFormat, {"n_shared_experts (1)"});
    c.shared_intermediate_size = 32;
    EXPECT_NO_THROW(c.validate());
    c.expert_format = ExpertFormat::Fp8;
    c.quantization.fmt = "e4m3";
    c.quantization.weight_block_k = 64;
    expect_error([&] { c.validate(); }, ErrorKind::BadFormat, {"weight_block_size"});
    c.quantization.weight_block_k = 128;
    EXPECT_NO_THROW(c.validate());
    c.swiglu_limit = -1;
    expect_error([&] { c.validate(); }, ErrorKind::BadFormat, {"swiglu_limit (-1)"});
}

// ---------------------------------------------------------------------------------------------------
// Bad configs.

struct BadCase {
    std::string name;
    std::string text;
    ErrorKind kind;
    std::vector<std::string> needles;
};

json base_v3() {
    return {{"model_type", "deepseek_v3"},   {"hidden_size", 64}, {"moe_intermediate_size", 32},
            {"n_routed_experts", 16},         {"num_experts_per_tok", 4}, {"n_group", 4},
            {"topk_group", 2},                {"num_hidden_layers", 4},   {"first_k_dense_replace", 1},
            {"routed_scaling_factor", 2.5},   {"vocab_size", 100}};
}

json base_v4() {
    json j = base_v3();
    j["model_type"] = "deepseek_v4";
    j.erase("n_group");
    j.erase("topk_group");
    j["num_hash_layers"] = 1;
    return j;
}

json base_qwen3() {
    return {{"model_type", "qwen3_moe"}, {"hidden_size", 64},         {"moe_intermediate_size", 32},
            {"num_experts", 8},          {"num_experts_per_tok", 2},  {"num_hidden_layers", 4}};
}

std::string patched(json j, const json& patch) {
    j.merge_patch(patch);
    return j.dump();
}

json erased(json j, const std::string& key) {
    j.erase(key);
    return j;
}

std::string without(const json& j, const std::string& key) { return erased(j, key).dump(); }

std::string with_quant(const json& quantization_config) {
    return patched(base_v3(), {{"quantization_config", quantization_config}});
}

std::vector<BadCase> bad_cases() {
    using K = ErrorKind;
    return {
        {"NotJson", "{\"model_type\": deepseek_v3", K::BadFormat, {"config.json: not valid JSON"}},
        {"EmptyText", "", K::BadFormat, {"config.json: not valid JSON"}},
        {"JsonArray", "[1, 2, 3]", K::BadFormat, {"config.json", "JSON object", "array"}},
        {"DeepNesting", std::string(100000, '['), K::BadFormat, {"nested deeper"}},
        {"NoModelType", "{\"hidden_size\": 64}", K::BadFormat, {"'model_type'", "missing"}},
        {"UnknownModelType", patched(base_v3(), {{"model_type", "llama"}}), K::Unsupported,
         {"config.json: model_type 'llama' is not an MoE model SteadyMoE supports", "deepseek_v3",
          "mixtral"}},
        {"ModelTypeNotString", patched(base_v3(), {{"model_type", 3}}), K::BadFormat,
         {"field 'model_type' must be a string, got number 3"}},
        {"MissingHiddenSize", without(base_v3(), "hidden_size"), K::BadFormat,
         {"config.json: required field 'hidden_size' is missing"}},
        {"NullHiddenSize", patched(base_v3(), {{"hidden_size", nullptr}}), K::BadFormat,
         {"'hidden_size'", "missing"}},
        {"MissingQwenExperts", without(base_qwen3(), "num_experts"), K::BadFormat,
         {"'num_experts'", "missing"}},
        {"StringForInt", patched(base_v3(), {{"num_experts_per_tok", "4"}}), K::BadFormat,
         {"config.json: field 'num_experts_per_tok' must be an integer, got string"}},
        {"FloatForInt", patched(base_v3(), {{"hidden_size", 64.0}}), K::BadFormat,
         {"field 'hidden_size' must be an integer, got number 64.0"}},
        {"HugeInt", R"({"model_type":"deepseek_v3","hidden_size":18446744073709551615})", K::BadFormat,
         {"'hidden_size' is out of range"}},
        {"StringForFloat", patched(base_v3(), {{"routed_scaling_factor", "2.5"}}), K::BadFormat,
         {"field 'routed_scaling_factor' must be a number, got string"}},
        {"StringForBool", patched(base_v3(), {{"norm_topk_prob", "yes"}}), K::BadFormat,
         {"field 'norm_topk_prob' must be true or false, got string"}},
        {"BadListItem", patched(base_qwen3(), {{"mlp_only_layers", {1, "2"}}}), K::BadFormat,
         {"field 'mlp_only_layers[1]' must be an integer"}},
        {"NegativeHiddenSize", patched(base_v3(), {{"hidden_size", -5}}), K::BadFormat,
         {"hidden_size (-5) must be positive"}},
        {"HugeHiddenSize", patched(base_v3(), {{"hidden_size", int64_t(1) << 40}}), K::BadFormat,
         {"hidden_size", "implausibly large"}},
        {"TopKZero", patched(base_v3(), {{"num_experts_per_tok", 0}}), K::BadFormat,
         {"num_experts_per_tok (0) must be at least 1"}},
        {"TopKExceedsExperts", patched(base_v3(), {{"num_experts_per_tok", 20}}), K::BadFormat,
         {"config.json: num_experts_per_tok (20) exceeds n_routed_experts (16)"}},
        {"TopKExceedsQwenExperts", patched(base_qwen3(), {{"num_experts_per_tok", 9}}), K::BadFormat,
         {"num_experts_per_tok (9) exceeds num_experts (8)"}},
        {"QwenExpertCountsDisagree", patched(base_qwen3(), {{"num_local_experts", 12}}), K::BadFormat,
         {"num_experts (8) and num_local_experts (12) disagree"}},
        {"GroupsDoNotDivide", patched(base_v3(), {{"n_group", 3}}), K::BadFormat,
         {"n_routed_experts (16) is not divisible by n_group (3)"}},
        {"TopkGroupAboveNGroup", patched(base_v3(), {{"topk_group", 5}}), K::BadFormat,
         {"topk_group (5) must be between 1 and n_group (4)"}},
        {"TopKTooLargeForGroups", patched(base_v3(), {{"topk_group", 1}, {"num_experts_per_tok", 5}}),
         K::BadFormat,
         {"num_experts_per_tok (5)", "topk_group (1)", "= 4"}},
        {"Top2SumSingletonGroups", patched(base_v3(), {{"n_group", 16}, {"topk_group", 8}}), K::BadFormat,
         {"top-2-sum", "n_group (16)"}},
        {"NGroupZero", patched(base_v3(), {{"n_group", 0}}), K::BadFormat,
         {"n_group (0) must be at least 1"}},
        {"GroupLimitedNeedsTopkGroup",
         patched(erased(base_v3(), "topk_group"),
                 {{"model_type", "deepseek_v2"}, {"topk_method", "group_limited_greedy"}}),
         K::BadFormat, {"'topk_group'", "missing"}},
        {"NegativeScaling", patched(base_v3(), {{"routed_scaling_factor", -1.0}}), K::BadFormat,
         {"routed_scaling_factor (-1) must be finite and positive"}},
        {"ZeroScaling", patched(base_v3(), {{"routed_scaling_factor", 0}}), K::BadFormat,
         {"routed_scaling_factor (0)"}},
        {"NegativeSwigluLimit", patched(base_v4(), {{"swiglu_limit", -2.0}}), K::BadFormat,
         {"swiglu_limit (-2)"}},
        {"WeightBlock64", with_quant({{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}}),
         K::Unsupported, {"quantization_config.weight_block_size [64, 64] is not supported"}},
        {"WeightBlockOneValue", with_quant({{"quant_method", "fp8"}, {"weight_block_size", {128}}}),
         K::BadFormat, {"quantization_config.weight_block_size must be [n, k]"}},
        {"QuantConfigNotObject", with_quant("fp8"), K::BadFormat,
         {"field 'quantization_config' must be an object, got string"}},
        {"QuantMethodMissing", with_quant({{"fmt", "e4m3"}}), K::BadFormat,
         {"'quantization_config.quant_method' is missing"}},
        {"QuantMethodUnknown", with_quant({{"quant_method", "gptq"}}),
         K::Unsupported, {"quantization_config.quant_method 'gptq' is not supported"}},
        {"ModeloptFp8", with_quant({{"quant_method", "modelopt"}, {"quant_algo", "FP8"}}),
         K::Unsupported, {"quantization_config.quant_algo 'FP8'"}},
        {"Fp8E5m2", with_quant({{"quant_method", "fp8"}, {"fmt", "e5m2"}}),
         K::Unsupported, {"quantization_config.fmt 'e5m2'"}},
        {"StaticActivations",
         with_quant({{"quant_method", "fp8"}, {"activation_scheme", "static"}}),
         K::Unsupported, {"quantization_config.activation_scheme 'static'"}},
        {"UnknownScaleFmt", with_quant({{"quant_method", "fp8"}, {"scale_fmt", "e5m3"}}),
         K::Unsupported, {"quantization_config.scale_fmt 'e5m3'"}},
        {"UnknownExpertDtype", patched(base_v4(), {{"expert_dtype", "int4"}}), K::Unsupported,
         {"expert_dtype 'int4'"}},
        {"UnknownScoringFunc", patched(base_v3(), {{"scoring_func", "relu"}}), K::Unsupported,
         {"scoring_func 'relu' is not supported", "sqrtsoftplus"}},
        {"UnknownTopkMethod", patched(base_v3(), {{"topk_method", "random"}}), K::Unsupported,
         {"topk_method 'random' is not supported"}},
        {"HashLayersExceedLayers", patched(base_v4(), {{"num_hash_layers", 5}}), K::BadFormat,
         {"num_hash_layers (5) exceeds num_hidden_layers (4)"}},
        {"HashLayersNeedVocab", without(base_v4(), "vocab_size"), K::BadFormat,
         {"num_hash_layers (1)", "vocab_size"}},
        {"NoMoeLayer", patched(base_v3(), {{"first_k_dense_replace", 4}}), K::BadFormat,
         {"none of the 4 layers has an MoE block"}},
        {"MoeLayerFreqZero", patched(base_v3(), {{"moe_layer_freq", 0}}), K::BadFormat,
         {"moe_layer_freq (0) must be at least 1"}},
        {"SparseStepZero", patched(base_qwen3(), {{"decoder_sparse_step", 0}}), K::BadFormat,
         {"decoder_sparse_step (0) must be at least 1"}},
        {"NegativeMlpOnlyLayer", patched(base_qwen3(), {{"mlp_only_layers", {-1}}}), K::BadFormat,
         {"mlp_only_layers", "(-1)"}},
        {"NegativeSharedExperts", patched(base_v3(), {{"n_shared_experts", -1}}), K::BadFormat,
         {"n_shared_experts (-1)"}},
        {"InferenceConfigWithoutV4Fields",
         R"({"dim":64,"moe_inter_dim":32,"n_routed_experts":8,"n_activated_experts":2,"n_layers":2,)"
         R"("score_func":"sigmoid"})",
         K::Unsupported, {"DeepSeek inference config", "config.json"}},
        {"InferenceConfigMissingLayers",
         R"({"dim":64,"moe_inter_dim":32,"n_routed_experts":8,"n_activated_experts":2,"n_hash_layers":0})",
         K::BadFormat, {"'n_layers'", "missing"}},
    };
}

class ConfigBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigBad, FailsNamingTheField) {
    const BadCase& bc = GetParam();
    expect_error([&] { MoeConfig::from_json_text(bc.text); }, bc.kind, bc.needles);
}

INSTANTIATE_TEST_SUITE_P(Matrix, ConfigBad, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(ConfigBadOrigin, MessagesNameTheOrigin) {
    expect_error([] { MoeConfig::from_json_text("[]", "my/model/config.json"); }, ErrorKind::BadFormat,
                 {"my/model/config.json: "});
    const std::string too_many = patched(base_v3(), {{"num_experts_per_tok", 20}});
    expect_error([&] { MoeConfig::from_json_text(too_many, "cfg.json"); },
                 ErrorKind::BadFormat, {"cfg.json: num_experts_per_tok (20)"});
}

TEST(ConfigBadOrigin, Files) {
    const std::filesystem::path dir = test::scratch_dir("config_files");
    expect_error([&] { MoeConfig::from_file(dir / "absent.json"); }, ErrorKind::NotFound,
                 {(dir / "absent.json").string(), "no such file"});
    // A directory without config.json.
    expect_error([&] { MoeConfig::from_file(dir); }, ErrorKind::NotFound, {(dir / "config.json").string()});

    test::write_file(dir / "config.json", patched(base_v3(), {{"hidden_size", "64"}}));
    expect_error([&] { MoeConfig::from_file(dir / "config.json"); }, ErrorKind::BadFormat,
                 {(dir / "config.json").string() + ": field 'hidden_size' must be an integer, got string"});

    test::write_file(dir / "config.json", base_v3().dump());
    EXPECT_EQ(MoeConfig::from_file(dir).hidden_size, 64);
}

}  // namespace
}  // namespace steadymoe
