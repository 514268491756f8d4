// What the CLI's commands share: exit codes, FILE:TENSOR inputs, progress lines, text tables, the
// facts a benchmark record names (device, commit, command line, date) and atomic file writes.
// Commands throw steadymoe::Error for bad input; only main() turns that into an exit code.
#pragma once

#include <chrono>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "steadymoe/core/files.hpp"
#include "steadymoe/core/tensor.hpp"
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/model/config.hpp"
#include "steadymoe/model/weights.hpp"

namespace CLI {
class App;
}

namespace steadymoe::cli {

// The exit codes every command shares (docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;  // a verification or validation ran and failed
inline constexpr int kExitBadInput = 2;     // bad usage, unreadable or inconsistent input

// A subcommand: its CLI11 parser and what to run once it was selected and parsed.
struct Command {
    CLI::App* app = nullptr;
    std::function<int()> run;
};

Command add_run_command(CLI::App& parent);
Command add_inspect_command(CLI::App& parent);
Command add_verify_command(CLI::App& parent);
Command add_quantize_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);
Command add_plan_command(CLI::App& parent);

// ---- the process ---------------------------------------------------------------------------------
// Recorded once by main(): the exact command line (for benchmark records) and the --quiet switch.
void set_command_line(int argc, char** argv);
const std::string& command_line();
void set_quiet(bool quiet);
bool quiet();
// Threads to use for a request of `requested` (0 = every hardware thread).
int resolve_threads(int requested);

// ---- inputs --------------------------------------------------------------------------------------
// "FILE:TENSOR", split at the last ':' (tensor names never hold one; paths rarely do).
struct TensorSpec {
    std::filesystem::path file;
    std::string tensor;
    std::string text() const;
};
// `option` names the flag in messages ("--input").
TensorSpec parse_tensor_spec(const std::string& text, const std::string& option);
// Opens the file, finds the tensor and checks its dtype and rank; every failure names the option,
// the file and the tensor. The result borrows the file's mapping (kept alive by the tensor).
Tensor load_tensor(const TensorSpec& spec, const std::string& option, std::initializer_list<DType> dtypes,
                   size_t rank);

// Comma-separated option values arrive split by CLI11; these check them once, where they enter.
void check_positive(const std::vector<int64_t>& values, const std::string& option);
void check_positive(const std::vector<int>& values, const std::string& option);

// --layer given to a command that takes one; kNoLayer when absent.
inline constexpr int64_t kNoLayer = INT64_MIN;
// Throws InvalidArgument unless `layer` of the model in `dir` exists and has an MoE block; a dense
// layer's message says which config field makes it dense.
void check_moe_layer(const MoeConfig& config, const std::string& dir, int64_t layer);

// "native" (the checkpoint's own), "bf16" or "fp8" (the fp8 rule the checkpoint uses, or per-128
// amax/448 scales when it has none). Throws InvalidArgument for anything else.
std::optional<ActivationQuant> parse_activations(const std::string& text, const MoeConfig& config);
// For people: "fp8 (per-128 power-of-two scale)", "not quantised (the input dtype)".
std::string activation_text(ActivationQuant a);

// ---- output --------------------------------------------------------------------------------------
// One line per step on stderr, prefixed with the seconds since the command started; silent under
// --quiet. throttled() prints at most every `interval` seconds, plus the last step. Safe to call
// from several threads.
class Progress {
  public:
    explicit Progress(std::string what, double interval_s = 0.5);
    void line(const std::string& text);
    void throttled(size_t done, size_t total, const std::string& text);
    // Prints only when `interval` seconds passed since the last line (for steps of unknown count).
    void periodic(const std::string& text);
    double elapsed() const;

  private:
    std::string what_;
    double interval_s_;
    std::chrono::steady_clock::time_point start_;
    double last_print_ = -1e9;
    std::mutex mutex_;
};

// A plain text table: left-aligned first column, the rest right-aligned, widths from the content.
class Table {
  public:
    explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
    void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
    std::string str(const std::string& indent = "") const;

  private:
    std::vector<std::string> header_;
    std::vector<std::vector<std::string>> rows_;
};

// "1.50 GiB", "312 KiB".
std::string human_bytes(double bytes);
// A bar of `width * fraction` block characters (eighths resolve the last cell).
std::string text_bar(double fraction, int width);
// A one-character-per-value row of ▁▂▃▄▅▆▇█ scaled to the largest value.
std::string sparkline(const std::vector<int64_t>& values);
// The expert-load report: total routed slots, max/mean and min/mean, a sparkline and the busiest
// and idlest experts with bars. Multi-line, each line starting with `indent`.
std::string expert_load_report(const std::vector<int64_t>& load, const std::string& indent);

// How a matrix is stored, for summaries: "BF16", "fp8 e4m3 + F32/128x128" (a scale per 128x128
// block), "fp4 e2m1 + E8M0/32" (a scale per 32 values along K), ...
std::string describe_weight(const WeightMatrix& w);

// ---- the demo -----------------------------------------------------------------------------------
// --demo-shape H,I,E,K (empty: the default shape); checked once here.
DemoModelShape demo_shape_from(const std::vector<int64_t>& hiek);
// The demo's two layers (0 hash-routed, 1 score-routed), built side by side with a progress line each.
std::vector<MoeLayer> build_demo_layers(const DemoModelShape& shape, const MoeLayerOptions& options,
                                        Progress& progress);

// ---- records -------------------------------------------------------------------------------------
std::string cpu_model();      // "model name" from /proc/cpuinfo, or "unknown CPU"
std::string git_commit();     // `git rev-parse HEAD` in the source tree, or "" when unavailable
std::string utc_timestamp();  // 2026-11-29T21:36:00Z
// Writes `text` to a temporary name beside `path`, then renames it into place.

// Seconds on a monotonic clock.
double now_seconds();

}  // namespace steadymoe::cli
