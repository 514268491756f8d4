#include "steadymoe/engine/demo_model.hpp"

#include "steadymoe/core/parallel.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/model/quantize.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace steadymoe {

namespace {

// Rows [row0, row0 + rows) of expert e's slice of a synthetic [E, R, C] stream, as float32.
std::vector<float> expert_rows(uint32_t seed, uint32_t stream, int64_t e, int64_t R, int64_t C, int64_t row0,
                               int64_t rows) {
    const Tensor t = synthetic::tensor(DType::BF16, {rows, C}, seed, stream, 0.02f, uint64_t((e * R + row0) * C));
    const Tensor f = t.to_f32();
    return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

uint32_t layer_seed(const DemoModelShape& s, int64_t layer) { return s.seed + uint32_t(layer) * 1000003u; }

// K distinct experts per token id, drawn from a hash so the table is fixed by the seed alone.
Tensor demo_tid2eid(const DemoModelShape& s, uint32_t seed) {
    SMOE_CHECK(0 < s.top_k && s.top_k <= s.experts, InvalidArgument, "demo shape: top_k {} must be in [1, {}]",
               s.top_k, s.experts);
    Tensor t = Tensor::zeros(DType::I32, {s.vocab, s.top_k});
    int32_t* p = t.mutable_data<int32_t>();
    for (int64_t v = 0; v < s.vocab; ++v) {
        for (int64_t k = 0, draw = 0; k < s.top_k; ++draw) {
            const int32_t e = int32_t(synthetic::lowbias32(seed ^ uint32_t(v * 131 + draw)) % uint32_t(s.experts));
            if (std::find(p + v * s.top_k, p + v * s.top_k + k, e) == p + v * s.top_k + k) p[v * s.top_k + k++] = e;
        }
    }
    return t;
}

}  // namespace

MoeConfig demo_config(const DemoModelShape& s) {
    MoeConfig c;
    c.family = ModelFamily::DeepseekV4;
    c.model_type = "deepseek_v4";
    c.hidden_size = s.hidden;
    c.moe_intermediate_size = s.intermediate;
    c.n_routed_experts = s.experts;
    c.top_k = s.top_k;
    c.n_shared_experts = 1;
    c.shared_intermediate_size = s.intermediate;
    c.score_func = ScoreFunc::SqrtSoftplus;
    c.selection_bias = true;
    c.norm_topk_prob = true;
    c.routed_scaling_factor = 1.5;
    c.num_hash_layers = 1;
    c.vocab_size = s.vocab;
    c.swiglu_limit = 10.0;
    c.weight_placement = WeightPlacement::BeforeDown;
    c.num_hidden_layers = 2;
    c.expert_format = ExpertFormat::Fp4;
    c.quantization.quant_method = "fp8";
    c.quantization.fmt = "e4m3";
    c.quantization.ue8m0_scales = true;
    c.quantization.activation_scheme = "dynamic";
    return c;
}

MoeLayerWeights demo_layer_weights(const DemoModelShape& s, int64_t layer) {
    const uint32_t seed = layer_seed(s, layer);
    const int64_t H = s.hidden, I = s.intermediate, E = s.experts;
    MoeLayerWeights w;
    w.layer = layer;
    w.router = synthetic::tensor(DType::BF16, {E, H}, seed, synthetic::kRouter, 0.02f);
    if (layer == 0) w.tid2eid = demo_tid2eid(s, seed);
    else w.selection_bias = synthetic::tensor(DType::F32, {E}, seed, synthetic::kBias, 0.01f);
    w.experts.resize(size_t(E));
    // Experts are independent: generate and quantise them on every core.
    parallel_for(E, resolve_threads(0), [&](int64_t e) {
        const std::string base = fmt::format("demo.layers.{}.experts.{}.", layer, e);
        auto gate = expert_rows(seed, synthetic::kGateUp, e, 2 * I, H, 0, I);
        auto up = expert_rows(seed, synthetic::kGateUp, e, 2 * I, H, I, I);
        auto down = expert_rows(seed, synthetic::kDown, e, H, I, 0, H);
        ExpertWeights& x = w.experts[size_t(e)];
        x.gate = quantize_mxfp4(gate.data(), I, H, E8M0Rounding::Up, base + "w1");
        x.up = quantize_mxfp4(up.data(), I, H, E8M0Rounding::Up, base + "w3");
        x.down = quantize_mxfp4(down.data(), H, I, E8M0Rounding::Up, base + "w2");
    });
    w.has_shared = true;
    const std::string base = fmt::format("demo.layers.{}.shared_experts.", layer);
    auto sgate = expert_rows(seed, synthetic::kSharedGateUp, 0, 2 * I, H, 0, I);
    auto sup = expert_rows(seed, synthetic::kSharedGateUp, 0, 2 * I, H, I, I);
    auto sdown = expert_rows(seed, synthetic::kSharedDown, 0, H, I, 0, H);
    w.shared.gate = quantize_fp8(sgate.data(), I, H, true, base + "w1");
    w.shared.up = quantize_fp8(sup.data(), I, H, true, base + "w3");
    w.shared.down = quantize_fp8(sdown.data(), H, I, true, base + "w2");
    return w;
}

Tensor demo_hidden(const DemoModelShape& s, int64_t tokens, uint64_t batch) {
    return synthetic::tensor(DType::BF16, {tokens, s.hidden}, s.seed + uint32_t(batch), synthetic::kHidden, 1.0f);
}

Tensor demo_token_ids(const DemoModelShape& s, int64_t tokens, uint64_t batch) {
    Tensor t = Tensor::zeros(DType::I32, {tokens});
    int32_t* p = t.mutable_data<int32_t>();
    for (int64_t i = 0; i < tokens; ++i)
        p[i] = int32_t(synthetic::lowbias32(s.seed ^ uint32_t(batch * 7919 + uint64_t(i))) % uint32_t(s.vocab));
    return t;
}

}  // namespace steadymoe
