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

#include "bench_workload.hpp"
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

struct Point {
    int64_t tokens = 0;
    double ours_s = 0, base_s = 0, rel_error = -1;
    Tensor output;
    int64_t compared_with = 0;
    bool bitwise = false;
};

int bench(const BenchOptions& o) {
    SMOE_CHECK(o.ranks_per_node == 0 || (o.ep_ranks > 0 && o.backend == "cpu"), InvalidArgument,
               "--ranks-per-node: two-level exchanges run with --ep-ranks on CPU ranks");
    SMOE_CHECK(!o.trace || (o.backend == "cuda" && o.ep_ranks == 0), InvalidArgument,
               "--trace: kernel traces are of one GPU's layer (--backend cuda without --ep-ranks)");
    if (o.ep_ranks > 0) {
        if (o.backend == "cuda") return bench_cuda_ep(o);
        SMOE_CHECK(o.backend == "cpu", InvalidArgument, "--backend: '{}' is not one of cpu, cuda", o.backend);
        return bench_ep(o);
    }
    if (o.backend == "cuda") return bench_cuda(o);
    SMOE_CHECK(o.backend == "cpu", InvalidArgument, "--backend: '{}' is not one of cpu, cuda", o.backend);
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
    layer.packed();  // (else each expert would be decoded in the first timed batch that reaches it)
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
    compare_with_neighbours(points, H);

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
        "Time one MoE layer on the CPU beside a plain fp32 OpenBLAS peer, or on a GPU (--backend cuda) beside its "
        "memory floor; print a table, write JSON");
    app->add_option("--workload", o->workload, "qwen3-30b-a3b, deepseek-v3, deepseek-v4-flash or demo")
        ->capture_default_str();
    app->add_option("--format", o->format,
                    "Routed expert format: bf16, fp8 or fp4 (default: the workload's own)");
    app->add_option("--tokens", o->tokens, "Token counts")->delimiter(',')->capture_default_str();
    app->add_option("--experts", o->experts,
                    "Routed experts to build (0 = the workload's full count; default 16 on the CPU, all on a GPU)")
        ->capture_default_str();
    app->add_option("--backend", o->backend, "cpu, or cuda (a GPU beside its memory floor and peers' inputs)")
        ->capture_default_str();
    app->add_option("--threads", o->threads, "Threads for both sides (0 = all)")->capture_default_str();
    app->add_option("--ep-ranks", o->ep_ranks,
                    "Expert parallelism on this many in-process ranks (CPU ranks, or GPUs with --backend cuda): "
                    "dispatch, experts and combine timed separately, --tokens per rank");
    app->add_option("--ranks-per-node", o->ranks_per_node,
                    "With --ep-ranks on the CPU: the ranks as nodes of this many (two-level exchanges; 0 = one node)")
        ->check(CLI::NonNegativeNumber);
    app->add_option("--graph-max-tokens", o->graph_max_tokens,
                    "cuda: batches up to this many tokens run as CUDA graph replays (0 = launch kernels one by one)")
        ->capture_default_str();
    app->add_flag("--trace", o->trace,
                  "cuda: after the timed runs, one more forward of each size as served, with every kernel's start, "
                  "time and gap after the one before it on its stream (from the profiling library's records)");
    app->add_option("--json", o->json_path, "JSON record to write")->capture_default_str();
    app->add_option("--repeat", o->repeat, "Timed runs per point (the median is reported)")
        ->capture_default_str();
    app->add_option("--seed", o->seed, "Seed of the synthetic streams")->capture_default_str();
    app->add_option("--activations", o->activations, "Expert activation arithmetic: native, bf16 or fp8")
        ->capture_default_str();
    return {app, [o, app] {
        o->experts_given = app->count("--experts") > 0;
        o->tokens_given = app->count("--tokens") > 0;
        o->json_given = app->count("--json") > 0;
        return bench(*o);
    }};
}

}  // namespace steadymoe::cli
