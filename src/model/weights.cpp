#include "steadymoe/model/weights.hpp"

#include "steadymoe/core/numeric.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace steadymoe {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void expect_shape(const Tensor& t, const Shape& want, const std::string& what, const std::string& name) {
    SMOE_CHECK(t.defined(), BadFormat, "{}: the {} tensor is missing", name, what);
    SMOE_CHECK(t.shape() == want, BadFormat, "{}: {} has shape {}, expected {}", name, what, shape_str(t.shape()),
               shape_str(want));
}

}  // namespace

void WeightMatrix::validate() const {
    SMOE_CHECK(rows > 0 && cols > 0, BadFormat, "{}: empty weight [{}, {}]", name, rows, cols);
    switch (format) {
        case ExpertFormat::Dense:
            SMOE_CHECK(data.dtype() == DType::BF16 || data.dtype() == DType::F16 || data.dtype() == DType::F32,
                       BadFormat, "{}: dense weights must be BF16, F16 or F32, not {}", name,
                       dtype_name(data.dtype()));
            expect_shape(data, {rows, cols}, "weight", name);
            break;
        case ExpertFormat::Fp8:
            SMOE_CHECK(data.dtype() == DType::F8_E4M3, BadFormat, "{}: FP8 weights must be F8_E4M3, not {}", name,
                       dtype_name(data.dtype()));
            expect_shape(data, {rows, cols}, "weight", name);
            SMOE_CHECK(scale.defined() && (scale.dtype() == DType::F32 || scale.dtype() == DType::F8_E8M0),
                       BadFormat, "{}: FP8 block scales must be F32 or F8_E8M0", name);
            expect_shape(scale, {ceil_div(rows, kFp8BlockSize), ceil_div(cols, kFp8BlockSize)}, "block scale",
                         name);
            break;
        case ExpertFormat::Fp4:
        case ExpertFormat::Nvfp4: {
            const int64_t block = format == ExpertFormat::Fp4 ? kMxBlockSize : kNvfp4BlockSize;
            SMOE_CHECK(data.dtype() == DType::I8 || data.dtype() == DType::U8, BadFormat,
                       "{}: packed FP4 weights must be I8 or U8, not {}", name, dtype_name(data.dtype()));
            SMOE_CHECK(cols % block == 0, BadFormat, "{}: {} input features are not a multiple of the {}-wide "
                       "scale block", name, cols, block);
            expect_shape(data, {rows, cols / 2}, "packed weight", name);
            const DType want = format == ExpertFormat::Fp4 ? DType::F8_E8M0 : DType::F8_E4M3;
            SMOE_CHECK(scale.defined() && scale.dtype() == want, BadFormat, "{}: scales must be {}", name,
                       dtype_name(want));
            expect_shape(scale, {rows, cols / block}, "scale", name);
            SMOE_CHECK(std::isfinite(global_scale), BadFormat, "{}: global scale is not finite", name);
            break;
        }
    }
}

namespace {

// The index of the first element for which bad(element) holds, or -1. A chunk is scanned whole, with no exit
// inside it, so the compiler runs the test on many elements at a time (a load takes one pass over every
// weight), and only a chunk that holds a bad element is searched for it.
template <class T, class Bad>
int64_t first_bad(const T* p, int64_t n, Bad bad) {
    constexpr int64_t kChunk = 4096;
    for (int64_t c = 0; c < n; c += kChunk) {
        const int64_t end = std::min(n, c + kChunk);
        unsigned any = 0;  // (an unsigned sum vectorises where a bool one did not)
        for (int64_t i = c; i < end; ++i) any |= unsigned(bad(p[i]));
        if (!any) continue;
        for (int64_t i = c; i < end; ++i)
            if (bad(p[i])) return i;
    }
    return -1;
}

bool f32_nonfinite(float v) { return (f32_bits(v) & 0x7F800000u) == 0x7F800000u; }

}  // namespace

void WeightMatrix::check_finite() const {
    const int64_t n = data.numel();
    int64_t i = -1;
    switch (data.dtype()) {
        case DType::BF16:
            i = first_bad(data.data<uint16_t>(), n, [](uint16_t v) { return (v & 0x7F80u) == 0x7F80u; });
            SMOE_CHECK(i < 0, BadFormat, "{}: non-finite value at element {} (row {})", name, i, i / cols);
            break;
        case DType::F16:
            i = first_bad(data.data<uint16_t>(), n, [](uint16_t v) { return (v & 0x7C00u) == 0x7C00u; });
            SMOE_CHECK(i < 0, BadFormat, "{}: non-finite value at element {} (row {})", name, i, i / cols);
            break;
        case DType::F32:
            i = first_bad(data.data<float>(), n, f32_nonfinite);
            SMOE_CHECK(i < 0, BadFormat, "{}: non-finite value at element {} (row {})", name, i, i / cols);
            break;
        case DType::F8_E4M3:
            i = first_bad(data.data<uint8_t>(), n, [](uint8_t v) { return (v & 0x7Fu) == 0x7Fu; });
            SMOE_CHECK(i < 0, BadFormat, "{}: NaN code at element {} (row {})", name, i, i / cols);
            break;
        default: break;  // e2m1 has no NaN codes
    }
    if (!scale.defined()) return;
    const int64_t ns = scale.numel();
    if (scale.dtype() == DType::F8_E8M0) {
        i = first_bad(scale.data<uint8_t>(), ns, [](uint8_t v) { return v == 0xFF; });
        SMOE_CHECK(i < 0, BadFormat, "{}: NaN scale (0xFF) at scale element {}", name, i);
    } else if (scale.dtype() == DType::F8_E4M3) {
        i = first_bad(scale.data<uint8_t>(), ns, [](uint8_t v) { return (v & 0x7Fu) == 0x7Fu || (v & 0x80u) != 0; });
        SMOE_CHECK(i < 0, BadFormat, "{}: NaN or negative scale at scale element {}", name, i);
    } else if (scale.dtype() == DType::F32) {
        i = first_bad(scale.data<float>(), ns, f32_nonfinite);
        SMOE_CHECK(i < 0, BadFormat, "{}: non-finite scale at scale element {}", name, i);
    }
}

namespace {

// decode(c) for every code c below N.
template <size_t N, class Decode>
std::array<float, N> code_values(Decode decode) {
    std::array<float, N> values{};
    for (size_t c = 0; c < N; ++c) values[c] = decode(uint8_t(c));
    return values;
}

}  // namespace

const std::array<float, 256>& e4m3_code_values() {
    static const std::array<float, 256> values = code_values<256>(e4m3_to_f32);
    return values;
}

const std::array<float, 16>& e2m1_code_values() {
    static const std::array<float, 16> values = code_values<16>(e2m1_to_f32);
    return values;
}

// (Each scale block's scale found once, codes decoded by lookup: the values of a conversion per element.)
void WeightMatrix::dequantize_row(int64_t r, float* out) const {
    switch (format) {
        case ExpertFormat::Dense: {
            if (data.dtype() == DType::F32) {
                const float* p = data.data<float>() + r * cols;
                for (int64_t k = 0; k < cols; ++k) out[k] = p[k];
            } else if (data.dtype() == DType::BF16) {
                const uint16_t* p = data.data<uint16_t>() + r * cols;
                for (int64_t k = 0; k < cols; ++k) out[k] = bf16_to_f32(p[k]);
            } else {
                const uint16_t* p = data.data<uint16_t>() + r * cols;
                for (int64_t k = 0; k < cols; ++k) out[k] = f16_to_f32(p[k]);
            }
            break;
        }
        case ExpertFormat::Fp8: {
            const std::array<float, 256>& value = e4m3_code_values();
            const uint8_t* p = data.data<uint8_t>() + r * cols;
            const int64_t first = (r / kFp8BlockSize) * scale.dim(1);
            for (int64_t k0 = 0; k0 < cols; k0 += kFp8BlockSize) {
                const int64_t sc = first + k0 / kFp8BlockSize, k1 = std::min(cols, k0 + kFp8BlockSize);
                const float s = scale.dtype() == DType::F32 ? scale.data<float>()[sc] : e8m0_to_f32(scale.data<uint8_t>()[sc]);
                for (int64_t k = k0; k < k1; ++k) out[k] = value[p[k]] * s;
            }
            break;
        }
        case ExpertFormat::Fp4:
        case ExpertFormat::Nvfp4: {
            const std::array<float, 16>& value = e2m1_code_values();
            const uint8_t* p = data.data<uint8_t>() + r * (cols / 2);
            const int64_t block = format == ExpertFormat::Fp4 ? kMxBlockSize : kNvfp4BlockSize;
            const uint8_t* s = scale.data<uint8_t>() + r * (cols / block);
            for (int64_t k0 = 0; k0 < cols; k0 += block) {
                const float sv = format == ExpertFormat::Fp4 ? e8m0_to_f32(s[k0 / block]) : e4m3_to_f32(s[k0 / block]);
                for (int64_t k = k0; k < k0 + block; ++k) {
                    const float v = value[(k & 1) ? p[k / 2] >> 4 : p[k / 2] & 0xF];
                    out[k] = format == ExpertFormat::Fp4 ? v * sv : (v * sv) * global_scale;
                }
            }
            break;
        }
    }
}

namespace {

void expect_matrix(const WeightMatrix& m, int64_t rows, int64_t cols, const std::string& what) {
    SMOE_CHECK(m.rows == rows && m.cols == cols, InvalidArgument, "{} '{}' is [{}, {}], expected [{}, {}]", what,
               m.name, m.rows, m.cols, rows, cols);
    m.validate();
}

void expect_expert(const ExpertWeights& e, int64_t H, int64_t I, const std::string& what) {
    expect_matrix(e.gate, I, H, what + " gate projection");
    expect_matrix(e.up, I, H, what + " up projection");
    expect_matrix(e.down, H, I, what + " down projection");
}

}  // namespace

void validate_layer_weights(const MoeConfig& cfg, const MoeLayerWeights& w) {
    const int64_t H = cfg.hidden_size, I = cfg.moe_intermediate_size, E = cfg.n_routed_experts, K = cfg.top_k;
    const int64_t L = w.layer;
    SMOE_CHECK(w.router.defined() && w.router.rank() == 2 && w.router.dim(0) == E && w.router.dim(1) == H,
               InvalidArgument, "layer {}: router weight must be [{}, {}]", L, E, H);
    SMOE_CHECK(w.router.dtype() == DType::BF16 || w.router.dtype() == DType::F16 || w.router.dtype() == DType::F32,
               InvalidArgument, "layer {}: router weight has dtype {}, expected BF16, F16 or F32", L,
               dtype_name(w.router.dtype()));
    SMOE_CHECK(int64_t(w.experts.size()) == E, InvalidArgument, "layer {}: {} experts given, the config has {}", L,
               w.experts.size(), E);
    for (int64_t e = 0; e < E; ++e) {
        SMOE_CHECK(w.partial || w.experts[size_t(e)].held(), InvalidArgument, "layer {}: expert {} has no weights", L, e);
        if (w.experts[size_t(e)].held()) expect_expert(w.experts[size_t(e)], H, I, fmt::format("layer {} expert {}", L, e));
    }
    SMOE_CHECK(w.has_shared == (cfg.n_shared_experts > 0), InvalidArgument,
               "layer {}: shared expert weights {} but the config has {} shared experts", L,
               w.has_shared ? "given" : "missing", cfg.n_shared_experts);
    if (w.has_shared) expect_expert(w.shared, H, cfg.shared_intermediate_size, fmt::format("layer {} shared expert", L));
    SMOE_CHECK(!w.shared_gate.defined() || (w.shared_gate.dtype() == DType::F32 && w.shared_gate.numel() == H),
               InvalidArgument, "layer {}: shared expert gate must be F32 [{}]", L, H);
    SMOE_CHECK(!w.selection_bias.defined() ||
                   (w.selection_bias.dtype() == DType::F32 && w.selection_bias.rank() == 1 &&
                    w.selection_bias.dim(0) == E),
               InvalidArgument, "layer {}: selection bias must be F32 [{}], got {} {}", L, E,
               dtype_name(w.selection_bias.dtype()), shape_str(w.selection_bias.shape()));
    const bool hash = cfg.is_hash_layer(L);
    SMOE_CHECK(!hash || w.tid2eid.defined(), InvalidArgument, "layer {} is hash-routed but has no tid2eid table", L);
    if (!w.tid2eid.defined()) return;
    SMOE_CHECK(w.tid2eid.dtype() == DType::I32 && w.tid2eid.rank() == 2 && w.tid2eid.dim(1) == K, InvalidArgument,
               "layer {}: tid2eid must be I32 [vocab, {}], got {} {}", L, K, dtype_name(w.tid2eid.dtype()),
               shape_str(w.tid2eid.shape()));
    const int32_t* ids = w.tid2eid.data<int32_t>();
    for (int64_t i = 0; i < w.tid2eid.numel(); ++i)
        SMOE_CHECK(0 <= ids[i] && ids[i] < E, InvalidArgument,
                   "layer {}: tid2eid token {} slot {} names expert {}, outside [0, {})", L, i / K, i % K, ids[i], E);
}

size_t MoeLayerWeights::stored_bytes() const {
    size_t total = router.nbytes();
    for (const auto& e : experts)
        if (e.held()) total += e.stored_bytes();
    if (has_shared) total += shared.stored_bytes();
    return total;
}

}  // namespace steadymoe
