// `steadymoe bench`: one MoE layer of a named workload, built from the synthetic streams of
// docs/benchmarks.md, timed on the CPU backend beside a plain fp32 OpenBLAS peer doing the same
// arithmetic in the same run. Prints a table and writes a JSON record (device, commit, command, date).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "blas_baseline.hpp"
#include "cli_common.hpp"
#include "steadymoe/core/error.hpp"
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/model/quantize.hpp"

namespace steadymoe::cli {

namespace {

using nlohmann::json;

struct BenchOptions {
    std::string workload = "qwen3-30b-a3b";
    std::string format;  // "": the workload's native format
    std::vector<int64_t> tokens = {1, 64, 256, 1024};
    int64_t experts = 16;  // 0: the workload's full count
    int threads = 0;
    std::string json_path = "bench-cpu.json";
    int repeat = 3;
    uint32_t seed = 0;
    std::string activations = "native";
};

struct Workload {
    MoeConfig config;
    int64_t full_experts = 0;
    std::string format;  // bf16, fp8, fp4
    MoeLayerWeights weights;
};

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

// One matrix [rows, cols] from bf16 values, stored in `format` (fp4 shared experts are fp8, as V4 ships).
WeightMatrix make_matrix(const Tensor& bf16, const std::string& format, bool ue8m0, const std::string& name) {
    if (format == "bf16") return {ExpertFormat::Dense, bf16.dim(0), bf16.dim(1), bf16, {}, 1.0f, name};
    const Tensor f = bf16.to_f32();
    if (format == "fp8") return quantize_fp8(f.data<float>(), bf16.dim(0), bf16.dim(1), ue8m0, name);
    return quantize_mxfp4(f.data<float>(), bf16.dim(0), bf16.dim(1), E8M0Rounding::Up, name);
}

ExpertWeights make_expert(uint32_t seed, uint32_t gate_up_stream, uint32_t down_stream, int64_t index,
                          int64_t H, int64_t I, const std::string& format, bool ue8m0,
                          const std::string& name) {
    // Expert e's rows of the [E, 2I, H] and [E, H, I] streams: element offsets e*2I*H and e*H*I.
    const Tensor gu =
        synthetic::tensor(DType::BF16, {2 * I, H}, seed, gate_up_stream, 0.02f, uint64_t(index * 2 * I * H));
    const Tensor down =
        synthetic::tensor(DType::BF16, {H, I}, seed, down_stream, 0.02f, uint64_t(index * H * I));
    return {make_matrix(gu.rows(0, I), format, ue8m0, name + ".gate"),
            make_matrix(gu.rows(I, 2 * I), format, ue8m0, name + ".up"),
            make_matrix(down, format, ue8m0, name + ".down")};
}

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
    std::exception_ptr failure;
    std::mutex guard;
    size_t done = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(resolve_threads(o.threads))
    for (int64_t e = 0; e < E; ++e) {
        try {
            w.weights.experts[size_t(e)] = make_expert(o.seed, synthetic::kGateUp, synthetic::kDown, e, H, I,
                                                       w.format, ue8m0, fmt::format("experts.{}", e));
            const std::lock_guard<std::mutex> lock(guard);
            progress.throttled(++done, size_t(E), fmt::format("experts generated ({})", w.format));
        } catch (...) {
            const std::lock_guard<std::mutex> lock(guard);
            if (!failure) failure = std::current_exception();
        }
    }
    if (failure) std::rethrow_exception(failure);
    if (c.n_shared_experts > 0) {
        w.weights.has_shared = true;
        w.weights.shared = make_expert(o.seed, synthetic::kSharedGateUp, synthetic::kSharedDown, 0, H,
                                       c.shared_intermediate_size, w.format == "fp4" ? "fp8" : w.format,
                                       ue8m0, "shared_experts");
    }
    return w;
}

// Median seconds of `fn` over at least `repeat` runs (and at least 0.2 s, for tiny batches), after a warm-up.
template <typename Fn>
double median_seconds(int repeat, Fn&& fn) {
    fn();
    std::vector<double> times;
    double total = 0;
    while (int(times.size()) < repeat || (total < 0.2 && int(times.size()) < 50 * repeat)) {
        const double t0 = now_seconds();
        fn();
        times.push_back(now_seconds() - t0);
        total += times.back();
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
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

struct Point {
    int64_t tokens = 0;
    double ours_s = 0, base_s = 0, rel_error = -1;
    Tensor output;
    int64_t compared_with = 0;
    bool bitwise = false;
};

int bench(const BenchOptions& o) {
    check_positive(o.tokens, "--tokens");
    SMOE_CHECK(o.repeat > 0, InvalidArgument, "--repeat must be positive, not {}", o.repeat);
    SMOE_CHECK(o.experts >= 0, InvalidArgument, "--experts must be 0 (all) or positive, not {}", o.experts);
    const int threads = resolve_threads(o.threads);
    Progress progress("bench");
    Workload w = build_workload(o, progress);
    const MoeConfig& c = w.config;
    MoeLayerOptions opts;
    opts.threads = threads;
    opts.activation_quant = parse_activations(o.activations, c);
    progress.line("packing the layer for the CPU kernels");
    const MoeLayer layer(c, std::move(w.weights), opts);
    progress.line("dequantising the baseline's experts to fp32");
    const std::unique_ptr<BlasBaseline> baseline = make_blas_baseline(c, layer.weights(), threads);

    const int64_t H = c.hidden_size, I = c.moe_intermediate_size, K = c.top_k;
    const double flops_per_token =
        6.0 * double(H) * double(I) * double(K) + 6.0 * double(H) * double(c.shared_intermediate_size);
    std::vector<Point> points;
    for (int64_t T : o.tokens) {
        progress.line(fmt::format("{} tokens", T));
        Point p;
        p.tokens = T;
        const MoeInput in{synthetic::tensor(DType::BF16, {T, H}, o.seed, synthetic::kHidden, 1.0f), Tensor(),
                          Tensor()};
        MoeOutput out;
        p.ours_s = median_seconds(o.repeat, [&] { out = layer.forward(in); });
        p.output = out.output;
        if (baseline) {
            // OpenBLAS's workers spin for ~0.1 s after each call before they sleep: let them (and the
            // layer's own pool) go idle so neither side is timed against the other's spinning threads.
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
            Tensor ref;
            p.base_s = median_seconds(
                o.repeat, [&] { ref = baseline->forward(in.hidden, out.topk_ids, out.topk_weights); });
            p.rel_error = relative_error(out.output, ref);
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
        }
        points.push_back(std::move(p));
    }
    // Hidden states are prefixes of one stream, so the first min(T, T') tokens of two batches are the
    // same tokens: their output rows must be the same bytes.
    for (size_t i = 0; i < points.size(); ++i) {
        if (points.size() < 2) break;
        const Point& other = points[i + 1 < points.size() ? i + 1 : i - 1];
        Point& p = points[i];
        const int64_t rows = std::min(p.tokens, other.tokens);
        p.compared_with = other.tokens;
        p.bitwise = std::memcmp(p.output.raw(), other.output.raw(),
                                size_t(rows * H) * dtype_size(p.output.dtype())) == 0;
    }

    const std::string device = cpu_model();
    const std::string routing =
        fmt::format("{}{}{}", score_func_name(c.score_func), c.selection_bias ? " + bias" : "",
                    c.n_group > 1 ? fmt::format(", {} groups / top-{}", c.n_group, c.topk_group)
                                  : std::string(", no groups"));
    fmt::print("workload {}: H={} I={} K={}, experts {} of {}{}\n", o.workload, H, I, K, c.n_routed_experts,
               w.full_experts,
               c.n_routed_experts < w.full_experts ? " (scaled down for the CPU; --experts 0 for all)" : "");
    fmt::print("  routing {}; routed experts {}; shared {}; activations {}\n", routing, w.format,
               c.n_shared_experts > 0 ? fmt::format("1 x {}", c.shared_intermediate_size) : "none",
               activation_text(layer.activation_quant()));
    fmt::print("  device {}, {} threads; baseline: {}\n", device, threads, blas_baseline_name());
    Table table({"tokens", "SteadyMoE µs", "baseline µs", "ratio", "ours GFLOP/s", "base GFLOP/s", "rel err",
                 "bitwise vs other batch"});
    json jpoints = json::array();
    for (const Point& p : points) {
        const double flops = flops_per_token * double(p.tokens);
        const bool has_base = p.base_s > 0;
        table.add(
            {std::to_string(p.tokens), fmt::format("{:.1f}", p.ours_s * 1e6),
             has_base ? fmt::format("{:.1f}", p.base_s * 1e6) : "n/a",
             has_base ? fmt::format("{:.2f}", p.base_s / p.ours_s) : "n/a",
             fmt::format("{:.1f}", flops / p.ours_s * 1e-9),
             has_base ? fmt::format("{:.1f}", flops / p.base_s * 1e-9) : "n/a",
             has_base ? fmt::format("{:.2e}", p.rel_error) : "n/a",
             p.compared_with ? fmt::format("{} (T={})", p.bitwise ? "yes" : "NO", p.compared_with) : "n/a"});
        json j = {{"tokens", p.tokens},
                  {"steadymoe_us", p.ours_s * 1e6},
                  {"steadymoe_gflops", flops / p.ours_s * 1e-9},
                  {"flops", flops}};
        if (has_base) {
            j["baseline_us"] = p.base_s * 1e6;
            j["baseline_gflops"] = flops / p.base_s * 1e-9;
            j["ratio_baseline_time_over_ours"] = p.base_s / p.ours_s;
            j["relative_error_vs_baseline"] = p.rel_error;
        }
        if (p.compared_with)
            j["bitwise_equal_to_batch_of"] = {{"tokens", p.compared_with}, {"equal", p.bitwise}};
        jpoints.push_back(j);
    }
    fmt::print("{}", table.str());
    fmt::print(
        "ratio = baseline time / SteadyMoE time (the fraction of the baseline's throughput); FLOPs = 6·H·I "
        "per routed (token, expert) + 6·H·Is per token\n");

    const json record = {
        {"tool", "steadymoe bench"},
        {"command", command_line()},
        {"date", utc_timestamp()},
        {"commit", git_commit()},
        {"device", device},
        {"threads", threads},
        {"baseline", blas_baseline_name()},
        {"workload",
         {{"name", o.workload},
          {"hidden", H},
          {"intermediate", I},
          {"experts", c.n_routed_experts},
          {"experts_full", w.full_experts},
          {"top_k", K},
          {"shared_intermediate", c.shared_intermediate_size},
          {"format", w.format},
          {"routing", routing},
          {"activations", activation_quant_name(layer.activation_quant())},
          {"seed", o.seed}}},
        {"repeat", o.repeat},
        {"points", jpoints},
    };
    write_file_atomic(o.json_path, record.dump(2) + "\n");
    fmt::print("wrote {}\n", o.json_path);
    return kExitOk;
}

}  // namespace

Command add_bench_command(CLI::App& parent) {
    auto o = std::make_shared<BenchOptions>();
    CLI::App* app = parent.add_subcommand(
        "bench",
        "Time one MoE layer on the CPU beside a plain fp32 OpenBLAS peer; print a table, write JSON");
    app->add_option("--workload", o->workload, "qwen3-30b-a3b, deepseek-v3, deepseek-v4-flash or demo")
        ->capture_default_str();
    app->add_option("--format", o->format,
                    "Routed expert format: bf16, fp8 or fp4 (default: the workload's own)");
    app->add_option("--tokens", o->tokens, "Token counts")->delimiter(',')->capture_default_str();
    app->add_option("--experts", o->experts, "Routed experts to build (0 = the workload's full count)")
        ->capture_default_str();
    app->add_option("--threads", o->threads, "Threads for both sides (0 = all)")->capture_default_str();
    app->add_option("--json", o->json_path, "JSON record to write")->capture_default_str();
    app->add_option("--repeat", o->repeat, "Timed runs per point (the median is reported)")
        ->capture_default_str();
    app->add_option("--seed", o->seed, "Seed of the synthetic streams")->capture_default_str();
    app->add_option("--activations", o->activations, "Expert activation arithmetic: native, bf16 or fp8")
        ->capture_default_str();
    return {app, [o] { return bench(*o); }};
}

}  // namespace steadymoe::cli
