// The goldens of ../shared/golden: MoE layers computed by independent implementations. Same expert
// sets for every token, routing weights close, outputs within the stated tolerances.
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/model/checkpoint.hpp"

#include "test_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

using namespace steadymoe;

namespace {

struct Golden {
    Checkpoint ckpt;
    SafetensorsFile io;
};

Golden open_golden(const std::string& name) {
    const auto dir = test::golden_dir() / name;
    return Golden{Checkpoint::open(dir), SafetensorsFile::open(dir / "io.safetensors")};
}

Tensor to_bf16(const Tensor& f32) {
    Tensor t = Tensor::zeros(DType::BF16, f32.shape());
    for (int64_t i = 0; i < f32.numel(); ++i) {
        const float v = f32.data<float>()[i];
        uint32_t u;
        std::memcpy(&u, &v, 4);
        EXPECT_EQ(u & 0xFFFFu, 0u) << "golden input is not bf16-exact at " << i;
        t.mutable_data<uint16_t>()[i] = uint16_t(u >> 16);
    }
    return t;
}

// Same expert set per token; each selected expert's weight within `tol` of the reference.
void expect_same_routing(const MoeOutput& out, const Tensor& ref_ids, const Tensor& ref_w, double tol) {
    const int64_t T = out.topk_ids.dim(0), K = out.topk_ids.dim(1);
    ASSERT_EQ(ref_ids.dim(0), T);
    ASSERT_EQ(ref_ids.dim(1), K);
    int mismatches = 0;
    for (int64_t t = 0; t < T; ++t) {
        std::map<int64_t, double> ref;
        for (int64_t k = 0; k < K; ++k) ref[int64_t(ref_ids.get(t * K + k))] = ref_w.get(t * K + k);
        std::set<int64_t> got;
        for (int64_t k = 0; k < K; ++k) {
            const int64_t e = out.topk_ids.data<int32_t>()[t * K + k];
            got.insert(e);
            if (!ref.count(e)) continue;
            EXPECT_NEAR(out.topk_weights.data<float>()[t * K + k], ref[e], tol) << "token " << t << " expert " << e;
        }
        std::set<int64_t> want;
        for (auto& [e, w] : ref) want.insert(e);
        if (got != want && ++mismatches <= 3) ADD_FAILURE() << "token " << t << ": expert sets differ";
    }
    EXPECT_EQ(mismatches, 0);
}

}  // namespace

// A Hugging Face golden: fp32 input, float64 reference output, routing from the reference's router.
static void expect_matches_float64(const std::string& name, int64_t layer_index) {
    Golden g = open_golden(name);
    const MoeLayer layer = MoeLayer::from_checkpoint(g.ckpt, layer_index);
    MoeInput in;
    in.hidden = g.io.get("input");
    const MoeOutput out = layer.forward(in);
    expect_same_routing(out, g.io.get("router.gate.2"), g.io.get("router.gate.1"), 2e-6);
    const double err = test::relative_error(out.output, g.io.get("output_f64"));
    EXPECT_LE(err, 1e-5);
    std::printf("%s layer %ld: relative error vs float64 = %.3g\n", name.c_str(), long(layer_index), err);
}

TEST(Golden, DeepseekV3TinyMatchesFloat64) { expect_matches_float64("deepseek-v3-tiny", 1); }

TEST(Golden, Qwen3MoeTinyMatchesFloat64) { expect_matches_float64("qwen3-moe-tiny", 0); }

TEST(Golden, Qwen3MoeTinyThreadCountsGiveIdenticalBits) {
    Golden g = open_golden("qwen3-moe-tiny");
    MoeInput in;
    in.hidden = g.io.get("input");
    const MoeLayer one = MoeLayer::from_checkpoint(g.ckpt, 0, {.threads = 1});
    const MoeOutput ref = one.forward(in);
    for (int threads : {2, 8}) {
        const MoeOutput out = one.with_threads(threads).forward(in);
        EXPECT_EQ(test::first_bit_difference(ref.output.raw(), out.output.raw(), ref.output.nbytes()), -1)
            << threads << " threads";
    }
}

class GoldenV4 : public ::testing::TestWithParam<int> {};

// DeepSeek's own V4 arithmetic: FP8 activations (power-of-two scales) into FP4 / FP8 GEMMs, bf16
// between stages. Matches `output.L` within bf16 rounding.
TEST_P(GoldenV4, NativeFp8ActivationsMatchReference) {
    const int L = GetParam();
    Golden g = open_golden("deepseek-v4-tiny");
    const MoeLayer layer = MoeLayer::from_checkpoint(g.ckpt, L);
    EXPECT_EQ(layer.activation_quant(), ActivationQuant::Fp8Pow2);
    EXPECT_EQ(layer.is_hash_layer(), L == 0);
    MoeInput in;
    in.hidden = to_bf16(g.io.get("input"));
    in.token_ids = g.io.get("token_ids");
    const MoeOutput out = layer.forward(in);
    const std::string l = std::to_string(L);
    expect_same_routing(out, g.io.get("topk_ids." + l), g.io.get("topk_weights." + l), 2e-6);
    if (L == 0) {  // hash layers keep the table's order
        for (int64_t i = 0; i < out.topk_ids.numel(); ++i)
            EXPECT_EQ(out.topk_ids.data<int32_t>()[i], g.io.get("topk_ids.0").get(i));
    }
    const double err = test::relative_error(out.output, g.io.get("output." + l));
    EXPECT_LE(err, 3e-3);
    const double err_vs_bf16w = test::relative_error(out.output, g.io.get("output_bf16w." + l));
    std::printf("deepseek-v4-tiny layer %d: fp8 activations: rel err %.3g vs reference (%.3g vs bf16-activation "
                "reference)\n", L, err, err_vs_bf16w);
}

TEST_P(GoldenV4, Bf16ActivationsMatchDequantisedReference) {
    const int L = GetParam();
    Golden g = open_golden("deepseek-v4-tiny");
    const MoeLayer layer = MoeLayer::from_checkpoint(g.ckpt, L, {.activation_quant = ActivationQuant::None});
    MoeInput in;
    in.hidden = to_bf16(g.io.get("input"));
    in.token_ids = g.io.get("token_ids");
    const MoeOutput out = layer.forward(in);
    const std::string l = std::to_string(L);
    expect_same_routing(out, g.io.get("topk_ids." + l), g.io.get("topk_weights." + l), 2e-6);
    const double err = test::relative_error(out.output, g.io.get("output_bf16w." + l));
    EXPECT_LE(err, 3e-3);
    std::printf("deepseek-v4-tiny layer %d: bf16 activations: rel err %.3g\n", L, err);
}

INSTANTIATE_TEST_SUITE_P(Layers, GoldenV4, ::testing::Values(0, 1));
