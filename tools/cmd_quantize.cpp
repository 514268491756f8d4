// `steadymoe quantize`: converts a checkpoint's bf16/f32 routed experts to FP8, MXFP4 or NVFP4 and
// writes a complete checkpoint the engine loads again (model/quantize.hpp does the work).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <system_error>

#include "cli_common.hpp"
#include "steadymoe/core/error.hpp"
#include "steadymoe/model/quantize.hpp"

namespace steadymoe::cli {

namespace {

struct QuantizeCliOptions {
    std::string model;
    std::string to;
    std::string out;
    std::string scale_rounding = "up";
    bool fp8_ue8m0 = false;
    int threads = 0;
};

QuantTarget parse_target(const std::string& to) {
    if (to == "fp8") return QuantTarget::Fp8;
    if (to == "mxfp4") return QuantTarget::Mxfp4;
    if (to == "nvfp4") return QuantTarget::Nvfp4;
    SMOE_THROW(InvalidArgument, "--to: '{}' is not one of fp8, mxfp4, nvfp4", to);
}

int quantize(const QuantizeCliOptions& o) {
    QuantizeOptions opts;
    opts.target = parse_target(o.to);
    SMOE_CHECK(o.scale_rounding == "up" || o.scale_rounding == "down", InvalidArgument,
               "--scale-rounding: '{}' is not one of up, down", o.scale_rounding);
    opts.rounding = o.scale_rounding == "up" ? E8M0Rounding::Up : E8M0Rounding::Down;
    opts.fp8_ue8m0 = o.fp8_ue8m0;
    SMOE_CHECK(o.threads >= 0, InvalidArgument, "--threads must be 0 (all) or positive, not {}", o.threads);
    opts.threads = o.threads;
    SMOE_CHECK(!o.fp8_ue8m0 || opts.target == QuantTarget::Fp8, InvalidArgument,
               "--fp8-ue8m0 applies only to --to fp8");
    SMOE_CHECK(o.scale_rounding == "up" || opts.target == QuantTarget::Mxfp4, InvalidArgument,
               "--scale-rounding down applies only to --to mxfp4 (E8M0 scales of fp8 are always rounded up)");

    std::error_code ec;
    SMOE_CHECK(std::filesystem::is_directory(o.model, ec), NotFound, "--model: '{}' is not a directory",
               o.model);
    // Writing over the input would replace the files being read.
    SMOE_CHECK(!std::filesystem::exists(o.out, ec) || !std::filesystem::equivalent(o.model, o.out, ec),
               InvalidArgument, "--out '{}' is the input directory; choose another", o.out);

    Progress progress("quantize");
    progress.line(fmt::format("{} -> {} ({})", o.model, o.out, quant_target_name(opts.target)));
    size_t written = 0;
    opts.progress = [&](size_t done, size_t total, const std::string& name) {
        written = done;
        progress.throttled(done, total, name);
    };
    const double t0 = now_seconds();
    quantize_checkpoint(o.model, o.out, opts);
    fmt::print("quantized {} -> {}: routed experts to {}{}, {} tensors written in {:.1f} s\n", o.model, o.out,
               quant_target_name(opts.target),
               opts.target == QuantTarget::Mxfp4 ? fmt::format(" (E8M0 scales rounded {})", o.scale_rounding)
               : opts.target == QuantTarget::Fp8
                   ? (o.fp8_ue8m0 ? " (F8_E8M0 block scales)" : " (F32 block scales)")
                   : "",
               written, now_seconds() - t0);
    return kExitOk;
}

}  // namespace

Command add_quantize_command(CLI::App& parent) {
    auto o = std::make_shared<QuantizeCliOptions>();
    CLI::App* app =
        parent.add_subcommand("quantize", "Convert a checkpoint's routed experts to fp8, mxfp4 or nvfp4");
    app->add_option("--model", o->model, "Input model directory (bf16/f16/f32 experts)")->required();
    app->add_option("--to", o->to, "Target format: fp8, mxfp4 or nvfp4")->required();
    app->add_option("--out", o->out, "Output model directory (created)")->required();
    app->add_option("--scale-rounding", o->scale_rounding,
                    "MXFP4 E8M0 scale exponent: up (never clips) or down (the OCP MX rule)")
        ->capture_default_str();
    app->add_flag("--fp8-ue8m0", o->fp8_ue8m0, "FP8: power-of-two F8_E8M0 block scales instead of F32");
    app->add_option("--threads", o->threads,
                    "Expert matrices converted at once, at most 16, each holding a float copy of its matrix (0: "
                    "every hardware thread, or OMP_NUM_THREADS); the same bytes for any count")
        ->capture_default_str();
    return {app, [o] { return quantize(*o); }};
}

}  // namespace steadymoe::cli
