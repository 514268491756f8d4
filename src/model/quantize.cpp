// The quantiser: matrix-level FP8 / MXFP4 / NVFP4 encoders and a whole-checkpoint converter.
//
// Every encoder computes its scales in fp32, divides each weight by its scale in fp32 and rounds
// with the codecs of numeric.hpp, so a given input always produces the same bytes on every machine.
#include "steadymoe/model/quantize.hpp"

#include "steadymoe/core/files.hpp"
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/core/parallel.hpp"
#include "steadymoe/model/checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

namespace steadymoe {

namespace {

namespace fs = std::filesystem;

constexpr float kFloatMinNormal = std::numeric_limits<float>::min();
constexpr uint8_t kE8M0One = 127;  // 2^0

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- input checks --------------------------------------------------------------------------------

void check_matrix_args(const float* w, int64_t rows, int64_t cols, const std::string& name) {
    SMOE_CHECK(rows > 0 && cols > 0, InvalidArgument, "{}: cannot quantise an empty [{}, {}] matrix", name,
               rows, cols);
    SMOE_CHECK(w != nullptr, InvalidArgument, "{}: no weight data", name);
}

void check_cols_multiple(int64_t cols, int64_t block, const char* format, const std::string& name) {
    SMOE_CHECK(cols % block == 0, InvalidArgument,
               "{}: {} input features are not a multiple of {}, the {} scale block along K", name, cols,
               block, format);
}

// A NaN or infinity has no meaningful code in any target format (e2m1 has no NaN at all), so it is
// an error in the source, reported at its position.
void reject_non_finite(const float* w, int64_t rows, int64_t cols, const std::string& name) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = w + r * cols;
        for (int64_t c = 0; c < cols; ++c)
            SMOE_CHECK(std::isfinite(row[c]), InvalidArgument, "{}: non-finite value {} at row {}, column {}",
                       name, row[c], r, c);
    }
}

float amax_of(const float* p, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(p[i]));
    return m;
}

// ---- scale rules ----------------------------------------------------------------------------------

// FP8 with an F32 scale: amax maps onto 448. An all-zero block gets scale 1 (any scale encodes zeros;
// 1 keeps the stored scale meaningful). The scale never drops below the smallest normal float, so it
// is never zero and the quotient w / scale never exceeds 448 by more than rounding.
float fp8_scale_f32(float amax) {
    if (amax == 0.0f) return 1.0f;
    return std::max(amax / kE4M3Max, kFloatMinNormal);
}

// The smallest E8M0 code whose power of two, times max_elem, covers amax: nothing in the block clips.
// The bump loop guards against amax / max_elem having rounded down onto a power of two.
uint8_t e8m0_covering(float amax, float max_elem) {
    if (amax == 0.0f) return kE8M0One;
    uint8_t code = e8m0_from_f32_ceil(amax / max_elem);
    while (code < 254 && amax > max_elem * e8m0_to_f32(code)) ++code;
    return code;
}

// OCP MX: 2^(floor(log2 amax) - 2), 2 being the largest e2m1 exponent, clamped to the E8M0 range.
// The block's amax then lands in [4, 8) on the e2m1 grid; what lies above 6 saturates.
uint8_t e8m0_ocp_mx(float amax) {
    if (amax == 0.0f) return kE8M0One;
    const int code = int(e8m0_from_f32_floor(amax)) - 2;
    return uint8_t(std::max(code, 0));
}

// NVFP4 global scale: the matrix amax maps onto the largest block scale (448) times the largest
// e2m1 value (6). All-zero matrices get 1. Floored at the smallest normal float so that every
// block's decoded scale times it stays positive.
float nvfp4_global_scale(float amax_all) {
    if (amax_all == 0.0f) return 1.0f;
    return std::max(amax_all / (kE4M3Max * kE2M1Max), kFloatMinNormal);
}

// The per-16 E4M3 block scale, relative to the global scale. It is a positive code: a block whose
// scale would round to zero (or is all zeros) gets the smallest subnormal, 2^-9, which still encodes
// its values without overflow (they are below 6 * 2^-10 * g, so at most 3 on the grid).
uint8_t nvfp4_block_scale(float amax_block, float global) {
    const uint8_t code = f32_to_e4m3(amax_block / kE2M1Max / global);
    return code == 0 ? uint8_t(0x01) : code;
}

// ---- codes -----------------------------------------------------------------------------------------

// The largest code magnitude (the codes of e4m3 and e2m1 are ordered by magnitude) whose value, scaled
// exactly as the dequantiser scales it, is still a finite float. Only blocks within a step of the fp32
// maximum lose codes: e2m1's 4 and 6 times a 2^126 scale are 2^128 and more, so values there take the
// nearest finite code instead of decoding to infinity.
template <typename Decode>
uint8_t largest_finite_magnitude(uint8_t top, const Decode& decoded) {
    while (top > 0 && !std::isfinite(decoded(top))) --top;
    return top;
}

uint8_t clamp_magnitude(uint8_t code, uint8_t sign_bit, uint8_t max_magnitude) {
    const uint8_t magnitude = code & uint8_t(~sign_bit);
    return magnitude > max_magnitude ? uint8_t((code & sign_bit) | max_magnitude) : code;
}

// A block's `count` values (even) as e2m1 codes of value / s, at most `top` in magnitude, two to a byte along
// K, the even index in the low nibble.
void pack_e2m1_block(uint8_t* dst, const float* src, int64_t count, float s, uint8_t top) {
    const auto code = [&](float v) { return clamp_magnitude(f32_to_e2m1(v / s), 0x8, top); };
    for (int64_t i = 0; i < count; i += 2) dst[i / 2] = uint8_t(code(src[i]) | code(src[i + 1]) << 4);
}

WeightMatrix empty_result(ExpertFormat format, int64_t rows, int64_t cols, const std::string& name) {
    WeightMatrix m;
    m.format = format;
    m.rows = rows;
    m.cols = cols;
    m.name = name;
    return m;
}

}  // namespace

// =====================================================================================================
// Matrix quantisers
// =====================================================================================================

WeightMatrix quantize_fp8(const float* w, int64_t rows, int64_t cols, bool ue8m0, const std::string& name) {
    check_matrix_args(w, rows, cols, name);
    reject_non_finite(w, rows, cols, name);
    const int64_t scale_rows = ceil_div(rows, kFp8BlockSize), scale_cols = ceil_div(cols, kFp8BlockSize);

    WeightMatrix m = empty_result(ExpertFormat::Fp8, rows, cols, name);
    m.data = Tensor::zeros(DType::F8_E4M3, {rows, cols});
    m.scale = Tensor::zeros(ue8m0 ? DType::F8_E8M0 : DType::F32, {scale_rows, scale_cols});
    uint8_t* q = m.data.mutable_data<uint8_t>();

    for (int64_t br = 0; br < scale_rows; ++br) {
        const int64_t r0 = br * kFp8BlockSize, r1 = std::min(rows, r0 + kFp8BlockSize);
        for (int64_t bc = 0; bc < scale_cols; ++bc) {
            const int64_t c0 = bc * kFp8BlockSize, c1 = std::min(cols, c0 + kFp8BlockSize);
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; ++r) amax = std::max(amax, amax_of(w + r * cols + c0, c1 - c0));

            float s;
            const int64_t si = br * scale_cols + bc;
            if (ue8m0) {
                const uint8_t code = e8m0_covering(amax, kE4M3Max);
                m.scale.mutable_data<uint8_t>()[si] = code;
                s = e8m0_to_f32(code);
            } else {
                s = fp8_scale_f32(amax);
                m.scale.mutable_data<float>()[si] = s;
            }
            const uint8_t top = largest_finite_magnitude(0x7E, [s](uint8_t c) { return e4m3_to_f32(c) * s; });
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c)
                    q[r * cols + c] = clamp_magnitude(f32_to_e4m3(w[r * cols + c] / s), 0x80, top);
        }
    }
    m.validate();
    return m;
}

WeightMatrix quantize_mxfp4(const float* w, int64_t rows, int64_t cols, E8M0Rounding rounding,
                            const std::string& name) {
    check_matrix_args(w, rows, cols, name);
    check_cols_multiple(cols, kMxBlockSize, "MXFP4", name);
    reject_non_finite(w, rows, cols, name);
    const int64_t blocks = cols / kMxBlockSize;

    WeightMatrix m = empty_result(ExpertFormat::Fp4, rows, cols, name);
    m.data = Tensor::zeros(DType::U8, {rows, cols / 2});
    m.scale = Tensor::zeros(DType::F8_E8M0, {rows, blocks});
    uint8_t* packed = m.data.mutable_data<uint8_t>();
    uint8_t* scales = m.scale.mutable_data<uint8_t>();

    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < blocks; ++b) {
            const float* src = w + r * cols + b * kMxBlockSize;
            const float amax = amax_of(src, kMxBlockSize);
            const uint8_t code =
                rounding == E8M0Rounding::Up ? e8m0_covering(amax, kE2M1Max) : e8m0_ocp_mx(amax);
            scales[r * blocks + b] = code;
            const float s = e8m0_to_f32(code);
            const uint8_t top = largest_finite_magnitude(7, [s](uint8_t c) { return e2m1_to_f32(c) * s; });
            pack_e2m1_block(packed + r * (cols / 2) + b * (kMxBlockSize / 2), src, kMxBlockSize, s, top);
        }
    }
    m.validate();
    return m;
}

WeightMatrix quantize_nvfp4(const float* w, int64_t rows, int64_t cols, const std::string& name) {
    check_matrix_args(w, rows, cols, name);
    check_cols_multiple(cols, kNvfp4BlockSize, "NVFP4", name);
    reject_non_finite(w, rows, cols, name);
    const int64_t blocks = cols / kNvfp4BlockSize;

    WeightMatrix m = empty_result(ExpertFormat::Nvfp4, rows, cols, name);
    m.data = Tensor::zeros(DType::U8, {rows, cols / 2});
    m.scale = Tensor::zeros(DType::F8_E4M3, {rows, blocks});
    m.global_scale = nvfp4_global_scale(amax_of(w, rows * cols));
    const float g = m.global_scale;
    uint8_t* packed = m.data.mutable_data<uint8_t>();
    uint8_t* scales = m.scale.mutable_data<uint8_t>();

    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < blocks; ++b) {
            const float* src = w + r * cols + b * kNvfp4BlockSize;
            const uint8_t code = nvfp4_block_scale(amax_of(src, kNvfp4BlockSize), g);
            scales[r * blocks + b] = code;
            const float sv = e4m3_to_f32(code);
            const float s = sv * g;  // the divisor: what a reader multiplies back
            const uint8_t top =
                largest_finite_magnitude(7, [sv, g](uint8_t c) { return (e2m1_to_f32(c) * sv) * g; });
            pack_e2m1_block(packed + r * (cols / 2) + b * (kNvfp4BlockSize / 2), src, kNvfp4BlockSize, s, top);
        }
    }
    m.validate();
    return m;
}

const char* quant_target_name(QuantTarget t) {
    switch (t) {
        case QuantTarget::Fp8:
            return "fp8";
        case QuantTarget::Mxfp4:
            return "mxfp4";
        case QuantTarget::Nvfp4:
            return "nvfp4";
    }
    return "?";
}

// =====================================================================================================
// Checkpoint conversion
// =====================================================================================================

namespace {

using ordered_json = nlohmann::ordered_json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kPartialSuffix = ".partial";  // not *.safetensors, so a leftover never blocks a rerun

// Scale tensors that may accompany "<base>.weight"; all of them are consumed when the weight is.
constexpr const char* kScaleSuffixes[] = {".scale", ".weight_scale_inv", ".weight_scale", ".weight_scale_2"};

// A routed expert's projection, "<base>.weight", in one of the naming styles.
struct ExpertMatrixName {
    std::string base;
    bool v4_names = false;  // DeepSeek-V4 ".ffn.experts.E.wN" (scales named ".scale")
};

std::optional<ExpertMatrixName> match_expert_matrix(const std::string& name) {
    // Hugging Face (DeepSeek, Qwen), Mixtral, DeepSeek-V4; any prefix before "layers." is allowed.
    static const std::regex kPattern(R"(^((?:.*\.)?layers\.\d+\.)"
                                     R"((?:mlp\.experts\.\d+\.(?:gate|up|down)_proj)"
                                     R"(|block_sparse_moe\.experts\.\d+\.w[123])"
                                     R"(|(ffn)\.experts\.\d+\.w[123])))"
                                     R"(\.weight$)");
    std::smatch m;
    if (!std::regex_match(name, m, kPattern)) return std::nullopt;
    return ExpertMatrixName{m[1].str(), m[2].matched};
}


void write_text(const fs::path& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    SMOE_CHECK(f.good(), Io, "{}: cannot open for writing", path.string());
    f.write(text.data(), std::streamsize(text.size()));
    f.close();
    SMOE_CHECK(!f.fail(), Io, "{}: write failed", path.string());
}

// ---- reading an expert matrix in whatever format it is stored -----------------------------------------

class ExpertReader {
  public:
    ExpertReader(const Checkpoint& ckpt, const std::string& base) : ckpt_(ckpt), base_(base) {}

    WeightMatrix read() {
        WeightMatrix m;
        m.name = base_ + ".weight";
        m.data = ckpt_.get(m.name);
        SMOE_CHECK(m.data.rank() == 2, BadFormat, "tensor '{}' has shape {}, expected 2-D", m.name,
                   shape_str(m.data.shape()));
        m.rows = m.data.dim(0);
        m.cols = m.data.dim(1);
        const DType dt = m.data.dtype();
        if (dt == DType::BF16 || dt == DType::F16 || dt == DType::F32) {
            m.format = ExpertFormat::Dense;
        } else if (dt == DType::F8_E4M3) {
            m.format = ExpertFormat::Fp8;
            m.scale = take_one_of(".weight_scale_inv", ".scale", m.name);
        } else if (dt == DType::I8 || dt == DType::U8) {
            read_packed_fp4(m);
        } else {
            SMOE_THROW(Unsupported, "tensor '{}' has dtype {}, which is not an expert weight format", m.name,
                       dtype_name(dt));
        }
        check_all_scales_used(m.name);
        m.validate();
        m.check_finite();
        return m;
    }

  private:
    const Checkpoint& ckpt_;
    std::string base_;
    std::set<std::string> used_;

    std::optional<Tensor> take(const char* suffix) {
        const std::string name = base_ + suffix;
        if (!ckpt_.contains(name)) return std::nullopt;
        used_.insert(suffix);
        return ckpt_.get(name);
    }

    Tensor take_one_of(const char* a, const char* b, const std::string& weight) {
        std::optional<Tensor> ta = take(a), tb = take(b);
        SMOE_CHECK(ta || tb, NotFound, "tensor '{}' has neither '{}{}' nor '{}{}'", weight, base_, a, base_,
                   b);
        SMOE_CHECK(!(ta && tb), BadFormat, "tensor '{}' has both '{}{}' and '{}{}'", weight, base_, a, base_,
                   b);
        return ta ? *ta : *tb;
    }

    // MXFP4 (E8M0 scale per 32) or NVFP4 (E4M3 scale per 16 plus an F32 global scale).
    void read_packed_fp4(WeightMatrix& m) {
        m.cols = m.data.dim(1) * 2;
        const bool nvfp4 = ckpt_.contains(base_ + ".weight_scale_2");
        if (!nvfp4) {
            m.format = ExpertFormat::Fp4;
            m.scale = take_one_of(".scale", ".weight_scale", m.name);
            return;
        }
        m.format = ExpertFormat::Nvfp4;
        const Tensor g = *take(".weight_scale_2");
        SMOE_CHECK(g.numel() == 1 && g.dtype() == DType::F32, BadFormat,
                   "'{}.weight_scale_2' must be one F32 value, not {} {}", base_, dtype_name(g.dtype()),
                   shape_str(g.shape()));
        m.global_scale = g.data<float>()[0];
        std::optional<Tensor> s = take(".weight_scale");
        SMOE_CHECK(s.has_value(), NotFound, "NVFP4 tensor '{}' has no '{}.weight_scale'", m.name, base_);
        m.scale = *s;
    }

    // A scale tensor the detected format does not use means the weight is something we misread.
    void check_all_scales_used(const std::string& weight) const {
        for (const char* suffix : kScaleSuffixes) {
            SMOE_CHECK(used_.count(suffix) || !ckpt_.contains(base_ + suffix), BadFormat,
                       "tensor '{}' ({}) comes with '{}{}', which its format does not use", weight,
                       dtype_name(ckpt_.get(weight).dtype()), base_, suffix);
        }
    }
};

// ---- writing the quantised matrix under the loader's names ---------------------------------------------

// The same bytes under another element type (the V4 layout stores packed e2m1 as I8).
Tensor retyped(const Tensor& t, DType dtype) {
    auto keep = std::make_shared<Tensor>(t);
    return Tensor::borrow(dtype, keep->shape(), keep->raw(), std::shared_ptr<const void>(keep, keep->raw()));
}

Tensor f32_scalar(float v) {
    Tensor t = Tensor::zeros(DType::F32, {});
    t.mutable_data<float>()[0] = v;
    return t;
}

WeightMatrix quantize_to_target(const float* w, const WeightMatrix& src, const QuantizeOptions& o) {
    switch (o.target) {
        case QuantTarget::Fp8:
            return quantize_fp8(w, src.rows, src.cols, o.fp8_ue8m0, src.name);
        case QuantTarget::Mxfp4:
            return quantize_mxfp4(w, src.rows, src.cols, o.rounding, src.name);
        case QuantTarget::Nvfp4:
            return quantize_nvfp4(w, src.rows, src.cols, src.name);
    }
    SMOE_THROW(Internal, "unknown quantisation target");
}

void append_quantized(std::vector<std::pair<std::string, Tensor>>& out, const ExpertMatrixName& n,
                      const WeightMatrix& q, QuantTarget target) {
    const std::string& b = n.base;
    switch (target) {
        case QuantTarget::Fp8:
            out.emplace_back(b + ".weight", q.data);
            out.emplace_back(b + (n.v4_names ? ".scale" : ".weight_scale_inv"), q.scale);
            break;
        case QuantTarget::Mxfp4:
            out.emplace_back(b + ".weight", n.v4_names ? retyped(q.data, DType::I8) : q.data);
            out.emplace_back(b + (n.v4_names ? ".scale" : ".weight_scale"), q.scale);
            break;
        case QuantTarget::Nvfp4:
            out.emplace_back(b + ".weight", q.data);
            out.emplace_back(b + ".weight_scale", q.scale);
            out.emplace_back(b + ".weight_scale_2", f32_scalar(q.global_scale));
            break;
    }
}

// Reads one expert matrix, dequantises it row by row and quantises it to the target.
void convert_expert(const Checkpoint& ckpt, const ExpertMatrixName& n, const QuantizeOptions& o,
                    std::vector<std::pair<std::string, Tensor>>& out) {
    const WeightMatrix src = ExpertReader(ckpt, n.base).read();
    std::vector<float> w(size_t(src.rows * src.cols));
    for (int64_t r = 0; r < src.rows; ++r) src.dequantize_row(r, w.data() + r * src.cols);
    append_quantized(out, n, quantize_to_target(w.data(), src, o), o.target);
}

// ---- config.json ---------------------------------------------------------------------------------------

ExpertFormat target_format(QuantTarget t) {
    switch (t) {
        case QuantTarget::Fp8:
            return ExpertFormat::Fp8;
        case QuantTarget::Mxfp4:
            return ExpertFormat::Fp4;
        case QuantTarget::Nvfp4:
            return ExpertFormat::Nvfp4;
    }
    return ExpertFormat::Dense;
}

ordered_json quantization_config_for(const QuantizeOptions& o) {
    ordered_json q = ordered_json::object();
    switch (o.target) {
        case QuantTarget::Fp8:
            q["quant_method"] = "fp8";
            q["fmt"] = "e4m3";
            q["activation_scheme"] = "dynamic";
            q["weight_block_size"] = {kFp8BlockSize, kFp8BlockSize};
            if (o.fp8_ue8m0) q["scale_fmt"] = "ue8m0";
            break;
        case QuantTarget::Mxfp4:
            q["quant_method"] = "mxfp4";
            q["scale_rounding"] = o.rounding == E8M0Rounding::Up ? "up" : "down";
            break;
        case QuantTarget::Nvfp4:
            q["quant_method"] = "modelopt";
            q["quant_algo"] = "NVFP4";
            break;
    }
    return q;
}

// DeepSeek-V4 names its routed experts' format in "expert_dtype"; its quantization_config describes
// the rest of the model (the FP8 shared expert) and stays as it is. expert_dtype knows fp8 and fp4 only.
const char* v4_expert_dtype(QuantTarget t, const fs::path& in_config) {
    switch (t) {
        case QuantTarget::Fp8:
            return "fp8";
        case QuantTarget::Mxfp4:
            return "fp4";
        case QuantTarget::Nvfp4:
            break;
    }
    SMOE_THROW(Unsupported,
               "{}: a DeepSeek-V4 config records its experts' format in expert_dtype, which has no "
               "NVFP4 value; quantise to fp8 or mxfp4 instead",
               in_config.string());
}

// The input config with the experts' new format recorded; checked by parsing it back, so a config the
// engine would misread is never written.
std::string updated_config_text(const fs::path& in_config, const MoeConfig& cfg, const QuantizeOptions& o) {
    ordered_json doc;
    try {
        doc = ordered_json::parse(read_file_text(in_config, 16 << 20));
    } catch (const nlohmann::json::exception& e) {
        SMOE_THROW(BadFormat, "{}: not valid JSON ({})", in_config.string(), e.what());
    }
    SMOE_CHECK(doc.is_object(), BadFormat, "{}: expected a JSON object", in_config.string());
    if (cfg.family == ModelFamily::DeepseekV4)
        doc["expert_dtype"] = v4_expert_dtype(o.target, in_config);
    else
        doc["quantization_config"] = quantization_config_for(o);
    std::string text = doc.dump(2) + "\n";

    const MoeConfig back = MoeConfig::from_json_text(text, "the quantised config.json");
    SMOE_CHECK(
        back.expert_format == target_format(o.target), Unsupported,
        "{}: after conversion to {} the config would read as expert format {}, not {}; this model family "
        "cannot record that format",
        in_config.string(), quant_target_name(o.target), expert_format_name(back.expert_format),
        expert_format_name(target_format(o.target)));
    return text;
}

// ---- the output directory ------------------------------------------------------------------------------

bool is_model_file(const fs::path& p) {
    const std::string name = p.filename().string();
    return name == kConfigFile || name == kIndexFile || p.extension() == ".safetensors";
}

void prepare_output_dir(const fs::path& in_dir, const fs::path& out_dir) {
    std::error_code ec;
    const bool same = fs::equivalent(in_dir, out_dir, ec) ||
                      fs::absolute(in_dir).lexically_normal() == fs::absolute(out_dir).lexically_normal();
    SMOE_CHECK(!same, InvalidArgument,
               "the output directory {} is the input checkpoint; choose another directory", out_dir.string());
    if (fs::exists(out_dir, ec)) {
        SMOE_CHECK(fs::is_directory(out_dir, ec), InvalidArgument, "the output path {} is not a directory",
                   out_dir.string());
        for (const fs::directory_entry& e : fs::directory_iterator(out_dir)) {
            SMOE_CHECK(!is_model_file(e.path()), InvalidArgument,
                       "the output directory {} already holds {}; refusing to overwrite a checkpoint",
                       out_dir.string(), e.path().filename().string());
        }
    }
    fs::create_directories(out_dir, ec);
    SMOE_CHECK(!ec, Io, "cannot create the output directory {}: {}", out_dir.string(), ec.message());
}

// Files written under temporary names, renamed into place together at the end; removed on failure.
class PendingFiles {
  public:
    explicit PendingFiles(fs::path dir) : dir_(std::move(dir)) {}
    ~PendingFiles() {
        std::error_code ec;
        for (const std::string& f : files_) fs::remove(temp_path(f), ec);
    }
    fs::path add(const std::string& final_name) {
        files_.push_back(final_name);
        return temp_path(final_name);
    }
    // In the order added: config.json goes last, so its presence marks a complete checkpoint.
    void commit() {
        for (const std::string& f : files_) {
            std::error_code ec;
            fs::rename(temp_path(f), dir_ / f, ec);
            SMOE_CHECK(!ec, Io, "cannot rename {} to {}: {}", temp_path(f).string(), (dir_ / f).string(),
                       ec.message());
        }
        files_.clear();
    }

  private:
    fs::path dir_;
    std::vector<std::string> files_;
    fs::path temp_path(const std::string& f) const { return dir_ / (f + kPartialSuffix); }
};

// What the conversion does to each input tensor, decided before anything is written (a scale may
// sit in an earlier shard than its weight).
struct Plan {
    std::map<std::string, ExpertMatrixName> experts;  // weight name -> its naming
    std::set<std::string> consumed;                   // input scale tensors replaced by new ones
    size_t total = 0;                                 // tensors that produce output
};

Plan make_plan(const Checkpoint& ckpt) {
    Plan plan;
    const std::vector<std::string> names = ckpt.names();
    for (const std::string& name : names) {
        std::optional<ExpertMatrixName> n = match_expert_matrix(name);
        if (!n) continue;
        for (const char* suffix : kScaleSuffixes) {
            if (ckpt.contains(n->base + suffix)) plan.consumed.insert(n->base + suffix);
        }
        plan.experts.emplace(name, std::move(*n));
    }
    // A name both consumed as a scale and matched as a weight cannot happen: scale names do not end
    // in ".weight".
    plan.total = names.size() - plan.consumed.size();
    return plan;
}

// Safetensors packs tensors back to back, so a 6-byte E8M0 scale would leave the next F32 tensor at an
// offset that is not a multiple of 4, and readers of the mapping would load floats from misaligned
// addresses. Largest elements first (order kept otherwise): every offset is then a multiple of the
// tensor's element size, since all sizes before it are.
void align_by_element_size(std::vector<std::pair<std::string, Tensor>>& tensors) {
    std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
        return dtype_size(a.second.dtype()) > dtype_size(b.second.dtype());
    });
}

}  // namespace

void quantize_checkpoint(const fs::path& in_dir, const fs::path& out_dir, const QuantizeOptions& options) {
    // Everything that can be checked is checked before the output directory is touched.
    const Checkpoint ckpt = Checkpoint::open(in_dir);
    const std::string config_text = updated_config_text(in_dir / kConfigFile, ckpt.config(), options);
    prepare_output_dir(in_dir, out_dir);
    const Plan plan = make_plan(ckpt);

    const std::vector<std::string> shards = ckpt.shard_files();
    const bool sharded = fs::exists(in_dir / kIndexFile) || shards.size() > 1;
    PendingFiles pending(out_dir);
    nlohmann::json weight_map = nlohmann::json::object();
    uint64_t total_size = 0;
    size_t done = 0;

    // Tensors are converted a batch at a time, each on one thread, and kept in the shard's order: the same
    // file for any thread count. A batch of at most 16 bounds the float copies of matrices held at once (one
    // a thread: deepseek-v3's are 59 MB each).
    const int threads = options.threads > 0 ? options.threads : ambient_threads();
    const size_t batch = size_t(std::min(threads, 16));
    for (const std::string& shard_name : shards) {
        const SafetensorsFile shard = SafetensorsFile::open(in_dir / shard_name);
        const std::string out_name = sharded ? shard_name : kSingleFile;
        std::vector<const TensorInfo*> kept;
        for (const TensorInfo& info : shard.tensors())
            if (!plan.consumed.count(info.name)) kept.push_back(&info);
        // Converted matrices are owned; copied tensors are views of the input mapping.
        std::vector<std::pair<std::string, Tensor>> out;
        for (size_t first = 0; first < kept.size(); first += batch) {
            const size_t count = std::min(batch, kept.size() - first);
            std::vector<std::vector<std::pair<std::string, Tensor>>> parts(count);
            // (parallel_for passes on the first failing tensor's error, in the shard's order)
            parallel_for(int64_t(count), int(count), [&](int64_t j) {
                const TensorInfo& info = *kept[first + size_t(j)];
                const auto expert = plan.experts.find(info.name);
                if (expert != plan.experts.end())
                    convert_expert(ckpt, expert->second, options, parts[size_t(j)]);
                else
                    parts[size_t(j)].emplace_back(info.name, shard.get(info.name));
            });
            for (size_t j = 0; j < count; ++j) {
                for (auto& t : parts[j]) out.push_back(std::move(t));
                if (options.progress) options.progress(++done, plan.total, kept[first + j]->name);
            }
        }
        align_by_element_size(out);
        for (const auto& [name, t] : out) {
            weight_map[name] = out_name;
            total_size += t.nbytes();
        }
        write_safetensors(pending.add(out_name), out, shard.metadata());
    }

    if (sharded) {
        const nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
        write_text(pending.add(kIndexFile), index.dump(2) + "\n");
    }
    write_text(pending.add(kConfigFile), config_text);
    pending.commit();
}

}  // namespace steadymoe
