#include "gpu_test_util.hpp"

#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/model/quantize.hpp"

#include "../src/kernels/cuda/grouped_gemm.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace steadymoe::test {

namespace {

WeightMatrix matrix(int64_t rows, int64_t cols, uint32_t stream, uint64_t offset, const std::string& format,
                    const std::string& name) {
    const Tensor bf16 = synthetic::tensor(DType::BF16, {rows, cols}, 3, stream, 0.02f, offset);
    if (format == "bf16") return {ExpertFormat::Dense, rows, cols, bf16, {}, 1.0f, name};
    const Tensor f = bf16.to_f32();
    if (format == "fp8") return quantize_fp8(f.data<float>(), rows, cols, false, name);
    return quantize_mxfp4(f.data<float>(), rows, cols, E8M0Rounding::Up, name);
}

ExpertWeights expert(int64_t index, int64_t inter, uint32_t gate_up, uint32_t down, const std::string& format,
                     const std::string& name) {
    const uint64_t gu = uint64_t(index * 2 * inter * kH), dn = uint64_t(index * kH * inter);
    return {matrix(inter, kH, gate_up, gu, format, name + ".gate"),
            matrix(inter, kH, gate_up, gu + uint64_t(inter * kH), format, name + ".up"),
            matrix(kH, inter, down, dn, format, name + ".down")};
}

}  // namespace

// A DeepSeek-V3-style layer (sigmoid + bias, 2 groups of 4 / top-1, norm, x2.5) with one shared
// expert, weights drawn from the benchmark streams and stored in `format` (FP4 for "fp4-fp8").
MoeConfig tensor_core_config(const std::string& format) {
    MoeConfig c;
    c.family = ModelFamily::DeepseekV3;
    c.model_type = "deepseek_v3";
    c.num_hidden_layers = 1;
    c.hidden_size = kH, c.moe_intermediate_size = kI, c.n_routed_experts = kE, c.top_k = kK;
    c.n_shared_experts = 1, c.shared_intermediate_size = kShared;
    c.score_func = ScoreFunc::Sigmoid, c.selection_bias = true, c.norm_topk_prob = true;
    c.n_group = 2, c.topk_group = 1, c.group_score = GroupScore::Top2Sum, c.routed_scaling_factor = 2.5;
    if (format != "bf16") {
        c.expert_format = format == "fp8" ? ExpertFormat::Fp8 : ExpertFormat::Fp4;
        c.quantization.quant_method = "fp8";
        c.quantization.fmt = "e4m3";
        c.quantization.activation_scheme = "dynamic";
    }
    return c;
}

MoeLayer tensor_core_layer(const std::string& format, const MoeConfig* routing) {
    MoeLayerWeights w;
    MoeConfig c = routing ? *routing : tensor_core_config(format);
    const int64_t E = c.n_routed_experts;
    w.router = synthetic::tensor(DType::BF16, {E, kH}, 3, synthetic::kRouter, 0.02f);
    w.selection_bias = synthetic::tensor(DType::F32, {E}, 3, synthetic::kBias, 0.01f);
    for (int64_t e = 0; e < E; ++e)
        w.experts.push_back(expert(e, kI, synthetic::kGateUp, synthetic::kDown, format, "experts." + std::to_string(e)));
    w.has_shared = true;
    w.shared = expert(0, kShared, synthetic::kSharedGateUp, synthetic::kSharedDown, format, "shared");
    if (!c.selection_bias) w.selection_bias = Tensor();
    MoeLayerOptions options;
    if (format == "fp4-fp8") options.activation_quant = ActivationQuant::Fp8Pow2;  // DeepSeek-V4's FP4 arithmetic
    return MoeLayer(c, std::move(w), options);
}

// Routing variants for the GPU router, each a bf16 layer of the same experts.
MoeConfig routing_variant(const std::string& name) {
    MoeConfig c = tensor_core_config("bf16");
    if (name == "softmax") {  // Qwen3-MoE
        c.family = ModelFamily::Qwen3Moe, c.model_type = "qwen3_moe";
        c.score_func = ScoreFunc::Softmax, c.selection_bias = false, c.n_group = 1, c.topk_group = 1;
        c.routed_scaling_factor = 1.0;
    } else if (name == "group-max") {
        c.n_group = 4, c.topk_group = 2, c.group_score = GroupScore::Max;
    } else if (name == "sqrt-softplus") {  // DeepSeek-V4
        c.family = ModelFamily::DeepseekV4, c.model_type = "deepseek_v4";
        c.score_func = ScoreFunc::SqrtSoftplus, c.n_group = 1, c.topk_group = 1, c.routed_scaling_factor = 1.5;
        c.swiglu_limit = 10.0, c.weight_placement = WeightPlacement::BeforeDown;
    }  // "group-top2": the V3 default of tensor_core_config
    return c;
}



std::string block_exact_fp4_arithmetic() {
    const bool tiled = cuda::grouped_gemm_fp4_exact_tiled(),
               tall = tiled && cuda::grouped_gemm_tall_tile_rows(cuda::WeightCode::Fp4, true, true) == 192;
    return std::string("gate/up block-exact, down block-exact") +
           (tiled ? "; block-exact ones on the tiled kernel in other batches than decode ones" : "") +
           (tall ? ", in 192-row tiles on three-warpgroup CTAs where experts average more than 128 rows" : "");
}

void expect_same_routing_bits(const MoeOutput& a, const MoeOutput& b) {
    EXPECT_EQ(test::first_bit_difference(a.topk_ids.raw(), b.topk_ids.raw(), a.topk_ids.nbytes()), -1);
    EXPECT_EQ(test::first_bit_difference(a.topk_weights.raw(), b.topk_weights.raw(), a.topk_weights.nbytes()), -1);
    EXPECT_EQ(a.expert_load, b.expert_load);
}

void expect_same_bytes(const MoeOutput& a, const MoeOutput& b) {
    EXPECT_EQ(first_bit_difference(a.output.raw(), b.output.raw(), a.output.nbytes()), -1);
    expect_same_routing_bits(a, b);
}

// Probe tokens alone vs first, middle and last of a batch of `size` filler tokens: identical bytes.
void expect_batch_invariant_on_gpu(const CudaMoeLayer& gpu, const MoeInput& probe, int64_t size) {
    const int64_t n = probe.hidden.dim(0), H = gpu.layer().config().hidden_size;
    const size_t row = size_t(H) * dtype_size(probe.hidden.dtype());
    std::vector<MoeOutput> alone;
    for (int64_t i = 0; i < n; ++i) {
        MoeInput one;
        one.hidden = probe.hidden.rows(i, i + 1);
        if (probe.token_ids.defined()) one.token_ids = probe.token_ids.rows(i, i + 1);
        alone.push_back(gpu.forward(one));
    }
    for (int64_t at : {int64_t(0), (size - n) / 2, size - n}) {
        MoeInput batch;
        batch.hidden = synthetic::tensor(probe.hidden.dtype(), {size, H}, 11, synthetic::kFillerHidden, 1.0f);
        batch.token_ids = Tensor::zeros(DType::I32, {size});
        for (int64_t i = 0; i < size; ++i) batch.token_ids.mutable_data<int32_t>()[i] = int32_t((i * 37) % 512);
        for (int64_t i = 0; i < n; ++i) {
            std::memcpy(static_cast<char*>(batch.hidden.mutable_raw()) + size_t(at + i) * row,
                        static_cast<const char*>(probe.hidden.raw()) + size_t(i) * row, row);
            if (probe.token_ids.defined())
                batch.token_ids.mutable_data<int32_t>()[at + i] = int32_t(probe.token_ids.get(i));
        }
        const MoeOutput out = gpu.forward(batch);
        for (int64_t i = 0; i < n; ++i)
            EXPECT_EQ(test::first_bit_difference(alone[size_t(i)].output.raw(),
                                                 static_cast<const char*>(out.output.raw()) + size_t(at + i) * row, row),
                      -1)
                << "probe " << i << " at row " << at + i << " of " << size;
    }
}


}  // namespace steadymoe::test
