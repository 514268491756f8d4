// Loading one MoE layer's tensors by name: damaged copies of the goldens (missing, misshapen or
// mistyped tensors, bad hash tables, missing or misshapen scales, dense or absent layers) give errors
// naming the tensor at fault; the goldens load with the formats they ship in, FP4 rows dequantise as an
// independent decoder says, and stored_bytes() is the sum of the tensors' sizes.
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/model/checkpoint.hpp"
#include "steadymoe/model/safetensors.hpp"
#include "steadymoe/model/weights.hpp"

#include "test_util.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

using namespace steadymoe;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

using TensorList = std::vector<std::pair<std::string, Tensor>>;

// A golden checkpoint's tensors (views of its file, in file order) and its config.json text.
struct Source {
    TensorList tensors;
    std::string config;
};

Source read_golden(const std::string& name) {
    const fs::path dir = test::golden_dir() / name;
    const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
    Source s;
    for (const TensorInfo& info : file.tensors()) s.tensors.emplace_back(info.name, file.get(info.name));
    s.config = test::read_file(dir / "config.json");
    return s;
}

// Writes config.json and model.safetensors into a fresh scratch directory and opens it.
Checkpoint write_checkpoint(const std::string& scratch, const Source& s) {
    const fs::path dir = test::scratch_dir("weights_" + scratch);
    test::write_file(dir / "config.json", s.config);
    write_safetensors(dir / "model.safetensors", s.tensors);
    return Checkpoint::open(dir);
}

TensorList::iterator find_tensor(TensorList& list, const std::string& name) {
    auto it = std::find_if(list.begin(), list.end(), [&](const auto& p) { return p.first == name; });
    if (it == list.end()) ADD_FAILURE() << "the golden has no tensor " << name;
    return it;
}

void erase_tensor(Source& s, const std::string& name) {
    auto it = find_tensor(s.tensors, name);
    if (it != s.tensors.end()) s.tensors.erase(it);
}

void replace_tensor(Source& s, const std::string& name, Tensor t) {
    auto it = find_tensor(s.tensors, name);
    if (it != s.tensors.end()) it->second = std::move(t);
}

// An owned, writable copy of a tensor.
Tensor owned_copy(const Tensor& t) {
    Tensor out = Tensor::zeros(t.dtype(), t.shape());
    if (t.nbytes() > 0) std::memcpy(out.mutable_raw(), t.raw(), t.nbytes());
    return out;
}

// Edits one field of config.json.
void set_config_field(Source& s, const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(s.config);
    j[key] = value;
    s.config = j.dump(2);
}

// Runs `fn` expecting an Error of `kind` whose message contains every one of `parts`.
void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "no error thrown; expected " << error_kind_name(kind);
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), kind) << "got " << error_kind_name(e.kind()) << ": " << e.what();
        for (const std::string& p : parts) EXPECT_THAT(std::string(e.what()), HasSubstr(p));
    }
}

void expect_load_error(const Checkpoint& ckpt, int64_t layer, ErrorKind kind, const std::vector<std::string>& parts) {
    expect_error([&] { (void)load_moe_layer(ckpt, layer); }, kind, parts);
}

const std::string kV3Expert3 = "model.layers.1.mlp.experts.3.";
const std::string kV4Layer0 = "layers.0.ffn.";
const std::string kV4Layer1 = "layers.1.ffn.";

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Missing, misshapen and mistyped tensors

TEST(DamagedWeights, MissingExpertTensorIsNotFoundByName) {
    Source s = read_golden("deepseek-v3-tiny");
    const std::string name = "model.layers.1.mlp.experts.7.down_proj.weight";
    erase_tensor(s, name);
    const Checkpoint ckpt = write_checkpoint("missing_expert", s);
    expect_load_error(ckpt, 1, ErrorKind::NotFound, {"'" + name + "'"});
    expect_error([&] { (void)MoeLayer::from_checkpoint(ckpt, 1); }, ErrorKind::NotFound, {name});
}

TEST(DamagedWeights, MissingRouterIsNotFoundByName) {
    Source s = read_golden("qwen3-moe-tiny");
    erase_tensor(s, "model.layers.0.mlp.gate.weight");
    expect_load_error(write_checkpoint("missing_router", s), 0, ErrorKind::NotFound,
                      {"'model.layers.0.mlp.gate.weight'"});
}

TEST(DamagedWeights, MissingSelectionBiasIsNotFoundByName) {
    Source s = read_golden("deepseek-v3-tiny");
    erase_tensor(s, "model.layers.1.mlp.gate.e_score_correction_bias");
    expect_load_error(write_checkpoint("missing_bias", s), 1, ErrorKind::NotFound, {"e_score_correction_bias"});
}

TEST(DamagedWeights, WrongShapedDownProjNamesTensorAndBothShapes) {
    Source s = read_golden("deepseek-v3-tiny");
    const std::string name = kV3Expert3 + "down_proj.weight";
    replace_tensor(s, name, Tensor::zeros(DType::BF16, {256, 96}));
    expect_load_error(write_checkpoint("down_shape", s), 1, ErrorKind::BadFormat,
                      {"'" + name + "'", "[256, 96]", "[256, 128]"});
}

TEST(DamagedWeights, TransposedDownProjIsRejected) {
    Source s = read_golden("deepseek-v3-tiny");
    const std::string name = kV3Expert3 + "down_proj.weight";
    replace_tensor(s, name, Tensor::zeros(DType::BF16, {128, 256}));
    expect_load_error(write_checkpoint("down_transposed", s), 1, ErrorKind::BadFormat,
                      {name, "[128, 256]", "[256, 128]"});
}

TEST(DamagedWeights, OneDimensionalWeightIsRejected) {
    Source s = read_golden("qwen3-moe-tiny");
    const std::string name = "model.layers.0.mlp.experts.2.up_proj.weight";
    replace_tensor(s, name, Tensor::zeros(DType::BF16, {96 * 192}));
    expect_load_error(write_checkpoint("weight_rank1", s), 0, ErrorKind::BadFormat, {name, "[18432]", "2-D"});
}

TEST(DamagedWeights, I16WeightIsNotAWeightFormat) {
    Source s = read_golden("qwen3-moe-tiny");
    const std::string name = "model.layers.0.mlp.experts.0.gate_proj.weight";
    replace_tensor(s, name, Tensor::zeros(DType::I16, {96, 192}));
    expect_load_error(write_checkpoint("i16_weight", s), 0, ErrorKind::BadFormat, {"'" + name + "'", "I16"});
}

TEST(DamagedWeights, I32RouterIsRejected) {
    Source s = read_golden("qwen3-moe-tiny");
    replace_tensor(s, "model.layers.0.mlp.gate.weight", Tensor::zeros(DType::I32, {12, 192}));
    expect_load_error(write_checkpoint("i32_router", s), 0, ErrorKind::BadFormat, {"gate.weight", "I32"});
}

TEST(DamagedWeights, RouterShapeDisagreesWithTheConfig) {
    Source s = read_golden("qwen3-moe-tiny");
    set_config_field(s, "num_local_experts", 13);
    expect_load_error(write_checkpoint("router_vs_config", s), 0, ErrorKind::BadFormat,
                      {"model.layers.0.mlp.gate.weight", "[12, 192]", "[13, 192]"});
}

TEST(DamagedWeights, ExpertWidthDisagreesWithTheConfig) {
    Source s = read_golden("qwen3-moe-tiny");
    set_config_field(s, "moe_intermediate_size", 64);
    expect_load_error(write_checkpoint("width_vs_config", s), 0, ErrorKind::BadFormat,
                      {"model.layers.0.mlp.experts.0.gate_proj.weight", "[96, 192]", "[64, 192]"});
}

// ---------------------------------------------------------------------------------------------------
// Hash tables

TEST(DamagedWeights, Tid2eidExpertOutOfRangeNamesRowAndSlot) {
    Source s = read_golden("deepseek-v4-tiny");
    const std::string name = kV4Layer0 + "gate.tid2eid";
    Tensor t = owned_copy(find_tensor(s.tensors, name)->second);
    ASSERT_EQ(t.dtype(), DType::I64);
    t.mutable_data<int64_t>()[300 * 4 + 1] = 16;
    replace_tensor(s, name, t);
    expect_load_error(write_checkpoint("tid2eid_range", s), 0, ErrorKind::BadFormat,
                      {name, "token 300", "slot 1", "expert 16", "[0, 16)"});
}

TEST(DamagedWeights, Tid2eidNegativeExpert) {
    Source s = read_golden("deepseek-v4-tiny");
    const std::string name = kV4Layer0 + "gate.tid2eid";
    Tensor t = owned_copy(find_tensor(s.tensors, name)->second);
    t.mutable_data<int64_t>()[511 * 4 + 3] = -1;
    replace_tensor(s, name, t);
    expect_load_error(write_checkpoint("tid2eid_negative", s), 0, ErrorKind::BadFormat,
                      {"token 511", "slot 3", "expert -1"});
}

TEST(DamagedWeights, Tid2eidWithWrongK) {
    Source s = read_golden("deepseek-v4-tiny");
    const std::string name = kV4Layer0 + "gate.tid2eid";
    replace_tensor(s, name, Tensor::zeros(DType::I64, {512, 3}));
    expect_load_error(write_checkpoint("tid2eid_k", s), 0, ErrorKind::BadFormat, {name, "[512, 3]", "[vocab, 4]"});
}

TEST(DamagedWeights, Tid2eidRowsDisagreeWithVocabSize) {
    Source s = read_golden("deepseek-v4-tiny");
    set_config_field(s, "vocab_size", 1024);
    expect_load_error(write_checkpoint("tid2eid_vocab", s), 0, ErrorKind::BadFormat, {"tid2eid", "512", "1024"});
}

TEST(DamagedWeights, Tid2eidOfFloatDtype) {
    Source s = read_golden("deepseek-v4-tiny");
    const std::string name = kV4Layer0 + "gate.tid2eid";
    replace_tensor(s, name, Tensor::zeros(DType::F32, {512, 4}));
    expect_load_error(write_checkpoint("tid2eid_dtype", s), 0, ErrorKind::BadFormat, {name, "F32"});
}

TEST(DamagedWeights, MissingTid2eidOfAHashLayer) {
    Source s = read_golden("deepseek-v4-tiny");
    erase_tensor(s, kV4Layer0 + "gate.tid2eid");
    expect_load_error(write_checkpoint("tid2eid_missing", s), 0, ErrorKind::NotFound, {"layers.0.ffn.gate.tid2eid"});
}

// ---------------------------------------------------------------------------------------------------
// Scales

TEST(DamagedWeights, Fp8WeightWithoutItsScale) {
    Source s = read_golden("deepseek-v4-tiny");
    erase_tensor(s, kV4Layer1 + "shared_experts.w2.scale");
    expect_load_error(write_checkpoint("fp8_no_scale", s), 1, ErrorKind::NotFound,
                      {"FP8", "'layers.1.ffn.shared_experts.w2.weight'", "weight_scale_inv", ".scale"});
}

TEST(DamagedWeights, Fp4WeightWithoutItsScale) {
    Source s = read_golden("deepseek-v4-tiny");
    erase_tensor(s, kV4Layer1 + "experts.4.w1.scale");
    expect_load_error(write_checkpoint("fp4_no_scale", s), 1, ErrorKind::NotFound,
                      {"'layers.1.ffn.experts.4.w1.weight'", "layers.1.ffn.experts.4.w1.scale"});
}

TEST(DamagedWeights, Fp8BlockScaleOfWrongShape) {
    Source s = read_golden("deepseek-v4-tiny");
    replace_tensor(s, kV4Layer1 + "shared_experts.w1.scale", Tensor::zeros(DType::F8_E8M0, {2, 2}));
    expect_load_error(write_checkpoint("fp8_scale_shape", s), 1, ErrorKind::BadFormat,
                      {"layers.1.ffn.shared_experts.w1.weight", "[2, 2]", "[3, 2]"});
}

TEST(DamagedWeights, Fp4ScaleOfWrongShape) {
    Source s = read_golden("deepseek-v4-tiny");
    replace_tensor(s, kV4Layer1 + "experts.9.w2.scale", Tensor::zeros(DType::F8_E8M0, {256, 6}));
    expect_load_error(write_checkpoint("fp4_scale_shape", s), 1, ErrorKind::BadFormat,
                      {"layers.1.ffn.experts.9.w2.weight", "[256, 6]", "[256, 12]"});
}

TEST(DamagedWeights, Fp8ScaleOfWrongDtype) {
    Source s = read_golden("deepseek-v4-tiny");
    replace_tensor(s, kV4Layer1 + "shared_experts.w3.scale", Tensor::zeros(DType::BF16, {3, 2}));
    expect_load_error(write_checkpoint("fp8_scale_dtype", s), 1, ErrorKind::BadFormat,
                      {"layers.1.ffn.shared_experts.w3.weight", "F32 or F8_E8M0"});
}

TEST(DamagedWeights, PackedFp4WithE4M3ScalesNeedsAGlobalScale) {
    // E4M3 scales make a packed weight NVFP4, which needs its F32 weight_scale_2.
    Source s = read_golden("deepseek-v4-tiny");
    replace_tensor(s, kV4Layer1 + "experts.0.w1.scale", Tensor::zeros(DType::F8_E4M3, {384, 16}));
    expect_load_error(write_checkpoint("nvfp4_no_global", s), 1, ErrorKind::NotFound,
                      {"NVFP4", "layers.1.ffn.experts.0.w1.weight_scale_2"});
}

// ---------------------------------------------------------------------------------------------------
// Which layers

TEST(LayerChoice, DenseLayerIsNotAnMoeLayer) {
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "deepseek-v3-tiny");
    expect_load_error(ckpt, 0, ErrorKind::InvalidArgument, {"layer 0", "dense"});
    expect_error([&] { (void)MoeLayer::from_checkpoint(ckpt, 0); }, ErrorKind::InvalidArgument, {"layer 0", "dense"});
}

TEST(LayerChoice, LayerOutOfRange) {
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "deepseek-v3-tiny");
    expect_load_error(ckpt, 2, ErrorKind::InvalidArgument, {"layer 2", "2 layers"});
    expect_load_error(ckpt, -1, ErrorKind::InvalidArgument, {"layer -1"});
    const Checkpoint qwen = Checkpoint::open(test::golden_dir() / "qwen3-moe-tiny");
    expect_load_error(qwen, 1, ErrorKind::InvalidArgument, {"layer 1", "1 layers"});
}

// ---------------------------------------------------------------------------------------------------
// The goldens as shipped

namespace {

void expect_matrix(const WeightMatrix& m, ExpertFormat format, DType data, Shape data_shape, DType scale,
                   Shape scale_shape, int64_t rows, int64_t cols) {
    SCOPED_TRACE(m.name);
    EXPECT_EQ(m.format, format);
    EXPECT_EQ(m.rows, rows);
    EXPECT_EQ(m.cols, cols);
    EXPECT_EQ(m.data.dtype(), data);
    EXPECT_EQ(m.data.shape(), data_shape);
    if (scale_shape.empty()) {
        EXPECT_FALSE(m.scale.defined());
    } else {
        ASSERT_TRUE(m.scale.defined());
        EXPECT_EQ(m.scale.dtype(), scale);
        EXPECT_EQ(m.scale.shape(), scale_shape);
    }
}

void expect_dense_bf16(const ExpertWeights& e, int64_t I, int64_t H) {
    expect_matrix(e.gate, ExpertFormat::Dense, DType::BF16, {I, H}, DType::F32, {}, I, H);
    expect_matrix(e.up, ExpertFormat::Dense, DType::BF16, {I, H}, DType::F32, {}, I, H);
    expect_matrix(e.down, ExpertFormat::Dense, DType::BF16, {H, I}, DType::F32, {}, H, I);
}

// Size in bytes of a tensor as the file records it.
size_t file_bytes(const Checkpoint& ckpt, const std::string& name) {
    const TensorInfo* info = ckpt.find(name);
    EXPECT_NE(info, nullptr) << name;
    return info ? size_t(info->end - info->begin) : 0;
}

}  // namespace

TEST(GoldenWeights, DeepseekV4LayersAreFp4ExpertsAndAnFp8SharedExpert) {
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "deepseek-v4-tiny");
    for (int64_t L : {0, 1}) {
        SCOPED_TRACE("layer " + std::to_string(L));
        const MoeLayerWeights w = load_moe_layer(ckpt, L);
        EXPECT_EQ(w.layer, L);
        EXPECT_EQ(w.router.dtype(), DType::BF16);
        EXPECT_EQ(w.router.shape(), (Shape{16, 256}));
        ASSERT_EQ(w.experts.size(), 16u);
        for (const ExpertWeights& e : w.experts) {
            expect_matrix(e.gate, ExpertFormat::Fp4, DType::I8, {384, 128}, DType::F8_E8M0, {384, 8}, 384, 256);
            expect_matrix(e.up, ExpertFormat::Fp4, DType::I8, {384, 128}, DType::F8_E8M0, {384, 8}, 384, 256);
            expect_matrix(e.down, ExpertFormat::Fp4, DType::I8, {256, 192}, DType::F8_E8M0, {256, 12}, 256, 384);
        }
        EXPECT_EQ(w.experts[7].up.name, "layers." + std::to_string(L) + ".ffn.experts.7.w3.weight");
        ASSERT_TRUE(w.has_shared);
        expect_matrix(w.shared.gate, ExpertFormat::Fp8, DType::F8_E4M3, {384, 256}, DType::F8_E8M0, {3, 2}, 384, 256);
        expect_matrix(w.shared.up, ExpertFormat::Fp8, DType::F8_E4M3, {384, 256}, DType::F8_E8M0, {3, 2}, 384, 256);
        expect_matrix(w.shared.down, ExpertFormat::Fp8, DType::F8_E4M3, {256, 384}, DType::F8_E8M0, {2, 3}, 256, 384);
        EXPECT_FALSE(w.shared_gate.defined());
        if (L == 0) {
            // The hash table, as I32 with the file's I64 values; no selection bias on a hash layer.
            ASSERT_TRUE(w.tid2eid.defined());
            EXPECT_EQ(w.tid2eid.dtype(), DType::I32);
            EXPECT_EQ(w.tid2eid.shape(), (Shape{512, 4}));
            const Tensor file = ckpt.get("layers.0.ffn.gate.tid2eid");
            for (int64_t i = 0; i < file.numel(); ++i)
                ASSERT_EQ(w.tid2eid.data<int32_t>()[i], file.data<int64_t>()[i]) << i;
            EXPECT_FALSE(w.selection_bias.defined());
        } else {
            EXPECT_FALSE(w.tid2eid.defined());
            ASSERT_TRUE(w.selection_bias.defined());
            EXPECT_EQ(w.selection_bias.dtype(), DType::F32);
            EXPECT_EQ(w.selection_bias.shape(), (Shape{16}));
            const Tensor file = ckpt.get("layers.1.ffn.gate.bias");
            EXPECT_EQ(std::memcmp(w.selection_bias.raw(), file.raw(), 16 * 4), 0);
        }
    }
}

TEST(GoldenWeights, DeepseekV4WithAModelPrefixLoadsTheSame) {
    Source s = read_golden("deepseek-v4-tiny");
    for (auto& [name, t] : s.tensors) name = "model." + name;
    const Checkpoint ckpt = write_checkpoint("v4_model_prefix", s);
    const MoeLayerWeights w = load_moe_layer(ckpt, 1);
    EXPECT_EQ(w.experts[3].down.name, "model.layers.1.ffn.experts.3.w2.weight");
    EXPECT_EQ(w.experts[3].down.format, ExpertFormat::Fp4);
    EXPECT_EQ(w.shared.gate.format, ExpertFormat::Fp8);
    EXPECT_TRUE(w.selection_bias.defined());
}

TEST(GoldenWeights, DeepseekV3LayerIsDenseBf16WithASharedExpertAndBias) {
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "deepseek-v3-tiny");
    const MoeLayerWeights w = load_moe_layer(ckpt, 1);
    ASSERT_EQ(w.experts.size(), 16u);
    for (const ExpertWeights& e : w.experts) expect_dense_bf16(e, 128, 256);
    ASSERT_TRUE(w.has_shared);
    expect_dense_bf16(w.shared, 128, 256);
    EXPECT_EQ(w.shared.down.name, "model.layers.1.mlp.shared_experts.down_proj.weight");
    EXPECT_FALSE(w.tid2eid.defined());
    // The BF16 correction bias arrives as exact F32 values.
    ASSERT_TRUE(w.selection_bias.defined());
    EXPECT_EQ(w.selection_bias.dtype(), DType::F32);
    const Tensor file = ckpt.get("model.layers.1.mlp.gate.e_score_correction_bias");
    ASSERT_EQ(file.dtype(), DType::BF16);
    for (int64_t e = 0; e < 16; ++e) EXPECT_EQ(w.selection_bias.data<float>()[e], file.get(e)) << e;
}

TEST(GoldenWeights, Qwen3LayerIsDenseBf16WithoutSharedExpert) {
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "qwen3-moe-tiny");
    const MoeLayerWeights w = load_moe_layer(ckpt, 0);
    ASSERT_EQ(w.experts.size(), 12u);
    for (const ExpertWeights& e : w.experts) expect_dense_bf16(e, 96, 192);
    EXPECT_FALSE(w.has_shared);
    EXPECT_FALSE(w.selection_bias.defined());
    EXPECT_FALSE(w.tid2eid.defined());
    EXPECT_EQ(w.router.shape(), (Shape{12, 192}));
}

namespace {

// An independent MXFP4 decode: two e2m1 codes per byte along K, the low nibble first; code bits are
// sign | exponent (2 bits, bias 1) | mantissa (1 bit); one E8M0 scale 2^(e - 127) per 32 values.
double decode_e2m1(unsigned code) {
    const double sign = (code & 8u) ? -1.0 : 1.0;
    const unsigned exp = (code >> 1) & 3u, man = code & 1u;
    const double mag = exp == 0 ? 0.5 * man : std::ldexp(1.0 + 0.5 * man, int(exp) - 1);
    return sign * mag;
}

std::vector<double> decode_fp4_row(const WeightMatrix& m, int64_t r) {
    const auto* bytes = static_cast<const uint8_t*>(m.data.raw()) + r * (m.cols / 2);
    const auto* scales = static_cast<const uint8_t*>(m.scale.raw()) + r * (m.cols / 32);
    std::vector<double> out(static_cast<size_t>(m.cols));
    for (int64_t k = 0; k < m.cols; ++k) {
        const unsigned byte = bytes[k / 2];
        const unsigned code = (k % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
        out[size_t(k)] = decode_e2m1(code) * std::ldexp(1.0, int(scales[k / 32]) - 127);
    }
    return out;
}

// An independent e4m3fn decode (bias 7, subnormals at exponent 0) with E8M0 128x128 block scales.
double decode_e4m3(unsigned c) {
    const double sign = (c & 0x80u) ? -1.0 : 1.0;
    const int exp = int((c >> 3) & 0xFu);
    const unsigned man = c & 7u;
    if (exp == 0) return sign * std::ldexp(double(man), -9);
    return sign * std::ldexp(1.0 + man / 8.0, exp - 7);
}

std::vector<double> decode_fp8_row(const WeightMatrix& m, int64_t r) {
    const auto* codes = static_cast<const uint8_t*>(m.data.raw()) + r * m.cols;
    const auto* scales = static_cast<const uint8_t*>(m.scale.raw());
    const int64_t scale_cols = (m.cols + 127) / 128;
    std::vector<double> out(static_cast<size_t>(m.cols));
    for (int64_t k = 0; k < m.cols; ++k)
        out[size_t(k)] =
            decode_e4m3(codes[k]) * std::ldexp(1.0, int(scales[(r / 128) * scale_cols + k / 128]) - 127);
    return out;
}

void expect_row_equals(const WeightMatrix& m, int64_t r, const std::vector<double>& want) {
    std::vector<float> got(static_cast<size_t>(m.cols), -12345.0f);
    m.dequantize_row(r, got.data());
    int nonzero = 0;
    for (int64_t k = 0; k < m.cols; ++k) {
        ASSERT_EQ(double(got[size_t(k)]), want[size_t(k)]) << m.name << " row " << r << " column " << k;
        nonzero += want[size_t(k)] != 0.0;
    }
    EXPECT_GT(nonzero, m.cols / 4) << m.name << " row " << r << " is mostly zeros: a weak check";
}

}  // namespace

TEST(GoldenWeights, Fp4RowsDequantiseLikeAnIndependentDecoder) {
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "deepseek-v4-tiny");
    const MoeLayerWeights w = load_moe_layer(ckpt, 1);
    for (int64_t e : {0, 5, 15}) {
        const ExpertWeights& x = w.experts[size_t(e)];
        for (int64_t r : {int64_t(0), int64_t(1), int64_t(200), int64_t(383)}) {
            expect_row_equals(x.gate, r, decode_fp4_row(x.gate, r));
            expect_row_equals(x.up, r, decode_fp4_row(x.up, r));
        }
        for (int64_t r : {int64_t(0), int64_t(77), int64_t(255)}) expect_row_equals(x.down, r, decode_fp4_row(x.down, r));
    }
}

TEST(GoldenWeights, Fp4DecoderSelfCheck) {
    // The test's own decoder: the e2m1 code table and the nibble order, on a hand-made row.
    const double table[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
    for (unsigned c = 0; c < 16; ++c) EXPECT_EQ(decode_e2m1(c), table[c]) << c;
    WeightMatrix m;
    m.format = ExpertFormat::Fp4;
    m.rows = 1;
    m.cols = 64;
    m.data = Tensor::zeros(DType::U8, {1, 32});
    m.scale = Tensor::zeros(DType::F8_E8M0, {1, 2});
    m.name = "hand-made";
    m.data.mutable_data<uint8_t>()[0] = 0x72;   // k=0: code 2 (1.0), k=1: code 7 (6.0)
    m.data.mutable_data<uint8_t>()[16] = 0xA3;  // k=32: code 3 (1.5), k=33: code 10 (-1.0)
    m.scale.mutable_data<uint8_t>()[0] = 128;   // x2
    m.scale.mutable_data<uint8_t>()[1] = 125;   // x0.25
    m.validate();
    const std::vector<double> want = decode_fp4_row(m, 0);
    EXPECT_EQ(want[0], 2.0);
    EXPECT_EQ(want[1], 12.0);
    EXPECT_EQ(want[32], 0.375);
    EXPECT_EQ(want[33], -0.25);
    std::vector<float> got(64);
    m.dequantize_row(0, got.data());
    for (int k = 0; k < 64; ++k) EXPECT_EQ(double(got[size_t(k)]), want[size_t(k)]) << k;
}

TEST(GoldenWeights, Fp8SharedRowsDequantiseLikeAnIndependentDecoder) {
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "deepseek-v4-tiny");
    const MoeLayerWeights w = load_moe_layer(ckpt, 0);
    for (int64_t r : {int64_t(0), int64_t(127), int64_t(128), int64_t(383)}) {
        expect_row_equals(w.shared.gate, r, decode_fp8_row(w.shared.gate, r));
        expect_row_equals(w.shared.up, r, decode_fp8_row(w.shared.up, r));
    }
    for (int64_t r : {int64_t(0), int64_t(130), int64_t(255)})
        expect_row_equals(w.shared.down, r, decode_fp8_row(w.shared.down, r));
}

TEST(GoldenWeights, StoredBytesAddUpToTheFileTensors) {
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "deepseek-v4-tiny");
    const MoeLayerWeights w = load_moe_layer(ckpt, 1);
    const std::string p = "layers.1.ffn.";
    size_t want = file_bytes(ckpt, p + "gate.weight");
    auto add_expert = [&](const std::string& base, const ExpertWeights& e) {
        size_t expert = 0;
        for (const char* m : {"w1", "w2", "w3"})
            expert += file_bytes(ckpt, base + m + ".weight") + file_bytes(ckpt, base + m + ".scale");
        EXPECT_EQ(e.gate.stored_bytes() + e.up.stored_bytes() + e.down.stored_bytes(), expert) << base;
        want += expert;
    };
    for (int64_t e = 0; e < 16; ++e) add_expert(p + "experts." + std::to_string(e) + ".", w.experts[size_t(e)]);
    add_expert(p + "shared_experts.", w.shared);
    // By hand: router 16x256 bf16; per routed expert 2 x (384x128 + 384x8) + (256x192 + 256x12);
    // shared 2 x (384x256 + 6) + (256x384 + 6).
    const size_t by_hand = 16 * 256 * 2 + 16 * (2 * (384 * 128 + 384 * 8) + (256 * 192 + 256 * 12)) +
                           2 * (384 * 256 + 6) + (256 * 384 + 6);
    EXPECT_EQ(want, by_hand);
    EXPECT_EQ(w.stored_bytes(), want);
    EXPECT_EQ(w.experts[0].down.stored_bytes(), size_t(256 * 192 + 256 * 12));
}

TEST(GoldenWeights, StoredBytesOfDenseLayers) {
    const Checkpoint v3 = Checkpoint::open(test::golden_dir() / "deepseek-v3-tiny");
    // Router 16x256, 16 routed + 1 shared expert of 3 x 128x256, all bf16.
    EXPECT_EQ(load_moe_layer(v3, 1).stored_bytes(), size_t(16 * 256 * 2 + 17 * 3 * 128 * 256 * 2));
    const Checkpoint qwen = Checkpoint::open(test::golden_dir() / "qwen3-moe-tiny");
    EXPECT_EQ(load_moe_layer(qwen, 0).stored_bytes(), size_t(12 * 192 * 2 + 12 * 3 * 96 * 192 * 2));
}
