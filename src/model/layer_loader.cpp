// Maps a family's tensor names to MoeLayerWeights and checks every shape against the config.
#include "steadymoe/model/checkpoint.hpp"
#include "steadymoe/model/weights.hpp"

#include <fmt/format.h>

namespace steadymoe {

namespace {

struct LayerNames {
    std::string prefix;       // "model.layers.3.mlp." / "layers.3.ffn."
    std::string gate_proj;    // per-expert projection names
    std::string up_proj;
    std::string down_proj;
    std::string shared;       // "shared_experts." / "shared_expert."
    std::string bias;         // selection bias tensor (relative to prefix)
};

LayerNames names_for(const Checkpoint& ckpt, const MoeConfig& cfg, int64_t layer) {
    LayerNames n;
    switch (cfg.family) {
        case ModelFamily::DeepseekV4: {
            // DeepSeek's own files have no "model." prefix; converted copies may.
            const std::string bare = fmt::format("layers.{}.ffn.", layer);
            n.prefix = ckpt.contains(bare + "gate.weight") ? bare : "model." + bare;
            n.gate_proj = "w1", n.up_proj = "w3", n.down_proj = "w2";
            n.shared = "shared_experts.";
            n.bias = "gate.bias";
            break;
        }
        case ModelFamily::Mixtral:
            n.prefix = fmt::format("model.layers.{}.block_sparse_moe.", layer);
            n.gate_proj = "w1", n.up_proj = "w3", n.down_proj = "w2";
            break;
        default:
            n.prefix = fmt::format("model.layers.{}.mlp.", layer);
            n.gate_proj = "gate_proj", n.up_proj = "up_proj", n.down_proj = "down_proj";
            n.shared = cfg.family == ModelFamily::Qwen2Moe ? "shared_expert." : "shared_experts.";
            n.bias = "gate.e_score_correction_bias";
            break;
    }
    return n;
}

Tensor optional_tensor(const Checkpoint& ckpt, const std::string& name) {
    return ckpt.contains(name) ? ckpt.get(name) : Tensor();
}

// One linear layer "<base>.weight" plus whichever scale tensors its format uses.
WeightMatrix load_matrix(const Checkpoint& ckpt, const std::string& base, int64_t rows, int64_t cols) {
    WeightMatrix m;
    m.name = base + ".weight";
    m.data = ckpt.get(m.name);
    SMOE_CHECK(m.data.rank() == 2, BadFormat, "tensor '{}' has shape {}, expected 2-D", m.name,
               shape_str(m.data.shape()));
    const DType dt = m.data.dtype();
    Tensor scale_inv = optional_tensor(ckpt, base + ".weight_scale_inv");
    Tensor scale = optional_tensor(ckpt, base + ".scale");
    Tensor weight_scale = optional_tensor(ckpt, base + ".weight_scale");
    if (dt == DType::BF16 || dt == DType::F16 || dt == DType::F32) {
        m.format = ExpertFormat::Dense;
    } else if (dt == DType::F8_E4M3) {
        m.format = ExpertFormat::Fp8;
        m.scale = scale_inv.defined() ? scale_inv : scale;
        SMOE_CHECK(m.scale.defined(), NotFound, "FP8 tensor '{}' has no '{}.weight_scale_inv' or '{}.scale'", m.name,
                   base, base);
    } else if (dt == DType::I8 || dt == DType::U8) {
        Tensor s = scale.defined() ? scale : weight_scale;
        SMOE_CHECK(s.defined(), NotFound, "packed FP4 tensor '{}' has no '{}.scale' or '{}.weight_scale'", m.name,
                   base, base);
        if (s.dtype() == DType::F8_E4M3) {
            m.format = ExpertFormat::Nvfp4;
            const std::string g = base + ".weight_scale_2";
            SMOE_CHECK(ckpt.contains(g), NotFound, "NVFP4 tensor '{}' has no global scale '{}'", m.name, g);
            Tensor gt = ckpt.get(g);
            SMOE_CHECK(gt.numel() == 1 && gt.dtype() == DType::F32, BadFormat,
                       "'{}' must be one F32 value, got {} {}", g, dtype_name(gt.dtype()), shape_str(gt.shape()));
            m.global_scale = gt.data<float>()[0];
        } else {
            m.format = ExpertFormat::Fp4;
        }
        m.scale = s;
    } else {
        SMOE_THROW(BadFormat, "tensor '{}' has dtype {}, which is not a weight format SteadyMoE reads", m.name,
                   dtype_name(dt));
    }
    m.rows = m.data.dim(0);
    m.cols = m.format == ExpertFormat::Fp4 || m.format == ExpertFormat::Nvfp4 ? m.data.dim(1) * 2 : m.data.dim(1);
    SMOE_CHECK(m.rows == rows && m.cols == cols, BadFormat,
               "tensor '{}' holds a [{}, {}] matrix, but the config implies [{}, {}]", m.name, m.rows, m.cols, rows,
               cols);
    m.validate();
    return m;
}

ExpertWeights load_expert(const Checkpoint& ckpt, const std::string& base, const LayerNames& n, int64_t H,
                          int64_t I) {
    return ExpertWeights{load_matrix(ckpt, base + n.gate_proj, I, H), load_matrix(ckpt, base + n.up_proj, I, H),
                         load_matrix(ckpt, base + n.down_proj, H, I)};
}

Tensor vector_f32(const Tensor& t, int64_t n, const std::string& name) {
    SMOE_CHECK(t.numel() == n, BadFormat, "tensor '{}' has shape {}, expected {} values", name, shape_str(t.shape()),
               n);
    SMOE_CHECK(dtype_is_float(t.dtype()), BadFormat, "tensor '{}' has dtype {}, expected a float", name,
               dtype_name(t.dtype()));
    return t.to_f32().reshaped({n});
}

Tensor load_tid2eid(const Tensor& t, const MoeConfig& cfg, const std::string& name) {
    SMOE_CHECK(t.rank() == 2 && t.dim(1) == cfg.top_k, BadFormat, "tensor '{}' has shape {}, expected [vocab, {}]",
               name, shape_str(t.shape()), cfg.top_k);
    SMOE_CHECK(t.dtype() == DType::I64 || t.dtype() == DType::I32, BadFormat,
               "tensor '{}' has dtype {}, expected I64 or I32", name, dtype_name(t.dtype()));
    SMOE_CHECK(cfg.vocab_size <= 0 || t.dim(0) == cfg.vocab_size, BadFormat,
               "tensor '{}' has {} rows but the config's vocab_size is {}", name, t.dim(0), cfg.vocab_size);
    Tensor out = Tensor::zeros(DType::I32, t.shape());
    int32_t* o = out.mutable_data<int32_t>();
    for (int64_t i = 0; i < t.numel(); ++i) {
        const int64_t e = t.dtype() == DType::I64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
        SMOE_CHECK(0 <= e && e < cfg.n_routed_experts, BadFormat,
                   "tensor '{}': token {} slot {} names expert {}, outside [0, {})", name, i / cfg.top_k,
                   i % cfg.top_k, e, cfg.n_routed_experts);
        o[i] = int32_t(e);
    }
    return out;
}

}  // namespace

MoeLayerWeights load_moe_layer(const Checkpoint& ckpt, int64_t layer, const std::vector<bool>* held) {
    const MoeConfig& cfg = ckpt.config();
    SMOE_CHECK(layer >= 0 && layer < cfg.num_hidden_layers, InvalidArgument,
               "layer {} does not exist (the model has {} layers)", layer, cfg.num_hidden_layers);
    SMOE_CHECK(cfg.is_moe_layer(layer), InvalidArgument, "layer {} is a dense layer, not an MoE layer", layer);
    const LayerNames n = names_for(ckpt, cfg, layer);
    const int64_t H = cfg.hidden_size, I = cfg.moe_intermediate_size, E = cfg.n_routed_experts;

    MoeLayerWeights w;
    w.layer = layer;
    const std::string router = n.prefix + "gate.weight";
    w.router = ckpt.get(router);
    SMOE_CHECK(w.router.rank() == 2 && w.router.dim(0) == E && w.router.dim(1) == H, BadFormat,
               "tensor '{}' has shape {}, expected [{}, {}]", router, shape_str(w.router.shape()), E, H);
    SMOE_CHECK(w.router.dtype() == DType::BF16 || w.router.dtype() == DType::F16 || w.router.dtype() == DType::F32,
               BadFormat, "tensor '{}' has dtype {}, expected BF16, F16 or F32", router, dtype_name(w.router.dtype()));

    const bool hash = cfg.is_hash_layer(layer);
    if (hash) {
        const std::string t = n.prefix + "gate.tid2eid";
        w.tid2eid = load_tid2eid(ckpt.get(t), cfg, t);
    } else if (cfg.selection_bias) {
        const std::string b = n.prefix + n.bias;
        w.selection_bias = vector_f32(ckpt.get(b), E, b);
    }
    SMOE_CHECK(!held || int64_t(held->size()) == E, InvalidArgument, "layer {}: {} held flags for {} experts", layer,
               held ? held->size() : 0, E);
    w.experts.reserve(size_t(E));
    for (int64_t e = 0; e < E; ++e) {
        const bool load = !held || (*held)[size_t(e)];
        w.experts.push_back(load ? load_expert(ckpt, fmt::format("{}experts.{}.", n.prefix, e), n, H, I) : ExpertWeights{});
        w.partial = w.partial || !load;
    }
    if (cfg.n_shared_experts > 0) {
        w.has_shared = true;
        w.shared = load_expert(ckpt, n.prefix + n.shared, n, H, cfg.shared_intermediate_size);
        if (cfg.shared_expert_gate) {
            const std::string g = n.prefix + "shared_expert_gate.weight";
            w.shared_gate = vector_f32(ckpt.get(g), H, g);
        }
    }
    validate_layer_weights(cfg, w);
    return w;
}

}  // namespace steadymoe
