// `steadymoe run`: without --model, the built-in demo (throughput, expert load, invariance self-check);
// with --model, one MoE layer of a checkpoint applied to hidden states read from a safetensors file.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

#include "cli_common.hpp"
#include "cuda_cli.hpp"
#include "run_ep.hpp"
#include "steadymoe/core/error.hpp"
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/model/checkpoint.hpp"
#include "steadymoe/model/safetensors.hpp"

namespace steadymoe::cli {

namespace {

struct RunOptions {
    std::string model;
    int64_t layer = kNoLayer;
    std::string input, output, token_ids, mask;
    std::string backend = "auto";
    int threads = 0;
    std::string activations = "native";
    std::string nonfinite = "error";
    std::string input_dtype = "stored";
    EpRun ep;  // under an MPI launcher
    // The demo.
    std::vector<int64_t> tokens = {1, 16, 256, 1024};
    int batches = 2;
    int64_t probes = 8;
    std::vector<int64_t> demo_shape;  // H,I,E,K
};

// The layer's forward pass on the chosen backend.
MoeOutput forward_on(const std::string& backend, const MoeLayer& layer, const MoeInput& in) {
    if (backend == "cuda") return cuda_layer_forward(layer)(in);
    return layer.forward(in);
}

MoeLayerOptions layer_options(const RunOptions& o, const MoeConfig& config) {
    MoeLayerOptions opts;
    opts.threads = resolve_threads(o.threads);
    opts.activation_quant = parse_activations(o.activations, config);
    SMOE_CHECK(o.nonfinite == "error" || o.nonfinite == "propagate", InvalidArgument,
               "--nonfinite: '{}' is not one of error, propagate", o.nonfinite);
    opts.nonfinite = o.nonfinite == "error" ? NonFinitePolicy::Error : NonFinitePolicy::Propagate;
    return opts;
}

// ---- one layer of a checkpoint ------------------------------------------------------------------

// The input dtype is the layer's activation dtype (the contract rounds each expert's output to it),
// so --input-dtype bf16 runs a model the way it runs in production even from an F32 file.
Tensor convert_input(const Tensor& hidden, const std::string& want) {
    SMOE_CHECK(want == "stored" || want == "bf16" || want == "f32", InvalidArgument,
               "--input-dtype: '{}' is not one of stored, bf16, f32", want);
    if (want == "f32" && hidden.dtype() == DType::BF16) return hidden.to_f32();
    if (want != "bf16" || hidden.dtype() == DType::BF16) return hidden;
    Tensor out = Tensor::zeros(DType::BF16, hidden.shape());
    const float* src = hidden.data<float>();
    uint16_t* dst = out.mutable_data<uint16_t>();
    for (int64_t i = 0; i < hidden.numel(); ++i) dst[i] = f32_to_bf16(src[i]);  // nearest, ties to even
    return out;
}

int run_model(const RunOptions& o) {
    SMOE_CHECK(!o.input.empty(), InvalidArgument, "--input FILE:TENSOR is required with --model");
    SMOE_CHECK(!o.output.empty(), InvalidArgument, "--output FILE is required with --model");
    Progress progress("run");
    const Checkpoint ckpt = Checkpoint::open(o.model);
    const MoeConfig& cfg = ckpt.config();
    check_moe_layer(cfg, o.model, o.layer);

    MoeInput in;
    in.hidden = load_tensor(parse_tensor_spec(o.input, "--input"), "--input", {DType::F32, DType::BF16}, 2);
    in.hidden = convert_input(in.hidden, o.input_dtype);
    const int64_t T = in.hidden.dim(0);
    SMOE_CHECK(in.hidden.dim(1) == cfg.hidden_size, InvalidArgument,
               "--input: {} has width {}, but '{}' has hidden size {} (expected [T, {}])", o.input,
               in.hidden.dim(1), o.model, cfg.hidden_size, cfg.hidden_size);
    if (!o.token_ids.empty()) {
        in.token_ids = load_tensor(parse_tensor_spec(o.token_ids, "--token-ids"), "--token-ids",
                                   {DType::I32, DType::I64}, 1);
        SMOE_CHECK(in.token_ids.dim(0) == T, InvalidArgument,
                   "--token-ids: {} has {} ids for {} input tokens", o.token_ids, in.token_ids.dim(0), T);
    }
    SMOE_CHECK(!cfg.is_hash_layer(o.layer) || in.token_ids.defined(), InvalidArgument,
               "--layer {}: layer {} of '{}' routes by token id (num_hash_layers = {}); pass --token-ids "
               "FILE:TENSOR",
               o.layer, o.layer, o.model, cfg.num_hash_layers);
    if (!o.mask.empty()) {
        in.mask = load_tensor(parse_tensor_spec(o.mask, "--mask"), "--mask",
                              {DType::BOOL, DType::U8, DType::I32, DType::I64}, 1);
        SMOE_CHECK(in.mask.dim(0) == T, InvalidArgument, "--mask: {} has {} entries for {} input tokens",
                   o.mask, in.mask.dim(0), T);
    }

    const MoeLayerOptions opts = layer_options(o, cfg);
    // Under an MPI launcher each rank loads only the experts its placement slots hold.
    EpRun ep = o.ep;
    const std::optional<std::vector<bool>> held = begin_expert_parallel(cfg, ep);
    const std::string backend = resolve_backend(o.backend, !held, "expert parallelism runs on CPU ranks for now");
    progress.line(fmt::format("loading layer {} of {}", o.layer, o.model));
    const MoeLayer layer = MoeLayer::from_checkpoint(ckpt, o.layer, opts, held ? &*held : nullptr);
    progress.line(backend == "cuda" ? fmt::format("running {} tokens on the GPU", T)
                                    : fmt::format("running {} tokens on {} threads", T, opts.threads));
    double t0 = 0;
    MoeOutput out;
    try {
        // The CPU kernels' decoded experts, made before the clock starts: an expert-parallel rank's every
        // held expert (any token may reach it), else those this input's tokens route to.
        if (backend != "cuda" && held) layer.packed();
        else if (backend != "cuda") layer.decode_for(in);
        t0 = now_seconds();
        std::optional<MoeOutput> spread = run_expert_parallel(layer, in, ep);
        out = spread ? std::move(*spread) : forward_on(backend, layer, in);
    } catch (const Error& e) {
        // The engine names the token and column; add which files they came from.
        std::string files = "--input " + o.input;
        if (!o.token_ids.empty()) files += ", --token-ids " + o.token_ids;
        if (!o.mask.empty()) files += ", --mask " + o.mask;
        const bool nonfinite = std::string_view(e.what()).find("non-finite") != std::string_view::npos;
        throw Error(
            e.kind(),
            fmt::format("{} ({}){}", e.what(), files,
                        nonfinite ? "; --nonfinite propagate computes it, affecting only that token" : ""));
    }
    const double seconds = now_seconds() - t0;
    if (!ep.root) return kExitOk;  // rank 0 writes the output of every rank's tokens
    SMOE_CHECK(out.topk_ids.dtype() == DType::I32, Internal, "the layer returned topk_ids as {}, not I32",
               dtype_name(out.topk_ids.dtype()));

    const std::map<std::string, std::string> metadata = {
        {"format", "steadymoe run output"},
        {"model", o.model},
        {"layer", std::to_string(o.layer)},
        {"input", o.input},
        {"activations", activation_quant_name(layer.activation_quant())},
        {"activation_dtype", std::string(dtype_name(in.hidden.dtype()))},
        {"nonfinite", o.nonfinite},
    };
    write_safetensors(
        o.output,
        {{"output", out.output.to_f32()}, {"topk_ids", out.topk_ids}, {"topk_weights", out.topk_weights}},
        metadata);
    fmt::print(
        "layer {} of {}: {} tokens [{} x {}] {}, top-{} of {} experts, expert activations {}, {} threads{}: "
        "{:.2f} ms\n",
        o.layer, o.model, T, T, cfg.hidden_size, dtype_name(in.hidden.dtype()), cfg.top_k,
        cfg.n_routed_experts, activation_text(layer.activation_quant()), opts.threads,
        ep.ranks > 1 ? fmt::format(", experts over {} ranks ({} placement)", ep.ranks, o.ep.placement) : "",
        seconds * 1e3);
    fmt::print("wrote {}: output F32 [{}, {}], topk_ids I32 [{}, {}], topk_weights F32 [{}, {}]\n", o.output,
               T, cfg.hidden_size, T, cfg.top_k, T, cfg.top_k);
    return kExitOk;
}

// ---- the demo -----------------------------------------------------------------------------------

// `base` with rows [at, at + rows(insert)) replaced by `insert`; any dtype, rank 1 or 2.
Tensor splice_rows(const Tensor& base, const Tensor& insert, int64_t at) {
    Tensor out = Tensor::zeros(base.dtype(), base.shape());
    const size_t row_bytes = base.nbytes() / size_t(base.dim(0));
    std::memcpy(out.mutable_raw(), base.raw(), base.nbytes());
    std::memcpy(static_cast<char*>(out.mutable_raw()) + size_t(at) * row_bytes, insert.raw(),
                insert.nbytes());
    return out;
}

// How many of `count` rows starting at `at` of `got` equal the rows of `want` byte for byte.
int64_t identical_rows(const Tensor& got, int64_t at, const Tensor& want, int64_t count) {
    const size_t row_bytes = want.nbytes() / size_t(want.dim(0));
    int64_t same = 0;
    for (int64_t r = 0; r < count; ++r) {
        same += std::memcmp(static_cast<const char*>(got.raw()) + size_t(at + r) * row_bytes,
                            static_cast<const char*>(want.raw()) + size_t(r) * row_bytes, row_bytes) == 0;
    }
    return same;
}

MoeInput demo_input(const DemoModelShape& shape, int64_t tokens, uint64_t batch) {
    return {demo_hidden(shape, tokens, batch), demo_token_ids(shape, tokens, batch), Tensor()};
}

// A demo layer on its backend: `forward` runs it; `check` is the other arithmetic-identical way to run it
// that the self-check compares against (one CPU thread; on a GPU, launches without CUDA graphs).
struct DemoLayer {
    const MoeLayer& layer;
    LayerForward forward;
    LayerForward check;
    std::string check_name;  // "1 vs 8 threads"
};

DemoLayer demo_layer(const MoeLayer& layer, const std::string& backend) {
    if (backend == "cuda")
        return {layer, cuda_layer_forward(layer), cuda_layer_forward(layer, 0), "CUDA graph replays vs graph-free launches"};
    // Every expert decoded for the CPU kernels before any batch is timed (the copy shares them)
    layer.packed();
    auto one = std::make_shared<MoeLayer>(layer.with_threads(1));
    return {layer, [&layer](const MoeInput& in) { return layer.forward(in); },
            [one](const MoeInput& in) { return one->forward(in); },
            fmt::format("1 vs {} threads", layer.options().threads)};
}

// Per batch size: tokens/s and µs per token. Small batches repeat until the timing means something.
void demo_throughput(const DemoLayer& demo, const DemoModelShape& shape, const RunOptions& o,
                     Progress& progress, std::vector<int64_t>& load) {
    const MoeLayer& layer = demo.layer;
    Table table({"tokens", "runs", "ms/batch", "µs/token", "tokens/s"});
    demo.forward(demo_input(shape, o.tokens.front(), 0));  // warm-up: first-touch of workspaces
    uint64_t batch = 1;
    for (int64_t T : o.tokens) {
        progress.line(fmt::format("layer {}: batches of {} tokens", layer.weights().layer, T));
        double seconds = 0;
        int runs = 0;
        while (runs < o.batches || (seconds < 0.2 && runs < 100 * o.batches)) {
            const MoeInput in = demo_input(shape, T, batch++);
            const double t0 = now_seconds();
            const MoeOutput out = demo.forward(in);
            seconds += now_seconds() - t0;
            ++runs;
            for (size_t e = 0; e < load.size() && e < out.expert_load.size(); ++e)
                load[e] += out.expert_load[e];
        }
        const double per_batch = seconds / runs;
        table.add({std::to_string(T), std::to_string(runs), fmt::format("{:.3f}", per_batch * 1e3),
                   fmt::format("{:.1f}", per_batch * 1e6 / double(T)),
                   fmt::format("{:.0f}", double(T) / per_batch)});
    }
    fmt::print("{}", table.str("  "));
}

// Probe tokens alone vs at the first, middle and last positions of a batch of other tokens, and
// alone against the layer's check run (demo_layer). Returns {identical, compared}.
std::pair<int64_t, int64_t> demo_invariance(const DemoLayer& demo, const DemoModelShape& shape, int64_t probes,
                                            int64_t batch_tokens, Progress& progress) {
    const MoeLayer& layer = demo.layer;
    const MoeInput probe = demo_input(shape, probes, 1u << 30);
    const MoeInput filler = demo_input(shape, batch_tokens, (1u << 30) + 1);
    const int64_t positions[] = {0, (batch_tokens - probes) / 2, batch_tokens - probes};
    MoeInput mixed = filler;
    for (int64_t at : positions) {
        mixed.hidden = splice_rows(mixed.hidden, probe.hidden, at);
        mixed.token_ids = splice_rows(mixed.token_ids, probe.token_ids, at);
    }
    progress.line(
        fmt::format("layer {}: invariance self-check ({} probe tokens)", layer.weights().layer, probes));
    Tensor alone;
    for (int run = 0; run < 3; ++run) alone = demo.forward(probe).output;  // on a GPU: eager, capture, replay
    const Tensor inside = demo.forward(mixed).output;
    const Tensor checked = demo.check(probe).output;
    int64_t same = identical_rows(checked, 0, alone, probes);
    for (int64_t at : positions) same += identical_rows(inside, at, alone, probes);
    return {same, 4 * probes};
}

int run_demo(const RunOptions& o) {
    check_positive(o.tokens, "--tokens");
    SMOE_CHECK(o.batches > 0, InvalidArgument, "--batches must be positive, not {}", o.batches);
    const DemoModelShape shape = demo_shape_from(o.demo_shape);
    const int64_t batch_tokens =
        std::max<int64_t>(*std::max_element(o.tokens.begin(), o.tokens.end()), 3 * o.probes);
    SMOE_CHECK(o.probes > 0, InvalidArgument, "--probes must be positive, not {}", o.probes);

    const std::string backend = resolve_backend(o.backend);
    Progress progress("run");
    const MoeConfig cfg = demo_config(shape);
    const MoeLayerOptions opts = layer_options(o, cfg);
    const std::vector<MoeLayer> layers = build_demo_layers(shape, opts, progress);
    const std::string where = backend == "cuda" ? "one GPU" : fmt::format("{} threads", opts.threads);

    const MoeLayerWeights& w = layers[1].weights();
    fmt::print(
        "SteadyMoE demo: DeepSeek-V4-shaped, 2 MoE layers (layer 0 hash-routed, layer 1 score-routed)\n");
    fmt::print(
        "  H={} I={} E={} K={} | {} routing | experts {} | shared {}x{} {} | activations {} | {}\n",
        cfg.hidden_size, cfg.moe_intermediate_size, cfg.n_routed_experts, cfg.top_k,
        score_func_name(cfg.score_func), describe_weight(w.experts.at(0).gate), cfg.n_shared_experts,
        cfg.shared_intermediate_size, w.has_shared ? describe_weight(w.shared.gate) : "none",
        activation_text(layers[1].activation_quant()), where);

    int64_t same = 0, compared = 0;
    std::string check_name;
    for (const MoeLayer& layer : layers) {
        if (backend == "cuda") progress.line(fmt::format("layer {}: uploading to the GPU", layer.weights().layer));
        const DemoLayer demo = demo_layer(layer, backend);
        check_name = demo.check_name;
        const int64_t l = layer.weights().layer;
        fmt::print("\nlayer {} ({})\n", l,
                   layer.is_hash_layer() ? "hash-routed: experts = tid2eid[token id]"
                                         : "score-routed: top-k of sqrt-softplus + bias");
        std::vector<int64_t> load(size_t(cfg.n_routed_experts), 0);
        demo_throughput(demo, shape, o, progress, load);
        fmt::print("{}", expert_load_report(load, "  "));
        const auto [s, c] = demo_invariance(demo, shape, o.probes, batch_tokens, progress);
        same += s;
        compared += c;
    }
    const bool ok = compared > 0 && same == compared;
    fmt::print(
        "\ninvariance: {}/{} tokens bitwise identical ({} probe tokens alone vs first/middle/last of a "
        "{}-token batch, and {}; both layers){}\n",
        same, compared, o.probes, batch_tokens, check_name, ok ? "" : " -- FAILED");
    return ok ? kExitOk : kExitCheckFailed;
}

}  // namespace

Command add_run_command(CLI::App& parent) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* app = parent.add_subcommand("run",
                                          "Run one MoE layer of a checkpoint on hidden states from a file; "
                                          "without --model, run the built-in demo");
    app->add_option("--model", o->model, "Model directory (config.json + safetensors); omit for the demo");
    app->add_option("--layer", o->layer, "Layer index (0-based) of an MoE layer");
    app->add_option("--input", o->input, "Hidden states FILE:TENSOR, [T, H] F32 or BF16");
    app->add_option("--output", o->output, "Output safetensors file: output, topk_ids, topk_weights");
    app->add_option("--token-ids", o->token_ids,
                    "Token ids FILE:TENSOR, [T] I32 or I64 (needed by hash layers)");
    app->add_option("--mask", o->mask, "Token mask FILE:TENSOR, [T] BOOL/U8/I32/I64, nonzero = real token");
    app->add_option("--backend", o->backend, "Compute backend: auto (the GPU when one is visible), cpu, or cuda (one GPU)")
        ->capture_default_str();
    app->add_option("--threads", o->threads, "CPU threads (0 = all)")->capture_default_str();
    app->add_option("--activations", o->activations, "Expert activation arithmetic: native, bf16 or fp8")
        ->capture_default_str();
    app->add_option("--input-dtype", o->input_dtype,
                    "Activation dtype: stored (as in the file), bf16 (round to bf16 first) or f32")
        ->capture_default_str();
    app->add_option("--nonfinite", o->nonfinite,
                    "NaN/Inf in the input: error or propagate (to that token only)")
        ->capture_default_str();
    app->add_option("--placement", o->ep.placement,
                    "Under mpirun or a torchrun-style launch: where the experts live — contiguous, strided or a file from steadymoe plan")
        ->capture_default_str();
    app->add_option("--ep-timeout", o->ep.timeout_s, "Under mpirun or a torchrun-style launch: seconds to wait for another rank")
        ->capture_default_str();
    app->add_option("--ranks-per-node", o->ep.ranks_per_node,
                    "Under mpirun or a torchrun-style launch: ranks per node (two-level exchanges: a token crosses to a node once; 0 = one node)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    CLI::Option_group* demo = app->add_option_group("Demo", "Options of the built-in demo (no --model)");
    demo->add_option("--tokens", o->tokens, "Batch sizes to time")->delimiter(',')->capture_default_str();
    demo->add_option("--batches", o->batches, "Timed batches per size (small sizes repeat to at least 0.2 s)")
        ->capture_default_str();
    demo->add_option("--probes", o->probes, "Probe tokens of the invariance self-check")
        ->capture_default_str();
    demo->add_option("--demo-shape", o->demo_shape,
                     "Shrink or grow the demo: H,I,E,K (default 1024,512,64,6)")
        ->delimiter(',');
    return {app, [o] {
                if (!o->model.empty()) return run_model(*o);
                SMOE_CHECK(o->input.empty() && o->output.empty() && o->layer == kNoLayer, InvalidArgument,
                           "--input, --output and --layer need --model DIR (without it, run runs the demo)");
                return run_demo(*o);
            }};
}

}  // namespace steadymoe::cli
