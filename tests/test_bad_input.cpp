// Bad input to MoeLayer: every rejected forward() call throws InvalidArgument with a message naming the
// problem; non-finite hidden values are rejected by default and contained to their token under
// NonFinitePolicy::Propagate; construction rejects damaged or inconsistent weights.
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/model/checkpoint.hpp"
#include "steadymoe/model/quantize.hpp"

#include "test_util.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

using namespace steadymoe;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

DemoModelShape small_demo() { return test::small_demo_shape(); }

// Layer 0 of the demo routes by token id, layer 1 by score.
MoeLayer demo_layer(int64_t layer, MoeLayerOptions options = {}) {
    const DemoModelShape s = small_demo();
    return MoeLayer(demo_config(s), demo_layer_weights(s, layer), options);
}

MoeInput demo_input(int64_t tokens, uint64_t batch = 1) {
    const DemoModelShape s = small_demo();
    MoeInput in;
    in.hidden = demo_hidden(s, tokens, batch);
    in.token_ids = demo_token_ids(s, tokens, batch);
    return in;
}

// Runs `fn`, expecting an Error of one of `kinds` whose message contains every one of `parts`.
void expect_error_of(const std::function<void()>& fn, const std::set<ErrorKind>& kinds,
                     const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "no error thrown; expected " << error_kind_name(*kinds.begin());
    } catch (const Error& e) {
        EXPECT_TRUE(kinds.count(e.kind())) << "got " << error_kind_name(e.kind()) << ": " << e.what();
        for (const std::string& p : parts) EXPECT_THAT(std::string(e.what()), HasSubstr(p));
    }
}

void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::vector<std::string>& parts) {
    expect_error_of(fn, {kind}, parts);
}

void expect_forward_error(const MoeLayer& layer, const MoeInput& in, const std::vector<std::string>& parts) {
    expect_error([&] { (void)layer.forward(in); }, ErrorKind::InvalidArgument, parts);
}

// An owned, writable copy of a tensor (checkpoint tensors are read-only views of the file).
Tensor owned_copy(const Tensor& t) {
    Tensor out = Tensor::zeros(t.dtype(), t.shape());
    if (t.nbytes() > 0) std::memcpy(out.mutable_raw(), t.raw(), t.nbytes());
    return out;
}

Tensor i32_vector(const std::vector<int32_t>& v) {
    Tensor t = Tensor::zeros(DType::I32, {int64_t(v.size())});
    std::memcpy(t.mutable_raw(), v.data(), v.size() * 4);
    return t;
}

void set_bf16(Tensor& hidden, int64_t t, int64_t h, float value) {
    hidden.mutable_data<uint16_t>()[t * hidden.dim(1) + h] = f32_to_bf16(value);
}

const char* row_bytes(const Tensor& out, int64_t t) {
    return static_cast<const char*>(out.raw()) + size_t(t) * size_t(out.dim(1)) * dtype_size(out.dtype());
}

size_t row_nbytes(const Tensor& out) { return size_t(out.dim(1)) * dtype_size(out.dtype()); }

bool row_has_nan(const Tensor& out, int64_t t) {
    for (int64_t h = 0; h < out.dim(1); ++h)
        if (std::isnan(out.get(t * out.dim(1) + h))) return true;
    return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Hidden states

TEST(BadHidden, WrongWidth) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in;
    in.hidden = Tensor::zeros(DType::BF16, {3, 255});
    expect_forward_error(layer, in, {"hidden states", "[3, 255]", "256"});
}

TEST(BadHidden, RankOne) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in;
    in.hidden = Tensor::zeros(DType::F32, {256});
    expect_forward_error(layer, in, {"hidden states", "shape [256]", "expected [tokens, 256]"});
}

TEST(BadHidden, RankThree) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in;
    in.hidden = Tensor::zeros(DType::F32, {2, 3, 256});
    expect_forward_error(layer, in, {"hidden states", "[2, 3, 256]"});
}

TEST(BadHidden, Missing) {
    expect_forward_error(demo_layer(1), MoeInput{}, {"no hidden states"});
}

TEST(BadHidden, DtypeF16Rejected) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in;
    in.hidden = Tensor::zeros(DType::F16, {2, 256});
    expect_forward_error(layer, in, {"hidden states", "dtype F16", "F32 or BF16"});
}

TEST(BadHidden, DtypeI32Rejected) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in;
    in.hidden = Tensor::zeros(DType::I32, {2, 256});
    expect_forward_error(layer, in, {"hidden states", "dtype I32", "F32 or BF16"});
}

// ---------------------------------------------------------------------------------------------------
// Token ids

TEST(BadTokenIds, MissingOnAHashLayer) {
    const MoeLayer layer = demo_layer(0);
    ASSERT_TRUE(layer.is_hash_layer());
    MoeInput in = demo_input(3);
    in.token_ids = Tensor();
    expect_forward_error(layer, in, {"hash layer", "token ids are required"});
}

TEST(BadTokenIds, NotNeededOnAScoredLayer) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in = demo_input(3);
    in.token_ids = Tensor();
    EXPECT_NO_THROW((void)layer.forward(in));
}

TEST(BadTokenIds, IdEqualToTheVocabularySizeNamesTokenAndId) {
    const MoeLayer layer = demo_layer(0);
    MoeInput in = demo_input(4);
    in.token_ids = i32_vector({5, 7, 512, 9});
    expect_forward_error(layer, in, {"token 2", "id 512", "[0, 512)"});
}

TEST(BadTokenIds, NegativeI64IdNamesTokenAndId) {
    const MoeLayer layer = demo_layer(0);
    MoeInput in = demo_input(4);
    in.token_ids = Tensor::zeros(DType::I64, {4});
    in.token_ids.mutable_data<int64_t>()[3] = -1;
    expect_forward_error(layer, in, {"token 3", "id -1", "outside the vocabulary"});
}

TEST(BadTokenIds, HugeI64IdIsNotTruncated) {
    const MoeLayer layer = demo_layer(0);
    MoeInput in = demo_input(2);
    in.token_ids = Tensor::zeros(DType::I64, {2});
    in.token_ids.mutable_data<int64_t>()[1] = (int64_t(1) << 32) + 5;  // 5 after a 32-bit truncation
    expect_forward_error(layer, in, {"token 1", "id 4294967301"});
}

TEST(BadTokenIds, OutOfRangeIdOfAMaskedTokenIsIgnored) {
    const MoeLayer layer = demo_layer(0);
    MoeInput in = demo_input(3);
    in.token_ids = i32_vector({1, 100000, 2});
    in.mask = Tensor::zeros(DType::U8, {3});
    in.mask.mutable_data<uint8_t>()[0] = 1;
    in.mask.mutable_data<uint8_t>()[2] = 1;
    MoeOutput out;
    ASSERT_NO_THROW(out = layer.forward(in));
    EXPECT_EQ(out.topk_ids.data<int32_t>()[4], -1);
}

TEST(BadTokenIds, WrongLength) {
    const MoeLayer layer = demo_layer(0);
    MoeInput in = demo_input(3);
    in.token_ids = i32_vector({1, 2});
    expect_forward_error(layer, in, {"token ids", "shape [2]", "expected [3]"});
}

TEST(BadTokenIds, WrongRank) {
    const MoeLayer layer = demo_layer(0);
    MoeInput in = demo_input(3);
    in.token_ids = Tensor::zeros(DType::I32, {3, 1});
    expect_forward_error(layer, in, {"token ids", "shape [3, 1]"});
}

TEST(BadTokenIds, WrongDtype) {
    const MoeLayer layer = demo_layer(0);
    MoeInput in = demo_input(3);
    for (DType dt : {DType::F32, DType::I16, DType::U8}) {
        in.token_ids = Tensor::zeros(dt, {3});
        expect_forward_error(layer, in, {"token ids", "dtype " + std::string(dtype_name(dt)), "I32 or I64"});
    }
}

// ---------------------------------------------------------------------------------------------------
// Masks

TEST(BadMask, WrongLength) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in = demo_input(3);
    in.mask = Tensor::zeros(DType::BOOL, {4});
    expect_forward_error(layer, in, {"mask", "shape [4]", "expected [3]"});
}

TEST(BadMask, WrongRank) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in = demo_input(3);
    in.mask = Tensor::zeros(DType::BOOL, {1, 3});
    expect_forward_error(layer, in, {"mask", "shape [1, 3]"});
}

TEST(BadMask, WrongDtype) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in = demo_input(3);
    for (DType dt : {DType::F32, DType::BF16, DType::I16}) {
        in.mask = Tensor::zeros(dt, {3});
        expect_forward_error(layer, in, {"mask", "dtype " + std::string(dtype_name(dt))});
    }
}

TEST(BadMask, EveryAcceptedDtypeMasksTheSameTokens) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in = demo_input(4);
    for (DType dt : {DType::BOOL, DType::U8, DType::I32, DType::I64}) {
        SCOPED_TRACE(dtype_name(dt));
        in.mask = Tensor::zeros(dt, {4});
        for (int64_t t : {0, 3}) {
            if (dt == DType::I32) in.mask.mutable_data<int32_t>()[t] = 7;
            else if (dt == DType::I64) in.mask.mutable_data<int64_t>()[t] = -1;
            else in.mask.mutable_data<uint8_t>()[t] = 1;
        }
        const MoeOutput out = layer.forward(in);
        for (int64_t t = 0; t < 4; ++t) EXPECT_EQ(out.topk_ids.data<int32_t>()[t * 4] >= 0, t == 0 || t == 3) << t;
    }
}

// ---------------------------------------------------------------------------------------------------
// Non-finite hidden values

TEST(NonFiniteInput, NaNIsRejectedByDefaultNamingTokenAndColumn) {
    const MoeLayer layer = demo_layer(1);
    EXPECT_EQ(layer.options().nonfinite, NonFinitePolicy::Error);
    MoeInput in = demo_input(5);
    set_bf16(in.hidden, 3, 17, std::numeric_limits<float>::quiet_NaN());
    expect_forward_error(layer, in, {"token 3", "non-finite", "column 17", "nan"});
}

TEST(NonFiniteInput, InfIsRejectedByDefaultNamingTokenAndColumn) {
    const MoeLayer layer = demo_layer(0);
    MoeInput in = demo_input(5);
    set_bf16(in.hidden, 1, 255, -std::numeric_limits<float>::infinity());
    expect_forward_error(layer, in, {"token 1", "column 255", "-inf"});
}

TEST(NonFiniteInput, F32InfIsRejected) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in;
    in.hidden = Tensor::zeros(DType::F32, {2, 256});
    in.hidden.mutable_data<float>()[256 + 4] = std::numeric_limits<float>::infinity();
    expect_forward_error(layer, in, {"token 1", "column 4", "inf"});
}

TEST(NonFiniteInput, NaNInAMaskedTokenIsFine) {
    const MoeLayer layer = demo_layer(1);
    MoeInput in = demo_input(4);
    set_bf16(in.hidden, 2, 0, std::numeric_limits<float>::quiet_NaN());
    set_bf16(in.hidden, 2, 9, std::numeric_limits<float>::infinity());
    in.mask = Tensor::zeros(DType::BOOL, {4});
    for (int64_t t : {0, 1, 3}) in.mask.mutable_data<uint8_t>()[t] = 1;
    MoeOutput out;
    ASSERT_NO_THROW(out = layer.forward(in));
    for (int64_t h = 0; h < 256; ++h) ASSERT_EQ(out.output.data<uint16_t>()[2 * 256 + h], 0) << h;
    for (int64_t t : {0, 1, 3}) EXPECT_FALSE(row_has_nan(out.output, t)) << t;
}

class PropagateNaN : public ::testing::TestWithParam<std::tuple<int, DType>> {};

// A token with a NaN computes anyway: its output has a NaN, its ids are still K distinct experts, and
// every other token's bytes equal those of the same batch with a finite token in its place.
TEST_P(PropagateNaN, OnlyThePoisonedTokenIsAffected) {
    const auto [L, dtype] = GetParam();
    const DemoModelShape s = small_demo();
    const MoeLayer layer = demo_layer(L).with_nonfinite(NonFinitePolicy::Propagate);
    const int64_t T = 70, bad = 33, H = s.hidden, K = s.top_k;  // two router chunks of 64
    MoeInput clean = demo_input(T, 4);
    if (dtype == DType::F32) clean.hidden = clean.hidden.to_f32();
    MoeInput poisoned = clean;
    poisoned.hidden = owned_copy(clean.hidden);
    if (dtype == DType::F32) poisoned.hidden.mutable_data<float>()[bad * H + 100] = std::nanf("");
    else set_bf16(poisoned.hidden, bad, 100, std::nanf(""));

    const MoeOutput a = layer.forward(clean);
    MoeOutput b;
    ASSERT_NO_THROW(b = layer.forward(poisoned));
    EXPECT_TRUE(row_has_nan(b.output, bad));
    for (int64_t t = 0; t < T; ++t) {
        if (t == bad) continue;
        ASSERT_EQ(test::first_bit_difference(row_bytes(a.output, t), row_bytes(b.output, t), row_nbytes(a.output)), -1)
            << "token " << t << " changed because token " << bad << " holds a NaN";
        for (int64_t k = 0; k < K; ++k) {
            EXPECT_EQ(a.topk_ids.data<int32_t>()[t * K + k], b.topk_ids.data<int32_t>()[t * K + k]);
            EXPECT_EQ(f32_bits(a.topk_weights.data<float>()[t * K + k]), f32_bits(b.topk_weights.data<float>()[t * K + k]));
        }
    }
    std::set<int32_t> ids;
    for (int64_t k = 0; k < K; ++k) {
        const int32_t e = b.topk_ids.data<int32_t>()[bad * K + k];
        EXPECT_TRUE(e >= 0 && e < s.experts) << "slot " << k << " id " << e;
        ids.insert(e);
    }
    EXPECT_EQ(ids.size(), size_t(K));
    int64_t routed = 0;
    for (int64_t v : b.expert_load) routed += v;
    EXPECT_EQ(routed, T * K);
    if (L == 0) {  // the hash table decides regardless of the NaN
        for (int64_t k = 0; k < K; ++k)
            EXPECT_EQ(b.topk_ids.data<int32_t>()[bad * K + k], a.topk_ids.data<int32_t>()[bad * K + k]);
    }
}

INSTANTIATE_TEST_SUITE_P(LayersAndDtypes, PropagateNaN,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(DType::BF16, DType::F32)));

TEST(NonFiniteInput, PropagatedInfOnlyAffectsItsToken) {
    const MoeLayer layer = demo_layer(1, {.nonfinite = NonFinitePolicy::Propagate});
    MoeInput clean = demo_input(9, 8);
    MoeInput poisoned = clean;
    poisoned.hidden = owned_copy(clean.hidden);
    set_bf16(poisoned.hidden, 4, 3, std::numeric_limits<float>::infinity());
    const MoeOutput a = layer.forward(clean);
    const MoeOutput b = layer.forward(poisoned);
    for (int64_t t = 0; t < 9; ++t) {
        if (t == 4) continue;
        EXPECT_EQ(test::first_bit_difference(row_bytes(a.output, t), row_bytes(b.output, t), row_nbytes(a.output)), -1)
            << "token " << t;
    }
    for (int64_t k = 0; k < 4; ++k) {
        const int32_t e = b.topk_ids.data<int32_t>()[4 * 4 + k];
        EXPECT_TRUE(e >= 0 && e < 16) << e;
    }
}

// ---------------------------------------------------------------------------------------------------
// Construction

namespace {

void expect_construction_error(MoeConfig cfg, MoeLayerWeights w, ErrorKind kind,
                               const std::vector<std::string>& parts) {
    expect_error([&] { MoeLayer layer(std::move(cfg), std::move(w)); }, kind, parts);
}

struct GoldenLayer {
    MoeConfig config;
    MoeLayerWeights weights;
};

GoldenLayer qwen3_layer0() {
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "qwen3-moe-tiny");
    return {ckpt.config(), load_moe_layer(ckpt, 0)};
}

}  // namespace

TEST(BadWeights, NaNBf16ValueInOneExpertNamesTheTensor) {
    GoldenLayer g = qwen3_layer0();
    WeightMatrix& up = g.weights.experts[5].up;
    ASSERT_EQ(up.data.dtype(), DType::BF16);
    up.data = owned_copy(up.data);
    const int64_t element = 7 * up.cols + 3;
    up.data.mutable_data<uint16_t>()[element] = 0x7FC1;
    expect_construction_error(g.config, std::move(g.weights), ErrorKind::BadFormat,
                              {"model.layers.0.mlp.experts.5.up_proj.weight", "non-finite",
                               "element " + std::to_string(element), "row 7"});
}

// The experts are checked on several threads; where several are damaged, the first in the experts' order is
// named, whichever thread finds its damage first.
TEST(BadWeights, OfSeveralDamagedExpertsTheFirstIsNamed) {
    for (const int threads : {1, 8}) {
        GoldenLayer g = qwen3_layer0();
        for (const size_t e : {size_t(11), size_t(4), size_t(9)}) {
            WeightMatrix& down = g.weights.experts[e].down;
            down.data = owned_copy(down.data);
            down.data.mutable_data<uint16_t>()[e * 3] = 0x7F80;  // +inf
        }
        MoeLayerOptions options;
        options.threads = threads;
        expect_error([&] { MoeLayer layer(g.config, std::move(g.weights), options); }, ErrorKind::BadFormat,
                     {"model.layers.0.mlp.experts.4.down_proj.weight", "element 12"});
    }
}

TEST(BadWeights, InfBf16ValueInTheRouterIsRejected) {
    GoldenLayer g = qwen3_layer0();
    g.weights.router = owned_copy(g.weights.router);
    g.weights.router.mutable_data<uint16_t>()[2 * 192 + 1] = 0xFF80;  // -inf
    expect_construction_error(g.config, std::move(g.weights), ErrorKind::BadFormat, {"router", "row 2"});
}

TEST(BadWeights, CheckWeightsOffSkipsTheScan) {
    GoldenLayer g = qwen3_layer0();
    WeightMatrix& down = g.weights.experts[0].down;
    down.data = owned_copy(down.data);
    down.data.mutable_data<uint16_t>()[0] = 0x7FC0;
    EXPECT_NO_THROW(MoeLayer(g.config, std::move(g.weights), {.check_weights = false}));
}

TEST(BadWeights, NaNE8M0ScaleNamesTheTensor) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    WeightMatrix& down = w.experts[3].down;
    ASSERT_EQ(down.format, ExpertFormat::Fp4);
    down.scale = owned_copy(down.scale);
    down.scale.mutable_data<uint8_t>()[21] = 0xFF;
    const std::string name = down.name;
    EXPECT_THAT(name, HasSubstr("experts.3.w2"));
    expect_construction_error(demo_config(s), std::move(w), ErrorKind::BadFormat,
                              {name, "NaN scale (0xFF)", "scale element 21"});
}

TEST(BadWeights, NaNE8M0BlockScaleOfTheFp8SharedExpert) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 0);
    WeightMatrix& up = w.shared.up;
    ASSERT_EQ(up.format, ExpertFormat::Fp8);
    up.scale = owned_copy(up.scale);
    up.scale.mutable_data<uint8_t>()[1] = 0xFF;
    expect_construction_error(demo_config(s), std::move(w), ErrorKind::BadFormat, {"shared_experts.w3", "0xFF"});
}

TEST(BadWeights, E4M3NaNCodeNamesTensorAndElement) {
    const DemoModelShape s = small_demo();
    for (uint8_t code : {uint8_t(0x7F), uint8_t(0xFF)}) {
        MoeLayerWeights w = demo_layer_weights(s, 1);
        WeightMatrix& gate = w.shared.gate;
        ASSERT_EQ(gate.data.dtype(), DType::F8_E4M3);
        gate.data = owned_copy(gate.data);
        gate.data.mutable_data<uint8_t>()[2 * 256 + 5] = code;
        expect_construction_error(demo_config(s), std::move(w), ErrorKind::BadFormat,
                                  {"demo.layers.1.shared_experts.w1", "NaN code", "element 517", "row 2"});
    }
}

TEST(BadWeights, NonFiniteSelectionBiasNamesTheExpert) {
    const DemoModelShape s = small_demo();
    for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
        MoeLayerWeights w = demo_layer_weights(s, 1);
        w.selection_bias = owned_copy(w.selection_bias);
        w.selection_bias.mutable_data<float>()[7] = bad;
        expect_construction_error(demo_config(s), std::move(w), ErrorKind::BadFormat,
                                  {"layer 1", "selection bias of expert 7", "not finite"});
    }
}

TEST(BadWeights, TooFewExperts) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    w.experts.pop_back();
    expect_construction_error(demo_config(s), std::move(w), ErrorKind::InvalidArgument,
                              {"layer 1", "15 experts given", "the config has 16"});
}

TEST(BadWeights, HashLayerWithoutTid2eid) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 0);
    w.tid2eid = Tensor();
    expect_construction_error(demo_config(s), std::move(w), ErrorKind::InvalidArgument,
                              {"layer 0", "hash-routed", "no tid2eid"});
}

TEST(BadWeights, RouterOfTheWrongShape) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    w.router = Tensor::zeros(DType::BF16, {15, 256});
    expect_construction_error(demo_config(s), std::move(w), ErrorKind::InvalidArgument,
                              {"layer 1", "router weight must be [16, 256]"});
}

TEST(BadWeights, MissingSharedExpert) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    w.has_shared = false;
    expect_construction_error(demo_config(s), std::move(w), ErrorKind::InvalidArgument,
                              {"shared expert weights missing", "1 shared experts"});
}

// Either kind is a fair answer for inconsistent weights handed to the constructor.
const std::set<ErrorKind> kRejected = {ErrorKind::InvalidArgument, ErrorKind::BadFormat};

// The constructor is public: weights built in memory (not by load_moe_layer) must get the checks the
// loader does, or forward() indexes out of bounds.
TEST(BadWeights, Tid2eidNamingAnExpertOutOfRangeIsRejectedAtConstruction) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 0);
    w.tid2eid = owned_copy(w.tid2eid);
    w.tid2eid.mutable_data<int32_t>()[10 * s.top_k + 2] = int32_t(s.experts);  // expert 16 of 16
    expect_error_of([&] { MoeLayer layer(demo_config(s), std::move(w)); }, kRejected,
                 {"tid2eid", "token 10", "slot 2", "16"});
}

TEST(BadWeights, Tid2eidWithTheWrongWidthIsRejectedAtConstruction) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 0);
    w.tid2eid = Tensor::zeros(DType::I32, {s.vocab, s.top_k - 1});
    expect_error_of([&] { MoeLayer layer(demo_config(s), std::move(w)); }, kRejected,
                 {"tid2eid", "[512, 3]"});
}

TEST(BadWeights, SelectionBiasOfTheWrongLengthIsRejectedAtConstruction) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    w.selection_bias = Tensor::zeros(DType::F32, {8});
    expect_error_of([&] { MoeLayer layer(demo_config(s), std::move(w)); }, kRejected,
                 {"selection bias", "[8]"});
}

TEST(BadWeights, ExpertOfTheWrongShapeIsRejectedAtConstruction) {
    // Expert 2's down projection has 320 output rows instead of H = 256: it would write past its
    // token's row of the contribution buffer.
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    const std::vector<float> values(size_t(320 * s.intermediate), 0.01f);
    w.experts[2].down = quantize_mxfp4(values.data(), 320, s.intermediate, E8M0Rounding::Up, "wide.w2");
    expect_error_of([&] { MoeLayer layer(demo_config(s), std::move(w)); }, kRejected,
                 {"wide.w2", "320"});
}

TEST(BadWeights, AnExpertMixingQuantisedAndDenseProjectionsIsRejectedAtConstruction) {
    // Experts are decoded for the CPU kernels only when a batch first needs them; what decoding refuses is
    // still refused when the layer is made, not at some later batch.
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    const Tensor dense = synthetic::tensor(DType::BF16, {s.hidden, s.intermediate}, 5, synthetic::kDown, 0.02f);
    w.experts[3].down = WeightMatrix{ExpertFormat::Dense, s.hidden, s.intermediate, dense, {}, 1.0f, "dense.w2"};
    expect_error_of([&] { MoeLayer layer(demo_config(s), std::move(w)); }, {ErrorKind::BadFormat},
                    {"demo.layers.1.experts.3.w1", "mix quantised and dense"});
}

TEST(BadWeights, OnlyHeldExpertsAreHandedOutDecoded) {
    const MoeLayer layer = demo_layer(1);
    EXPECT_NO_THROW(layer.packed_expert(0));
    const int64_t experts = small_demo().experts;
    expect_error_of([&] { layer.packed_expert(experts); }, {ErrorKind::InvalidArgument},
                    {"routed expert " + std::to_string(experts), "not one this layer holds"});
    expect_error_of([&] { layer.packed_expert(-1); }, {ErrorKind::InvalidArgument}, {"routed expert -1"});
}

TEST(BadWeights, NonFiniteSharedExpertGateIsRejected) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    w.shared_gate = Tensor::zeros(DType::F32, {s.hidden});
    w.shared_gate.mutable_data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
    try {
        MoeLayer layer(demo_config(s), std::move(w));
        FAIL() << "a NaN shared expert gate was accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::BadFormat);
        EXPECT_THAT(std::string(e.what()), HasSubstr("shared expert gate weight 7"));
    }
}
