#include "steadymoe/engine/cuda_moe_layer.hpp"

#include "steadymoe/kernels/cpu/experts.hpp"
#include "steadymoe/kernels/cuda/gemm.hpp"

#include "../kernels/cuda/check.hpp"
#include "../kernels/cuda/dependent_launch.hpp"
#include "../kernels/cuda/layer_kernels.hpp"
#include "../kernels/cuda/quant_mode.hpp"
#include "cuda_tensor_core_path.hpp"
#include "../kernels/cuda/grouped_gemm_sm90.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

namespace steadymoe {

namespace {

struct DeviceExpert {
    cuda::DevicePackedWeight gate, up, down;
};

DeviceExpert upload_expert(const cpu::PackedExpert& e, const std::string& what) {
    return {cuda::upload_weight(e.gate, what + " gate"), cuda::upload_weight(e.up, what + " up"),
            cuda::upload_weight(e.down, what + " down")};
}

template <typename T>
cuda::DeviceBuffer upload_vector(const std::vector<T>& v, const std::string& what) {
    cuda::DeviceBuffer b(v.size() * sizeof(T), what);
    b.upload(v.data(), v.size() * sizeof(T));
    return b;
}

}  // namespace

struct CudaMoeLayer::Device {
    // The portable path's weights: uploaded at construction on that path, or on the first batch the
    // tensor-core path cannot take when the path was left to Auto.
    std::once_flag portable_once;
    cuda::DevicePackedWeight router;
    std::vector<DeviceExpert> experts;
    DeviceExpert shared;
    std::unique_ptr<TensorCorePath> tensor_core;

    void upload_portable(const cpu::PackedLayer& p) {
        std::call_once(portable_once, [&] {
            router = cuda::upload_weight(p.router, "router");
            for (size_t e = 0; e < p.experts.size(); ++e)
                experts.push_back(upload_expert(p.experts[e], fmt::format("expert {}", e)));
            if (p.has_shared) shared = upload_expert(p.shared, "shared expert");
            cuda::synchronize();
        });
    }
};

const char* cuda_path_name(CudaPath path) {
    switch (path) {
    case CudaPath::Auto: return "auto";
    case CudaPath::TensorCore: return "tensor-core";
    case CudaPath::Portable: return "portable";
    }
    return "?";
}

std::string CudaMoeLayer::gemm_kernel() {
    return cuda::hopper_gemm_available() ? "wgmma (sm_90a)" : "mma.sync (sm_80)";
}

bool CudaMoeLayer::fp8_tensor_cores() { return cuda::grouped_gemm_takes_fp8_activations(cuda::WeightCode::Fp8); }

bool CudaMoeLayer::dependent_launches() { return cuda::dependent_launches_available(); }

int CudaMoeLayer::tall_tile_rows() { return cuda::grouped_gemm_tall_tile_rows(cuda::WeightCode::Fp8, true); }

std::string CudaMoeLayer::few_row_kernels() {
    using cuda::WeightCode;
    const int tiled = cuda::grouped_gemm_few_row_ctas_per_sm(), bf16 = cuda::grouped_gemm_decode_ctas_per_sm(WeightCode::Bf16),
              fp8 = cuda::grouped_gemm_decode_ctas_per_sm(WeightCode::Fp8), fp4 = cuda::grouped_gemm_decode_ctas_per_sm(WeightCode::Fp4);
    if (tiled == 0 && fp4 == 0) return "";
    const auto kernel = [&](int decode_ctas) {
        return decode_ctas > 0 ? fmt::format("the decode kernel, {} CTAs per SM", decode_ctas) : fmt::format("64-row CTAs, {} per SM", tiled);
    };
    // (FP8 weights meet e4m3 activations only on the FP8 tensor cores; with bf16 ones they keep 128-row CTAs.
    // FP4 weights meeting e4m3 activations take the decode kernel's form in every batch.)
    const int thin = cuda::grouped_gemm_fp4_e4m3_ctas_per_sm(8),
              narrow = cuda::grouped_gemm_fp4_e4m3_ctas_per_sm(16),
              mid = cuda::grouped_gemm_fp4_e4m3_ctas_per_sm(32),
              wide = cuda::grouped_gemm_fp4_e4m3_ctas_per_sm(64);
    // Launches of few CTAs (one token's experts, say) take a shape of fewer CTAs to an SM where there is one.
    const auto few = [](WeightCode code, bool a_fp8) -> std::string {
        const cuda::FewCtaShape s = cuda::grouped_gemm_few_cta_shape(code, a_fp8);
        return s.ctas_per_sm > 0 ? fmt::format(" ({} in launches of at most {} an SM)", s.ctas_per_sm, s.launch_ctas_per_sm) : "";
    };
    return fmt::format(
        "BF16 weights: {}{}; FP8 weights: {}; FP4 weights: {}{} (the decode kernel: the weights as the "
        "MMAs' first operand; taller CTAs where a decode batch's experts average more rows)",
        kernel(bf16), few(WeightCode::Bf16, false), fp8_tensor_cores() ? kernel(fp8) : "128-row CTAs",
        kernel(fp4),
        thin > 0 ? fmt::format(", meeting e4m3 activations {} CTAs per SM of 8 tokens{}, {} of 16, {} of 32, "
                               "{} of 64 (64 in other batches)",
                               thin, few(WeightCode::Fp4, true), narrow, mid, wide)
                 : "");
}

std::string CudaMoeLayer::fp4_arithmetic() const {
    if (!device_ || !device_->tensor_core) return "";
    const cuda::DeviceExpertGroup& routed = device_->tensor_core->routed();
    if (!routed.gate_up.fp4_e4m3_order) return "";
    const auto name = [](const cuda::DeviceMatrixSet& w) { return w.fp4_block_exact ? "block-exact" : "per-32"; };
    const bool tiled = routed.gate_up.fp4_block_exact && cuda::grouped_gemm_fp4_exact_tiled();
    // (tall tiles only where both GEMMs take them: the layer's one tile list serves both)
    const int tall = routed.down.fp4_block_exact ? cuda::grouped_gemm_tall_tile_rows(cuda::WeightCode::Fp4, true, true) : 0;
    return fmt::format("gate/up {}, down {}{}{}", name(routed.gate_up), name(routed.down),
                       tiled ? "; block-exact ones on the tiled kernel in other batches than decode ones" : "",
                       tiled && tall > 0 ? fmt::format(", in {}-row tiles on three-warpgroup CTAs where experts average more "
                                                       "than {} rows",
                                                       tall, cuda::grouped_gemm_tile_rows())
                                         : "");
}

CudaMoeLayer::CudaMoeLayer(const MoeLayer& layer, CudaPath path, Fp8Products fp8)
    : layer_(layer), device_(std::make_unique<Device>()) {
    std::string why;
    SMOE_CHECK(cuda::device_available(&why), Unsupported, "the CUDA backend needs a GPU: {}", why);
    SMOE_CHECK(!layer.weights().partial, Unsupported,
               "layer {} holds only some of its experts; the CUDA backend runs whole layers", layer.weights().layer);
    if (path != CudaPath::Portable) {
        portable_reason_ = TensorCorePath::blocker(layer);
        SMOE_CHECK(path == CudaPath::Auto || portable_reason_.empty(), Unsupported,
                   "the tensor-core path cannot run this layer: {}", portable_reason_);
    } else {
        portable_reason_ = "the portable path was asked for";
    }
    fallback_ = path == CudaPath::Auto;
    if (portable_reason_.empty()) {
        path_ = CudaPath::TensorCore;
        device_->tensor_core = std::make_unique<TensorCorePath>(layer, fp8);
        return;
    }
    device_->upload_portable(layer.packed());
}

CudaMoeLayer::~CudaMoeLayer() = default;

void CudaMoeLayer::set_graph_max_tokens(int64_t tokens) {
    if (device_->tensor_core) device_->tensor_core->set_graph_max_tokens(tokens);
}

size_t CudaMoeLayer::graph_count() const { return device_->tensor_core ? device_->tensor_core->graph_count() : 0; }

int64_t CudaMoeLayer::graph_max_tokens() const {
    return device_->tensor_core ? device_->tensor_core->graph_max_tokens() : 0;
}
CudaMoeLayer::CudaMoeLayer(CudaMoeLayer&&) noexcept = default;

MoeOutput CudaMoeLayer::forward(const MoeInput& input, CudaStageTimes* times) const {
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k;
    // The tensor-core path takes the batch unless its inputs have no exact bf16 form (f32 hidden states
    // for bf16 experts); then Auto runs it on the portable path, and an explicit TensorCore refuses it.
    const bool tensor_core = device_->tensor_core &&
                             (!fallback_ || device_->tensor_core->accepts(input.hidden.defined() &&
                                                                          input.hidden.dtype() == DType::BF16));
    BatchPlan plan = layer_.begin_batch(input, !tensor_core);
    const int64_t T = plan.tokens;
    if (T == 0) return std::move(plan.out);
    if (tensor_core) {
        device_->tensor_core->forward(input, plan, times);
        return std::move(plan.out);
    }
    device_->upload_portable(layer_.packed());
    if (times) *times = {};
    const bool bf16 = plan.act_dtype == cpu::ActDType::BF16;

    // Router GEMM on the GPU; the routing itself runs on the host from the (bitwise CPU-equal) logits.
    cuda::DeviceBuffer x(size_t(T * H) * 4, "hidden states");
    x.upload(plan.x.data<float>(), size_t(T * H) * 4);
    cuda::DeviceBuffer logits(size_t(T * E) * 4, "router logits");
    cuda::gemm({x.as<const float>(), nullptr, T, H}, device_->router, logits.as<float>(), E);
    std::vector<float> host_logits(size_t(T * E));
    logits.download(host_logits.data(), host_logits.size() * 4);
    cuda::synchronize();
    layer_.route_batch(plan, host_logits.data());

    // Scratch sized for the largest job, reused by every job in turn.
    int64_t max_m = 0, max_i = 0;
    for (const auto& job : plan.jobs) {
        max_m = std::max<int64_t>(max_m, int64_t(job.tokens.size()));
        max_i = std::max<int64_t>(max_i, job.expert->gate.rows);
    }
    const int64_t wide = std::max(H, max_i);
    cuda::DeviceBuffer values(size_t(max_m * wide) * 4, "expert inputs");
    cuda::DeviceBuffer scales(size_t(max_m * ((wide + 127) / 128)) * 4, "activation scales");
    cuda::DeviceBuffer gate(size_t(max_m * max_i) * 4, "gate outputs"), up(size_t(max_m * max_i) * 4, "up outputs");
    cuda::DeviceBuffer mid(size_t(max_m * max_i) * 4, "SwiGLU outputs");
    cuda::DeviceBuffer down(size_t(max_m * H) * 4, "down outputs");
    cuda::DeviceBuffer contributions(size_t((T * K + T) * H) * 4, "expert contributions");

    const cpu::PackedLayer& packed = layer_.packed();
    const ActivationQuant aq = layer_.activation_quant();
    for (const cpu::ExpertJob& job : plan.jobs) {
        const bool is_shared = job.expert == &packed.shared;
        const DeviceExpert& dev = is_shared ? device_->shared : device_->experts[size_t(job.expert - packed.experts.data())];
        const int64_t m = int64_t(job.tokens.size()), I = dev.gate.rows;
        const cuda::DeviceBuffer tokens = upload_vector(job.tokens, "token rows");
        const cuda::DeviceBuffer dest = upload_vector(job.destinations, "destinations");
        const cuda::DeviceBuffer weights = upload_vector(job.weights, "routing weights");

        const int in_mode = cuda::activation_quant_mode(aq, dev.gate.quantized);
        SMOE_CUDA_CHECK(cuda::launch_gather_quant(x.as<const float>(), H, tokens.as<const int64_t>(), m, H, in_mode,
                                                  values.as<float>(), scales.as<float>(), nullptr));
        const cuda::DeviceActivations xin{values.as<const float>(), in_mode == 1 ? scales.as<const float>() : nullptr,
                                          m, H};
        cuda::gemm(xin, dev.gate, gate.as<float>(), I);
        cuda::gemm(xin, dev.up, up.as<float>(), I);
        SMOE_CUDA_CHECK(cuda::launch_swiglu(gate.as<const float>(), up.as<const float>(), m, I,
                                            weights.as<const float>(), job.swiglu_limit, job.weight_before_down,
                                            bf16, mid.as<float>(), nullptr));
        const int mid_mode = cuda::activation_quant_mode(aq, dev.down.quantized);
        SMOE_CUDA_CHECK(cuda::launch_gather_quant(mid.as<const float>(), I, nullptr, m, I, mid_mode, values.as<float>(),
                                                  scales.as<float>(), nullptr));
        const cuda::DeviceActivations hin{values.as<const float>(),
                                          mid_mode == 1 ? scales.as<const float>() : nullptr, m, I};
        cuda::gemm(hin, dev.down, down.as<float>(), H);
        SMOE_CUDA_CHECK(cuda::launch_scatter(down.as<const float>(), m, H, dest.as<const int64_t>(),
                                             weights.as<const float>(), job.weight_before_down, bf16,
                                             contributions.as<float>(), nullptr));
        // The job's index buffers are freed when this iteration ends: wait for the kernels using them.
        cuda::synchronize();
    }

    const cuda::DeviceBuffer active = upload_vector(plan.active, "mask");
    cuda::DeviceBuffer out(plan.out.output.nbytes(), "output");
    SMOE_CUDA_CHECK(cuda::launch_combine(contributions.as<const float>(), false, T, K, H, active.as<const uint8_t>(),
                                         packed.has_shared, bf16, out.get(), nullptr));
    out.download(plan.out.output.mutable_raw(), plan.out.output.nbytes());
    cuda::synchronize();
    return std::move(plan.out);
}

}  // namespace steadymoe
