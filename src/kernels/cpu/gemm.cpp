#include "steadymoe/kernels/cpu/gemm.hpp"

#include "steadymoe/core/numeric.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

namespace steadymoe::cpu {

namespace {

constexpr int64_t kScaleBlock = 128;

// Row r of w with every scale that folds exactly applied; the rest is left to block_scale.
void decode_row_foldable(const WeightMatrix& w, int64_t r, float* out) {
    if (w.format == ExpertFormat::Fp8 && w.scale.dtype() == DType::F32) {
        const std::array<float, 256>& value = e4m3_code_values();
        const uint8_t* p = w.data.data<uint8_t>() + r * w.cols;
        for (int64_t k = 0; k < w.cols; ++k) out[k] = value[p[k]];
        return;
    }
    if (w.format == ExpertFormat::Nvfp4) {
        WeightMatrix unit = w;
        unit.global_scale = 1.0f;
        unit.dequantize_row(r, out);
        return;
    }
    w.dequantize_row(r, out);
}

bool has_unfoldable_scale(const WeightMatrix& w) {
    return (w.format == ExpertFormat::Fp8 && w.scale.dtype() == DType::F32) ||
           (w.format == ExpertFormat::Nvfp4 && w.global_scale != 1.0f);
}

float unfoldable_scale(const WeightMatrix& w, int64_t r, int64_t kb) {
    if (w.format == ExpertFormat::Nvfp4) return w.global_scale;
    return w.scale.data<float>()[(r / kFp8BlockSize) * w.scale.dim(1) + kb];
}

// Panel p of w ([K][kPanelWidth], k-major; rows past w.rows left as they are) from its rows decoded into
// `rows` first, so that the panel is written in order (a row at a time, each write lands kPanelWidth values
// from the last: a cache line a value). T = uint16_t: bf16 panels, whose values must be exact there; false
// where one is not (rounding to bf16 changes it, or it is NaN), and the panel is then unfinished.
template <typename T>
bool fill_panel(const WeightMatrix& w, int64_t p, std::vector<float>& rows, T* panel) {
    const int64_t r0 = p * kPanelWidth, n = std::min(kPanelWidth, w.rows - r0), K = w.cols;
    rows.resize(size_t(kPanelWidth * K));
    for (int64_t j = 0; j < n; ++j) decode_row_foldable(w, r0 + j, rows.data() + j * K);
    bool exact = true;
    for (int64_t k = 0; k < K; ++k) {
        for (int64_t j = 0; j < n; ++j) {
            const float v = rows[size_t(j * K + k)];
            if constexpr (std::is_same_v<T, float>) {
                panel[k * kPanelWidth + j] = v;
            } else {
                const uint16_t b = f32_to_bf16(v);
                exact &= bf16_to_f32(b) == v;
                panel[k * kPanelWidth + j] = b;
            }
        }
    }
    return exact;
}

}  // namespace

PackedWeight pack_weight(const WeightMatrix& w) {
    w.validate();
    PackedWeight out;
    out.rows = w.rows;
    out.cols = w.cols;
    out.quantized = w.format != ExpertFormat::Dense;
    const int64_t panel_values = kPanelWidth * w.cols, padded = out.panels() * panel_values;
    std::vector<float> rows;

    // Decoded values go to bf16 panels when every one of them is exactly representable there (found while
    // they are written: every stored format but f16 and f32 always is), else all to f32 panels. bf16 weights
    // are bf16 panels whatever they hold.
    const bool bf16_source = w.format == ExpertFormat::Dense && w.data.dtype() == DType::BF16;
    bool exact_in_bf16 = !(w.format == ExpertFormat::Dense && !bf16_source);
    if (exact_in_bf16) {
        out.bf16.assign(size_t(padded), 0);
        for (int64_t p = 0; p < out.panels() && exact_in_bf16; ++p)
            exact_in_bf16 = fill_panel(w, p, rows, out.bf16.data() + p * panel_values) || bf16_source;
    }
    out.f32_panels = !exact_in_bf16;
    if (out.f32_panels) {
        std::vector<uint16_t>().swap(out.bf16);  // (its memory too)
        out.f32.assign(size_t(padded), 0.0f);
        for (int64_t p = 0; p < out.panels(); ++p) fill_panel(w, p, rows, out.f32.data() + p * panel_values);
    }
    if (has_unfoldable_scale(w)) {
        const int64_t nkb = out.k_blocks();
        out.block_scale.assign(size_t(out.panels() * kPanelWidth * nkb), 0.0f);
        for (int64_t r = 0; r < w.rows; ++r)
            for (int64_t kb = 0; kb < nkb; ++kb) out.block_scale[size_t(r * nkb + kb)] = unfoldable_scale(w, r, kb);
    }
    return out;
}

PackedWeight pack_dense(const Tensor& t, const std::string& name) {
    SMOE_CHECK(t.rank() == 2, BadFormat, "{}: expected a 2-D weight, got shape {}", name, shape_str(t.shape()));
    WeightMatrix w;
    w.format = ExpertFormat::Dense;
    w.rows = t.dim(0);
    w.cols = t.dim(1);
    w.data = t;
    w.name = name;
    return pack_weight(w);
}

void pack_activations(const ActivationRows& a, PackedActivations& out) {
    out.rows = a.rows;
    out.cols = a.cols;
    const int64_t tiles = out.tile_count(), K = a.cols;
    // Reused buffers are not cleared: every real row is written below; only the padding rows of
    // the last tile must be zero.
    out.tiles.resize(size_t(tiles * K * kTileRows));
    if (a.rows % kTileRows != 0) {
        float* last = out.tiles.data() + (tiles - 1) * K * kTileRows;
        for (int64_t k = 0; k < K; ++k)
            for (int64_t i = a.rows % kTileRows; i < kTileRows; ++i) last[k * kTileRows + i] = 0.0f;
    }
    for (int64_t r = 0; r < a.rows; ++r) {
        float* dst = out.tiles.data() + (r / kTileRows) * K * kTileRows + (r % kTileRows);
        const float* src = a.values + r * K;
        for (int64_t k = 0; k < K; ++k) dst[k * kTileRows] = src[k];
    }
    out.block_scale.clear();
    if (a.block_scale) {
        const int64_t nkb = (K + kScaleBlock - 1) / kScaleBlock;
        out.block_scale.assign(size_t(tiles * nkb * kTileRows), 0.0f);
        for (int64_t r = 0; r < a.rows; ++r)
            for (int64_t kb = 0; kb < nkb; ++kb)
                out.block_scale[size_t(((r / kTileRows) * nkb + kb) * kTileRows + r % kTileRows)] =
                    a.block_scale[r * nkb + kb];
    }
}

namespace {

// The operands of tile `tile` and panel `panel`, and their 128-block scales, as every path reads them.
inline const float* tile_rows(const PackedActivations& a, int64_t tile) { return a.tiles.data() + tile * a.cols * kTileRows; }
template <bool kBf16>
inline const void* panel_values(const PackedWeight& w, int64_t panel) {
    return kBf16 ? static_cast<const void*>(w.bf16.data() + panel * w.cols * kPanelWidth)
                 : static_cast<const void*>(w.f32.data() + panel * w.cols * kPanelWidth);
}
// Scale of feature j of the panel in k block kb (1 without weight scales).
inline float weight_scale(const PackedWeight& w, int64_t panel, int64_t j, int64_t kb) {
    return w.block_scale.empty() ? 1.0f : w.block_scale[size_t((panel * kPanelWidth + j) * w.k_blocks() + kb)];
}
// Scale of row i of the tile in k block kb (1 without activation scales).
inline float activation_scale(const PackedActivations& a, const PackedWeight& w, int64_t tile, int64_t kb, int64_t i) {
    return a.block_scale.empty() ? 1.0f : a.block_scale[size_t((tile * w.k_blocks() + kb) * kTileRows + i)];
}

constexpr int kAccRegs = int(kTileRows) * 2;  // two 16-lane registers per row of a tile

// acc[i][j] (i < kTileRows rows, j < 32 features) += sum over k in [k0, k1) of a[k][i] * b[k][j], one fma
// chain per element in ascending k.
#if defined(__AVX512F__)
template <bool kBf16>
inline void chain_tile(const float* a, const void* b, int64_t k0, int64_t k1, __m512 acc[kAccRegs]) {
    for (int64_t k = k0; k < k1; ++k) {
        __m512 b0, b1;
        if constexpr (kBf16) {
            const uint16_t* bp = static_cast<const uint16_t*>(b) + k * kPanelWidth;
            b0 = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp))), 16));
            b1 = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + 16))), 16));
        } else {
            const float* bp = static_cast<const float*>(b) + k * kPanelWidth;
            b0 = _mm512_loadu_ps(bp);
            b1 = _mm512_loadu_ps(bp + 16);
        }
        const float* ak = a + k * kTileRows;
#pragma GCC unroll 16
        for (int i = 0; i < int(kTileRows); ++i) {
            const __m512 ai = _mm512_set1_ps(ak[i]);
            acc[2 * i] = _mm512_fmadd_ps(ai, b0, acc[2 * i]);
            acc[2 * i + 1] = _mm512_fmadd_ps(ai, b1, acc[2 * i + 1]);
        }
    }
}

// Continues the accumulators of one 8x32 tile over k in [k0, k1). Unscaled: one chain per element,
// carried across calls through `ctile`, so splitting K into chunks changes no value. Scaled: k0 and
// k1 fall on 128-block boundaries (or K) and each block's chain is folded in as c = fma(p, s, c).
template <bool kBf16>
void tile_chunk(const PackedActivations& a, int64_t tile, const PackedWeight& w, int64_t panel, int64_t k0,
                int64_t k1, bool scaled, float* ctile) {
    const float* ap = tile_rows(a, tile);
    const void* bp = panel_values<kBf16>(w, panel);
    if (!scaled) {
        __m512 c[kAccRegs];
        for (int i = 0; i < kAccRegs; ++i) c[i] = _mm512_loadu_ps(ctile + 16 * i);
        chain_tile<kBf16>(ap, bp, k0, k1, c);
        for (int i = 0; i < kAccRegs; ++i) _mm512_storeu_ps(ctile + 16 * i, c[i]);
        return;
    }
    // Scaled: each block's chain runs in registers; the running sum c waits in memory.
    for (int64_t b0 = k0; b0 < k1; b0 += kScaleBlock) {
        const int64_t kb = b0 / kScaleBlock;
        __m512 acc[kAccRegs];
        for (auto& v : acc) v = _mm512_setzero_ps();
        chain_tile<kBf16>(ap, bp, b0, std::min(k1, b0 + kScaleBlock), acc);
        alignas(64) float sv[kPanelWidth];
        for (int j = 0; j < kPanelWidth; ++j) sv[j] = weight_scale(w, panel, j, kb);
        const __m512 sw0 = _mm512_load_ps(sv), sw1 = _mm512_load_ps(sv + 16);
        for (int i = 0; i < int(kTileRows); ++i) {
            const __m512 vsa = _mm512_set1_ps(activation_scale(a, w, tile, kb, i));
            float* ci = ctile + i * kPanelWidth;
            _mm512_storeu_ps(ci, _mm512_fmadd_ps(acc[2 * i], _mm512_mul_ps(vsa, sw0), _mm512_loadu_ps(ci)));
            _mm512_storeu_ps(ci + 16, _mm512_fmadd_ps(acc[2 * i + 1], _mm512_mul_ps(vsa, sw1), _mm512_loadu_ps(ci + 16)));
        }
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
// AVX2: the same chains eight features at a time — a quarter of the panel per pass, so a tile's 12 rows
// of accumulators stay in registers. Each element's fma chain is the one above, bit for bit.
template <bool kBf16>
inline void chain_quarter(const float* a, const void* b, int q, int64_t k0, int64_t k1, __m256 acc[kTileRows]) {
    for (int64_t k = k0; k < k1; ++k) {
        __m256 bv;
        if constexpr (kBf16) {
            const uint16_t* bp = static_cast<const uint16_t*>(b) + k * kPanelWidth + 8 * q;
            bv = _mm256_castsi256_ps(
                _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bp))), 16));
        } else {
            bv = _mm256_loadu_ps(static_cast<const float*>(b) + k * kPanelWidth + 8 * q);
        }
        const float* ak = a + k * kTileRows;
#pragma GCC unroll 16
        for (int i = 0; i < int(kTileRows); ++i) acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(ak[i]), bv, acc[i]);
    }
}

template <bool kBf16>
void tile_chunk(const PackedActivations& a, int64_t tile, const PackedWeight& w, int64_t panel, int64_t k0,
                int64_t k1, bool scaled, float* ctile) {
    const float* ap = tile_rows(a, tile);
    const void* bp = panel_values<kBf16>(w, panel);
    for (int q = 0; q < int(kPanelWidth) / 8; ++q) {
        __m256 acc[kTileRows];
        if (!scaled) {
            for (int i = 0; i < int(kTileRows); ++i) acc[i] = _mm256_loadu_ps(ctile + i * kPanelWidth + 8 * q);
            chain_quarter<kBf16>(ap, bp, q, k0, k1, acc);
            for (int i = 0; i < int(kTileRows); ++i) _mm256_storeu_ps(ctile + i * kPanelWidth + 8 * q, acc[i]);
            continue;
        }
        for (int64_t b0 = k0; b0 < k1; b0 += kScaleBlock) {
            const int64_t kb = b0 / kScaleBlock;
            for (auto& v : acc) v = _mm256_setzero_ps();
            chain_quarter<kBf16>(ap, bp, q, b0, std::min(k1, b0 + kScaleBlock), acc);
            alignas(32) float sv[8];
            for (int j = 0; j < 8; ++j) sv[j] = weight_scale(w, panel, 8 * q + j, kb);
            const __m256 sw = _mm256_load_ps(sv);
            for (int i = 0; i < int(kTileRows); ++i) {
                const __m256 vsa = _mm256_set1_ps(activation_scale(a, w, tile, kb, i));
                float* ci = ctile + i * kPanelWidth + 8 * q;
                _mm256_storeu_ps(ci, _mm256_fmadd_ps(acc[i], _mm256_mul_ps(vsa, sw), _mm256_loadu_ps(ci)));
            }
        }
    }
}
#else
template <bool kBf16>
void tile_chunk(const PackedActivations& a, int64_t tile, const PackedWeight& w, int64_t panel, int64_t k0,
                int64_t k1, bool scaled, float* ctile) {
    const int64_t K = w.cols;
    const float* ap = tile_rows(a, tile);
    auto b_at = [&](int64_t k, int j) {
        const size_t bi = size_t((panel * K + k) * kPanelWidth + j);
        return kBf16 ? bf16_to_f32(w.bf16[bi]) : w.f32[bi];
    };
    for (int i = 0; i < kTileRows; ++i) {
        for (int j = 0; j < kPanelWidth; ++j) {
            float& c = ctile[i * kPanelWidth + j];
            if (!scaled) {
                for (int64_t k = k0; k < k1; ++k) c = std::fma(ap[k * kTileRows + i], b_at(k, j), c);
                continue;
            }
            for (int64_t b0 = k0; b0 < k1; b0 += kScaleBlock) {
                const int64_t kb = b0 / kScaleBlock;
                float acc = 0.0f;
                for (int64_t k = b0; k < std::min(k1, b0 + kScaleBlock); ++k)
                    acc = std::fma(ap[k * kTileRows + i], b_at(k, j), acc);
                c = std::fma(acc, activation_scale(a, w, tile, kb, i) * weight_scale(w, panel, j, kb), c);
            }
        }
    }
}
#endif

}  // namespace

void gemm_tiles(const PackedActivations& a, const PackedWeight& w, int64_t panel_begin, int64_t panel_end,
                int64_t tile_begin, int64_t tile_end, float* c, int64_t ldc) {
    SMOE_CHECK(a.cols == w.cols, Internal, "gemm: activations have {} columns, weight has {}", a.cols, w.cols);
    const int64_t K = w.cols;
    tile_end = std::min(tile_end, a.tile_count());
    if (K == 0 || tile_begin >= tile_end) return;
    // Scales apply per 128-wide k block when either operand has them; otherwise one chain over K.
    const bool scaled = !w.block_scale.empty() || !a.block_scale.empty();
    // Tiles go in groups of kTileGroup. For each group, K is walked in chunks; within a chunk each
    // activation tile (256 x 12 floats, L1-resident) meets every panel of the range in turn (256 x 32
    // weights each, L2-resident across the group), so both operands are reused from cache. The
    // accumulators of every (tile, panel) pair of the group wait in `acc` between chunks.
    constexpr int64_t kChunk = 2 * kScaleBlock;
    constexpr int64_t kTileGroup = 16;
    constexpr int64_t kTileFloats = kTileRows * kPanelWidth;
    const int64_t panels = panel_end - panel_begin;
    thread_local std::vector<float> acc;  // reused: no allocation per call
    if (int64_t(acc.size()) < kTileGroup * panels * kTileFloats) acc.resize(size_t(kTileGroup * panels * kTileFloats));
    for (int64_t g0 = tile_begin; g0 < tile_end; g0 += kTileGroup) {
        const int64_t g1 = std::min(tile_end, g0 + kTileGroup);
        std::fill(acc.begin(), acc.begin() + (g1 - g0) * panels * kTileFloats, 0.0f);
        for (int64_t k0 = 0; k0 < K; k0 += kChunk) {
            const int64_t k1 = std::min(K, k0 + kChunk);
            for (int64_t t = g0; t < g1; ++t) {
                for (int64_t p = panel_begin; p < panel_end; ++p) {
                    float* ct = acc.data() + ((t - g0) * panels + (p - panel_begin)) * kTileFloats;
                    if (w.f32_panels) tile_chunk<false>(a, t, w, p, k0, k1, scaled, ct);
                    else tile_chunk<true>(a, t, w, p, k0, k1, scaled, ct);
                }
            }
        }
        for (int64_t t = g0; t < g1; ++t) {
            const int64_t m_valid = std::min<int64_t>(kTileRows, a.rows - t * kTileRows);
            for (int64_t p = panel_begin; p < panel_end; ++p) {
                const int64_t n0 = p * kPanelWidth, n_valid = std::min<int64_t>(kPanelWidth, w.rows - n0);
                const float* ct = acc.data() + ((t - g0) * panels + (p - panel_begin)) * kTileFloats;
                for (int64_t i = 0; i < m_valid; ++i)
                    std::memcpy(c + (t * kTileRows + i) * ldc + n0, ct + i * kPanelWidth,
                                size_t(n_valid) * sizeof(float));
            }
        }
    }
}

const char* gemm_isa() {
#if defined(__AVX512F__)
    return "avx512";
#else
    return "scalar";
#endif
}

}  // namespace steadymoe::cpu
