#include "expert_group.hpp"
#include "env_switch.hpp"
#include "fp4_blocks.hpp"
#include "weight_layouts.hpp"

#include "steadymoe/core/numeric.hpp"

#include "check.hpp"

#include <fmt/format.h>

#include <cstring>
#include <optional>

namespace steadymoe::cuda {

namespace {

// Bytes one stored row of `w` occupies (the data only).
int64_t row_bytes(const WeightMatrix& w) {
    return w.format == ExpertFormat::Fp4 ? w.cols / 2 : w.format == ExpertFormat::Fp8 ? w.cols : w.cols * 2;
}

WeightCode code_of(const WeightMatrix& w) {
    return w.format == ExpertFormat::Fp4 ? WeightCode::Fp4 : w.format == ExpertFormat::Fp8 ? WeightCode::Fp8
                                                                                           : WeightCode::Bf16;
}

// An FP4 value times its scale 2^(e-127) is exact in bf16 when e is in [2, 252]; a block of zeros is
// exact at any finite scale.
std::string fp4_scale_blocker(const WeightMatrix& w) {
    const auto* scale = static_cast<const uint8_t*>(w.scale.raw());
    const auto* data = static_cast<const uint8_t*>(w.data.raw());
    const int64_t blocks = w.cols / kMxBlockSize;
    for (int64_t r = 0; r < w.rows; ++r) {
        for (int64_t b = 0; b < blocks; ++b) {
            const uint8_t e = scale[r * blocks + b];
            if (e >= 2 && e <= 252) continue;
            const uint8_t* codes = data + r * (w.cols / 2) + b * (kMxBlockSize / 2);
            if (e == 0xFF || fp4_group_has_value(codes))
                return fmt::format("{}: scale 2^{} of row {} block {} is outside the range bf16 holds exactly",
                                   w.name, int(e) - 127, r, b);
        }
    }
    return {};
}

std::string matrix_blocker(const WeightMatrix& w) {
    if (w.cols % 128 != 0) return fmt::format("{}: {} input features is not a multiple of 128", w.name, w.cols);
    switch (w.format) {
    case ExpertFormat::Dense:
        if (w.data.dtype() != DType::BF16)
            return fmt::format("{}: dense {} weights have no exact bf16 form", w.name, dtype_name(w.data.dtype()));
        return {};
    case ExpertFormat::Fp8:
        return {};
    case ExpertFormat::Fp4:
        return fp4_scale_blocker(w);
    case ExpertFormat::Nvfp4:
        return fmt::format("{}: NVFP4 weights are not on the tensor-core path yet", w.name);
    }
    return fmt::format("{}: unknown format", w.name);
}

bool same_kind(const WeightMatrix& a, const WeightMatrix& b) {
    return a.format == b.format && a.rows == b.rows && a.cols == b.cols && a.data.dtype() == b.data.dtype() &&
           (a.format != ExpertFormat::Fp8 || a.scale.dtype() == b.scale.dtype());
}

// FP8 block scales of one matrix as f32 [ceil(rows/128)][cols/128].
std::vector<float> fp8_scales(const WeightMatrix& w) {
    const int64_t count = w.scale.numel();
    std::vector<float> out(size_t(count), 0.0f);
    if (w.scale.dtype() == DType::F32) {
        std::memcpy(out.data(), w.scale.raw(), size_t(count) * 4);
    } else {
        const auto* e = static_cast<const uint8_t*>(w.scale.raw());
        for (int64_t i = 0; i < count; ++i) out[size_t(i)] = e8m0_to_f32(e[i]);
    }
    return out;
}

void copy_to_device(DeviceBuffer& dst, int64_t offset, const void* src, size_t bytes) {
    SMOE_CUDA_CHECK(cudaMemcpy(static_cast<char*>(dst.get()) + offset, src, bytes, cudaMemcpyHostToDevice));
}

DeviceMatrixSet make_set(const WeightMatrix& like, int64_t experts, int64_t n, const std::string& what, bool fp4_e4m3_order = false,
                         bool fp4_block_exact = false) {
    DeviceMatrixSet s;
    s.code = code_of(like);
    s.fp4_e4m3_order = fp4_e4m3_order && s.code == WeightCode::Fp4;
    s.fp4_block_exact = s.fp4_e4m3_order && fp4_block_exact;
    s.quantized = like.format != ExpertFormat::Dense;
    s.n = n;
    s.k = like.cols;
    const int64_t n_tiles = (n + kTileN - 1) / kTileN;
    s.expert_bytes = s.fp4_e4m3_order ? n_tiles * 2 * (s.k / 128) * kFp4E4m3BlockBytes : n_tiles * (s.k / kStageK) * stage_tile_bytes(s.code);
    s.data = DeviceBuffer(size_t(experts * s.expert_bytes), what);
    if (s.code == WeightCode::Fp8) {
        s.scale_expert_bytes = (n == like.rows ? (n + 127) / 128 : 2 * ((like.rows + 127) / 128)) * (s.k / 128) * 4;
        if (n != like.rows) s.fp8_half_blocks = int32_t((like.rows + 127) / 128);
    } else if (s.code == WeightCode::Fp4 && !s.fp4_e4m3_order) {  // (in e4m3 order the exponents lie among the codes)
        s.scale_expert_bytes = n_tiles * (s.k / 128) * kTileN * 4;
    }
    if (s.scale_expert_bytes) s.scale = DeviceBuffer(size_t(experts * s.scale_expert_bytes), what + " scales");
    return s;
}

// Rows r of the result are rows pick(r) of the sources (data and, for FP4, e8m0 scales; for block-exact FP4,
// their 128-row blocks' exponents).
void upload_rows(DeviceMatrixSet& s, int64_t e, const std::vector<const uint8_t*>& data_rows,
                 const std::vector<const uint8_t*>& scale_rows, const std::vector<const uint8_t*>& block_exp_rows, int64_t row_bytes) {
    const int64_t n = int64_t(data_rows.size());
    std::vector<uint8_t> rows(size_t(n * row_bytes));
    for (int64_t r = 0; r < n; ++r) std::memcpy(rows.data() + r * row_bytes, data_rows[size_t(r)], size_t(row_bytes));
    const int64_t sb = s.k / kMxBlockSize;
    std::vector<uint8_t> scales(size_t(s.code == WeightCode::Fp4 ? n * sb : 0));
    for (int64_t r = 0; r < n && s.code == WeightCode::Fp4; ++r) std::memcpy(scales.data() + r * sb, scale_rows[size_t(r)], size_t(sb));
    if (s.fp4_e4m3_order) {
        const std::vector<uint8_t> blocks = fp4_e4m3_blocks(rows.data(), scales.data(), n, s.k, block_exp_rows);
        copy_to_device(s.data, e * s.expert_bytes, blocks.data(), blocks.size());
        return;
    }
    const std::vector<uint8_t> tiled = tile_matrix(rows.data(), n, s.k, s.code);
    copy_to_device(s.data, e * s.expert_bytes, tiled.data(), tiled.size());
    if (s.code != WeightCode::Fp4) return;
    const std::vector<uint8_t> scale_tiles = tile_fp4_scales(scales.data(), n, s.k);
    copy_to_device(s.scale, e * s.scale_expert_bytes, scale_tiles.data(), scale_tiles.size());
}

// Block-exact FP4 matrices' 128-row blocks' exponents (fp4_block_exponents), each [row block][k block].
using BlockExponents = std::vector<uint8_t>;

// Where row `row`'s block exponents lie in `exps` (empty: not block-exact).
const uint8_t* block_exp_row(const BlockExponents& exps, int64_t row, int64_t k) {
    return exps.empty() ? nullptr : exps.data() + (row / 128) * (k / 128);
}

// Gate and up of one expert, rows interleaved by 8: rows 16j..16j+7 are gate rows 8j.., the next 8 up's.
void upload_gate_up(DeviceMatrixSet& s, int64_t e, const WeightMatrix& gate, const WeightMatrix& up, const BlockExponents& gate_exps = {},
                    const BlockExponents& up_exps = {}) {
    const int64_t I = gate.rows, rb = row_bytes(gate), sb = gate.cols / kMxBlockSize;
    std::vector<const uint8_t*> data_rows(size_t(2 * I)), scale_rows(size_t(2 * I)), block_exp_rows;
    for (int64_t r = 0; r < 2 * I; ++r) {
        const int64_t frag = r / 8, original = (frag / 2) * 8 + r % 8;
        const WeightMatrix& w = frag & 1 ? up : gate;
        data_rows[size_t(r)] = static_cast<const uint8_t*>(w.data.raw()) + original * rb;
        if (s.code == WeightCode::Fp4) scale_rows[size_t(r)] = static_cast<const uint8_t*>(w.scale.raw()) + original * sb;
        if (s.fp4_block_exact) block_exp_rows.push_back(block_exp_row(frag & 1 ? up_exps : gate_exps, original, gate.cols));
    }
    upload_rows(s, e, data_rows, scale_rows, block_exp_rows, rb);
    if (s.code == WeightCode::Fp8) {
        std::vector<float> scales = fp8_scales(gate);
        const std::vector<float> up_scales = fp8_scales(up);
        scales.insert(scales.end(), up_scales.begin(), up_scales.end());
        copy_to_device(s.scale, e * s.scale_expert_bytes, scales.data(), scales.size() * 4);
    }
}

void upload_plain(DeviceMatrixSet& s, int64_t e, const WeightMatrix& w, const BlockExponents& exps = {}) {
    const int64_t rb = row_bytes(w), sb = w.cols / kMxBlockSize;
    std::vector<const uint8_t*> data_rows(size_t(w.rows)), scale_rows(size_t(w.rows)), block_exp_rows;
    for (int64_t r = 0; r < w.rows; ++r) {
        data_rows[size_t(r)] = static_cast<const uint8_t*>(w.data.raw()) + r * rb;
        if (s.code == WeightCode::Fp4) scale_rows[size_t(r)] = static_cast<const uint8_t*>(w.scale.raw()) + r * sb;
        if (s.fp4_block_exact) block_exp_rows.push_back(block_exp_row(exps, r, w.cols));
    }
    upload_rows(s, e, data_rows, scale_rows, block_exp_rows, rb);
    if (s.code == WeightCode::Fp8) {
        const std::vector<float> scales = fp8_scales(w);
        copy_to_device(s.scale, e * s.scale_expert_bytes, scales.data(), scales.size() * 4);
    }
}

}  // namespace

std::string tensor_core_blocker(const std::vector<const ExpertWeights*>& experts) {
    if (experts.empty()) return "no experts";
    const ExpertWeights& first = *experts.front();
    if (first.gate.rows % 8 != 0)
        return fmt::format("{}: {} intermediate features is not a multiple of 8", first.gate.name, first.gate.rows);
    if (!same_kind(first.gate, first.up))
        return fmt::format("{} and {} differ in format or shape", first.gate.name, first.up.name);
    for (const ExpertWeights* e : experts) {
        if (!same_kind(e->gate, first.gate) || !same_kind(e->up, first.up) || !same_kind(e->down, first.down))
            return fmt::format("{} differs in format or shape from {}", e->gate.name, first.gate.name);
        for (const WeightMatrix* w : {&e->gate, &e->up, &e->down})
            if (std::string why = matrix_blocker(*w); !why.empty()) return why;
    }
    return {};
}

namespace {

// Why FP4 matrix `w` cannot take the block-exact arithmetic.
std::string not_block_exact(const WeightMatrix& w) {
    return fmt::format("{}: the FP4 scales of some 128x128 block (of its groups with a nonzero code) span more than 11 "
                       "binades, wider than the e4m3 codes the block-exact kernels make under one scale, so it cannot "
                       "take the block-exact arithmetic asked for (Fp8Products::TensorCoresBlockExact or "
                       "STEADYMOE_FP4_BLOCK_EXACT=1)",
                       w.name);
}

// Its block exponents (fp4_block_exponents), or Unsupported naming it.
BlockExponents block_exponents_or_refuse(const WeightMatrix& w) {
    std::optional<BlockExponents> exps = fp4_block_exponents(w);
    SMOE_CHECK(exps.has_value(), Unsupported, "{}", not_block_exact(w));
    return std::move(*exps);
}

}  // namespace

std::string fp4_block_exact_blocker(const std::vector<const ExpertWeights*>& experts) {
    for (const ExpertWeights* e : experts)
        for (const WeightMatrix* w : {&e->gate, &e->up, &e->down})
            if (w->format == ExpertFormat::Fp4 && !fp4_block_exponents(*w)) return not_block_exact(*w);
    return {};
}

bool fp4_block_exact_requested() {
    static const bool requested = env_equals("STEADYMOE_FP4_BLOCK_EXACT", "1");
    return requested;
}

DeviceExpertGroup upload_expert_group(const std::vector<const ExpertWeights*>& experts, const std::string& what,
                                      bool fp4_e4m3_order, bool fp4_block_exact) {
    const ExpertWeights& first = *experts.front();
    DeviceExpertGroup g;
    g.experts = int64_t(experts.size());
    g.intermediate = first.gate.rows;
    // Block-exact FP4 (fp4_blocks.hpp): every FP4 matrix of every expert must be, so that no token's
    // arithmetic depends on which experts a GPU holds; refused, naming the first that is not, before anything
    // is uploaded.
    const bool exact = fp4_block_exact && fp4_e4m3_order;
    const bool gate_up_exact = exact && first.gate.format == ExpertFormat::Fp4, down_exact = exact && first.down.format == ExpertFormat::Fp4;
    std::vector<BlockExponents> gate_exps(experts.size()), up_exps(experts.size()), down_exps(experts.size());
    for (size_t i = 0; i < experts.size(); ++i) {
        if (gate_up_exact) {
            gate_exps[i] = block_exponents_or_refuse(experts[i]->gate);
            up_exps[i] = block_exponents_or_refuse(experts[i]->up);
        }
        if (down_exact) down_exps[i] = block_exponents_or_refuse(experts[i]->down);
    }
    g.gate_up = make_set(first.gate, g.experts, 2 * first.gate.rows, what + " gate/up", fp4_e4m3_order, gate_up_exact);
    g.down = make_set(first.down, g.experts, first.down.rows, what + " down", fp4_e4m3_order, down_exact);
    for (int64_t e = 0; e < g.experts; ++e) {
        const size_t i = size_t(e);
        upload_gate_up(g.gate_up, e, experts[i]->gate, experts[i]->up, gate_exps[i], up_exps[i]);
        upload_plain(g.down, e, experts[i]->down, down_exps[i]);
    }
    return g;
}

DeviceMatrixSet upload_bf16_matrix(const Tensor& matrix, const std::string& what) {
    WeightMatrix w{ExpertFormat::Dense, matrix.dim(0), matrix.dim(1), matrix, {}, 1.0f, what};
    DeviceMatrixSet s = make_set(w, 1, w.rows, what);
    upload_plain(s, 0, w);
    return s;
}

}  // namespace steadymoe::cuda
