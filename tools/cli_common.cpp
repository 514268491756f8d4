#include "cli_common.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <numeric>
#include <sstream>
#include <system_error>
#include <thread>

#include "steadymoe/core/error.hpp"
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/model/safetensors.hpp"

namespace steadymoe::cli {

namespace {

std::string g_command_line;
bool g_quiet = false;

// Quotes an argument only when a shell would need it, so the recorded line can be pasted back.
std::string shell_quote(const std::string& arg) {
    const bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) ||
               std::string_view("-_./:=,+@%").find(c) != std::string_view::npos;
    });
    if (plain) return arg;
    std::string out = "'";
    for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string run_and_read(const std::string& command) {
    std::string out;
    if (FILE* p = popen(command.c_str(), "r")) {
        char buf[256];
        while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
        if (pclose(p) != 0) return "";
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
}

// Display width of a UTF-8 string (the bars use multi-byte block characters).
size_t display_width(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

}  // namespace

void set_command_line(int argc, char** argv) {
    g_command_line.clear();
    for (int i = 0; i < argc; ++i) {
        if (i) g_command_line += ' ';
        g_command_line += shell_quote(argv[i]);
    }
}
const std::string& command_line() { return g_command_line; }
void set_quiet(bool quiet) { g_quiet = quiet; }
bool quiet() { return g_quiet; }

int resolve_threads(int requested) {
    SMOE_CHECK(requested >= 0, InvalidArgument, "--threads must be 0 (all) or a positive count, not {}",
               requested);
    if (requested > 0) return requested;
    const unsigned hw = std::thread::hardware_concurrency();
    return hw ? int(hw) : 1;
}

// ---- inputs --------------------------------------------------------------------------------------

std::string TensorSpec::text() const { return file.string() + ":" + tensor; }

TensorSpec parse_tensor_spec(const std::string& text, const std::string& option) {
    const size_t colon = text.rfind(':');
    SMOE_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < text.size(), InvalidArgument,
               "{}: '{}' is not FILE:TENSOR (for example io.safetensors:input)", option, text);
    return {text.substr(0, colon), text.substr(colon + 1)};
}

Tensor load_tensor(const TensorSpec& spec, const std::string& option, std::initializer_list<DType> dtypes,
                   size_t rank) {
    std::error_code ec;
    SMOE_CHECK(std::filesystem::is_regular_file(spec.file, ec), NotFound, "{}: file '{}' does not exist",
               option, spec.file.string());
    const SafetensorsFile file = SafetensorsFile::open(spec.file);
    if (!file.contains(spec.tensor)) {
        std::string names;
        size_t shown = 0;
        for (const TensorInfo& t : file.tensors()) {
            if (shown++ == 8) {
                names += ", ...";
                break;
            }
            names += (names.empty() ? "" : ", ") + t.name;
        }
        SMOE_THROW(NotFound, "{}: tensor '{}' is not in '{}' (it holds: {})", option, spec.tensor,
                   spec.file.string(), names.empty() ? "nothing" : names);
    }
    Tensor t = file.get(spec.tensor);
    std::string allowed;
    size_t i = 0;
    for (DType d : dtypes)
        allowed += (i++ == 0 ? "" : i == dtypes.size() ? " or " : ", ") + std::string(dtype_name(d));
    SMOE_CHECK(std::find(dtypes.begin(), dtypes.end(), t.dtype()) != dtypes.end(), InvalidArgument,
               "{}: {} has dtype {}; expected {}", option, spec.text(), dtype_name(t.dtype()), allowed);
    SMOE_CHECK(t.rank() == rank, InvalidArgument, "{}: {} has shape {}; expected {} dimensions", option,
               spec.text(), shape_str(t.shape()), rank);
    return t;
}

void check_positive(const std::vector<int64_t>& values, const std::string& option) {
    SMOE_CHECK(!values.empty(), InvalidArgument, "{}: the list is empty", option);
    for (int64_t v : values) SMOE_CHECK(v > 0, InvalidArgument, "{}: {} is not a positive count", option, v);
}
void check_positive(const std::vector<int>& values, const std::string& option) {
    check_positive(std::vector<int64_t>(values.begin(), values.end()), option);
}

namespace {

// Why layer L carries no MoE block, in the config's own terms.
std::string dense_reason(const MoeConfig& c, int64_t layer) {
    const bool deepseek = c.family == ModelFamily::DeepseekV2 || c.family == ModelFamily::DeepseekV3 ||
                          c.family == ModelFamily::DeepseekV4;
    if (deepseek && layer < c.first_k_dense_replace)
        return fmt::format("it is dense: first_k_dense_replace = {} makes layers 0..{} dense MLPs",
                           c.first_k_dense_replace, c.first_k_dense_replace - 1);
    if (deepseek && c.moe_layer_freq > 1)
        return fmt::format("it is dense: moe_layer_freq = {} makes only every {}th layer MoE",
                           c.moe_layer_freq, c.moe_layer_freq);
    if (std::find(c.mlp_only_layers.begin(), c.mlp_only_layers.end(), layer) != c.mlp_only_layers.end())
        return "it is dense: it is listed in mlp_only_layers";
    if (c.decoder_sparse_step > 1)
        return fmt::format(
            "it is dense: decoder_sparse_step = {} makes only layers with (L + 1) % {} == 0 MoE",
            c.decoder_sparse_step, c.decoder_sparse_step);
    return "the config makes it a dense MLP";
}

}  // namespace

void check_moe_layer(const MoeConfig& config, const std::string& dir, int64_t layer) {
    SMOE_CHECK(layer != kNoLayer, InvalidArgument,
               "--layer is required with --model (a 0-based layer index)");
    SMOE_CHECK(layer >= 0 && layer < config.num_hidden_layers, InvalidArgument,
               "--layer {}: '{}' has {} layers (0..{})", layer, dir, config.num_hidden_layers,
               config.num_hidden_layers - 1);
    SMOE_CHECK(config.is_moe_layer(layer), InvalidArgument,
               "--layer {}: layer {} of '{}' is not an MoE layer ({})", layer, layer, dir,
               dense_reason(config, layer));
}

std::optional<ActivationQuant> parse_activations(const std::string& text, const MoeConfig& config) {
    if (text == "native") return std::nullopt;
    if (text == "bf16") return ActivationQuant::None;
    if (text == "fp8") {
        const ActivationQuant native = config.native_activation_quant();
        return native == ActivationQuant::None ? ActivationQuant::Fp8Block : native;
    }
    SMOE_THROW(InvalidArgument, "--activations: '{}' is not one of native, bf16, fp8", text);
}

std::string activation_text(ActivationQuant a) {
    return a == ActivationQuant::None ? "not quantised (the input dtype)" : activation_quant_name(a);
}

// ---- the demo -----------------------------------------------------------------------------------

DemoModelShape demo_shape_from(const std::vector<int64_t>& hiek) {
    DemoModelShape shape;
    if (hiek.empty()) return shape;
    SMOE_CHECK(hiek.size() == 4, InvalidArgument, "--demo-shape takes H,I,E,K (4 values), got {}",
               hiek.size());
    check_positive(hiek, "--demo-shape");
    SMOE_CHECK(hiek[3] <= hiek[2], InvalidArgument, "--demo-shape: top-k {} exceeds the {} experts", hiek[3],
               hiek[2]);
    shape.hidden = hiek[0];
    shape.intermediate = hiek[1];
    shape.experts = hiek[2];
    shape.top_k = hiek[3];
    return shape;
}

std::vector<MoeLayer> build_demo_layers(const DemoModelShape& shape, const MoeLayerOptions& options,
                                        Progress& progress) {
    progress.line(fmt::format("building the demo model (fixed seed {}, H={} I={} E={} K={})", shape.seed,
                              shape.hidden, shape.intermediate, shape.experts, shape.top_k));
    const MoeConfig config = demo_config(shape);
    std::vector<MoeLayer> layers;
    for (int64_t layer = 0; layer < 2; ++layer) {
        // demo_layer_weights spreads its experts over every core itself.
        layers.emplace_back(config, demo_layer_weights(shape, layer), options);
        progress.line(fmt::format("demo layer {} built", layer));
    }
    return layers;
}

// ---- output --------------------------------------------------------------------------------------

Progress::Progress(std::string what, double interval_s)
    : what_(std::move(what)), interval_s_(interval_s), start_(std::chrono::steady_clock::now()) {}

double Progress::elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::line(const std::string& text) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const double t = elapsed();
    last_print_ = t;
    if (!g_quiet) fmt::print(stderr, "[{} {:6.1f}s] {}\n", what_, t, text);
}

void Progress::periodic(const std::string& text) {
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (elapsed() - last_print_ < interval_s_) return;
    }
    line(text);
}

void Progress::throttled(size_t done, size_t total, const std::string& text) {
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (done < total && elapsed() - last_print_ < interval_s_) return;
    }
    line(fmt::format("{}/{} {}", done, total, text));
}

std::string Table::str(const std::string& indent) const {
    std::vector<size_t> width(header_.size(), 0);
    auto widen = [&](const std::vector<std::string>& row) {
        for (size_t c = 0; c < row.size() && c < width.size(); ++c)
            width[c] = std::max(width[c], display_width(row[c]));
    };
    widen(header_);
    for (const auto& r : rows_) widen(r);
    auto line = [&](const std::vector<std::string>& row) {
        std::string out = indent;
        for (size_t c = 0; c < width.size(); ++c) {
            const std::string cell = c < row.size() ? row[c] : "";
            const std::string pad(width[c] - display_width(cell), ' ');
            out += (c ? "  " : "") + (c == 0 ? cell + pad : pad + cell);
        }
        while (!out.empty() && out.back() == ' ') out.pop_back();
        return out + "\n";
    };
    std::string out = line(header_);
    size_t total = 0;
    for (size_t w : width) total += w;
    out += indent + std::string(total + 2 * (width.size() - 1), '-') + "\n";
    for (const auto& r : rows_) out += line(r);
    return out;
}

std::string human_bytes(double bytes) {
    static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        ++u;
    }
    return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, kUnits[u]);
}

std::string text_bar(double fraction, int width) {
    static const char* kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    const int eighths = int(std::lround(std::clamp(fraction, 0.0, 1.0) * width * 8));
    std::string out;
    for (int i = 0; i < eighths / 8; ++i) out += "█";
    out += kEighths[eighths % 8];
    return out;
}

std::string sparkline(const std::vector<int64_t>& values) {
    static const char* kLevels[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    const int64_t top = values.empty() ? 0 : *std::max_element(values.begin(), values.end());
    std::string out;
    for (int64_t v : values)
        out += v == 0 ? " " : kLevels[top > 0 ? std::min<int64_t>(7, v * 8 / (top + 1)) : 0];
    return out;
}

std::string expert_load_report(const std::vector<int64_t>& load, const std::string& indent) {
    if (load.empty()) return indent + "expert load: no experts\n";
    const int64_t total = std::accumulate(load.begin(), load.end(), int64_t{0});
    const double mean = double(total) / double(load.size());
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    std::string out = fmt::format(
        "{}expert load: {} routed slots over {} experts, max/mean {:.2f}, min/mean {:.2f}\n", indent, total,
        load.size(), mean > 0 ? double(*hi) / mean : 0.0, mean > 0 ? double(*lo) / mean : 0.0);
    out += fmt::format("{}  experts 0..{}: |{}|\n", indent, load.size() - 1, sparkline(load));
    // Busiest and idlest, ties broken by id so the report is stable.
    std::vector<size_t> order(load.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return load[a] > load[b]; });
    const size_t show = std::min<size_t>(3, order.size());
    auto row = [&](const char* label, size_t e) {
        return fmt::format("{}  {:<6} expert {:>4} {:>8}  {}\n", indent, label, e, load[e],
                           text_bar(*hi > 0 ? double(load[e]) / double(*hi) : 0.0, 30));
    };
    for (size_t i = 0; i < show; ++i) out += row(i == 0 ? "top" : "", order[i]);
    for (size_t i = 0; i < show && order.size() > show; ++i)
        out += row(i == 0 ? "bottom" : "", order[order.size() - show + i]);
    return out;
}

std::string describe_weight(const WeightMatrix& w) {
    switch (w.format) {
        case ExpertFormat::Dense:
            return std::string(dtype_name(w.data.dtype()));
        case ExpertFormat::Fp8:
            return fmt::format("fp8 e4m3 + {}/128x128", !w.scale.defined()                  ? "no scale"
                                                        : w.scale.dtype() == DType::F8_E8M0 ? "E8M0"
                                                                                            : "F32");
        case ExpertFormat::Fp4:
            return "fp4 e2m1 + E8M0/32";
        case ExpertFormat::Nvfp4:
            return "nvfp4 e2m1 + E4M3/16 + F32 global";
    }
    return "unknown";
}

// ---- records -------------------------------------------------------------------------------------

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("model name", 0) == 0) {
            const size_t colon = line.find(':');
            if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
        }
    }
    return "unknown CPU";
}

std::string git_commit() {
    // A copy of the tree without its git history (a remote build machine) names its commit here.
    if (const char* given = std::getenv("STEADYMOE_SOURCE_COMMIT"); given && *given) return given;
    // The source tree this binary was built from (__FILE__ is absolute in our builds), else the cwd.
    const std::string dir = std::filesystem::path(__FILE__).parent_path().string();
    const std::string git = "git -C " + shell_quote(dir.empty() ? "." : dir);
    std::string head = run_and_read(git + " rev-parse HEAD 2>/dev/null");
    if (head.empty()) return "";
    if (!run_and_read(git + " status --porcelain --untracked-files=no 2>/dev/null").empty()) head += "-dirty";
    return head;
}

std::string utc_timestamp() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}


double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace steadymoe::cli
