#include "expert_group.hpp"
#include "env_switch.hpp"
#include "fp4_blocks.hpp"
#include "pinned_uploads.hpp"
#include "weight_layouts.hpp"

#include "steadymoe/core/numeric.hpp"
#include "steadymoe/core/parallel.hpp"

#include "check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
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

// One matrix of one expert as the device holds it, laid out on the host: its data, and its scales where
// they lie apart from it (FP4 scale tiles, FP8 block scales).
struct HostMatrix {
    std::vector<uint8_t> data;
    std::vector<uint8_t> scales;
};
// The rows a layout is made from, gathered in the GEMM's order (data, and FP4's e8m0 scales).
struct LayoutScratch {
    std::vector<uint8_t> rows;
    std::vector<uint8_t> scales;
};

// Into `out` (its buffers reused, as `scratch`'s: weight_layouts.hpp): rows r of the result are rows pick(r)
// of the sources (data and, for FP4, e8m0 scales; for block-exact FP4, their 128-row blocks' exponents).
void lay_out_rows(const DeviceMatrixSet& s, const std::vector<const uint8_t*>& data_rows,
                  const std::vector<const uint8_t*>& scale_rows, const std::vector<const uint8_t*>& block_exp_rows,
                  int64_t row_bytes, LayoutScratch& scratch, HostMatrix& out) {
    const int64_t n = int64_t(data_rows.size());
    scratch.rows.resize(size_t(n * row_bytes));
    for (int64_t r = 0; r < n; ++r)
        std::memcpy(scratch.rows.data() + r * row_bytes, data_rows[size_t(r)], size_t(row_bytes));
    const int64_t sb = s.k / kMxBlockSize;
    scratch.scales.resize(size_t(s.code == WeightCode::Fp4 ? n * sb : 0));
    for (int64_t r = 0; r < n && s.code == WeightCode::Fp4; ++r)
        std::memcpy(scratch.scales.data() + r * sb, scale_rows[size_t(r)], size_t(sb));
    out.scales.clear();
    if (s.fp4_e4m3_order) {
        fp4_e4m3_blocks(scratch.rows.data(), scratch.scales.data(), n, s.k, block_exp_rows, out.data);
        return;
    }
    tile_matrix(scratch.rows.data(), n, s.k, s.code, out.data);
    if (s.code == WeightCode::Fp4) tile_fp4_scales(scratch.scales.data(), n, s.k, out.scales);
}

// FP8 block scales of the matrices as f32, one after the other, as bytes.
std::vector<uint8_t> fp8_scale_bytes(std::initializer_list<const WeightMatrix*> matrices) {
    std::vector<float> all;
    for (const WeightMatrix* w : matrices) {
        const std::vector<float> scales = fp8_scales(*w);
        all.insert(all.end(), scales.begin(), scales.end());
    }
    std::vector<uint8_t> bytes(all.size() * 4);
    std::memcpy(bytes.data(), all.data(), bytes.size());
    return bytes;
}

// Block-exact FP4 matrices' 128-row blocks' exponents (fp4_block_exponents), each [row block][k block].
using BlockExponents = std::vector<uint8_t>;

// Where row `row`'s block exponents lie in `exps` (empty: not block-exact).
const uint8_t* block_exp_row(const BlockExponents& exps, int64_t row, int64_t k) {
    return exps.empty() ? nullptr : exps.data() + (row / 128) * (k / 128);
}

// Gate and up of one expert, rows interleaved by 8: rows 16j..16j+7 are gate rows 8j.., the next 8 up's.
void lay_out_gate_up(const DeviceMatrixSet& s, const WeightMatrix& gate, const WeightMatrix& up,
                     const BlockExponents& gate_exps, const BlockExponents& up_exps, LayoutScratch& scratch,
                     HostMatrix& out) {
    const int64_t I = gate.rows, rb = row_bytes(gate), sb = gate.cols / kMxBlockSize;
    std::vector<const uint8_t*> data_rows(size_t(2 * I)), scale_rows(size_t(2 * I)), block_exp_rows;
    for (int64_t r = 0; r < 2 * I; ++r) {
        const int64_t frag = r / 8, original = (frag / 2) * 8 + r % 8;
        const WeightMatrix& w = frag & 1 ? up : gate;
        data_rows[size_t(r)] = static_cast<const uint8_t*>(w.data.raw()) + original * rb;
        if (s.code == WeightCode::Fp4) scale_rows[size_t(r)] = static_cast<const uint8_t*>(w.scale.raw()) + original * sb;
        if (s.fp4_block_exact) block_exp_rows.push_back(block_exp_row(frag & 1 ? up_exps : gate_exps, original, gate.cols));
    }
    lay_out_rows(s, data_rows, scale_rows, block_exp_rows, rb, scratch, out);
    if (s.code == WeightCode::Fp8) out.scales = fp8_scale_bytes({&gate, &up});
}

void lay_out_plain(const DeviceMatrixSet& s, const WeightMatrix& w, const BlockExponents& exps, LayoutScratch& scratch,
                   HostMatrix& out) {
    const int64_t rb = row_bytes(w), sb = w.cols / kMxBlockSize;
    std::vector<const uint8_t*> data_rows(size_t(w.rows)), scale_rows(size_t(w.rows)), block_exp_rows;
    for (int64_t r = 0; r < w.rows; ++r) {
        data_rows[size_t(r)] = static_cast<const uint8_t*>(w.data.raw()) + r * rb;
        if (s.code == WeightCode::Fp4) scale_rows[size_t(r)] = static_cast<const uint8_t*>(w.scale.raw()) + r * sb;
        if (s.fp4_block_exact) block_exp_rows.push_back(block_exp_row(exps, r, w.cols));
    }
    lay_out_rows(s, data_rows, scale_rows, block_exp_rows, rb, scratch, out);
    if (s.code == WeightCode::Fp8) out.scales = fp8_scale_bytes({&w});
}

// The first of the experts' reasons (`reason` of each, "" for none) in their order, "" if none has one: the
// experts' scans (a pass over their scales or codes each) on several threads.
template <class Reason>
std::string first_reason(const std::vector<const ExpertWeights*>& experts, Reason reason) {
    std::vector<std::string> reasons(experts.size());
    parallel_for(int64_t(experts.size()), ambient_threads(), [&](int64_t i) { reasons[size_t(i)] = reason(*experts[size_t(i)]); });
    for (std::string& why : reasons)
        if (!why.empty()) return std::move(why);
    return {};
}

// Expert e's matrix on its way to its place in the set.
void copy_to_set(DeviceMatrixSet& s, int64_t e, const HostMatrix& m, PinnedUploads& uploads) {
    uploads.copy(s.data.as<char>() + e * s.expert_bytes, m.data.data(), m.data.size());
    if (!m.scales.empty()) uploads.copy(s.scale.as<char>() + e * s.scale_expert_bytes, m.scales.data(), m.scales.size());
}

}  // namespace

std::string tensor_core_blocker(const std::vector<const ExpertWeights*>& experts) {
    if (experts.empty()) return "no experts";
    const ExpertWeights& first = *experts.front();
    if (first.gate.rows % 8 != 0)
        return fmt::format("{}: {} intermediate features is not a multiple of 8", first.gate.name, first.gate.rows);
    if (!same_kind(first.gate, first.up))
        return fmt::format("{} and {} differ in format or shape", first.gate.name, first.up.name);
    return first_reason(experts, [&](const ExpertWeights& e) -> std::string {
        if (!same_kind(e.gate, first.gate) || !same_kind(e.up, first.up) || !same_kind(e.down, first.down))
            return fmt::format("{} differs in format or shape from {}", e.gate.name, first.gate.name);
        for (const WeightMatrix* w : {&e.gate, &e.up, &e.down})
            if (std::string why = matrix_blocker(*w); !why.empty()) return why;
        return {};
    });
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

// Block exponents (fp4_block_exponents) of every expert's gate and up (where gate_up) and down (where down),
// found on several threads, or Unsupported naming the first matrix that has none, in the experts' order and
// gate, up, down within one.
struct ExpertExponents {
    BlockExponents gate, up, down;
};
std::vector<ExpertExponents> block_exponents_or_refuse(const std::vector<const ExpertWeights*>& experts, bool gate_up,
                                                       bool down) {
    std::vector<ExpertExponents> exps(experts.size());
    if (!gate_up && !down) return exps;
    const auto exponents = [](const WeightMatrix& w) {
        std::optional<BlockExponents> found = fp4_block_exponents(w);
        SMOE_CHECK(found.has_value(), Unsupported, "{}", not_block_exact(w));
        return std::move(*found);
    };
    // (parallel_for passes on the first failing expert's refusal)
    parallel_for(int64_t(experts.size()), ambient_threads(), [&](int64_t i) {
        const ExpertWeights& e = *experts[size_t(i)];
        if (gate_up) exps[size_t(i)].gate = exponents(e.gate), exps[size_t(i)].up = exponents(e.up);
        if (down) exps[size_t(i)].down = exponents(e.down);
    });
    return exps;
}

}  // namespace

std::string fp4_block_exact_blocker(const std::vector<const ExpertWeights*>& experts) {
    return first_reason(experts, [](const ExpertWeights& e) -> std::string {
        for (const WeightMatrix* w : {&e.gate, &e.up, &e.down})
            if (w->format == ExpertFormat::Fp4 && !fp4_block_exponents(*w)) return not_block_exact(*w);
        return {};
    });
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
    const std::vector<ExpertExponents> exps = block_exponents_or_refuse(experts, gate_up_exact, down_exact);
    g.gate_up = make_set(first.gate, g.experts, 2 * first.gate.rows, what + " gate/up", fp4_e4m3_order, gate_up_exact);
    g.down = make_set(first.down, g.experts, first.down.rows, what + " down", fp4_e4m3_order, down_exact);
    // Experts laid out a batch at a time on several threads, then copied in order from this thread, whose
    // device is the group's, through page-locked staging. A batch of at most 16 bounds the host memory the
    // layouts hold (deepseek-v3's: 16 x 73 MB with their scratch), in buffers each batch reuses.
    PinnedUploads uploads = PinnedUploads::for_total(g.gate_up.data.bytes() + g.gate_up.scale.bytes() + g.down.data.bytes() +
                                                     g.down.scale.bytes());
    const int threads = ambient_threads();
    const int64_t batch = std::min<int64_t>({threads, 16, g.experts});
    std::vector<HostMatrix> gate_ups(static_cast<size_t>(batch)), downs(static_cast<size_t>(batch));
    std::vector<LayoutScratch> scratch(static_cast<size_t>(batch));
    for (int64_t e0 = 0; e0 < g.experts; e0 += batch) {
        const int64_t count = std::min(batch, g.experts - e0);
        parallel_for(count, threads, [&](int64_t j) {
            const size_t i = size_t(e0 + j);
            lay_out_gate_up(g.gate_up, experts[i]->gate, experts[i]->up, exps[i].gate, exps[i].up, scratch[size_t(j)],
                            gate_ups[size_t(j)]);
            lay_out_plain(g.down, experts[i]->down, exps[i].down, scratch[size_t(j)], downs[size_t(j)]);
        });
        for (int64_t j = 0; j < count; ++j) {
            copy_to_set(g.gate_up, e0 + j, gate_ups[size_t(j)], uploads);
            copy_to_set(g.down, e0 + j, downs[size_t(j)], uploads);
        }
    }
    uploads.finish();
    return g;
}

DeviceMatrixSet upload_bf16_matrix(const Tensor& matrix, const std::string& what) {
    WeightMatrix w{ExpertFormat::Dense, matrix.dim(0), matrix.dim(1), matrix, {}, 1.0f, what};
    DeviceMatrixSet s = make_set(w, 1, w.rows, what);
    PinnedUploads uploads = PinnedUploads::for_total(s.data.bytes() + s.scale.bytes());
    LayoutScratch scratch;
    HostMatrix laid_out;
    lay_out_plain(s, w, {}, scratch, laid_out);
    copy_to_set(s, 0, laid_out, uploads);
    uploads.finish();
    return s;
}

}  // namespace steadymoe::cuda
