// `steadymoe bench --backend cuda`: one MoE layer of a named workload on the GPU. Each point stands
// beside its memory floor — the bytes of expert weights the batch touches over the device-to-device
// copy bandwidth measured in the same run — and carries the per-expert token counts, so a peer
// (bench/gpu_peers.py: dense GEMM rates, torch._grouped_mm) can run the same work in the same call.
#include "bench_workload.hpp"
#include "kernel_trace.hpp"

#include "steadymoe/core/digest.hpp"
#include "steadymoe/core/error.hpp"
#include "steadymoe/engine/synthetic.hpp"

#if STEADYMOE_HAVE_CUDA
#include "steadymoe/engine/cuda_moe_layer.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#endif

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

namespace steadymoe::cli {

#if !STEADYMOE_HAVE_CUDA

int bench_cuda(const BenchOptions&) {
    SMOE_THROW(Unsupported, "--backend cuda: this build has no CUDA backend (nvcc was not found when it was configured)");
}

#else

namespace {

using nlohmann::json;

struct GpuPoint {
    int64_t tokens = 0;
    double layer_us = 0, gpu_us = 0, untimed_us = 0, experts_us = 0, router_us = 0, routed_us = 0, gate_up_us = 0, down_us = 0, shared_us = 0, combine_us = 0;
    double routed_alone_us = 0;  // the routed experts alone, untimed (CudaStageTimes::routed_untimed_ms)
    double routed_bytes = 0, layer_bytes = 0;
    double rel_error = -1;
    std::vector<int64_t> load;
    std::vector<KernelSpan> trace;  // --trace: the kernels of one forward as served
    Tensor output;
    uint64_t output_digest = 0;  // FNV-1a of the output's bytes
    int64_t compared_with = 0;
    bool bitwise = false;
    bool graph = false;  // ran as a CUDA graph replay
};

}  // namespace

int bench_cuda(const BenchOptions& given) {
    BenchOptions o = given;
    if (!o.experts_given) o.experts = 0;
    if (!o.tokens_given) o.tokens = {1, 8, 64, 128, 256, 1024, 4096, 16384};
    if (!o.json_given) o.json_path = "bench-cuda.json";
    check_positive(o.tokens, "--tokens");
    SMOE_CHECK(o.repeat > 0, InvalidArgument, "--repeat must be positive, not {}", o.repeat);
    std::string why;
    SMOE_CHECK(cuda::device_available(&why), Unsupported, "--backend cuda needs a GPU: {}", why);
    Progress progress("bench");
    Workload w = build_workload(o, progress);
    const MoeConfig& c = w.config;
    MoeLayerOptions opts;
    opts.threads = resolve_threads(o.threads);
    opts.activation_quant = parse_activations(o.activations, c);
    progress.line("checking the layer (the CPU reference, whose experts are decoded as its batch needs them)");
    const MoeLayer layer(c, std::move(w.weights), opts);
    progress.line("uploading the layer to the GPU");
    CudaMoeLayer gpu(layer);
    gpu.set_graph_max_tokens(o.graph_max_tokens);
    const double bandwidth = cuda::copy_bandwidth(size_t(1) << 31, 10);

    const int64_t H = c.hidden_size, I = c.moe_intermediate_size, K = c.top_k;
    const MoeLayerWeights& weights = layer.weights();
    const double shared_bytes = weights.has_shared ? double(weights.shared.stored_bytes()) : 0.0;
    const double router_bytes = double(weights.router.nbytes());
    // The CPU backend on the first tokens alone: by batch invariance, every batch's first rows.
    const int64_t ref_rows = std::min<int64_t>(16, *std::max_element(o.tokens.begin(), o.tokens.end()));
    progress.line(fmt::format("CPU reference for the first {} tokens", ref_rows));
    // A batch of `tokens` synthetic tokens: every batch's first rows are the same tokens.
    const auto batch_of = [&](int64_t tokens) {
        return MoeInput{synthetic::tensor(DType::BF16, {tokens, H}, o.seed, synthetic::kHidden, 1.0f), Tensor(), Tensor()};
    };
    const MoeOutput ref = layer.forward(batch_of(ref_rows));

    std::vector<GpuPoint> points;
    for (int64_t T : o.tokens) {
        progress.line(fmt::format("{} tokens", T));
        GpuPoint p;
        p.tokens = T;
        const MoeInput in = batch_of(T);
        // Warm-up: grows the workspace; for graph-sized batches the two timed runs capture the graphs (the
        // untimed run's and the timed one's). `graph` says whether they were captured, not just asked for.
        MoeOutput out = gpu.forward(in);
        const size_t graphs_before = gpu.graph_count();
        for (int i = 0; i < 2; ++i) {
            CudaStageTimes warm;
            out = gpu.forward(in, &warm);
        }
        p.graph = gpu.graph_count() > graphs_before;
        std::vector<double> wall, gpu_total, untimed, experts, routed_alone, router, routed, shared, combine, gate_up, down;
        double total = 0;
        while (int(wall.size()) < o.repeat || (total < 0.5 && int(wall.size()) < 20 * o.repeat)) {
            const double t0 = now_seconds();
            out = gpu.forward(in);  // as served: no stage timers
            wall.push_back(now_seconds() - t0);
            total += wall.back();
            CudaStageTimes st;
            out = gpu.forward(in, &st);
            router.push_back(st.router_ms), routed.push_back(st.routed_ms), shared.push_back(st.shared_ms);
            combine.push_back(st.combine_ms), gpu_total.push_back(st.total_ms), untimed.push_back(st.untimed_ms);
            experts.push_back(st.experts_untimed_ms), routed_alone.push_back(st.routed_untimed_ms);
            gate_up.push_back(st.gate_up_ms), down.push_back(st.down_ms);
        }
        p.layer_us = median_of(wall) * 1e6;
        p.router_us = median_of(router) * 1e3, p.routed_us = median_of(routed) * 1e3, p.shared_us = median_of(shared) * 1e3;
        p.combine_us = median_of(combine) * 1e3, p.gpu_us = median_of(gpu_total) * 1e3;
        p.untimed_us = median_of(untimed) * 1e3, p.experts_us = median_of(experts) * 1e3;
        p.routed_alone_us = median_of(routed_alone) * 1e3;
        p.gate_up_us = median_of(gate_up) * 1e3, p.down_us = median_of(down) * 1e3;
        p.load = out.expert_load;
        for (size_t e = 0; e < p.load.size(); ++e)
            if (p.load[e] > 0) p.routed_bytes += double(weights.experts[e].stored_bytes());
        p.layer_bytes = p.routed_bytes + shared_bytes + router_bytes;
        const int64_t rows = std::min(T, ref_rows);
        p.rel_error = relative_error(out.output.rows(0, rows), ref.output.rows(0, rows).to_f32());
        p.output = out.output;
        // The output's bytes as one number: runs of two builds (or switches) that should give the same bits
        // are compared by it (bench/compare_runs.py).
        p.output_digest = fnv1a(kFnvOffset, p.output.raw(), p.output.nbytes());
        points.push_back(std::move(p));
    }
    compare_with_neighbours(points, H);
    std::string trace_failure;  // why --trace recorded nothing (the timed points stand without it)
    if (o.trace) {
        // After every point is timed, so that the trace's own cost lands in no timing. A larger size grew the
        // workspace since a smaller one ran, which drops the graphs: two forwards first (the size seen, then
        // captured), so that the traced one runs as the timed ones did.
        try {
            for (GpuPoint& p : points) {
                const MoeInput in = batch_of(p.tokens);
                for (int i = 0; i < 2; ++i) (void)gpu.forward(in);
                KernelTrace trace;
                trace.start();
                (void)gpu.forward(in);
                p.trace = trace.stop();
            }
        } catch (const Error& e) {
            trace_failure = e.what();
        }
    }

    const std::string device = cuda::device_name();
    fmt::print("workload {}: H={} I={} K={}, experts {} of {}; routed experts {}; shared {}; activations {}\n",
               o.workload, H, I, K, c.n_routed_experts, w.full_experts, w.format,
               c.n_shared_experts > 0 ? fmt::format("1 x {}", c.shared_intermediate_size) : "none",
               activation_text(layer.activation_quant()));
    fmt::print("  device {}, {} path{}, expert GEMMs on {}; copy bandwidth {:.0f} GB/s (read + written)\n", device,
               cuda_path_name(gpu.path()), gpu.portable_reason().empty() ? "" : " (" + gpu.portable_reason() + ")",
               CudaMoeLayer::gemm_kernel(), bandwidth * 1e-9);
    if (const std::string few = CudaMoeLayer::few_row_kernels(); !few.empty())
        fmt::print("  batches of at most 32 rows per expert: {}\n", few);
    if (CudaMoeLayer::fp8_tensor_cores() && w.format == "fp8" && layer.activation_quant() != ActivationQuant::None) {
        const int tall = CudaMoeLayer::tall_tile_rows();
        fmt::print("  FP8 weights x FP8 activations on the FP8 tensor cores (per-128 partial sums folded in fp32){}\n",
                   tall > 0 ? fmt::format("; other batches in {}-row tiles on three-warpgroup CTAs", tall) : "");
    }
    if (const std::string fp4 = gpu.fp4_arithmetic(); !fp4.empty())
        fmt::print("  FP4 weights x FP8 activations on the FP8 tensor cores ({}; block-exact: one sum per 128-wide block folded with "
                   "the block's scale, as FP8 weights; per-32: partial sums scaled per 32-wide group, folded per 128-wide block)\n", fp4);
    Table table({"tokens", "graph", "wall µs", "layer µs", "untimed µs", "experts µs", "untimed/experts", "routed µs", "gate/up µs", "down µs", "shared µs", "routed floor µs", "floor/routed",
                 "routed alone µs", "floor/routed alone", "layer floor µs", "floor/layer", "floor/untimed", "routed TFLOP/s", "rel err", "bitwise vs other batch"});
    json jpoints = json::array();
    for (const GpuPoint& p : points) {
        const double routed_floor = p.routed_bytes / bandwidth * 1e6, layer_floor = p.layer_bytes / bandwidth * 1e6;
        const double routed_flops = 6.0 * double(H) * double(I) * double(K) * double(p.tokens);
        table.add({std::to_string(p.tokens), p.graph ? "yes" : "no", fmt::format("{:.1f}", p.layer_us), fmt::format("{:.1f}", p.gpu_us),
                   fmt::format("{:.1f}", p.untimed_us), p.experts_us > 0 ? fmt::format("{:.1f}", p.experts_us) : "n/a",
                   p.experts_us > 0 ? fmt::format("{:.2f}", p.untimed_us / p.experts_us) : "n/a",
                   fmt::format("{:.1f}", p.routed_us), fmt::format("{:.1f}", p.gate_up_us),
                   fmt::format("{:.1f}", p.down_us), fmt::format("{:.1f}", p.shared_us),
                   fmt::format("{:.1f}", routed_floor), fmt::format("{:.2f}", routed_floor / p.routed_us),
                   p.routed_alone_us > 0 ? fmt::format("{:.1f}", p.routed_alone_us) : "n/a",
                   p.routed_alone_us > 0 ? fmt::format("{:.2f}", routed_floor / p.routed_alone_us) : "n/a",
                   fmt::format("{:.1f}", layer_floor), fmt::format("{:.2f}", layer_floor / p.gpu_us),
                   p.untimed_us > 0 ? fmt::format("{:.2f}", layer_floor / p.untimed_us) : "n/a",
                   fmt::format("{:.1f}", routed_flops / (p.routed_us * 1e-6) * 1e-12), fmt::format("{:.2e}", p.rel_error),
                   p.compared_with ? fmt::format("{} (T={})", p.bitwise ? "yes" : "NO", p.compared_with) : "n/a"});
        json j = {{"tokens", p.tokens},           {"wall_us", p.layer_us},        {"layer_us", p.gpu_us}, {"layer_untimed_us", p.untimed_us}, {"experts_untimed_us", p.experts_us}, {"routed_untimed_us", p.routed_alone_us},       {"router_us", p.router_us},
                  {"routed_us", p.routed_us},     {"shared_us", p.shared_us},     {"combine_us", p.combine_us}, {"gate_up_us", p.gate_up_us}, {"down_us", p.down_us},
                  {"routed_bytes", p.routed_bytes}, {"layer_bytes", p.layer_bytes}, {"routed_floor_us", routed_floor},
                  {"layer_floor_us", layer_floor}, {"routed_flops", routed_flops}, {"expert_load", p.load},
                  {"relative_error_vs_cpu_first_rows", p.rel_error}, {"cuda_graph", p.graph},
                  {"output_fnv1a", fmt::format("{:016x}", p.output_digest)}};
        if (p.compared_with) j["bitwise_equal_to_batch_of"] = {{"tokens", p.compared_with}, {"equal", p.bitwise}};
        if (!p.trace.empty()) {
            const uint64_t first = p.trace.front().start_ns;
            json kernels = json::array();
            for (const KernelSpan& k : p.trace)
                kernels.push_back({{"name", k.name}, {"stream", k.stream}, {"blocks", k.blocks},
                                   {"start_us", double(k.start_ns - first) * 1e-3}, {"us", double(k.end_ns - k.start_ns) * 1e-3}});
            j["kernel_trace"] = kernels;
        }
        jpoints.push_back(j);
    }
    fmt::print("{}", table.str());
    fmt::print("floor = touched expert bytes / copy bandwidth. GPU event times: layer = router GEMM through combine, "
               "routed = routed experts only (permutation, gathers, both GEMMs), shared = the shared expert beside them; untimed = the "
               "same layer run without the stage timers' events between its kernels (which keep a kernel from starting before the one "
               "before it ends), timed from outside; experts = its routed and shared experts alone, run the same way (the layer's target: "
               "untimed within 1.1 times experts); routed alone = the routed experts alone, run the same way, with no shared expert "
               "streaming beside them (the time their floor is set against in floor/routed alone). "
               "wall = forward() from host tensors to host tensors (input checks, transfers included). graph: the batch ran as a "
               "CUDA graph replay\n");
    if (!trace_failure.empty()) fmt::print("\nno kernel trace: {}\n", trace_failure);
    for (const GpuPoint& p : points) {
        if (o.trace && trace_failure.empty() && p.trace.empty())
            fmt::print("\nno kernels recorded for one forward of {} tokens\n", p.tokens);
        if (p.trace.empty()) continue;
        Table timeline(kernel_timeline_header());
        for (std::vector<std::string>& row : kernel_timeline(p.trace)) timeline.add(std::move(row));
        fmt::print("\nkernels of one forward of {} tokens as served ({}; gap: after the kernel before it on its stream, "
                   "negative where it overlapped that one: a dependent launch, or in a graph another branch):\n{}",
                   p.tokens, p.graph ? "a CUDA graph replay" : "launched one by one", timeline.str("  "));
    }
    const json record = {
        {"tool", "steadymoe bench --backend cuda"},
        {"command", command_line()},
        {"date", utc_timestamp()},
        {"commit", git_commit()},
        {"device", device},
        {"path", cuda_path_name(gpu.path())},
        {"gemm_kernel", CudaMoeLayer::gemm_kernel()},
        {"fp8_tensor_cores", CudaMoeLayer::fp8_tensor_cores()},
        {"few_row_kernels", CudaMoeLayer::few_row_kernels()},
        {"fp4_arithmetic", gpu.fp4_arithmetic()},
        {"dependent_launches", CudaMoeLayer::dependent_launches()},
        {"graph_max_tokens", gpu.graph_max_tokens()},
        {"copy_bandwidth_bytes_per_s", bandwidth},
        {"workload",
         {{"name", o.workload},
          {"hidden", H},
          {"intermediate", I},
          {"experts", c.n_routed_experts},
          {"top_k", K},
          {"shared_intermediate", c.n_shared_experts > 0 ? c.shared_intermediate_size : 0},
          {"format", w.format},
          {"activations", activation_quant_name(layer.activation_quant())},
          {"seed", o.seed}}},
        {"points", jpoints},
    };
    write_file_atomic(o.json_path, record.dump(2) + "\n");
    fmt::print("wrote {}\n", o.json_path);
    return kExitOk;
}

#endif

}  // namespace steadymoe::cli
