#include "bench_workload.hpp"

#include "steadymoe/core/error.hpp"
#include "steadymoe/core/parallel.hpp"
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/model/quantize.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace steadymoe::cli {

namespace {

// The workload table of docs/benchmarks.md, with the routed expert count possibly scaled down: H, I
// and K stay, so every per-expert GEMM has its real shape.
MoeConfig workload_config(const std::string& name, int64_t experts, int64_t& full_experts,
                          std::string& native) {
    MoeConfig c;
    c.num_hidden_layers = 1;
    if (name == "deepseek-v3") {
        c.family = ModelFamily::DeepseekV3;
        c.model_type = "deepseek_v3";
        c.hidden_size = 7168, c.moe_intermediate_size = 2048, full_experts = 256, c.top_k = 8;
        c.n_shared_experts = 1, c.shared_intermediate_size = 2048;
        c.score_func = ScoreFunc::Sigmoid, c.selection_bias = true, c.norm_topk_prob = true;
        c.n_group = 8, c.topk_group = 4, c.group_score = GroupScore::Top2Sum, c.routed_scaling_factor = 2.5;
        native = "fp8";
    } else if (name == "deepseek-v4-flash") {
        c.family = ModelFamily::DeepseekV4;
        c.model_type = "deepseek_v4";
        c.hidden_size = 4096, c.moe_intermediate_size = 2048, full_experts = 256, c.top_k = 6;
        c.n_shared_experts = 1, c.shared_intermediate_size = 2048;
        c.score_func = ScoreFunc::SqrtSoftplus, c.selection_bias = true, c.norm_topk_prob = true;
        c.routed_scaling_factor = 1.5, c.swiglu_limit = 10.0,
        c.weight_placement = WeightPlacement::BeforeDown;
        native = "fp4";
    } else if (name == "qwen3-30b-a3b") {
        c.family = ModelFamily::Qwen3Moe;
        c.model_type = "qwen3_moe";
        c.hidden_size = 2048, c.moe_intermediate_size = 768, full_experts = 128, c.top_k = 8;
        c.score_func = ScoreFunc::Softmax, c.norm_topk_prob = true;
        native = "bf16";
    } else {
        SMOE_THROW(InvalidArgument,
                   "--workload: '{}' is not one of qwen3-30b-a3b, deepseek-v3, deepseek-v4-flash, demo",
                   name);
    }
    c.n_routed_experts = experts == 0 ? full_experts : experts;
    SMOE_CHECK(c.n_routed_experts >= c.top_k, InvalidArgument,
               "--experts {}: {} routes each token to {} experts", experts, name, c.top_k);
    // Group-limited selection survives scaling only while the groups still divide the experts and
    // the kept groups still hold top-k experts; otherwise select over all experts (and say so).
    if (c.n_group > 1 &&
        (c.n_routed_experts % c.n_group != 0 || c.n_routed_experts / c.n_group * c.topk_group < c.top_k ||
         c.n_routed_experts / c.n_group < 2)) {
        c.n_group = 1, c.topk_group = 1;
    }
    return c;
}

// Sets the config's expert format and the quantization block that goes with it.
void set_format(MoeConfig& c, const std::string& format) {
    if (format == "bf16") return;
    c.expert_format = format == "fp8" ? ExpertFormat::Fp8 : ExpertFormat::Fp4;
    c.quantization.quant_method = "fp8";
    c.quantization.fmt = "e4m3";
    c.quantization.ue8m0_scales = c.family == ModelFamily::DeepseekV4;  // V4's fp8 block scales are E8M0
    c.quantization.activation_scheme = "dynamic";
}

// One matrix [rows, cols] of the stream from element `offset` on: bf16 values, stored in `format` (fp4 shared
// experts are fp8, as V4 ships). Quantised ones are generated into `values`, a buffer the generating thread
// reuses (an expert's f32 values in fresh pages each time cost as much as drawing them).
WeightMatrix make_matrix(uint32_t seed, uint32_t stream, uint64_t offset, int64_t rows, int64_t cols,
                         const std::string& format, bool ue8m0, const std::string& name, std::vector<float>& values) {
    if (format == "bf16")
        return {ExpertFormat::Dense, rows, cols, synthetic::tensor(DType::BF16, {rows, cols}, seed, stream, 0.02f, offset), {},
                1.0f, name};
    values.resize(size_t(rows * cols));
    synthetic::fill_bf16_as_f32(values.data(), rows * cols, seed, stream, 0.02f, offset);
    if (format == "fp8") return quantize_fp8(values.data(), rows, cols, ue8m0, name);
    return quantize_mxfp4(values.data(), rows, cols, E8M0Rounding::Up, name);
}

ExpertWeights make_expert(uint32_t seed, uint32_t gate_up_stream, uint32_t down_stream, int64_t index,
                          int64_t H, int64_t I, const std::string& format, bool ue8m0,
                          const std::string& name, std::vector<float>& values) {
    // Expert e's rows of the [E, 2I, H] and [E, H, I] streams: element offsets e*2I*H (gate's I rows, then
    // up's) and e*H*I.
    const uint64_t gate = uint64_t(index * 2 * I * H), up = gate + uint64_t(I * H), down = uint64_t(index * H * I);
    return {make_matrix(seed, gate_up_stream, gate, I, H, format, ue8m0, name + ".gate", values),
            make_matrix(seed, gate_up_stream, up, I, H, format, ue8m0, name + ".up", values),
            make_matrix(seed, down_stream, down, H, I, format, ue8m0, name + ".down", values)};
}

}  // namespace

Workload build_workload(const BenchOptions& o, Progress& progress) {
    Workload w;
    if (o.workload == "demo") {
        const DemoModelShape shape;
        SMOE_CHECK(o.format.empty() || o.format == "fp4", InvalidArgument,
                   "--format {}: the demo workload's experts are fp4 (drop --format)", o.format);
        w.config = demo_config(shape);
        w.full_experts = shape.experts;
        w.format = "fp4";
        progress.line("building the demo's score-routed layer");
        w.weights = demo_layer_weights(shape, 1);
        return w;
    }
    std::string native;
    w.config = workload_config(o.workload, o.experts, w.full_experts, native);
    w.format = o.format.empty() ? native : o.format;
    SMOE_CHECK(w.format == "bf16" || w.format == "fp8" || w.format == "fp4", InvalidArgument,
               "--format: '{}' is not one of bf16, fp8, fp4", w.format);
    set_format(w.config, w.format);
    const MoeConfig& c = w.config;
    const int64_t H = c.hidden_size, I = c.moe_intermediate_size, E = c.n_routed_experts;
    const bool ue8m0 = c.family == ModelFamily::DeepseekV4;
    w.weights.layer = 0;
    w.weights.router = synthetic::tensor(DType::BF16, {E, H}, o.seed, synthetic::kRouter, 0.02f);
    if (c.selection_bias)
        w.weights.selection_bias = synthetic::tensor(DType::F32, {E}, o.seed, synthetic::kBias, 0.01f);
    w.weights.experts.resize(size_t(E));
    std::mutex guard;
    size_t done = 0;
    const int threads = resolve_threads(o.threads);
    // Each generating thread's (freed on return)
    std::vector<std::vector<float>> values(static_cast<size_t>(threads));
    parallel_for(E, threads, [&](int64_t e) {
        w.weights.experts[size_t(e)] = make_expert(o.seed, synthetic::kGateUp, synthetic::kDown, e, H, I, w.format, ue8m0,
                                                   fmt::format("experts.{}", e), values[size_t(omp_get_thread_num())]);
        const std::lock_guard<std::mutex> lock(guard);
        progress.throttled(++done, size_t(E), fmt::format("experts generated ({})", w.format));
    });
    if (c.n_shared_experts > 0) {
        w.weights.has_shared = true;
        w.weights.shared = make_expert(o.seed, synthetic::kSharedGateUp, synthetic::kSharedDown, 0, H,
                                       c.shared_intermediate_size, w.format == "fp4" ? "fp8" : w.format,
                                       ue8m0, "shared_experts", values.front());
    }
    return w;
}

double relative_error(const Tensor& ours, const Tensor& ref) {
    const Tensor a = ours.to_f32();
    double num = 0, den = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
        const double d = double(a.data<float>()[i]) - double(ref.data<float>()[i]);
        num += d * d;
        den += double(ref.data<float>()[i]) * double(ref.data<float>()[i]);
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}


void on_local_ranks(int ranks, const std::function<void(int rank, Transport& transport)>& body) {
    LocalGroup group(ranks, std::chrono::seconds(120));
    std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                body(r, group.transport(r));
            } catch (...) {
                errors[size_t(r)] = std::current_exception();
                group.fail(r);
            }
        });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
}

}  // namespace steadymoe::cli
