// `steadymoe verify`: the invariance battery (engine/invariance.hpp) on the demo's two layers or on
// one layer of a checkpoint. Every case compares output bytes, never tolerances; exit 1 on any failure.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>

#include "cli_common.hpp"
#include "cuda_cli.hpp"
#include "steadymoe/core/error.hpp"
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/invariance.hpp"
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/model/checkpoint.hpp"

namespace steadymoe::cli {

namespace {

struct VerifyOptions {
    std::string model;
    int64_t layer = kNoLayer;
    std::vector<int> threads = {1, 2, 8};
    std::vector<int64_t> batch_sizes = {1, 2, 3, 7, 64, 257, 1000};
    int64_t probes = 4;
    uint32_t seed = 7;
    std::string activations = "native";
    std::string dtype = "bf16";
    std::vector<int64_t> demo_shape;  // H,I,E,K
    std::string backend = "auto";
};

// Probe tokens for a checkpoint layer: hidden states from the synthetic generator (stream 0) and token
// ids that look random but are a fixed function of the seed, inside the vocabulary.
MoeInput checkpoint_probe(const MoeLayer& layer, const VerifyOptions& o) {
    const MoeConfig& cfg = layer.config();
    MoeInput in;
    const DType dtype = o.dtype == "f32" ? DType::F32 : DType::BF16;
    in.hidden = synthetic::tensor(dtype, {o.probes, cfg.hidden_size}, o.seed, synthetic::kHidden, 1.0f);
    int64_t vocab = cfg.vocab_size;
    if (layer.weights().tid2eid.defined()) vocab = layer.weights().tid2eid.dim(0);
    if (vocab > 0) {
        in.token_ids = Tensor::zeros(DType::I32, {o.probes});
        int32_t* ids = in.token_ids.mutable_data<int32_t>();
        for (int64_t i = 0; i < o.probes; ++i)
            ids[i] = int32_t(synthetic::lowbias32(o.seed * 0x9E3779B1u + uint32_t(i)) % uint64_t(vocab));
    }
    return in;
}

// Runs the battery on one layer; prints a line per case and returns the number of failed cases.
int64_t verify_layer(const MoeLayer& layer, const MoeInput& probe, const std::string& label,
                     const VerifyOptions& o, const std::string& backend, Progress& progress) {
    InvarianceOptions opts;
    opts.batch_sizes = o.batch_sizes;
    opts.thread_counts = o.threads;
    opts.probe_tokens = probe.hidden.dim(0);
    opts.seed = o.seed;
    size_t done = 0;
    opts.progress = [&](const std::string& line) {
        progress.periodic(fmt::format("{}: case {}: {}", label, ++done, line));
    };
    const bool gpu = backend == "cuda";
    progress.line(fmt::format("{}: {} probe tokens, batch sizes {}, {}", label, opts.probe_tokens,
                              fmt::join(o.batch_sizes, ","),
                              gpu ? "on the GPU" : fmt::format("threads {}", fmt::join(o.threads, ","))));
    const InvarianceReport report = gpu ? run_invariance(layer, probe, opts, cuda_invariance_runner(layer))
                                        : run_invariance(layer, probe, opts);
    fmt::print("{}\n", label);
    for (const InvarianceCase& c : report.cases) {
        if (c.passed)
            fmt::print("  pass  {}\n", c.name);
        else
            fmt::print("  FAIL  {}: first difference at {}\n", c.name, c.first_difference);
    }
    fmt::print("  {}/{} cases bitwise identical\n", int64_t(report.cases.size()) - report.failures(),
               report.cases.size());
    return report.failures();
}

int verify(const VerifyOptions& o) {
    check_positive(o.threads, "--threads");
    check_positive(o.batch_sizes, "--batch-sizes");
    SMOE_CHECK(o.probes > 0, InvalidArgument, "--probes must be positive, not {}", o.probes);
    SMOE_CHECK(o.dtype == "bf16" || o.dtype == "f32", InvalidArgument,
               "--dtype: '{}' is not one of bf16, f32", o.dtype);
    const std::string backend = resolve_backend(o.backend);
    const std::string where = backend == "cuda" ? " on the GPU" : "";
    Progress progress("verify", 2.0);
    int64_t failures = 0, layers_checked = 0;
    std::string first_failure;
    auto tally = [&](int64_t failed, const std::string& label) {
        if (failed && first_failure.empty()) first_failure = label;
        failures += failed;
        ++layers_checked;
    };
    if (!o.model.empty()) {
        const Checkpoint ckpt = Checkpoint::open(o.model);
        check_moe_layer(ckpt.config(), o.model, o.layer);
        MoeLayerOptions opts;
        opts.threads = resolve_threads(0);
        opts.activation_quant = parse_activations(o.activations, ckpt.config());
        progress.line(fmt::format("loading layer {} of {}", o.layer, o.model));
        const MoeLayer layer = MoeLayer::from_checkpoint(ckpt, o.layer, opts);
        const std::string label = fmt::format("layer {} of {}{}", o.layer, o.model, where);
        tally(verify_layer(layer, checkpoint_probe(layer, o), label, o, backend, progress), label);
    } else {
        SMOE_CHECK(o.layer == kNoLayer, InvalidArgument,
                   "--layer needs --model DIR (without it, verify checks the demo)");
        const DemoModelShape shape = demo_shape_from(o.demo_shape);
        MoeLayerOptions opts;
        opts.threads = resolve_threads(0);
        opts.activation_quant = parse_activations(o.activations, demo_config(shape));
        const std::vector<MoeLayer> demo = build_demo_layers(shape, opts, progress);
        for (int64_t l = 0; l < 2; ++l) {
            const MoeLayer& layer = demo[size_t(l)];
            const MoeInput probe{demo_hidden(shape, o.probes, 1u << 30),
                                 demo_token_ids(shape, o.probes, 1u << 30), Tensor()};
            const std::string label =
                fmt::format("demo layer {} ({}){}", l, l == 0 ? "hash-routed" : "score-routed", where);
            tally(verify_layer(layer, probe, label, o, backend, progress), label);
        }
    }
    if (failures == 0) {
        fmt::print("verify: passed, every case bitwise identical on {} layer(s)\n", layers_checked);
        return kExitOk;
    }
    fmt::print("verify: FAILED, {} case(s) differ (first in {})\n", failures, first_failure);
    fmt::print(stderr, "steadymoe: error: verify: {} invariance case(s) differ, first in {}\n", failures,
               first_failure);
    return kExitCheckFailed;
}

}  // namespace

Command add_verify_command(CLI::App& parent) {
    auto o = std::make_shared<VerifyOptions>();
    CLI::App* app = parent.add_subcommand(
        "verify",
        "Check bitwise invariance: the same tokens alone, inside batches of other sizes, at other "
        "positions and thread counts must give identical bytes");
    app->add_option("--model", o->model, "Model directory; omit to check the built-in demo's two layers");
    app->add_option("--layer", o->layer, "MoE layer to check (with --model)");
    app->add_option("--threads", o->threads, "Thread counts to compare")
        ->delimiter(',')
        ->capture_default_str();
    app->add_option("--batch-sizes", o->batch_sizes, "Batch sizes the probe tokens are placed in")
        ->delimiter(',')
        ->capture_default_str();
    app->add_option("--probes", o->probes, "Probe tokens checked at each position")->capture_default_str();
    app->add_option("--seed", o->seed, "Seed of the probe and filler tokens")->capture_default_str();
    app->add_option("--activations", o->activations, "Expert activation arithmetic: native, bf16 or fp8")
        ->capture_default_str();
    app->add_option("--dtype", o->dtype, "Activation dtype of checkpoint probes: bf16 or f32")
        ->capture_default_str();
    app->add_option("--demo-shape", o->demo_shape, "Demo size H,I,E,K (default 1024,512,64,6)")
        ->delimiter(',');
    app->add_option("--backend", o->backend,
                    "auto (the GPU when one is visible), cpu, or cuda: on the GPU the thread cases become a "
                    "graph-free launch case")
        ->capture_default_str();
    return {app, [o] { return verify(*o); }};
}

}  // namespace steadymoe::cli
