// The grouped expert GEMM on its own, for FP8 and FP4 weights: activations as e4m3 codes (Hopper's FP8
// tensor cores, FP8 weights) and as their exact bf16 values (the widening path), against a float64
// reference. On small integers every partial sum is exact at any
// accumulation width, so any difference is a layout or conversion error (a swizzle, a descriptor, a k
// step, an exponent); on random codes the paths show their rounding. Skips, saying so, without a GPU.
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"

#include "../src/kernels/cuda/env_switch.hpp"
#include "../src/kernels/cuda/expert_group.hpp"
#include "../src/kernels/cuda/fp4_blocks.hpp"
#include "../src/kernels/cuda/fp4_exact_tiles.hpp"
#include "../src/kernels/cuda/grouped_gemm.hpp"
#include "../src/kernels/cuda/tensor_map.hpp"
#include "../src/kernels/cuda/weight_layouts.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace steadymoe;

namespace {

constexpr int32_t kHopperTallRows = 192;  // tall tiles' rows (grouped_gemm_tall_tile_rows)
constexpr int64_t kN = 256, kK = 1024, kRows = 150;  // two row tiles on Hopper, the second partly filled;
// k long enough that every kernel's pipeline wraps round its stages

// An FP8 matrix [rows][cols] of the given codes, with f32 block scales.
WeightMatrix fp8_matrix(int64_t rows, int64_t cols, const std::vector<uint8_t>& codes, const std::vector<float>& scales,
                        const std::string& name) {
    WeightMatrix w;
    w.format = ExpertFormat::Fp8;
    w.rows = rows, w.cols = cols, w.name = name;
    w.data = Tensor::zeros(DType::F8_E4M3, {rows, cols});
    std::copy(codes.begin(), codes.end(), w.data.mutable_data<uint8_t>());
    w.scale = Tensor::zeros(DType::F32, {(rows + 127) / 128, cols / 128});
    std::copy(scales.begin(), scales.end(), w.scale.mutable_data<float>());
    return w;
}

// An FP4 matrix [rows][cols] of e2m1 codes (one per byte here, packed two per byte below) with e8m0
// exponents per 32 values.
WeightMatrix fp4_matrix(int64_t rows, int64_t cols, const std::vector<uint8_t>& codes, const std::vector<uint8_t>& exps,
                        const std::string& name) {
    WeightMatrix w;
    w.format = ExpertFormat::Fp4;
    w.rows = rows, w.cols = cols, w.name = name;
    w.data = Tensor::zeros(DType::U8, {rows, cols / 2});
    for (int64_t i = 0; i < rows * cols / 2; ++i)
        w.data.mutable_data<uint8_t>()[i] = uint8_t(codes[size_t(2 * i)] | codes[size_t(2 * i + 1)] << 4);
    w.scale = Tensor::zeros(DType::F8_E8M0, {rows, cols / 32});
    std::copy(exps.begin(), exps.end(), w.scale.mutable_data<uint8_t>());
    return w;
}

// A bf16 matrix [rows][cols] whose element i is value(i) (exact in bf16).
template <typename Value>
WeightMatrix bf16_matrix(int64_t rows, int64_t cols, Value value, const std::string& name) {
    WeightMatrix w;
    w.format = ExpertFormat::Dense;
    w.rows = rows, w.cols = cols, w.name = name;
    w.data = Tensor::zeros(DType::BF16, {rows, cols});
    for (int64_t i = 0; i < rows * cols; ++i) w.data.mutable_data<uint16_t>()[i] = f32_to_bf16(value(i));
    return w;
}

struct Problem {
    int64_t kdim = kK;  // the weights' input features (k)
    bool fp4 = false;
    bool bf16 = false;  // the weight codes' e4m3 values stored as bf16 (exact), scale 1
    std::vector<uint8_t> a, w;            // e4m3 codes [kRows][kdim]; weight codes [kN][kdim] (e4m3 or e2m1)
    std::vector<uint16_t> a_bf16;         // when set: bf16 activations [kRows][kdim] instead of a's codes
    std::vector<float> a_scale, w_scale;  // [kRows][kdim/128]; FP8: [kN/128][kdim/128]
    std::vector<uint8_t> w_exp;           // FP4: e8m0 [kN][kdim/32]
    bool block_exact = false;             // FP4 meeting e4m3 activations: uploaded block-exact (fp4_blocks.hpp)

    double activation(int64_t r, int64_t k) const {
        return a_bf16.empty() ? double(e4m3_to_f32(a[size_t(r * kdim + k)])) : double(bf16_to_f32(a_bf16[size_t(r * kdim + k)]));
    }
    double weight(int64_t n, int64_t k) const {
        if (fp4) return double(e2m1_to_f32(w[size_t(n * kdim + k)])) * std::ldexp(1.0, int(w_exp[size_t(n * (kdim / 32) + k / 32)]) - 127);
        const double scale = bf16 ? 1.0 : w_scale[size_t((n / 128) * (kdim / 128) + k / 128)];
        return double(e4m3_to_f32(w[size_t(n * kdim + k)])) * scale;
    }
};

// Every finite e4m3 value (NaN codes left out) and every e2m1 value, each as often as its codes.
std::vector<float> every_e4m3_value() {
    std::vector<float> v;
    for (int c = 0; c < 256; ++c)
        if ((c & 0x7F) != 0x7F) v.push_back(e4m3_to_f32(uint8_t(c)));
    return v;
}
std::vector<float> every_e2m1_value() {
    std::vector<float> v;
    for (int c = 0; c < 16; ++c) v.push_back(e2m1_to_f32(uint8_t(c)));
    return v;
}

template <typename T>
const T& pick_from(const std::vector<T>& v, std::mt19937& rng) {
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

// Activation codes from `a_values` with scales from `scales`; FP8 weight codes from `w_values` with
// block scales from `scales`.
Problem make_problem(const std::vector<float>& a_values, const std::vector<float>& w_values,
                     const std::vector<float>& scales, uint32_t seed, int64_t kdim = kK) {
    std::mt19937 rng(seed);
    Problem p;
    p.kdim = kdim;
    for (int64_t i = 0; i < kRows * kdim; ++i) p.a.push_back(f32_to_e4m3(pick_from(a_values, rng)));
    for (int64_t i = 0; i < kN * kdim; ++i) p.w.push_back(f32_to_e4m3(pick_from(w_values, rng)));
    for (int64_t i = 0; i < kRows * (kdim / 128); ++i) p.a_scale.push_back(pick_from(scales, rng));
    for (int64_t i = 0; i < (kN / 128) * (kdim / 128); ++i) p.w_scale.push_back(pick_from(scales, rng));
    return p;
}

// The same with FP4 weights: e2m1 codes of `w_values`, exponents 127 + one of `shifts` per 32 values.
Problem make_fp4_problem(const std::vector<float>& a_values, const std::vector<float>& w_values,
                         const std::vector<int>& shifts, uint32_t seed, int64_t kdim = kK) {
    Problem p = make_problem(a_values, {0.0f}, {1.0f}, seed, kdim);
    std::mt19937 rng(seed + 1);
    p.fp4 = true;
    p.w.clear();
    for (int64_t i = 0; i < kN * kdim; ++i) p.w.push_back(f32_to_e2m1(pick_from(w_values, rng)));
    for (int64_t i = 0; i < kN * (kdim / 32); ++i) p.w_exp.push_back(uint8_t(127 + pick_from(shifts, rng)));
    return p;
}

std::vector<double> reference(const Problem& p) {
    std::vector<double> out(size_t(kRows * kN));
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t n = 0; n < kN; ++n) {
            double sum = 0;
            for (int64_t k = 0; k < p.kdim; ++k)
                sum += p.activation(r, k) * p.a_scale[r * (p.kdim / 128) + k / 128] * p.weight(n, k);
            out[size_t(r * kN + n)] = sum;
        }
    return out;
}

// The weights as the down projection ([kN][kdim]) of a one-expert group; gate and up only fill the group.
// FP4 weights that meet e4m3 activations go in e4m3 order.
cuda::DeviceExpertGroup upload(const Problem& p, bool e4m3_order) {
    const int64_t K = p.kdim;
    ExpertWeights e;
    if (p.fp4) {
        const std::vector<uint8_t> gu(size_t(K * kN), 2), gu_exp(size_t(K * kN / 32), 127);  // 1.0
        e.gate = fp4_matrix(K, kN, gu, gu_exp, "gate");
        e.up = fp4_matrix(K, kN, gu, gu_exp, "up");
        e.down = fp4_matrix(kN, K, p.w, p.w_exp, "down");
    } else if (p.bf16) {
        const auto one = [](int64_t) { return 1.0f; };
        e.gate = bf16_matrix(K, kN, one, "gate");
        e.up = bf16_matrix(K, kN, one, "up");
        e.down = bf16_matrix(kN, K, [&](int64_t i) { return e4m3_to_f32(p.w[size_t(i)]); }, "down");
    } else {
        const std::vector<uint8_t> gu(size_t(K * kN), 0x38);  // 1.0
        const std::vector<float> gu_scale(size_t((K / 128) * (kN / 128)), 1.0f);
        e.gate = fp8_matrix(K, kN, gu, gu_scale, "gate");
        e.up = fp8_matrix(K, kN, gu, gu_scale, "up");
        e.down = fp8_matrix(kN, K, p.w, p.w_scale, "down");
    }
    return cuda::upload_expert_group({&e}, "test experts", e4m3_order, p.block_exact);
}

// C = A . W^T on the GPU through one grouped-GEMM launch; fp8_a: A as e4m3 codes, else as bf16 values;
// few_rows: the launch's decode hint (the few-row kernels on a Hopper where the path has them); scaled:
// the activations' 128-block scales apply (else none: scale 1); adjust: changes to the launch (another
// epilogue) before it runs; splits: k splits, each summing its share of k into an output of its own
// (returned one after the other); tile_m: rows per tile of the launch's tile list (0: the GPU's tile rows).
std::vector<float> run(const Problem& p, bool fp8_a, bool few_rows = false, bool scaled = true,
                       const std::function<void(cuda::GroupedGemmLaunch&)>& adjust = {}, int32_t splits = 1, int32_t tile_m = 0) {
    const cuda::DeviceExpertGroup group = upload(p, fp8_a && p.fp4);
    const int32_t tm = tile_m > 0 ? tile_m : cuda::grouped_gemm_tile_rows(), tiles = int32_t((kRows + tm - 1) / tm);
    std::vector<int32_t> tile_list(size_t(3 * tiles + 1));
    for (int32_t t = 0; t < tiles; ++t) {
        tile_list[size_t(t)] = 0;                                                  // expert
        tile_list[size_t(tiles + t)] = t * tm;                                     // first row
        tile_list[size_t(2 * tiles + t)] = int32_t(std::min<int64_t>(tm, kRows - t * tm));  // rows
    }
    tile_list[size_t(3 * tiles)] = tiles;
    cuda::DeviceBuffer tile_buf(tile_list.size() * 4, "tiles"), a_buf(size_t(kRows * p.kdim) * 2, "a"),
        scale_buf(p.a_scale.size() * 4, "a scales"), out_buf(size_t(splits * kRows * kN) * 4, "out");
    tile_buf.upload(tile_list.data(), tile_list.size() * 4);
    scale_buf.upload(p.a_scale.data(), p.a_scale.size() * 4);
    EXPECT_EQ(cudaMemset(out_buf.get(), 0xFF, size_t(splits * kRows * kN) * 4), cudaSuccess);  // NaN where the launch writes nothing
    cuda::GroupedGemmLaunch g;
    const int32_t* t = tile_buf.as<int32_t>();
    g.tile_expert = t, g.tile_row0 = t + tiles, g.tile_rows = t + 2 * tiles, g.tile_count = t + 3 * tiles;
    g.max_tiles = tiles;
    g.tile_m = tile_m;
    if (fp8_a) {
        a_buf.upload(p.a.data(), p.a.size());
        g.a_fp8 = a_buf.as<uint8_t>();
    } else {
        std::vector<uint16_t> bf16(p.a_bf16);
        if (bf16.empty())
            for (uint8_t code : p.a) bf16.push_back(f32_to_bf16(e4m3_to_f32(code)));
        a_buf.upload(bf16.data(), bf16.size() * 2);
        g.a = a_buf.as<uint16_t>();
    }
    g.a_scale = scaled ? scale_buf.as<float>() : nullptr;
    const cuda::DeviceMatrixSet& w = group.down;
    g.code = w.code, g.fp4_e4m3_order = w.fp4_e4m3_order, g.fp4_block_exact = w.fp4_block_exact, g.w = w.data.get(), g.w_expert_bytes = w.expert_bytes, g.w_scale = w.scale.get();
    g.scale_expert_bytes = w.scale_expert_bytes, g.n = w.n, g.k = w.k, g.scaled = scaled || w.code == cuda::WeightCode::Fp8;
    if (p.bf16) g.w_scale = nullptr, g.scale_expert_bytes = 0;
    g.epilogue = cuda::GemmEpilogue::Store, g.out = out_buf.as<float>(), g.ldo = kN;
    g.few_rows = few_rows;
    g.a_rows = kRows;  // the buffer's rows: tiled launches may take them by tensor copies (see grouped_gemm_sm90.cu)
    g.k_splits = splits, g.split_stride = kRows * kN;
    if (adjust) adjust(g);
    EXPECT_EQ(cuda::launch_grouped_gemm(g), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> out(size_t(splits * kRows * kN));
    out_buf.download(out.data(), out.size() * 4);
    return out;
}

double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / den);
}

// Outputs that differ from the float64 result: the first's index (-1 where none) and how many.
struct Mismatches {
    int64_t first = -1, count = 0;
};
Mismatches mismatches(const std::vector<float>& got, const std::vector<double>& want) {
    Mismatches m;
    for (size_t i = 0; i < want.size(); ++i)
        if (double(got[i]) != want[i] && m.count++ == 0) m.first = int64_t(i);
    return m;
}

// The clusters a persistent launch runs in whose rows come by tensor copies, on the paths that have clusters
// of four and weight pairs (bf16 rows meeting bf16 weights, e4m3 rows meeting FP8 weights; where SwiGLU
// outputs are parked, only bf16 ones and tall tiles', and no clusters of four: `quads_possible` false, as for
// every tall tile), as the library chooses them, restated: clusters of four where asked
// (STEADYMOE_QUAD_CTAS=1) and the n-blocks pair up, unless weight pairs are asked for too
// (STEADYMOE_WEIGHT_PAIRS=1); else weight pairs where asked or where a weight column's k run (these tests
// split no k) holds at least `least_column_bytes` (kWeightPairColumnBytes; kSwiGluWeightPairColumnBytes where
// 128-row tiles' SwiGLU outputs are parked), unless STEADYMOE_WEIGHT_PAIRS=0; else pairs sharing the rows
// where the n-blocks pair up. STEADYMOE_PAIRED_CTAS=0 or STEADYMOE_ROW_TENSOR_COPIES=0: none (`any` false).
struct ExpectedClusters {
    bool any = false, quads = false, weight_pairs = false, pairs = false;
};
ExpectedClusters expected_clusters(int64_t k, int weight_bytes, bool n_blocks_pair_up,
                                   bool quads_possible = true,
                                   int64_t least_column_bytes = cuda::kWeightPairColumnBytes) {
    ExpectedClusters c;
    if (cuda::env_equals("STEADYMOE_PAIRED_CTAS", "0") || cuda::env_equals("STEADYMOE_ROW_TENSOR_COPIES", "0")) return c;
    c.any = true;
    const bool pairs_asked = cuda::env_equals("STEADYMOE_WEIGHT_PAIRS", "1");
    c.quads =
        quads_possible && n_blocks_pair_up && cuda::env_equals("STEADYMOE_QUAD_CTAS", "1") && !pairs_asked;
    c.weight_pairs = !c.quads && !cuda::env_equals("STEADYMOE_WEIGHT_PAIRS", "0") &&
                     (pairs_asked || k * weight_bytes >= least_column_bytes);
    c.pairs = n_blocks_pair_up && !c.quads && !c.weight_pairs;
    return c;
}

// p's activation scales block-major ([k/128][kScaleRows]), NaN in the rows past the matrix's, on the GPU.
constexpr int64_t kScaleRows = (kRows + 3) / 4 * 4;
cuda::DeviceBuffer block_major_scales(const Problem& p) {
    const int64_t blocks = p.kdim / 128;
    std::vector<float> transposed(size_t(kScaleRows * blocks), std::nanf(""));
    for (int64_t r = 0; r < kRows; ++r)
        for (int64_t b = 0; b < blocks; ++b) transposed[size_t(b * kScaleRows + r)] = p.a_scale[size_t(r * blocks + b)];
    cuda::DeviceBuffer block_major(transposed.size() * 4, "block-major scales");
    block_major.upload(transposed.data(), transposed.size() * 4);
    return block_major;
}

bool fp8_path_here(bool fp4) {
    return cuda::grouped_gemm_takes_fp8_activations(fp4 ? cuda::WeightCode::Fp4 : cuda::WeightCode::Fp8);
}

// Both paths on `p`: bit for bit equal to float64 (exact), or within the bounds' relative error.
void check_paths(const Problem& p, bool exact, double bf16_bound = 0, double e4m3_bound = 0) {
    const std::vector<double> want = reference(p);
    for (bool fp8_a : {false, true}) {
        if (fp8_a && !fp8_path_here(p.fp4)) {
            std::printf("%s weights do not take e4m3 activations on this GPU: not tested\n", p.fp4 ? "FP4" : "FP8");
            continue;
        }
        SCOPED_TRACE(fp8_a ? "e4m3 activations" : "bf16 activations");
        const std::vector<float> got = run(p, fp8_a);
        if (!exact) {
            const double err = relative_error(got, want);
            std::printf("%s weights, %s activations: relative error vs float64 %.3g\n", p.fp4 ? "FP4" : "FP8",
                        fp8_a ? "e4m3" : "bf16", err);
            EXPECT_LE(err, fp8_a ? e4m3_bound : bf16_bound);
            continue;
        }
        const auto [first, wrong] = mismatches(got, want);
        EXPECT_EQ(wrong, 0) << "first at row " << first / kN << " feature " << first % kN << ": got "
                            << (first >= 0 ? got[size_t(first)] : 0) << ", want " << (first >= 0 ? want[size_t(first)] : 0);
    }
}

}  // namespace

// Small integers and power-of-two scales: every product and every partial sum is exact, so both
// paths must give the float64 result bit for bit.
TEST(CudaGroupedGemm, Fp8IsExactOnSmallIntegers) {
    SMOE_SKIP_WITHOUT_GPU();
    const std::vector<float> ints = {-4, -3, -2, -1, 0, 1, 2, 3, 4};
    check_paths(make_problem(ints, ints, {0.5f, 1.0f, 2.0f}, 11), true);
}

// FP4 weights with exponents that differ from group to group within a 128-wide block: exact too.
TEST(CudaGroupedGemm, Fp4IsExactOnSmallIntegers) {
    SMOE_SKIP_WITHOUT_GPU();
    check_paths(make_fp4_problem({-2, -1, 0, 1, 2}, {-4, -3, -2, -1, 0, 1, 2, 3, 4}, {-2, -1, 0, 1}, 13), true);
}

// Random codes over their whole range: within the accumulation's rounding of float64.
TEST(CudaGroupedGemm, RandomCodesMatchFloat64) {
    SMOE_SKIP_WITHOUT_GPU();
    const std::vector<float> e4m3 = every_e4m3_value(), e2m1 = every_e2m1_value();
    check_paths(make_problem(e4m3, e4m3, {0.001f, 0.01f, 0.1f}, 12), false, 1e-6, 1e-3);
    check_paths(make_fp4_problem(e4m3, e2m1, {-16, -12, -9, -6, -5}, 14), false, 1e-6, 1e-3);
}

// Persistent CTAs with parked epilogues (e4m3 rows meeting FP8 weights) over k of 1 to 7 and 9 blocks of 128:
// items of every length a pipeline of four stages holds, and longer. Small integers with power-of-two scales:
// the float64 result bit for bit; random codes: the bits of one CTA per tile.
TEST(CudaGroupedGemm, ParkedFp8CtasGiveTheBitsOfOneCtaPerTileForEveryBlockCount) {
    SMOE_SKIP_WITHOUT_GPU();
    if (!fp8_path_here(false) || cuda::grouped_gemm_tile_rows() != 128) GTEST_SKIP() << "FP8 weights do not take e4m3 activations on this GPU";
    const std::vector<float> ints = {-4, -3, -2, -1, 0, 1, 2, 3, 4}, e4m3 = every_e4m3_value();
    const auto parked = [](cuda::GroupedGemmLaunch& g) { g.schedule = cuda::TiledSchedule::Parked; };
    const auto per_tile = [](cuda::GroupedGemmLaunch& g) { g.schedule = cuda::TiledSchedule::PerTile; };
    for (const int64_t blocks : {1, 2, 3, 4, 5, 6, 7, 9}) {
        SCOPED_TRACE(std::to_string(blocks) + " blocks of 128 k");
        const Problem exact = make_problem(ints, ints, {0.5f, 1.0f, 2.0f}, uint32_t(60 + blocks), 128 * blocks);
        const std::vector<float> got = run(exact, true, false, true, parked);
        const auto [first, wrong] = mismatches(got, reference(exact));
        EXPECT_EQ(wrong, 0) << "first at row " << first / kN << " feature " << first % kN;
        const Problem random = make_problem(e4m3, e4m3, {0.001f, 0.01f, 0.1f}, uint32_t(70 + blocks), 128 * blocks);
        const std::vector<float> persistent = run(random, true, false, true, parked), one_each = run(random, true, false, true, per_tile);
        EXPECT_EQ(std::memcmp(persistent.data(), one_each.data(), one_each.size() * 4), 0);
        EXPECT_TRUE(std::all_of(one_each.begin(), one_each.end(), [](float v) { return std::isfinite(v); }));
    }
}

// e4m3 rows whose scales are held block-major ([k/128][rows]: the tiled kernel copies a stage's row scales
// by one tensor copy) give the bits of row-major ones, in every schedule, with the rows by tensor copies (the
// two n-blocks' CTAs paired, k = 4096 in weight pairs) and by cp.async, in tiles of 128 rows, of 75 and of
// 50 (whose first rows are not all multiples of 4, where a copy cannot start; three tiles, one without a
// partner in weight pairs), in one k split and in two; NaN scales in the rows past the matrix's reach no
// output. Launches that cannot take block-major scales are refused.
TEST(CudaGroupedGemm, BlockMajorScalesGiveTheBitsOfRowMajorOnes) {
    SMOE_SKIP_WITHOUT_GPU();
    if (!fp8_path_here(false) || cuda::grouped_gemm_tile_rows() != 128) GTEST_SKIP() << "FP8 weights do not take e4m3 activations on this GPU";
    const std::vector<float> e4m3 = every_e4m3_value();
    for (const int64_t kdim : {int64_t(kK), int64_t(4096)}) {
        const Problem p = make_problem(e4m3, e4m3, {0.001f, 0.01f, 0.1f, 0.5f}, uint32_t(80 + kdim / 1024), kdim);
        cuda::DeviceBuffer block_major = block_major_scales(p);
        using cuda::TiledSchedule;
        for (const TiledSchedule schedule : {TiledSchedule::PerTile, TiledSchedule::Persistent, TiledSchedule::Parked})
            for (const bool tensor_copies : {true, false})
                for (const int32_t tile_m : {0, 75, 50})
                    for (const int32_t splits : {1, 2}) {
                        SCOPED_TRACE("k " + std::to_string(kdim) + ", schedule " + std::to_string(int(schedule)) +
                                     (tensor_copies ? ", rows by tensor copies" : ", rows by cp.async") + ", tiles of " +
                                     std::to_string(tile_m > 0 ? tile_m : 128) + " rows, " + std::to_string(splits) +
                                     " k splits");
                        bool takes = false;
                        const auto row_major = [&](cuda::GroupedGemmLaunch& g) {
                            g.schedule = schedule;
                            if (!tensor_copies) g.a_rows = 0;
                            takes = cuda::grouped_gemm_reads_block_major_scales(g);
                        };
                        const auto with_block_major = [&](cuda::GroupedGemmLaunch& g) {
                            row_major(g);
                            g.a_scale = block_major.as<float>(), g.a_scale_layout = cuda::ScaleLayout{kScaleRows};
                        };
                        const std::vector<float> want = run(p, true, false, true, row_major, splits, tile_m);
                        EXPECT_TRUE(takes) << "the tiled kernel should take block-major scales";
                        const uint64_t by_map = cuda::grouped_gemm_scale_map_launches();
                        const std::vector<float> got = run(p, true, false, true, with_block_major, splits, tile_m);
                        EXPECT_EQ(cuda::grouped_gemm_scale_map_launches() - by_map, 1u) << "the scales by a tensor copy";
                        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
                        EXPECT_TRUE(std::all_of(want.begin(), want.end(), [](float v) { return std::isfinite(v); }));
                    }
        // Refused: block-major rows that are not a multiple of 4; bf16 activations; the decode kernel's
        // launches (or, with STEADYMOE_DECODE_KERNEL=tiled, the tiled kernel's 64-row CTAs).
        for (int refusal = 0; refusal < 3; ++refusal) {
            cudaError_t refused = cudaSuccess;
            run(p, refusal != 1, refusal == 2, true, [&](cuda::GroupedGemmLaunch& g) {
                cuda::GroupedGemmLaunch bad = g;
                bad.a_scale = block_major.as<float>(), bad.a_scale_layout = cuda::ScaleLayout{refusal == 0 ? kRows : kScaleRows};
                refused = cuda::launch_grouped_gemm(bad);
            });
            EXPECT_EQ(refused, cudaErrorInvalidValue) << "refusal " << refusal;
        }
    }
}

// The experts' epilogues' inputs for kRows rows on the GPU: a routing weight a row (`weights`), destinations
// in reverse (the scatter's), and room for kRows x kN bf16 outputs.
struct EpilogueRows {
    cuda::DeviceBuffer weights{size_t(kRows) * 4, "row weights"}, dests{size_t(kRows) * 8, "row destinations"},
        bf16_out{size_t(kRows * kN) * 2, "bf16 out"};
    explicit EpilogueRows(const std::vector<float>& row_weights) {
        std::vector<int64_t> reversed(static_cast<size_t>(kRows));
        for (int64_t r = 0; r < kRows; ++r) reversed[size_t(r)] = kRows - 1 - r;
        weights.upload(row_weights.data(), size_t(kRows) * 4);
        dests.upload(reversed.data(), reversed.size() * 8);
    }
};

// Whether a persistent SwiGLU launch rounded to bf16 parks its outputs as bf16 (on the paths that have the
// form): bf16 rows meeting bf16 weights, and tall tiles, unless STEADYMOE_PARKED_SWIGLU=0; every path where
// it is 1.
bool parks_swiglu(bool bf16_rows_and_weights, bool tall = false) {
    return cuda::env_equals("STEADYMOE_PARKED_SWIGLU", "1") ||
           ((bf16_rows_and_weights || tall) && !cuda::env_equals("STEADYMOE_PARKED_SWIGLU", "0"));
}

// Tall tiles (192 rows a tile on three-warpgroup CTAs, e4m3 rows meeting FP8 weights, unless
// STEADYMOE_TALL_TILES=0) give the bits of tiles of 128 rows: with the rows by tensor copies (at k 1024 two
// CTAs sharing their rows' copies, 96-row boxes; at 4096 weight pairs, whose one tile has no partner) and by
// cp.async (CTAs on their own), the scales row-major and block-major (whose tensor copy's box reaches past
// the scales' rows). The tile's third warpgroup holds rows 128-149. One tile, one item a CTA, the Store
// epilogue; and the experts' epilogues storing bf16 rows, parked as tall tiles park them: SwiGLU's outputs
// (unless STEADYMOE_PARKED_SWIGLU=0) and the scatter's values (unless STEADYMOE_PARKED_SCATTER=0), at k 4096
// in weight pairs (expected_clusters). FP8 weights at k 1024 and 4096; block-exact FP4 weights at 1024 and
// 4096 where the tiled kernel takes them (two epilogue warps convert each block; weight pairs only where
// asked). The tensor-core and layer suites run tall tiles over many items a CTA. Refused: tall tiles with
// bf16 activations, in two k splits, in a few-row launch, without activation scales, of per-32 FP4 weights,
// and, where they are turned off, every tall tile (the test then says it skipped).
TEST(CudaGroupedGemm, TallTilesGiveTheBitsOfTilesOf128Rows) {
    SMOE_SKIP_WITHOUT_GPU();
    if (!fp8_path_here(false) || cuda::grouped_gemm_tile_rows() != 128) GTEST_SKIP() << "FP8 weights do not take e4m3 activations on this GPU";
    const std::vector<float> e4m3 = every_e4m3_value();
    const int32_t tall = cuda::grouped_gemm_tall_tile_rows(cuda::WeightCode::Fp8, true);
    // Whether a launch of p in tall tiles, spoilt so, is refused.
    const auto refused = [&](const Problem& p, bool fp8_a, const std::function<void(cuda::GroupedGemmLaunch&)>& spoil) {
        cudaError_t answer = cudaSuccess;
        run(p, fp8_a, false, true, [&](cuda::GroupedGemmLaunch& g) {
            cuda::GroupedGemmLaunch bad = g;
            bad.tile_m = kHopperTallRows;
            spoil(bad);
            answer = cuda::launch_grouped_gemm(bad);
        });
        return answer == cudaErrorInvalidValue;
    };
    const auto as_it_is = [](cuda::GroupedGemmLaunch&) {};
    if (tall == 0) {
        EXPECT_TRUE(refused(make_problem(e4m3, e4m3, {0.01f}, 90), true, as_it_is)) << "tall tiles where turned off";
        GTEST_SKIP() << "tall tiles turned off (STEADYMOE_TALL_TILES=0): refused, not multiplied";
    }
    EXPECT_EQ(tall, kHopperTallRows);
    // the experts' epilogues: a routing weight a row, rows scattered in reverse
    std::vector<float> weights(static_cast<size_t>(kRows));
    for (int64_t r = 0; r < kRows; ++r) weights[size_t(r)] = float(1 + r % 7) / 8.0f;
    const EpilogueRows rows(weights);
    // FP8 weights at k 1024 and 4096, block-exact FP4 ones too where the tiled kernel takes them
    std::vector<std::pair<std::string, Problem>> problems;
    for (const int64_t kdim : {int64_t(kK), int64_t(4096)})
        problems.emplace_back("FP8 weights, k " + std::to_string(kdim),
                              make_problem(e4m3, e4m3, {0.001f, 0.01f, 0.1f, 0.5f}, uint32_t(90 + kdim / 1024), kdim));
    const bool fp4_tall = cuda::grouped_gemm_tall_tile_rows(cuda::WeightCode::Fp4, true, true) == tall;
    EXPECT_EQ(fp4_tall, cuda::grouped_gemm_fp4_exact_tiled());
    EXPECT_EQ(cuda::grouped_gemm_tall_tile_rows(cuda::WeightCode::Fp4, true, false), 0) << "per-32 FP4 weights";
    if (fp4_tall)
        for (const int64_t kdim : {int64_t(kK), int64_t(4096)}) {  // (as BlockExactFp4GivesTheFp8KernelsBits)
            Problem p = make_fp4_problem(e4m3, every_e2m1_value(), {-11, -6, -2, 0}, uint32_t(41 + kdim / 1024), kdim);
            p.block_exact = true;
            problems.emplace_back("block-exact FP4 weights, k " + std::to_string(kdim), std::move(p));
        }
    for (const auto& [name, p] : problems) {
        cuda::DeviceBuffer block_major = block_major_scales(p);
        for (const bool tensor_copies : {true, false})
            for (const bool by_blocks : {false, true}) {
                SCOPED_TRACE(name + (tensor_copies ? ", rows by tensor copies" : ", rows by cp.async") +
                             (by_blocks ? ", block-major scales" : ", row-major scales"));
                const auto adjust = [&](cuda::GroupedGemmLaunch& g) {
                    if (!tensor_copies) g.a_rows = 0;
                    if (by_blocks) g.a_scale = block_major.as<float>(), g.a_scale_layout = cuda::ScaleLayout{kScaleRows};
                };
                const std::vector<float> want = run(p, true, false, true, adjust);
                const uint64_t before = cuda::grouped_gemm_tall_launches();
                const std::vector<float> got = run(p, true, false, true, adjust, 1, tall);
                EXPECT_EQ(cuda::grouped_gemm_tall_launches() - before, 1u) << "a launch on three-warpgroup CTAs";
                EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
                EXPECT_TRUE(std::all_of(want.begin(), want.end(), [](float v) { return std::isfinite(v); }));
            }
        for (const auto epilogue : {cuda::GemmEpilogue::SwiGlu, cuda::GemmEpilogue::Scatter}) {
            const bool swiglu = epilogue == cuda::GemmEpilogue::SwiGlu;
            SCOPED_TRACE(name + (swiglu ? ", SwiGLU outputs in bf16" : ", scattered bf16 rows"));
            const int64_t width = swiglu ? kN / 2 : kN;
            std::vector<uint16_t> stored[2];  // 128-row tiles', tall tiles'
            for (const int32_t tile_m : {0, tall}) {
                // NaN where nothing is stored
                ASSERT_EQ(cudaMemset(rows.bf16_out.get(), 0xFF, size_t(kRows * kN) * 2), cudaSuccess);
                const uint64_t swiglus_before = cuda::grouped_gemm_parked_swiglu_launches(),
                               scatters_before = cuda::grouped_gemm_parked_scatter_launches(),
                               weight_pairs_before = cuda::grouped_gemm_weight_pair_launches();
                (void)run(p, true, false, true, [&](cuda::GroupedGemmLaunch& g) {
                    g.epilogue = epilogue, g.round_bf16 = true, g.ldo = width;
                    g.out = nullptr, g.out_bf16 = rows.bf16_out.as<uint16_t>();
                    g.row_weight = rows.weights.as<float>(), g.row_dest = swiglu ? nullptr : rows.dests.as<int64_t>();
                }, 1, tile_m);
                if (tile_m == tall) {
                    const bool parks =
                        swiglu ? parks_swiglu(false, true) : !cuda::env_equals("STEADYMOE_PARKED_SCATTER", "0");
                    EXPECT_EQ(cuda::grouped_gemm_parked_swiglu_launches() - swiglus_before, swiglu && parks ? 1u : 0u);
                    EXPECT_EQ(cuda::grouped_gemm_parked_scatter_launches() - scatters_before,
                              !swiglu && parks ? 1u : 0u);
                    // both in weight pairs from 4 KiB weight columns (k 4096), parked SwiGLU outputs too;
                    // block-exact FP4 weights only where asked
                    const ExpectedClusters c = expected_clusters(p.kdim, p.fp4 ? 0 : 1, true, false);
                    EXPECT_EQ(cuda::grouped_gemm_weight_pair_launches() - weight_pairs_before,
                              c.weight_pairs ? 1u : 0u);
                }
                std::vector<uint16_t>& out = stored[tile_m == tall];
                out.resize(size_t(kRows * width));
                rows.bf16_out.download(out.data(), out.size() * 2);
            }
            EXPECT_EQ(stored[0], stored[1]);
            EXPECT_EQ(std::count(stored[0].begin(), stored[0].end(), uint16_t(0xFFFF)), 0) << "values never stored";
        }
        if (p.fp4) continue;  // (the refusals once, of FP8 weights; per-32 FP4 weights' below)
        EXPECT_TRUE(refused(p, false, as_it_is)) << "tall tiles of bf16 activations";
        EXPECT_TRUE(refused(p, true, [](cuda::GroupedGemmLaunch& g) { g.k_splits = 2; })) << "tall tiles in two k splits";
        EXPECT_TRUE(refused(p, true, [](cuda::GroupedGemmLaunch& g) { g.few_rows = true; })) << "tall tiles in a few-row launch";
        EXPECT_TRUE(refused(p, true, [](cuda::GroupedGemmLaunch& g) { g.a_scale = nullptr; })) << "tall tiles without scales";
    }
    const Problem per_32 = make_fp4_problem(e4m3, every_e2m1_value(), {-11, -6, -2, 0}, 41);
    EXPECT_TRUE(refused(per_32, true, as_it_is)) << "tall tiles of per-32 FP4 weights";
}

// The decode hint changes how rows and features are spread over CTAs, never a row's arithmetic: the same
// bits, for FP8 weights with e4m3 activations and for bf16 weights (e4m3 values, then full-mantissa bf16
// activations). On a Hopper those take the decode kernel (the weights as the MMAs' first operand, 64 of
// them and 8 to 64 tokens to a CTA; the second tile's 22 rows in a full chunk and a partial one; and over
// tiles as tall as each of those CTAs and taller), or with STEADYMOE_DECODE_KERNEL=tiled the tiled kernel's
// 64-row CTAs. (FP8 weights with bf16 activations keep their 128-row CTAs.)
TEST(CudaGroupedGemm, FewRowCtasGiveTheSameBits) {
    SMOE_SKIP_WITHOUT_GPU();
    const int per_sm = cuda::grouped_gemm_few_row_ctas_per_sm();
    const int decode_bf16 = cuda::grouped_gemm_decode_ctas_per_sm(cuda::WeightCode::Bf16),
              decode_fp8 = cuda::grouped_gemm_decode_ctas_per_sm(cuda::WeightCode::Fp8),
              decode_fp4 = cuda::grouped_gemm_decode_ctas_per_sm(cuda::WeightCode::Fp4);
    std::printf("CTAs per SM on this GPU: 64-row tiled %d, decode bf16 %d, FP8 %d, FP4 %d (0: the kernel is not here)\n", per_sm,
                decode_bf16, decode_fp8, decode_fp4);
    if (cuda::grouped_gemm_tile_rows() == 128 && !cuda::env_equals("STEADYMOE_FEW_ROW_KERNELS", "0")) {
        const bool tiled = cuda::env_equals("STEADYMOE_DECODE_KERNEL", "tiled");
        const bool fewer = cuda::env_equals("STEADYMOE_DECODE_CTAS_PER_SM", "fewer");
        EXPECT_EQ(per_sm, 2);
        EXPECT_EQ(decode_bf16, tiled ? 0 : fewer ? 3 : 5);
        EXPECT_EQ(decode_fp8, tiled ? 0 : fewer ? 5 : 7);
        EXPECT_EQ(decode_fp4, 4);
        // launches of at most two bf16 CTAs an SM take two to an SM, unless STEADYMOE_DEEP_STAGES=0
        const cuda::FewCtaShape deep = cuda::grouped_gemm_few_cta_shape(cuda::WeightCode::Bf16, false);
        const bool deep_on = !tiled && !cuda::env_equals("STEADYMOE_DEEP_STAGES", "0");
        EXPECT_EQ(deep.ctas_per_sm, deep_on ? 2 : 0);
        EXPECT_EQ(deep.launch_ctas_per_sm, deep_on ? 2 : 0);
        EXPECT_EQ(cuda::grouped_gemm_few_cta_shape(cuda::WeightCode::Fp8, true).ctas_per_sm, 0);  // none of its own
        // bf16 decode batches: 16-row tiles up to 8 rows an expert on average, 32-row ones up to 24, 64-row
        // ones above (STEADYMOE_BF16_WIDE_DECODE=0: 16 throughout, =32: at most 32;
        // STEADYMOE_DECODE_TILES=full keeps the GPU's tiles, checked by the rows below)
        if (!tiled && !cuda::env_equals("STEADYMOE_DECODE_TILES", "full")) {
            const bool narrow = cuda::env_equals("STEADYMOE_BF16_WIDE_DECODE", "0");
            const bool at_most_32 = cuda::env_equals("STEADYMOE_BF16_WIDE_DECODE", "32");
            const auto tile_rows = [](int64_t rows) {
                return cuda::grouped_gemm_decode_tile_rows(cuda::WeightCode::Bf16, false, rows, 128);
            };
            EXPECT_EQ(tile_rows(8 * 128), 16);
            EXPECT_EQ(tile_rows(8 * 128 + 1), narrow ? 16 : 32);
            EXPECT_EQ(tile_rows(24 * 128), narrow ? 16 : 32);
            EXPECT_EQ(tile_rows(24 * 128 + 1), narrow ? 16 : at_most_32 ? 32 : 64);
            // FP8 weights meeting e4m3 rows: 64-row tiles past 24 rows an expert
            // (STEADYMOE_FP8_WIDE_DECODE=0: 32)
            const bool fp8_wide = !cuda::env_equals("STEADYMOE_FP8_WIDE_DECODE", "0");
            EXPECT_EQ(cuda::grouped_gemm_decode_tile_rows(cuda::WeightCode::Fp8, true, 24 * 256, 256), 32);
            EXPECT_EQ(cuda::grouped_gemm_decode_tile_rows(cuda::WeightCode::Fp8, true, 24 * 256 + 1, 256),
                      fp8_wide ? 64 : 32);
        }
    }
    const std::vector<float> e4m3 = every_e4m3_value();
    Problem p = make_problem(e4m3, e4m3, {0.001f, 0.01f, 0.1f}, 15);
    std::mt19937 rng(18);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int variant = 0; variant < 4; ++variant) {
        const bool bf16_weights = variant >= 2, fp8_a = variant == 1, bf16_activations = variant == 3;
        if (fp8_a && !fp8_path_here(false)) continue;
        p.bf16 = bf16_weights;
        if (bf16_activations)
            for (int64_t i = 0; i < kRows * kK; ++i) p.a_bf16.push_back(f32_to_bf16(normal(rng)));
        SCOPED_TRACE(std::string(bf16_weights ? "bf16" : "FP8") + " weights, " + (fp8_a ? "e4m3" : bf16_activations ? "bf16" : "e4m3-valued bf16") +
                     " activations");
        const std::vector<float> full = run(p, fp8_a, false), halves = run(p, fp8_a, true);
        EXPECT_EQ(std::memcmp(full.data(), halves.data(), full.size() * 4), 0);
        // and in tiles of every height a decode batch is cut in (as tall as a CTA of 8, 16, 32 or 64 tokens:
        // one chunk a tile) and of heights no CTA has (48: a 64-token CTA partly filled; 96 and 128: 16- or
        // 32-token CTAs taking a tile in chunks)
        for (int32_t tm : {8, 16, 32, 48, 64, 96, 128}) {
            if (tm > cuda::grouped_gemm_tile_rows()) continue;
            const std::vector<float> short_tiles = run(p, fp8_a, true, true, {}, 1, tm);
            EXPECT_EQ(std::memcmp(full.data(), short_tiles.data(), full.size() * 4), 0) << tm << "-row tiles";
        }
        // 8-row tiles of FP8 weights meeting e4m3 rows: 8-token CTAs (19 tiles, the last of 6 rows)
        if (fp8_a) {
            const std::vector<float> thin = run(p, fp8_a, true, true, {}, 1, 8);
            EXPECT_EQ(std::memcmp(full.data(), thin.data(), full.size() * 4), 0) << "8-row tiles";
        }
        // bf16 weights on the CTAs of launches with at most two an SM (Bf16Deep; 128-row tiles: 2 tiles x 8
        // chunks x 4 CTAs) and on the others, with a grid for 128 tiles (the 126 past tile_count find none)
        for (const int32_t grid_tiles : {0, 128}) {
            if (!bf16_weights) break;
            const auto grid = [&](cuda::GroupedGemmLaunch& g) { g.max_tiles = std::max(g.max_tiles, grid_tiles); };
            const std::vector<float> few = run(p, fp8_a, true, true, grid);
            EXPECT_EQ(std::memcmp(full.data(), few.data(), full.size() * 4), 0) << "a grid for " << grid_tiles << " tiles";
        }
        if (bf16_weights) {
            EXPECT_LE(relative_error(halves, reference(p)), 1e-6);
            // and without activation scales: one sum over the whole k (no 128-block folds)
            const std::vector<float> plain = run(p, false, false, false), plain_few = run(p, false, true, false);
            EXPECT_EQ(std::memcmp(plain.data(), plain_few.data(), plain.size() * 4), 0) << "unscaled";
        }
    }
}

// The decode kernel where a launch's last n-tile is partial (200 features: its second half holds 8, the
// FP8 weight scale of its odd fragments lies past the matrix) and where k is split in two (each split's
// partial sums stored on their own, as the router's GEMM does), over the GPU's tiles and a decode batch's:
// the bits of the tiled kernel, for FP8 weights with e4m3 activations, bf16 weights with and without
// activation scales, and FP4 weights.
TEST(CudaGroupedGemm, DecodeKernelPartialTilesAndSplitsGiveTheSameBits) {
    SMOE_SKIP_WITHOUT_GPU();
    if (cuda::grouped_gemm_decode_ctas_per_sm(cuda::WeightCode::Fp4) == 0) GTEST_SKIP() << "no decode kernel on this GPU (or turned off)";
    const std::vector<float> e4m3 = every_e4m3_value(), e2m1 = every_e2m1_value();
    Problem fp8 = make_problem(e4m3, e4m3, {0.001f, 0.01f, 0.1f}, 19), bf16 = fp8;
    bf16.bf16 = true;
    const Problem fp4 = make_fp4_problem(e4m3, e2m1, {-9, -5, 0}, 20);
    const auto partial = [](cuda::GroupedGemmLaunch& g) { g.n = 200; };
    struct Case {
        const char* name;
        const Problem* p;
        bool fp8_a, scaled;
    };
    for (const Case& c : {Case{"FP8 x e4m3", &fp8, true, true}, Case{"bf16, scaled", &bf16, false, true},
                          Case{"bf16, unscaled", &bf16, false, false}, Case{"FP4", &fp4, false, true}}) {
        if (c.fp8_a && !fp8_path_here(false)) continue;
        SCOPED_TRACE(c.name);
        const cuda::WeightCode code = c.p->fp4 ? cuda::WeightCode::Fp4 : c.p->bf16 ? cuda::WeightCode::Bf16 : cuda::WeightCode::Fp8;
        const int32_t decode_tm = cuda::grouped_gemm_decode_tile_rows(code, c.fp8_a, kRows, 1);
        const std::vector<float> tiled = run(*c.p, c.fp8_a, false, c.scaled, partial);
        const std::vector<float> split_tiled = run(*c.p, c.fp8_a, false, c.scaled, {}, 2);
        for (int32_t tm : {0, decode_tm}) {  // the GPU's tiles, and a decode batch's
            SCOPED_TRACE(std::to_string(tm) + "-row tiles (0: the GPU's)");
            const std::vector<float> decode = run(*c.p, c.fp8_a, true, c.scaled, partial, 1, tm);
            EXPECT_EQ(std::memcmp(tiled.data(), decode.data(), tiled.size() * 4), 0) << "200 features";
            const std::vector<float> split_decode = run(*c.p, c.fp8_a, true, c.scaled, {}, 2, tm);
            EXPECT_EQ(std::memcmp(split_tiled.data(), split_decode.data(), split_tiled.size() * 4), 0) << "two k splits";
        }
    }
}

// FP4 weights in a decode batch take the decode kernel too (the weights as the MMAs' first operand,
// widened in registers; 32 tokens per CTA, four CTAs to a 128-row tile, the second tile's 22 rows in
// one): the same bits as the tiled kernel — for activations that are e4m3 values with per-128 scales
// (not powers of two), the same without scales, and full-mantissa bf16 activations.
TEST(CudaGroupedGemm, Fp4DecodeKernelGivesTheSameBits) {
    SMOE_SKIP_WITHOUT_GPU();
    if (cuda::grouped_gemm_decode_ctas_per_sm(cuda::WeightCode::Fp4) == 0) GTEST_SKIP() << "no decode kernel on this GPU (or turned off)";
    const std::vector<float> e4m3 = every_e4m3_value(), e2m1 = every_e2m1_value();
    Problem p = make_fp4_problem(e4m3, e2m1, {-16, -9, -5, 0, 3}, 16);
    std::mt19937 rng(17);
    for (float& s : p.a_scale) s = pick_from(std::vector<float>{0.3f, 0.7f, 1.9f, 5.1f}, rng);
    const std::vector<float> scaled_tiled = run(p, false, false), scaled_decode = run(p, false, true);
    EXPECT_EQ(std::memcmp(scaled_tiled.data(), scaled_decode.data(), scaled_tiled.size() * 4), 0) << "with activation scales";
    const std::vector<float> short_tiles = run(p, false, true, true, {}, 1, cuda::grouped_gemm_decode_tile_rows(cuda::WeightCode::Fp4, false, kRows, 1));
    EXPECT_EQ(std::memcmp(scaled_tiled.data(), short_tiles.data(), scaled_tiled.size() * 4), 0) << "in a decode batch's tiles";
    EXPECT_LE(relative_error(scaled_decode, reference(p)), 1e-6);
    std::fill(p.a_scale.begin(), p.a_scale.end(), 1.0f);  // what the reference multiplies by without scales
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (bool bf16_activations : {false, true}) {
        SCOPED_TRACE(bf16_activations ? "bf16 activations" : "e4m3 activations");
        if (bf16_activations)
            for (int64_t i = 0; i < kRows * kK; ++i) p.a_bf16.push_back(f32_to_bf16(normal(rng)));
        const std::vector<float> tiled = run(p, false, false, false), decode = run(p, false, true, false);
        EXPECT_EQ(std::memcmp(tiled.data(), decode.data(), tiled.size() * 4), 0);
        EXPECT_LE(relative_error(decode, reference(p)), 1e-6);
    }
}

namespace {
void check_fp4_e4m3_batches(const std::vector<int>& shifts, bool block_exact);
}  // namespace

// FP4 weights meeting e4m3 activations (DeepSeek-V4's arithmetic: a tensor-core sum per 32-wide group, scaled
// per group, folded per 128-wide block; or, for block-exact weights, the FP8 kernels' arithmetic: one sum per
// 128-wide block, folded with the block's scale) run one kernel at every batch size: 64 tokens and one block
// a stage to a CTA in other batches (their rows by tensor copies); in decode batches two blocks a stage and
// 16 tokens (over 128-row tiles in chunks, or over 16-row tiles) or 8 (8-row tiles: six CTAs to an SM, or
// four, a stage's two blocks multiplied at once, in launches of at most three CTAs an SM — here all but those
// with k split in eight; with STEADYMOE_DEEP_STAGES=0 six, with STEADYMOE_FP4_THIN_CTAS_PER_SM=4 four in
// every launch). The same bits every way — with activation scales that are not powers of two, with a partial
// last n-tile (200 features), with k split in two and in eight (a split of one block: a stage half filled),
// with thirteen blocks (every stage ring wraps), with token scales held per CTA and copied per stage — and
// within the FP8 tensor cores' rounding of float64.
TEST(CudaGroupedGemm, Fp4MeetingE4m3GivesTheSameBitsInEveryBatch) {
    SMOE_SKIP_WITHOUT_GPU();
    if (!fp8_path_here(true)) GTEST_SKIP() << "FP4 weights do not take e4m3 activations on this GPU";
    const int thin = cuda::grouped_gemm_fp4_e4m3_ctas_per_sm(8),
              narrow = cuda::grouped_gemm_fp4_e4m3_ctas_per_sm(16),
              mid = cuda::grouped_gemm_fp4_e4m3_ctas_per_sm(32),
              wide = cuda::grouped_gemm_fp4_e4m3_ctas_per_sm(64);
    std::printf("FP4 x e4m3 CTAs per SM on this GPU: %d of 8 tokens, %d of 16, %d of 32, %d of 64\n", thin,
                narrow, mid, wide);
    EXPECT_EQ(thin, cuda::env_equals("STEADYMOE_FP4_THIN_CTAS_PER_SM", "4") ? 4 : 6);
    EXPECT_EQ(narrow, cuda::env_equals("STEADYMOE_DECODE_CTAS_PER_SM", "fewer") ? 4 : 5);
    EXPECT_EQ(mid, 4);
    EXPECT_EQ(wide, 3);
    // decode batches' tiles: 8 rows up to 4 an expert on average, 16 up to 12, 32 up to 24, 64 above
    // (STEADYMOE_FP4_THIN_CTAS=0: 16 up to 12; STEADYMOE_FP4_WIDE_DECODE=0: 16 past 4, =32: at most 32)
    if (!cuda::env_equals("STEADYMOE_FEW_ROW_KERNELS", "0") &&
        !cuda::env_equals("STEADYMOE_DECODE_TILES", "full")) {
        const bool narrow_only = cuda::env_equals("STEADYMOE_FP4_WIDE_DECODE", "0");
        const bool at_most_32 = cuda::env_equals("STEADYMOE_FP4_WIDE_DECODE", "32");
        const auto tile_rows = [](int64_t rows) {
            return cuda::grouped_gemm_decode_tile_rows(cuda::WeightCode::Fp4, true, rows, 256);
        };
        EXPECT_EQ(tile_rows(4 * 256), cuda::env_equals("STEADYMOE_FP4_THIN_CTAS", "0") ? 16 : 8);
        EXPECT_EQ(tile_rows(12 * 256), 16);
        EXPECT_EQ(tile_rows(12 * 256 + 1), narrow_only ? 16 : 32);
        EXPECT_EQ(tile_rows(24 * 256 + 1), narrow_only ? 16 : at_most_32 ? 32 : 64);
    }
    // launches of at most three 8-token CTAs an SM take four to an SM, unless every launch runs so or none does
    const cuda::FewCtaShape four = cuda::grouped_gemm_few_cta_shape(cuda::WeightCode::Fp4, true);
    const bool four_on = !cuda::env_equals("STEADYMOE_FP4_THIN_CTAS_PER_SM", "4") && !cuda::env_equals("STEADYMOE_DEEP_STAGES", "0") &&
                         !cuda::env_equals("STEADYMOE_FEW_ROW_KERNELS", "0");
    EXPECT_EQ(four.ctas_per_sm, four_on ? 4 : 0);
    EXPECT_EQ(four.launch_ctas_per_sm, four_on ? 3 : 0);
    // Weights whose groups' exponents span 19 binades within a block, on the per-32 arithmetic; 11, on it and
    // uploaded block-exact (fp4_blocks.hpp).
    check_fp4_e4m3_batches({-16, -9, -5, 0, 3}, false);
    check_fp4_e4m3_batches({-11, -5, 0}, false);
    check_fp4_e4m3_batches({-11, -5, 0}, true);
}

namespace {

// Fp4MeetingE4m3GivesTheSameBitsInEveryBatch's checks on weights of exponents 127 + `shifts`.
void check_fp4_e4m3_batches(const std::vector<int>& shifts, bool block_exact) {
    SCOPED_TRACE(block_exact ? "block-exact weights" : "per-32 weights");
    const std::vector<float> e4m3 = every_e4m3_value(), e2m1 = every_e2m1_value();
    Problem p = make_fp4_problem(e4m3, e2m1, shifts, 21);
    p.block_exact = block_exact;
    EXPECT_EQ(upload(p, true).down.fp4_block_exact, block_exact);
    std::mt19937 rng(22);
    for (float& s : p.a_scale) s = pick_from(std::vector<float>{0.3f, 0.7f, 1.9f, 5.1f}, rng);
    // The decode batches' forms against the others' (64-token CTAs over 128-row tiles).
    const auto every_decode_form = [](const Problem& q, const std::vector<float>& want, const char* what,
                                      const std::function<void(cuda::GroupedGemmLaunch&)>& adjust = {},
                                      int32_t splits = 1) {
        for (int32_t tile_m : {0, 64, 32, 16, 8}) {
            const std::vector<float> got = run(q, true, true, true, adjust, splits, tile_m);
            EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << what << ", tiles of " << tile_m << " rows (0: 128)";
        }
    };
    const std::vector<float> tiles = run(p, true, false);
    every_decode_form(p, tiles, "");
    const double err = relative_error(run(p, true, true, true, {}, 1, 8), reference(p));
    std::printf("FP4 weights, e4m3 activations with scales: relative error vs float64 %.3g\n", err);
    EXPECT_LE(err, 1e-3);
    const auto partial = [](cuda::GroupedGemmLaunch& g) { g.n = 200; };
    const std::vector<float> partial_tiles = run(p, true, false, true, partial);
    every_decode_form(p, partial_tiles, "200 features", partial);
    for (int64_t r = 0; r < kRows; ++r)  // the features past 200 are never written (NaN bits left there)
        EXPECT_EQ(std::memcmp(&partial_tiles[size_t(r * kN)], &tiles[size_t(r * kN)], 200 * 4), 0) << "row " << r;
    for (int32_t splits : {2, 8}) {  // eight: one 128-wide block per split, half a decode stage
        const std::vector<float> split_tiles = run(p, true, false, true, {}, splits);
        every_decode_form(p, split_tiles, splits == 2 ? "2 k splits" : "8 k splits", {}, splits);
    }
    // k = 1664: thirteen blocks, so every ring wraps and every decode form's last stage is half filled (seven
    // stages of two blocks in a ring of three or four; thirteen of one in a ring of five).
    Problem long_k = make_fp4_problem(e4m3, e2m1, shifts, 23, 1664);
    long_k.block_exact = block_exact;
    const std::vector<float> long_tiles = run(long_k, true, false);
    every_decode_form(long_k, long_tiles, "k = 1664");
    EXPECT_LE(relative_error(long_tiles, reference(long_k)), 1e-3) << "k = 1664";
    // The decode batches' CTAs hold their k range's token scales, the others' copy them per stage. k = 8192: 64
    // blocks, more than a 16-token CTA holds (it copies them per stage), fewer than an 8-token one holds; with k
    // split in two, both hold their 32.
    Problem longer_k = make_fp4_problem(e4m3, e2m1, shifts, 24, 8192);
    longer_k.block_exact = block_exact;
    for (float& s : longer_k.a_scale) s = pick_from(std::vector<float>{0.3f, 0.7f, 1.9f, 5.1f}, rng);
    EXPECT_LE(relative_error(run(longer_k, true, true, true, {}, 1, 8), reference(longer_k)), 1e-3) << "k = 8192";
    for (int32_t splits : {1, 2}) {
        const std::vector<float> longer_tiles = run(longer_k, true, false, true, {}, splits);
        every_decode_form(longer_k, longer_tiles, splits == 1 ? "k = 8192" : "k = 8192, 2 k splits", {}, splits);
    }
}

}  // namespace

// Which FP4 matrices are block-exact (fp4_blocks.hpp): within each 128 x 128 block, the exponents of the
// groups with a nonzero code span at most 11 binades; the block's exponent is the largest less 6 (at least
// 1), and a row's word holds each group's shift (its exponent less the block's, plus 6) and the block's
// exponent. A group of zeros counts for nothing; a block of zeros takes 127.
TEST(CudaGroupedGemm, Fp4BlockExponentsFollowTheGroupsExponents) {
    constexpr int64_t kRowsHere = 256, kCols = 256;  // 2 x 2 blocks
    const auto matrix = [&](const std::function<uint8_t(int64_t, int64_t)>& exponent, const std::function<uint8_t(int64_t, int64_t)>& code) {
        std::vector<uint8_t> codes(size_t(kRowsHere * kCols)), exps(size_t(kRowsHere * kCols / 32));
        for (int64_t r = 0; r < kRowsHere; ++r)
            for (int64_t k = 0; k < kCols; ++k) codes[size_t(r * kCols + k)] = code(r, k);
        for (int64_t r = 0; r < kRowsHere; ++r)
            for (int64_t g = 0; g < kCols / 32; ++g) exps[size_t(r * (kCols / 32) + g)] = exponent(r, g);
        return fp4_matrix(kRowsHere, kCols, codes, exps, "w");
    };
    const auto ones = [](int64_t, int64_t) { return uint8_t(2); };  // 1.0
    // Exponents 120 + (row + group) % 12 within block (0, 0): a span of 11; the other blocks one exponent
    // each.
    const auto spread = [](int64_t r, int64_t g) { return uint8_t(r < 128 && g < 4 ? 120 + (r + g) % 12 : 100 + g / 4 + r / 128); };
    const WeightMatrix w = matrix(spread, ones);
    const std::optional<std::vector<uint8_t>> exps = cuda::fp4_block_exponents(w);
    ASSERT_TRUE(exps.has_value());
    EXPECT_EQ(*exps, (std::vector<uint8_t>{131 - 6, 101 - 6, 101 - 6, 102 - 6}));
    const auto* codes = static_cast<const uint8_t*>(w.data.raw());
    const auto* scales = static_cast<const uint8_t*>(w.scale.raw());
    const uint32_t word = cuda::fp4_block_shift_word(codes + 5 * (kCols / 2), scales + 5 * (kCols / 32), (*exps)[0]);
    EXPECT_EQ(word, uint32_t(125) << 16 | uint32_t((125 + 6 - 125) | (126 + 6 - 125) << 4 | (127 + 6 - 125) << 8 | (128 + 6 - 125) << 12));
    // A span of 12 (one group's exponent 119 beside others' 131): not block-exact.
    EXPECT_FALSE(cuda::fp4_block_exponents(matrix([&](int64_t r, int64_t g) { return r == 7 && g == 1 ? uint8_t(119) : spread(r, g); }, ones)));
    // A largest exponent of 6 (a block exponent of 0 would put the scale below f32's normal numbers): the
    // block's exponent is 1, and every shift (e + 5) is in range — here with exponents 0 to 6.
    const std::optional<std::vector<uint8_t>> small =
        cuda::fp4_block_exponents(matrix([](int64_t r, int64_t g) { return uint8_t(g < 4 ? (r + g) % 7 : 100); }, ones));
    ASSERT_TRUE(small.has_value());
    EXPECT_EQ(*small, (std::vector<uint8_t>{1, 94, 1, 94}));
    // Groups of zeros (here with exponents 1 and 254) count for nothing; a block of zeros takes 127.
    const auto zero_group = [](int64_t r, int64_t k) { return uint8_t((r == 3 && k < 32) || (r < 128 && k >= 128) ? 0 : 2); };
    const auto far = [](int64_t r, int64_t g) { return uint8_t(r == 3 && g == 0 ? 1 : r < 128 && g >= 4 ? 254 : 110); };
    const std::optional<std::vector<uint8_t>> zeros = cuda::fp4_block_exponents(matrix(far, zero_group));
    ASSERT_TRUE(zeros.has_value());
    EXPECT_EQ(*zeros, (std::vector<uint8_t>{104, 127, 104, 104}));
}

// Weights asked to be block-exact that are not are refused, naming the matrix, before anything is uploaded
// (so this runs without a GPU too).
TEST(CudaGroupedGemm, BlockExactUploadRefusesWeightsWithoutAnExactForm) {
    Problem p = make_fp4_problem({1.0f}, every_e2m1_value(), {-16, -9, -5, 0, 3}, 43);
    p.block_exact = true;
    try {
        (void)upload(p, true);
        ADD_FAILURE() << "weights whose exponents span 19 binades were uploaded block-exact";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
        EXPECT_NE(std::string(e.what()).find("down"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("STEADYMOE_FP4_BLOCK_EXACT"), std::string::npos) << e.what();
    }
}

namespace {

// A block-exact FP4 matrix [rows][cols] of random codes: per (128-row block, 128-wide k block) a random
// exponent, each group's up to 10 binades above it; about one group in eight holds only zeros (signed too).
WeightMatrix random_block_exact_fp4(int64_t rows, int64_t cols, std::mt19937& rng, const std::string& name) {
    std::vector<uint8_t> codes(size_t(rows * cols)), exps(size_t(rows * cols / 32));
    std::vector<uint8_t> base(size_t((rows + 127) / 128 * (cols / 128)));
    for (uint8_t& b : base) b = uint8_t(100 + rng() % 31);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < cols / 32; ++g) {
            exps[size_t(r * (cols / 32) + g)] = uint8_t(base[size_t(r / 128 * (cols / 128) + g / 4)] + rng() % 11);
            const bool zeros = rng() % 8 == 0;
            for (int64_t k = 32 * g; k < 32 * g + 32; ++k) codes[size_t(r * cols + k)] = uint8_t(zeros ? (rng() % 2) * 8 : rng() % 16);
        }
    return fp4_matrix(rows, cols, codes, exps, name);
}

// Three tiles of one expert over 150 rows (22, 100 and 28 rows), uploaded for the schedule tests' launches.
struct ThreeTiles {
    static constexpr int64_t kRows = 150;
    const std::vector<int32_t> list = {0, 0, 0, 0, 22, 122, 22, 100, 28, 3};  // experts, first rows, rows, count
    cuda::DeviceBuffer buf{list.size() * 4, "tiles"};
    ThreeTiles() { buf.upload(list.data(), list.size() * 4); }
    void set(cuda::GroupedGemmLaunch& g) const {
        const int32_t* t = buf.as<int32_t>();
        g.tile_expert = t, g.tile_row0 = t + 3, g.tile_rows = t + 6, g.tile_count = t + 9, g.max_tiles = 3;
    }
};

// A block-exact FP4 matrix as FP8 weights: each value the e4m3 code of it over its 128 x 128 block's scale
// 2^(b - 127) (fp4_block_exponents), exactly, with those scales as the FP8 block scales.
WeightMatrix fp8_twin(const WeightMatrix& fp4) {
    const std::vector<uint8_t> exps = cuda::fp4_block_exponents(fp4).value();  // (throws where none)
    const int64_t k_blocks = fp4.cols / 128;
    std::vector<float> scales(exps.size());
    for (size_t i = 0; i < exps.size(); ++i) scales[i] = std::ldexp(1.0f, int(exps[i]) - 127);
    const auto* data = static_cast<const uint8_t*>(fp4.data.raw());
    const auto* exp = static_cast<const uint8_t*>(fp4.scale.raw());
    std::vector<uint8_t> codes(size_t(fp4.rows * fp4.cols));
    for (int64_t r = 0; r < fp4.rows; ++r)
        for (int64_t k = 0; k < fp4.cols; ++k) {
            const float value = e2m1_to_f32(uint8_t(data[r * (fp4.cols / 2) + k / 2] >> (4 * (k % 2)) & 15)) *
                                std::ldexp(1.0f, int(exp[r * (fp4.cols / 32) + k / 32]) - 127);
            const float scaled = value / scales[size_t(r / 128 * k_blocks + k / 128)];
            uint8_t& code = codes[size_t(r * fp4.cols + k)];
            code = f32_to_e4m3(scaled);
            EXPECT_EQ(f32_bits(e4m3_to_f32(code)), f32_bits(scaled)) << fp4.name << " row " << r << " k " << k << " has no exact e4m3 form";
        }
    return fp8_matrix(fp4.rows, fp4.cols, codes, scales, fp4.name);
}

}  // namespace

// Block-exact FP4 weights take the FP8 kernels' arithmetic: converted exactly to e4m3 codes with a scale per
// 128 x 128 block (here by the test itself), they give the same bits on the FP8 kernels — the tiled kernel
// and the decode kernel — as on the FP4 ones, in every batch's form (other batches on the tiled kernel, or on
// the decode kernel with STEADYMOE_FP4_EXACT_TILED=0).
TEST(CudaGroupedGemm, BlockExactFp4GivesTheFp8KernelsBits) {
    SMOE_SKIP_WITHOUT_GPU();
    if (!fp8_path_here(true)) GTEST_SKIP() << "FP4 weights do not take e4m3 activations on this GPU";
    const std::vector<float> e4m3 = every_e4m3_value(), e2m1 = every_e2m1_value();
    Problem p = make_fp4_problem(e4m3, e2m1, {-11, -6, -2, 0}, 41);
    std::mt19937 rng(42);
    for (float& s : p.a_scale) s = pick_from(std::vector<float>{0.3f, 0.7f, 1.9f, 5.1f}, rng);
    p.block_exact = true;
    ASSERT_TRUE(upload(p, true).down.fp4_block_exact);
    Problem fp8 = p;
    fp8.fp4 = false, fp8.block_exact = false;
    const WeightMatrix twin = fp8_twin(fp4_matrix(kN, p.kdim, p.w, p.w_exp, "down"));
    ASSERT_FALSE(::testing::Test::HasFailure()) << "the weights have no exact e4m3 form";
    fp8.w.assign(static_cast<const uint8_t*>(twin.data.raw()), static_cast<const uint8_t*>(twin.data.raw()) + kN * p.kdim);
    fp8.w_scale.assign(static_cast<const float*>(twin.scale.raw()), static_cast<const float*>(twin.scale.raw()) + twin.scale.numel());
    const std::vector<float> want = run(fp8, true, false);  // the FP8 tiled kernel
    EXPECT_EQ(std::memcmp(want.data(), run(p, true, false).data(), want.size() * 4), 0) << "FP4, other batches";
    // Other batches take the tiled kernel (unless STEADYMOE_FP4_EXACT_TILED=0): every schedule, with rows by
    // tensor copies and by the producer's cp.async (a launch that gives no row count).
    std::printf("block-exact FP4, other batches: the %s kernel\n", cuda::grouped_gemm_fp4_exact_tiled() ? "tiled" : "decode");
    for (const auto schedule : {cuda::TiledSchedule::PerTile, cuda::TiledSchedule::Persistent, cuda::TiledSchedule::Parked})
        for (const bool row_copies : {true, false}) {
            const auto adjust = [&](cuda::GroupedGemmLaunch& g) {
                g.schedule = schedule;
                if (!row_copies) g.a_rows = 0;
            };
            EXPECT_EQ(std::memcmp(want.data(), run(p, true, false, true, adjust).data(), want.size() * 4), 0)
                << "FP4, other batches, schedule " << int(schedule) << (row_copies ? ", rows by tensor copies" : ", rows by cp.async");
        }
    for (int32_t tile_m : {0, 16, 8}) {
        EXPECT_EQ(std::memcmp(want.data(), run(fp8, true, true, true, {}, 1, tile_m).data(), want.size() * 4), 0)
            << "FP8 decode kernel, tiles of " << tile_m << " rows (0: 128)";
        EXPECT_EQ(std::memcmp(want.data(), run(p, true, true, true, {}, 1, tile_m).data(), want.size() * 4), 0)
            << "FP4 decode batch, tiles of " << tile_m << " rows (0: 128)";
    }
}

// The tiled kernel's conversion of block-exact FP4 weights (fp4_exact_tiles.hpp), run on the host: each
// stage's block, stored in e4m3 order for the decode kernel, becomes byte for byte the stored tiles of the
// same weights as FP8 codes with their block scales (the FP8 weights' upload), and the two weight scales the
// FP8 tiled kernel's fold reads. Gate and up rows interleaved (each from its own blocks) and plain rows,
// with n-tiles partly past the matrix (the second plain one's odd fragment wholly).
TEST(CudaGroupedGemm, Fp4BlockConversionGivesTheFp8StoredTiles) {
    constexpr int64_t kCols = 384;  // three k blocks
    std::mt19937 rng(7);
    const WeightMatrix gate = random_block_exact_fp4(96, kCols, rng, "gate"), up = random_block_exact_fp4(96, kCols, rng, "up");
    const WeightMatrix plain = random_block_exact_fp4(136, kCols, rng, "down");
    struct Case {
        const char* what;
        std::vector<std::pair<const WeightMatrix*, int64_t>> rows;  // GEMM row r: row .second of matrix .first
    };
    Case interleaved{"gate and up interleaved", {}}, in_order{"plain rows", {}};
    for (int64_t r = 0; r < 2 * gate.rows; ++r)  // as expert_group.cpp uploads them: 8 gate rows, then 8 up rows
        interleaved.rows.emplace_back(r / 8 % 2 ? &up : &gate, r / 16 * 8 + r % 8);
    for (int64_t r = 0; r < plain.rows; ++r) in_order.rows.emplace_back(&plain, r);
    std::vector<std::vector<uint8_t>> exps;
    std::vector<WeightMatrix> twins;
    for (const WeightMatrix* w : {&gate, &up, &plain}) exps.push_back(cuda::fp4_block_exponents(*w).value()), twins.push_back(fp8_twin(*w));
    for (const Case& c : {interleaved, in_order}) {
        SCOPED_TRACE(c.what);
        const int64_t n = int64_t(c.rows.size()), k = kCols, k_blocks = k / 128;
        std::vector<uint8_t> codes, scales, fp8_codes;
        std::vector<const uint8_t*> block_exp_rows;
        std::vector<float> block_scales;  // per GEMM row and k block
        for (int64_t r = 0; r < n; ++r) {
            const auto& [w, row] = c.rows[size_t(r)];
            const size_t which = w == &gate ? 0 : w == &up ? 1 : 2;
            const WeightMatrix& fp8 = twins[which];
            const auto* data = static_cast<const uint8_t*>(w->data.raw()) + row * (k / 2);
            const auto* exp = static_cast<const uint8_t*>(w->scale.raw()) + row * (k / 32);
            const auto* fp8_row = static_cast<const uint8_t*>(fp8.data.raw()) + row * k;
            codes.insert(codes.end(), data, data + k / 2);
            scales.insert(scales.end(), exp, exp + k / 32);
            fp8_codes.insert(fp8_codes.end(), fp8_row, fp8_row + k);
            block_exp_rows.push_back(exps[which].data() + row / 128 * k_blocks);
            const float* fp8_scale = static_cast<const float*>(fp8.scale.raw()) + row / 128 * k_blocks;
            block_scales.insert(block_scales.end(), fp8_scale, fp8_scale + k_blocks);
        }
        std::vector<uint8_t> stored, want;
        cuda::fp4_e4m3_blocks(codes.data(), scales.data(), n, k, block_exp_rows, stored);
        cuda::tile_matrix(fp8_codes.data(), n, k, cuda::WeightCode::Fp8, want);
        for (int64_t nt = 0; nt < (n + 127) / 128; ++nt)
            for (int64_t kb = 0; kb < k_blocks; ++kb) {
                std::vector<uint8_t> stage(2 * cuda::kFp4E4m3BlockBytes), tile(cuda::fp4_tiles::kE4m3BlockBytes, 0xAB);
                for (int64_t h = 0; h < 2; ++h)
                    std::memcpy(stage.data() + h * cuda::kFp4E4m3BlockBytes,
                                stored.data() + ((2 * nt + h) * k_blocks + kb) * cuda::kFp4E4m3BlockBytes, cuda::kFp4E4m3BlockBytes);
                float fragment_scales[2] = {-1.0f, -1.0f};
                for (int t = 0; t < cuda::fp4_tiles::kConvertThreads; ++t)
                    cuda::fp4_tiles::convert_row(stage.data(), tile.data(), fragment_scales, t);
                EXPECT_EQ(std::memcmp(tile.data(), want.data() + (nt * k_blocks + kb) * tile.size(), tile.size()), 0)
                    << "n-tile " << nt << ", k block " << kb;
                // the same by a thread a row of a half, as tall tiles' converting warps take them
                std::vector<uint8_t> by_rows(tile.size(), 0xAA);
                float row_scales[2] = {-1.0f, -1.0f};
                for (int r = 0; r < cuda::fp4_tiles::kHalfRows; ++r)
                    for (int i = 0; i < 4; ++i)
                        cuda::fp4_tiles::convert_half_row(stage.data(), by_rows.data(), row_scales, i / 2, i % 2, r);
                EXPECT_EQ(by_rows, tile) << "n-tile " << nt << ", k block " << kb << ", a thread a row of a half";
                EXPECT_EQ(row_scales[0], fragment_scales[0]);
                EXPECT_EQ(row_scales[1], fragment_scales[1]);
                for (int p = 0; p < 2; ++p) {
                    const int64_t r = nt * 128 + 8 * p;  // the fragment's first row
                    const float scale = r < n ? block_scales[size_t(r * k_blocks + kb)] : 0.0f;
                    EXPECT_EQ(fragment_scales[p], scale) << "n-tile " << nt << ", k block " << kb << ", fragment parity " << p;
                }
            }
    }
}

namespace {

// One block-exact FP4 expert (its down weights [n][k] multiplied; gate and up, as an upload needs them, too)
// and its FP8 twin.
struct BlockExactExpert {
    ExpertWeights fp4, fp8;
    BlockExactExpert(int64_t n, int64_t k, std::mt19937& rng) {
        fp4.gate = random_block_exact_fp4(k, n, rng, "gate"),
        fp4.up = random_block_exact_fp4(k, n, rng, "up");
        fp4.down = random_block_exact_fp4(n, k, rng, "down");
        fp8.gate = fp8_twin(fp4.gate), fp8.up = fp8_twin(fp4.up), fp8.down = fp8_twin(fp4.down);
    }
};

// Random e4m3 rows [rows][k] with random per-128 scales, and Store launches over them on a tile list (rows by
// tensor copies, or by the producer's cp.async): their f32 outputs [rows][n], NaN where nothing is written.
struct E4m3RowLaunches {
    int64_t rows, n, k;
    cuda::DeviceBuffer a, scales, out;
    E4m3RowLaunches(int64_t rows_, int64_t n_, int64_t k_, std::mt19937& rng)
        : rows(rows_),
          n(n_),
          k(k_),
          a(size_t(rows * k), "a"),
          scales(size_t(rows * (k / 128)) * 4, "scales"),
          out(size_t(rows * n) * 4, "out") {
        const std::vector<float> e4m3 = every_e4m3_value();
        std::vector<uint8_t> codes(size_t(rows * k));
        for (uint8_t& code : codes) code = f32_to_e4m3(pick_from(e4m3, rng));
        std::vector<float> row_scales(size_t(rows * (k / 128)));
        for (float& v : row_scales) v = pick_from(std::vector<float>{0.3f, 0.7f, 1.9f, 5.1f}, rng);
        a.upload(codes.data(), codes.size());
        scales.upload(row_scales.data(), row_scales.size() * 4);
    }
    template <class Tiles>
    std::vector<float> run(const Tiles& tiles, const cuda::DeviceMatrixSet& m, cuda::TiledSchedule schedule,
                           bool row_copies) {
        cuda::GroupedGemmLaunch g;
        tiles.set(g);
        g.a_fp8 = a.as<uint8_t>(), g.a_scale = scales.as<float>(), g.scaled = true,
        g.a_rows = row_copies ? rows : 0;
        g.code = m.code, g.fp4_e4m3_order = m.fp4_e4m3_order, g.fp4_block_exact = m.fp4_block_exact;
        g.w = m.data.get(), g.w_expert_bytes = m.expert_bytes, g.w_scale = m.scale.get(),
        g.scale_expert_bytes = m.scale_expert_bytes;
        g.n = m.n, g.k = m.k, g.epilogue = cuda::GemmEpilogue::Store, g.out = out.as<float>(), g.ldo = n,
        g.schedule = schedule;
        EXPECT_EQ(cudaMemset(out.get(), 0xFF, size_t(rows * n) * 4), cudaSuccess);
        EXPECT_EQ(cuda::launch_grouped_gemm(g), cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<float> got(size_t(rows * n));
        out.download(got.data(), got.size() * 4);
        return got;
    }
};

// Whether persistent launches of block-exact FP4 weights whose rows come by tensor copies run in weight
// pairs: with STEADYMOE_WEIGHT_PAIRS=1 only (measured slower by default: the library counts a converted
// block's column as no bytes, and such launches never take clusters of four), where the tiled kernel takes
// them.
bool fp4_weight_pairs_asked() {
    return cuda::grouped_gemm_fp4_exact_tiled() && expected_clusters(0, 1, false, false).weight_pairs;
}

}  // namespace

// Block-exact FP4 weights over many n-blocks (more items than persistent CTAs, so each walks several, its
// blocks' spare tiles alternating across them), with k of one block and of three: the bits of their FP8 form
// on the FP8 tiled kernel, on every schedule, rows by tensor copies and by cp.async (other batches: the tiled
// kernel, or the decode one with STEADYMOE_FP4_EXACT_TILED=0). With STEADYMOE_WEIGHT_PAIRS=1 persistent
// launches whose rows come by tensor copies run in weight pairs (tiles 0 and 1 share the expert's weights,
// tile 2 has no partner).
TEST(CudaGroupedGemm, BlockExactFp4GivesTheFp8KernelsBitsOverManyItems) {
    SMOE_SKIP_WITHOUT_GPU();
    if (!fp8_path_here(true)) GTEST_SKIP() << "FP4 weights do not take e4m3 activations on this GPU";
    constexpr int64_t N = 151 * 128;
    std::mt19937 rng(23);
    const ThreeTiles tiles;
    for (const int64_t K : {int64_t(128), int64_t(384)}) {
        SCOPED_TRACE("k = " + std::to_string(K));
        const BlockExactExpert expert(N, K, rng);  // (every FP4 matrix must be block-exact)
        const cuda::DeviceExpertGroup fp4_group =
            cuda::upload_expert_group({&expert.fp4}, "fp4 experts", true, true);
        const cuda::DeviceExpertGroup fp8_group = cuda::upload_expert_group({&expert.fp8}, "fp8 experts");
        E4m3RowLaunches launches(ThreeTiles::kRows, N, K, rng);
        const std::vector<float> want =
            launches.run(tiles, fp8_group.down, cuda::TiledSchedule::Automatic, true);
        EXPECT_TRUE(std::all_of(want.begin(), want.end(), [](float v) { return std::isfinite(v); }));
        for (const auto schedule : {cuda::TiledSchedule::PerTile, cuda::TiledSchedule::Persistent, cuda::TiledSchedule::Parked})
            for (const bool row_copies : {true, false}) {
                const uint64_t pairs_before = cuda::grouped_gemm_weight_pair_launches();
                EXPECT_EQ(
                    std::memcmp(want.data(), launches.run(tiles, fp4_group.down, schedule, row_copies).data(),
                                want.size() * 4),
                    0)
                    << "schedule " << int(schedule)
                    << (row_copies ? ", rows by tensor copies" : ", rows by cp.async");
                const bool pairs =
                    fp4_weight_pairs_asked() && row_copies && schedule != cuda::TiledSchedule::PerTile;
                EXPECT_EQ(cuda::grouped_gemm_weight_pair_launches() - pairs_before, pairs ? 1u : 0u)
                    << "weight pairs expected: " << pairs << ", schedule " << int(schedule);
            }
    }
}

// Rows read in place through a_index (the layer's gate/up GEMMs where the kernel does so: no gather kernel to
// copy them first) give the bits of the same rows in order, with the rows shuffled in their buffer: FP8
// weights meeting e4m3 rows and bf16 weights (with and without activation scales) in a decode batch, FP4
// weights meeting e4m3 rows in a decode batch and in another (where rows in order come by tensor copies). A
// launch whose kernel would not read rows so (bf16 weights over 128-row tiles) is refused.
TEST(CudaGroupedGemm, IndexedRowsGiveTheBitsOfRowsInOrder) {
    SMOE_SKIP_WITHOUT_GPU();
    std::vector<int32_t> index(static_cast<size_t>(kRows));
    for (int64_t r = 0; r < kRows; ++r) index[size_t(r)] = int32_t((r * 37 + 11) % kRows);  // 37 and 150 are coprime
    cuda::DeviceBuffer index_buf(index.size() * 4, "row index");
    index_buf.upload(index.data(), index.size() * 4);
    const std::vector<float> e4m3 = every_e4m3_value(), e2m1 = every_e2m1_value();
    Problem fp8 = make_problem(e4m3, e4m3, {0.001f, 0.01f, 0.1f}, 31), bf16 = fp8;
    bf16.bf16 = true;
    const Problem fp4 = make_fp4_problem(e4m3, e2m1, {-9, -5, 0}, 32);
    const bool enabled = !cuda::env_equals("STEADYMOE_INDEXED_ROWS", "0");
    const bool bf16_decode = enabled && cuda::grouped_gemm_decode_ctas_per_sm(cuda::WeightCode::Bf16) > 0,
               fp8_decode = enabled && cuda::grouped_gemm_decode_ctas_per_sm(cuda::WeightCode::Fp8) > 0 && fp8_path_here(false),
               fp4_e4m3 = enabled && fp8_path_here(true);
    struct Case {
        const char* what;
        const Problem& p;
        bool fp8_a, few_rows, scaled, in_place;  // in_place: where the launch must read its rows so
    };
    for (const Case& c : {Case{"FP8 weights, e4m3 rows, decode batch", fp8, true, true, true, fp8_decode},
                          Case{"bf16 weights, decode batch", bf16, false, true, true, bf16_decode},
                          Case{"bf16 weights, decode batch, no activation scales", bf16, false, true, false, bf16_decode},
                          Case{"FP4 weights, e4m3 rows, decode batch", fp4, true, true, true, fp4_e4m3},
                          Case{"FP4 weights, e4m3 rows, other batch", fp4, true, false, true, fp4_e4m3},
                          Case{"bf16 weights, 128-row tiles", bf16, false, false, true, false}}) {
        SCOPED_TRACE(c.what);
        if (c.fp8_a && !fp8_path_here(c.p.fp4)) continue;
        const cuda::WeightCode code = c.p.fp4 ? cuda::WeightCode::Fp4 : c.p.bf16 ? cuda::WeightCode::Bf16 : cuda::WeightCode::Fp8;
        const int32_t tile_m = c.few_rows ? cuda::grouped_gemm_decode_tile_rows(code, c.fp8_a, kRows, 1) : 0;
        // Buffer row index[r] holds row r (codes, or their exact bf16 values) and its scales.
        const int64_t row_bytes = c.p.kdim * (c.fp8_a ? 1 : 2), groups = c.p.kdim / 128;
        std::vector<uint8_t> rows(size_t(kRows * row_bytes));
        std::vector<float> scales(c.p.a_scale.size());
        for (int64_t r = 0; r < kRows; ++r) {
            uint8_t* to = &rows[size_t(index[size_t(r)] * row_bytes)];
            for (int64_t k = 0; k < c.p.kdim; ++k) {
                const uint8_t code_rk = c.p.a[size_t(r * c.p.kdim + k)];
                if (c.fp8_a) to[k] = code_rk;
                else reinterpret_cast<uint16_t*>(to)[k] = f32_to_bf16(e4m3_to_f32(code_rk));
            }
            std::copy_n(&c.p.a_scale[size_t(r * groups)], groups, &scales[size_t(index[size_t(r)] * groups)]);
        }
        cuda::DeviceBuffer rows_buf(rows.size(), "shuffled rows"), scales_buf(scales.size() * 4, "shuffled scales");
        rows_buf.upload(rows.data(), rows.size());
        scales_buf.upload(scales.data(), scales.size() * 4);
        bool in_place = false;
        const auto read_in_place = [&](cuda::GroupedGemmLaunch& g) {
            cuda::GroupedGemmLaunch shuffled = g;
            if (c.fp8_a) shuffled.a_fp8 = rows_buf.as<uint8_t>();
            else shuffled.a = rows_buf.as<uint16_t>();
            if (g.a_scale) shuffled.a_scale = scales_buf.as<float>();
            shuffled.a_index = index_buf.as<int32_t>();
            in_place = cuda::grouped_gemm_reads_indexed_rows(shuffled);
            if (in_place) g = shuffled;
            else EXPECT_EQ(cuda::launch_grouped_gemm(shuffled), cudaErrorInvalidValue);  // and g runs on rows in order
        };
        const std::vector<float> want = run(c.p, c.fp8_a, c.few_rows, c.scaled, {}, 1, tile_m),
                                 got = run(c.p, c.fp8_a, c.few_rows, c.scaled, read_in_place, 1, tile_m);
        EXPECT_EQ(in_place, c.in_place);
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0);
        std::printf("%s: rows %s\n", c.what, in_place ? "read in place, the same bits" : "not read in place (the launch refused them)");
    }
}

// A bf16 decode launch given the routing kernel's early experts (GroupedGemmLaunch::early_route) over tiles of
// one row each (tile i: expert e_i, row i, as one token's tiles are) gives the bits of the launch without them:
// with the first 32 tiles' experts published (those CTAs start from them, the rest from the list), and with
// nothing published (every CTA waits kEarlyRouteWaitNs, then reads the list). 40 tiles of 256 features are
// 160 CTAs, few enough for the CTAs that take them (those of one token's gate/up launches, two to an SM).
// Without a dependent launch the routing kernel has long ended, so this checks the CTAs' two ways to their
// tile, not their timing; FP8 and FP4 launches, which ignore the experts, alike.
TEST(CudaGroupedGemm, EarlyRoutedTilesGiveTheBitsOfTheTileList) {
    SMOE_SKIP_WITHOUT_GPU();
    if (cuda::env_equals("STEADYMOE_DEEP_STAGES", "0")) GTEST_SKIP() << "STEADYMOE_DEEP_STAGES=0: no CTAs take early experts";
    const std::vector<float> e4m3 = every_e4m3_value(), e2m1 = every_e2m1_value();
    Problem fp8 = make_problem(e4m3, e4m3, {0.001f, 0.01f, 0.1f}, 41), bf16 = fp8;
    bf16.bf16 = true;
    const Problem fp4 = make_fp4_problem(e4m3, e2m1, {-9, -5, 0}, 42);
    constexpr int32_t kTiles = 40;
    std::vector<int32_t> one_row_tiles(size_t(3 * kTiles + 1));
    for (int32_t i = 0; i < kTiles; ++i)
        one_row_tiles[size_t(i)] = 0, one_row_tiles[size_t(kTiles + i)] = i, one_row_tiles[size_t(2 * kTiles + i)] = 1;
    one_row_tiles[size_t(3 * kTiles)] = kTiles;
    cuda::DeviceBuffer tiles(one_row_tiles.size() * 4, "one-row tiles"), early(sizeof(cuda::EarlyRoute), "early experts");
    tiles.upload(one_row_tiles.data(), one_row_tiles.size() * 4);
    struct Case {
        const char* name;
        const Problem& p;
        bool fp8_a, scaled;
        cuda::WeightCode code;
    };
    for (const Case& c : {Case{"bf16 weights", bf16, false, false, cuda::WeightCode::Bf16},
                          Case{"bf16 weights, scaled", bf16, false, true, cuda::WeightCode::Bf16},
                          Case{"FP8 weights, e4m3 rows", fp8, true, true, cuda::WeightCode::Fp8},
                          Case{"FP4 weights, e4m3 rows", fp4, true, true, cuda::WeightCode::Fp4}}) {
        if (c.fp8_a && !fp8_path_here(c.p.fp4)) continue;
        if (cuda::grouped_gemm_decode_ctas_per_sm(c.code) == 0) continue;
        SCOPED_TRACE(c.name);
        const int32_t tm = cuda::grouped_gemm_decode_tile_rows(c.code, c.fp8_a, 1, 1);  // one token's tiles
        const std::vector<float> want = run(c.p, c.fp8_a, true, c.scaled, {}, 1, tm);
        for (uint32_t ready : {1u, 0u}) {
            SCOPED_TRACE(ready ? "32 experts published" : "nothing published");
            cuda::EarlyRoute published{ready, 32, {}};  // tiles 0..31: expert 0 (the problem's one expert)
            early.upload(&published, sizeof(published));
            const std::vector<float> got = run(c.p, c.fp8_a, true, c.scaled, [&](cuda::GroupedGemmLaunch& g) {
                const int32_t* t = tiles.as<int32_t>();
                g.tile_expert = t, g.tile_row0 = t + kTiles, g.tile_rows = t + 2 * kTiles, g.tile_count = t + 3 * kTiles;
                g.max_tiles = kTiles;
                g.early_route = early.as<cuda::EarlyRoute>();
            }, 1, tm);
            EXPECT_EQ(std::memcmp(want.data(), got.data(), size_t(kTiles * kN) * 4), 0) << "the first 40 rows";
        }
    }
}

// FP4 codes are stored in one order for bf16 activations and in another for e4m3 ones (expert_group.hpp): a
// launch whose codes are in the other order than its activations need is refused before it touches a GPU.
TEST(CudaGroupedGemm, RefusesFp4CodesInTheOtherOrder) {
    static const uint8_t e4m3_rows[128] = {};
    cuda::GroupedGemmLaunch g;
    g.max_tiles = 1, g.n = 128, g.k = 128, g.code = cuda::WeightCode::Fp4;
    g.a_fp8 = e4m3_rows;  // e4m3 activations, codes in the bf16 order
    EXPECT_EQ(cuda::launch_grouped_gemm(g), cudaErrorInvalidValue);
    g.a_fp8 = nullptr, g.fp4_e4m3_order = true;  // bf16 activations, codes in e4m3 order
    EXPECT_EQ(cuda::launch_grouped_gemm(g), cudaErrorInvalidValue);
}

// Tiles taller than the GPU's, or an identity launch whose tile height disagrees with its tiles', are refused
// before the launch touches a GPU (a kernel would skip the rows past its CTAs').
TEST(CudaGroupedGemm, RefusesTilesTallerThanItsCtas) {
    static const uint16_t rows[128] = {};
    cuda::GroupedGemmLaunch g;
    g.max_tiles = 1, g.n = 128, g.k = 128, g.a = rows;
    g.tile_m = cuda::grouped_gemm_tile_rows() + 1;
    EXPECT_EQ(cuda::launch_grouped_gemm(g), cudaErrorInvalidValue);
    g.tile_m = -1;
    EXPECT_EQ(cuda::launch_grouped_gemm(g), cudaErrorInvalidValue);
    g.tile_m = 16, g.identity_rows = 100, g.identity_tile_rows = cuda::grouped_gemm_tile_rows();
    EXPECT_EQ(cuda::launch_grouped_gemm(g), cudaErrorInvalidValue);
}

// The Hopper kernel's schedules for 128-row CTAs — one CTA per tile, two CTAs to an SM, persistent CTAs (with
// this k, epilogues from registers unless STEADYMOE_PARKED_EPILOGUES=1) and persistent CTAs whose epilogues
// are parked for epilogue warps —
// on a launch with more (tile, n-block) items than an H200 has SMs, k too short to fill a pipeline, and a
// partial tile first in the list; rows by the producer's cp.async and by tensor copies (whose boxes also bring
// the other tiles' rows, and for the last tile zeros past the buffer). On small integers every sum is exact, so each schedule must give the float64
// result bit for bit, with and without activation scales (powers of two); on random values every
// schedule must give the bits of one CTA per tile. An odd and two even counts of n-blocks: with the even
// ones, persistent CTAs with rows by tensor copies run in pairs that share those copies. (With
// STEADYMOE_WIDE_CTAS=1 unscaled persistent CTAs take 256 features an item where they can: 75 and 76 of them
// for the even counts, the first unpaired.)
class EveryTiledSchedule : public ::testing::TestWithParam<int64_t> {};
TEST_P(EveryTiledSchedule, GivesTheExactResult) {
    SMOE_SKIP_WITHOUT_GPU();
    if (cuda::grouped_gemm_tile_rows() != 128) GTEST_SKIP() << "the schedules are the Hopper kernel's; this GPU runs the sm_80 kernel";
    const int64_t N = GetParam() * 128;
    constexpr int64_t K = 256, rows = ThreeTiles::kRows;
    std::mt19937 rng(21);
    std::uniform_int_distribution<int> small(-3, 3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const auto one = [](int64_t) { return 1.0f; };
    for (bool integers : {true, false}) {
        ExpertWeights e;
        e.gate = bf16_matrix(K, N, one, "gate"), e.up = bf16_matrix(K, N, one, "up");
        e.down = bf16_matrix(N, K, [&](int64_t) { return integers ? float(small(rng)) : normal(rng); }, "down");
        const cuda::DeviceExpertGroup group = cuda::upload_expert_group({&e}, "schedule test");
        std::vector<uint16_t> a(size_t(rows * K));
        for (uint16_t& v : a) v = f32_to_bf16(integers ? float(small(rng)) : normal(rng));
        std::vector<float> scales(size_t(rows * (K / 128)));
        for (float& s : scales) s = std::ldexp(1.0f, small(rng) % 2);  // 0.5, 1 or 2
        const ThreeTiles tiles;
        cuda::DeviceBuffer a_buf(a.size() * 2, "a"), scale_buf(scales.size() * 4, "scales"),
            out_buf(size_t(rows * N) * 4, "out");
        a_buf.upload(a.data(), a.size() * 2);
        scale_buf.upload(scales.data(), scales.size() * 4);
        CUtensorMap map;  // what the kernel's launch encodes: if it could not, "tensor copies" would test cp.async
        ASSERT_TRUE(cuda::encode_row_map(map, a_buf.get(), rows, K, cuda::RowElement::Bf16, 128));
        const uint16_t* w = static_cast<const uint16_t*>(e.down.data.raw());
        for (bool scaled : {false, true}) {
            std::vector<double> want(size_t(rows * N));
            for (int64_t r = 0; integers && r < rows; ++r)
                for (int64_t n = 0; n < N; ++n) {
                    double sum = 0;
                    for (int64_t k = 0; k < K; ++k)
                        sum += double(bf16_to_f32(a[size_t(r * K + k)])) * bf16_to_f32(w[size_t(n * K + k)]) *
                               (scaled ? scales[size_t(r * (K / 128) + k / 128)] : 1.0);
                    want[size_t(r * N + n)] = sum;
                }
            std::vector<float> per_tile;  // random values: the bits of the first schedule
            for (int variant = 0; variant < 8; ++variant) {
                const cuda::TiledSchedule schedule = cuda::TiledSchedule(1 + variant % 4);  // PerTile, TwoPerSm, Persistent, Parked
                const bool tensor_copies = variant >= 4;
                SCOPED_TRACE(std::string(integers ? "small integers, " : "random values, ") + (scaled ? "scaled, " : "unscaled, ") +
                             "schedule " + std::to_string(int(schedule)) + (tensor_copies ? ", rows by tensor copies" : ""));
                cuda::GroupedGemmLaunch g;
                tiles.set(g);
                g.a = a_buf.as<uint16_t>(), g.a_scale = scaled ? scale_buf.as<float>() : nullptr, g.scaled = scaled;
                g.a_rows = tensor_copies ? rows : 0;
                const cuda::DeviceMatrixSet& m = group.down;
                g.code = m.code, g.w = m.data.get(), g.w_expert_bytes = m.expert_bytes, g.n = m.n, g.k = m.k;
                g.epilogue = cuda::GemmEpilogue::Store, g.out = out_buf.as<float>(), g.ldo = N, g.schedule = schedule;
                const bool persistent = schedule == cuda::TiledSchedule::Persistent || schedule == cuda::TiledSchedule::Parked;
                // Wide CTAs (STEADYMOE_WIDE_CTAS=1) take 256 features an item where they can: pairs of those.
                const bool wide = cuda::env_equals("STEADYMOE_WIDE_CTAS", "1") && !cuda::env_equals("STEADYMOE_PARKED_EPILOGUES", "1") &&
                                  !scaled && schedule == cuda::TiledSchedule::Persistent && N % 256 == 0;
                const int64_t items_across = wide ? N / 256 : GetParam();
                // Clusters of four and weight pairs on unscaled 128-wide items (bf16 rows, weights): the
                // library's rule; pairs sharing the rows on the others where the items pair up.
                const ExpectedClusters c = expected_clusters(K, 2, items_across % 2 == 0);
                const bool clustered = persistent && tensor_copies && items_across % 2 == 0 && c.any;
                const bool two_tiles = persistent && tensor_copies && !wide && !scaled;
                const bool quads = two_tiles && c.quads, weight_pairs = two_tiles && c.weight_pairs;
                ASSERT_EQ(cudaMemset(out_buf.get(), 0xFF, size_t(rows * N) * 4), cudaSuccess);  // NaN where nothing is written
                const uint64_t paired_before = cuda::grouped_gemm_paired_launches(), quads_before = cuda::grouped_gemm_quad_launches(),
                               weight_pairs_before = cuda::grouped_gemm_weight_pair_launches();
                ASSERT_EQ(cuda::launch_grouped_gemm(g), cudaSuccess);
                EXPECT_EQ(cuda::grouped_gemm_paired_launches() - paired_before, clustered && !quads && !weight_pairs ? 1u : 0u)
                    << "pairs expected";
                EXPECT_EQ(cuda::grouped_gemm_quad_launches() - quads_before, quads ? 1u : 0u) << "clusters of four expected: " << quads;
                EXPECT_EQ(cuda::grouped_gemm_weight_pair_launches() - weight_pairs_before, weight_pairs ? 1u : 0u)
                    << "weight pairs expected: " << weight_pairs;
                ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
                std::vector<float> got(size_t(rows * N));
                out_buf.download(got.data(), got.size() * 4);
                if (!integers && per_tile.empty()) {
                    per_tile = got;
                    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); }));
                    continue;
                }
                int64_t wrong = 0, first = -1;
                for (size_t i = 0; i < got.size(); ++i) {
                    const bool same = integers ? double(got[i]) == want[i] : std::memcmp(&got[i], &per_tile[i], 4) == 0;
                    if (!same && wrong++ == 0) first = int64_t(i);
                }
                EXPECT_EQ(wrong, 0) << "first at row " << first / N << " feature " << first % N;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(NBlocks, EveryTiledSchedule, ::testing::Values(int64_t(151), int64_t(150), int64_t(152)));

namespace {

// Seven row tiles of two experts, 677 rows, for the cluster tests: tiles 0-2 of expert 0 (128, 100 and 128
// rows), tiles 3-6 of expert 1 (5, 128, 128 and 60), uploaded for their launches.
struct TwoExpertTiles {
    static constexpr int32_t kTiles = 7;
    const std::vector<int32_t> experts = {0, 0, 0, 1, 1, 1, 1}, rows = {128, 100, 128, 5, 128, 128, 60};
    std::vector<int32_t> list =
        std::vector<int32_t>(size_t(3 * kTiles + 1));  // experts, first rows, rows, count
    int32_t total = 0;
    cuda::DeviceBuffer buf{list.size() * 4, "tiles"};
    TwoExpertTiles() {
        for (int32_t t = 0; t < kTiles; ++t) {
            list[size_t(t)] = experts[size_t(t)], list[size_t(kTiles + t)] = total,
            list[size_t(2 * kTiles + t)] = rows[size_t(t)];
            total += rows[size_t(t)];
        }
        list[size_t(3 * kTiles)] = kTiles;
        buf.upload(list.data(), list.size() * 4);
    }
    int32_t first_row(int32_t t) const { return list[size_t(kTiles + t)]; }
    void set(cuda::GroupedGemmLaunch& g) const {
        const int32_t* t = buf.as<int32_t>();
        g.tile_expert = t, g.tile_row0 = t + kTiles, g.tile_rows = t + 2 * kTiles,
        g.tile_count = t + 3 * kTiles, g.max_tiles = kTiles;
    }
};

// Persistent CTAs in clusters (pairs sharing rows; weight pairs, whose two row tiles share a stage's weight
// copies where they hold rows of one expert; with STEADYMOE_QUAD_CTAS=1 clusters of four, which share both)
// on a tile list of two experts: tiles 0-1 of expert 0 share weights, tiles 2-3 straddle the experts (each
// copies its own), tiles 4-5 of expert 1 share them, tile 6 has no partner; each cluster takes several items,
// shared and not, where the features give enough n-blocks (the first test below). FP8 weights meeting e4m3
// rows (scaled) and bf16 weights meeting bf16 rows, on small integers and powers of two: every sum is exact,
// so each row must give the float64 result of its own expert's weights bit for bit, in the persistent
// schedule (epilogues from registers, or parked where k is long) and the parked one.
void check_clusters(int64_t N, int64_t K) {
    const TwoExpertTiles tiles;
    const int64_t total = tiles.total;
    std::mt19937 rng(37);
    std::uniform_int_distribution<int> small(-3, 3);
    const auto power_of_two = [&] { return std::ldexp(1.0f, small(rng) % 2); };  // 0.5, 1 or 2
    for (bool fp8 : {true, false}) {
        if (fp8 && !fp8_path_here(false)) {
            std::printf("FP8 weights do not take e4m3 activations on this GPU: not tested\n");
            continue;
        }
        const ExpectedClusters c = expected_clusters(K, fp8 ? 1 : 2, (N / 128) % 2 == 0);
        // Per expert: weight codes [N][K] (e4m3 of small integers) and, FP8, block scales [N/128][K/128].
        std::vector<std::vector<uint8_t>> codes(2, std::vector<uint8_t>(size_t(N * K)));
        std::vector<std::vector<float>> w_scales(2, std::vector<float>(size_t((N / 128) * (K / 128)), 1.0f));
        ExpertWeights e[2];
        for (int x = 0; x < 2; ++x) {
            for (uint8_t& c : codes[size_t(x)]) c = f32_to_e4m3(float(small(rng)));
            if (fp8) {
                for (float& v : w_scales[size_t(x)]) v = power_of_two();
                const std::vector<uint8_t> one(size_t(K * N), 0x38);
                const std::vector<float> ones(size_t((K / 128) * (N / 128)), 1.0f);
                e[x].gate = fp8_matrix(K, N, one, ones, "gate"), e[x].up = fp8_matrix(K, N, one, ones, "up");
                e[x].down = fp8_matrix(N, K, codes[size_t(x)], w_scales[size_t(x)], "down");
            } else {
                const auto one = [](int64_t) { return 1.0f; };
                e[x].gate = bf16_matrix(K, N, one, "gate"), e[x].up = bf16_matrix(K, N, one, "up");
                e[x].down = bf16_matrix(N, K, [&](int64_t i) { return e4m3_to_f32(codes[size_t(x)][size_t(i)]); }, "down");
            }
        }
        const cuda::DeviceExpertGroup group = cuda::upload_expert_group({&e[0], &e[1]}, "cluster test");
        std::vector<uint8_t> a(size_t(total * K));
        for (uint8_t& c : a) c = f32_to_e4m3(float(small(rng)));
        std::vector<float> a_scale(size_t(total * (K / 128)), 1.0f);
        if (fp8)
            for (float& v : a_scale) v = power_of_two();
        std::vector<double> want(size_t(total * N));
        for (int32_t t = 0; t < tiles.kTiles; ++t)
            for (int64_t r = tiles.first_row(t); r < tiles.first_row(t) + tiles.rows[size_t(t)]; ++r)
                for (int64_t n = 0; n < N; ++n) {
                    const int x = tiles.experts[size_t(t)];
                    double sum = 0;
                    for (int64_t k = 0; k < K; ++k)
                        sum += double(e4m3_to_f32(a[size_t(r * K + k)])) * a_scale[size_t(r * (K / 128) + k / 128)] *
                               e4m3_to_f32(codes[size_t(x)][size_t(n * K + k)]) * w_scales[size_t(x)][size_t((n / 128) * (K / 128) + k / 128)];
                    want[size_t(r * N + n)] = sum;
                }
        std::vector<uint16_t> a_bf16;
        for (uint8_t c : a) a_bf16.push_back(f32_to_bf16(e4m3_to_f32(c)));
        cuda::DeviceBuffer a_buf(a_bf16.size() * 2, "a"), scale_buf(a_scale.size() * 4, "a scales"),
            out_buf(size_t(total * N) * 4, "out");
        if (fp8) a_buf.upload(a.data(), a.size());
        else a_buf.upload(a_bf16.data(), a_bf16.size() * 2);
        scale_buf.upload(a_scale.data(), a_scale.size() * 4);
        for (const auto schedule : {cuda::TiledSchedule::Persistent, cuda::TiledSchedule::Parked}) {
            SCOPED_TRACE(std::string(fp8 ? "FP8 weights, e4m3 rows" : "bf16 weights and rows") + ", k " + std::to_string(K) +
                         (schedule == cuda::TiledSchedule::Parked ? ", the parked schedule" : ", the persistent schedule"));
            cuda::GroupedGemmLaunch g;
            tiles.set(g);
            if (fp8) g.a_fp8 = a_buf.as<uint8_t>(), g.a_scale = scale_buf.as<float>();
            else g.a = a_buf.as<uint16_t>();
            const cuda::DeviceMatrixSet& m = group.down;
            g.code = m.code, g.w = m.data.get(), g.w_expert_bytes = m.expert_bytes, g.n = m.n, g.k = m.k;
            g.w_scale = fp8 ? m.scale.get() : nullptr, g.scale_expert_bytes = fp8 ? m.scale_expert_bytes : 0, g.scaled = fp8;
            g.epilogue = cuda::GemmEpilogue::Store, g.out = out_buf.as<float>(), g.ldo = N, g.schedule = schedule;
            g.a_rows = total;  // rows by tensor copies: the persistent CTAs run in clusters
            ASSERT_EQ(cudaMemset(out_buf.get(), 0xFF, size_t(total * N) * 4), cudaSuccess);  // NaN where nothing is written
            const uint64_t pairs_before = cuda::grouped_gemm_paired_launches(), quads_before = cuda::grouped_gemm_quad_launches(),
                           weight_pairs_before = cuda::grouped_gemm_weight_pair_launches();
            ASSERT_EQ(cuda::launch_grouped_gemm(g), cudaSuccess);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            EXPECT_EQ(cuda::grouped_gemm_quad_launches() - quads_before, c.quads ? 1u : 0u);
            EXPECT_EQ(cuda::grouped_gemm_weight_pair_launches() - weight_pairs_before, c.weight_pairs ? 1u : 0u);
            EXPECT_EQ(cuda::grouped_gemm_paired_launches() - pairs_before, c.pairs ? 1u : 0u);
            std::vector<float> got(size_t(total * N));
            out_buf.download(got.data(), got.size() * 4);
            const auto [first, wrong] = mismatches(got, want);
            EXPECT_EQ(wrong, 0) << "first at row " << first / N << " feature " << first % N << ": got "
                                << (first >= 0 ? got[size_t(first)] : 0) << ", want " << (first >= 0 ? want[size_t(first)] : 0);
        }
    }
}

}  // namespace

// N = 36 x 128, K = 384: 72 items of clusters of four, 126 of pairs, 144 of weight pairs, so clusters take
// several; pairs sharing rows unless asked otherwise.
TEST(CudaGroupedGemm, ClusteredCtasReadEachTilesOwnExpertsWeights) {
    SMOE_SKIP_WITHOUT_GPU();
    if (cuda::grouped_gemm_tile_rows() != 128) GTEST_SKIP() << "clusters are the Hopper kernel's; this GPU runs the sm_80 kernel";
    check_clusters(36 * 128, 384);
}

// Weight columns of 2 KiB (FP8, k 2048: pairs sharing rows) and of 4 KiB and more (bf16 at k 2048, both at
// k 4096: weight pairs, by default) on the same tile list; two n-blocks.
TEST(CudaGroupedGemm, WeightPairsTakeLaunchesWhoseWeightColumnsHoldFourKiB) {
    SMOE_SKIP_WITHOUT_GPU();
    if (cuda::grouped_gemm_tile_rows() != 128) GTEST_SKIP() << "clusters are the Hopper kernel's; this GPU runs the sm_80 kernel";
    for (int64_t k : {2048, 4096}) check_clusters(2 * 128, k);
}

// Block-exact FP4 weights in weight pairs (with STEADYMOE_WEIGHT_PAIRS=1; by default pairs sharing rows, the
// same check) on the two experts' tiles: tiles 0-1 of expert 0 share a converted block's two stored halves (a
// CTA copies each into both), tiles 2-3 straddle the experts (each CTA copies both halves of its own), tiles
// 4-5 of expert 1 share them, tile 6 has no partner; 36 n-blocks, so clusters take several items; k of three
// blocks and of 32 (deepseek-v4-flash's gate/up). Every output must have the bits of the same weights' FP8
// form on the FP8 kernel, in the persistent and parked schedules.
TEST(CudaGroupedGemm, BlockExactFp4WeightPairsReadEachTilesOwnExpertsWeights) {
    SMOE_SKIP_WITHOUT_GPU();
    if (!fp8_path_here(true)) GTEST_SKIP() << "FP4 weights do not take e4m3 activations on this GPU";
    if (cuda::grouped_gemm_tile_rows() != 128)
        GTEST_SKIP() << "clusters are the Hopper kernel's; this GPU runs the sm_80 kernel";
    constexpr int64_t N = 36 * 128;
    std::mt19937 rng(29);
    const TwoExpertTiles tiles;
    for (const int64_t K : {int64_t(384), int64_t(4096)}) {
        SCOPED_TRACE("k = " + std::to_string(K));
        const BlockExactExpert experts[2] = {BlockExactExpert(N, K, rng), BlockExactExpert(N, K, rng)};
        const cuda::DeviceExpertGroup fp4_group =
            cuda::upload_expert_group({&experts[0].fp4, &experts[1].fp4}, "fp4 experts", true, true);
        const cuda::DeviceExpertGroup fp8_group =
            cuda::upload_expert_group({&experts[0].fp8, &experts[1].fp8}, "fp8 experts");
        ASSERT_TRUE(fp4_group.down.fp4_block_exact);
        E4m3RowLaunches launches(tiles.total, N, K, rng);
        const std::vector<float> want =
            launches.run(tiles, fp8_group.down, cuda::TiledSchedule::Automatic, true);
        EXPECT_TRUE(std::all_of(want.begin(), want.end(), [](float v) { return std::isfinite(v); }));
        for (const auto schedule : {cuda::TiledSchedule::Persistent, cuda::TiledSchedule::Parked}) {
            const uint64_t pairs_before = cuda::grouped_gemm_weight_pair_launches();
            EXPECT_EQ(std::memcmp(want.data(), launches.run(tiles, fp4_group.down, schedule, true).data(),
                                  want.size() * 4),
                      0)
                << "schedule " << int(schedule);
            EXPECT_EQ(cuda::grouped_gemm_weight_pair_launches() - pairs_before,
                      fp4_weight_pairs_asked() ? 1u : 0u)
                << "schedule " << int(schedule);
        }
    }
}

namespace {

// A launch with more items than an H200 has CTAs at once (70 n-blocks of three row tiles: 105 pair items over
// 66 clusters, or in weight pairs 140, so CTAs park an item while their epilogue warps drain the one before),
// eight bf16 stages an item (K = 512 unless given: a CTA's second item refills every stage of its six), and a
// last n-block of 72 features (the drains' lanes past N store nothing), for the persistent-against-per-tile
// tests below: random bf16 rows and weights, routing weights and destinations (in reverse).
struct ManyItems {
    static constexpr int64_t N = 70 * 128 - 56, rows = ThreeTiles::kRows;
    const int64_t K;
    const ThreeTiles tiles;
    cuda::DeviceExpertGroup group;
    cuda::DeviceBuffer a_buf{size_t(rows * K) * 2, "a"}, w_buf{size_t(rows) * 4, "row weights"}, dest_buf{size_t(rows) * 8, "row destinations"};
    explicit ManyItems(int64_t k = 512) : K(k) {
        std::mt19937 rng(43);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        const auto one = [](int64_t) { return 1.0f; };
        ExpertWeights e;
        e.gate = bf16_matrix(K, N, one, "gate"), e.up = bf16_matrix(K, N, one, "up");
        e.down = bf16_matrix(N, K, [&](int64_t) { return normal(rng); }, "down");
        group = cuda::upload_expert_group({&e}, "many items");
        std::vector<uint16_t> a(size_t(rows * K));
        for (uint16_t& v : a) v = f32_to_bf16(normal(rng));
        std::vector<float> weights(static_cast<size_t>(rows));
        std::vector<int64_t> dest(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) weights[size_t(r)] = float(rng() % 1000) / 997.0f, dest[size_t(r)] = rows - 1 - r;
        a_buf.upload(a.data(), a.size() * 2);
        w_buf.upload(weights.data(), weights.size() * 4);
        dest_buf.upload(dest.data(), dest.size() * 8);
    }
    // The bytes of `width` outputs a row (bf16 where `bf16_out`, which the launch then rounds to, else f32)
    // that the down matrix's launch on `schedule` stores, the epilogue set by `adjust`; everything else reads
    // back as all ones (NaN).
    std::vector<uint8_t> outputs(cuda::TiledSchedule schedule, int64_t width, bool bf16_out,
                                 const std::function<void(cuda::GroupedGemmLaunch&)>& adjust) const {
        const size_t bytes = size_t(rows * width) * (bf16_out ? 2 : 4);
        cuda::DeviceBuffer out_buf(bytes, "out");
        cuda::GroupedGemmLaunch g;
        tiles.set(g);
        g.a = a_buf.as<uint16_t>(), g.a_rows = rows;
        const cuda::DeviceMatrixSet& m = group.down;
        g.code = m.code, g.w = m.data.get(), g.w_expert_bytes = m.expert_bytes, g.n = m.n, g.k = m.k;
        g.ldo = width, g.schedule = schedule, g.round_bf16 = bf16_out;  // (else bf16 outputs are refused)
        if (bf16_out) g.out_bf16 = out_buf.as<uint16_t>();
        else g.out = out_buf.as<float>();
        adjust(g);
        EXPECT_EQ(cudaMemset(out_buf.get(), 0xFF, bytes), cudaSuccess);
        EXPECT_EQ(cuda::launch_grouped_gemm(g), cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<uint8_t> got(bytes);
        out_buf.download(got.data(), bytes);
        return got;
    }
};

// Where two launches' outputs of `size` bytes each first differ (-1 where nowhere), and how many differ.
std::pair<int64_t, int64_t> first_difference(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, size_t size) {
    int64_t wrong = 0, first = -1;
    for (size_t i = 0; i < got.size(); i += size)
        if (std::memcmp(&got[i], &want[i], size) != 0 && wrong++ == 0) first = int64_t(i / size);
    return {first, wrong};
}
// How many outputs of `size` bytes each are still all ones (nothing stored them).
int64_t unwritten(const std::vector<uint8_t>& got, size_t size) {
    const std::vector<uint8_t> ones(got.size(), 0xFF);
    return int64_t(got.size() / size) - first_difference(got, ones, size).second;
}

}  // namespace

// The scatter into bf16 rows of persistent CTAs (parked as bf16 for epilogue warps, or from the consumers'
// registers where STEADYMOE_PARKED_SCATTER=0) stores the bits of one CTA per tile on ManyItems' launch, with
// the routing weights applied in the scatter and before it.
TEST(CudaGroupedGemm, PersistentScattersStoreWhatPerTileCtasStore) {
    SMOE_SKIP_WITHOUT_GPU();
    if (cuda::grouped_gemm_tile_rows() != 128) GTEST_SKIP() << "the schedules are the Hopper kernel's; this GPU runs the sm_80 kernel";
    const ManyItems m;
    const int64_t N = m.N;
    const bool parks = !cuda::env_equals("STEADYMOE_PARKED_SCATTER", "0") && !cuda::env_equals("STEADYMOE_PARKED_EPILOGUES", "1");
    for (bool weight_before_down : {false, true}) {
        SCOPED_TRACE(weight_before_down ? "weights applied before" : "weights applied in the scatter");
        std::vector<uint8_t> per_tile;
        for (const auto schedule : {cuda::TiledSchedule::PerTile, cuda::TiledSchedule::Persistent}) {
            const uint64_t parked_before = cuda::grouped_gemm_parked_scatter_launches();
            const std::vector<uint8_t> got = m.outputs(schedule, N, true, [&](cuda::GroupedGemmLaunch& g) {
                g.epilogue = cuda::GemmEpilogue::Scatter, g.row_weight = m.w_buf.as<float>(), g.row_dest = m.dest_buf.as<int64_t>();
                g.weight_before_down = weight_before_down;
            });
            const bool parked = parks && schedule == cuda::TiledSchedule::Persistent;
            EXPECT_EQ(cuda::grouped_gemm_parked_scatter_launches() - parked_before, parked ? 1u : 0u) << "parked: " << parked;
            if (per_tile.empty()) {
                per_tile = got;
                EXPECT_EQ(unwritten(got, 2), 0) << "a value not written";
                continue;
            }
            const auto [first, wrong] = first_difference(got, per_tile, 2);
            EXPECT_EQ(wrong, 0) << "first at row " << first / N << " feature " << first % N;
        }
    }
}

// The SwiGLU epilogue of persistent CTAs (its outputs parked as bf16 for epilogue warps where they are
// rounded to bf16, as bf16 rows meeting bf16 weights are by default (parks_swiglu); else from the consumers'
// registers, or f32 results parked: by default at K = 4096, 32 blocks of 128 k, where
// STEADYMOE_PARKED_EPILOGUES=1 at every K) stores the bits of one CTA per tile on ManyItems' launch (the last
// n-block's 36 outputs), into bf16 and f32 rows, with the routing weights applied in SwiGLU or not, with and
// without a clamp, and without the bf16 rounding (never parked as bf16). A weight column holds 1, 4 and 8 KiB
// at K = 512, 2048 and 4096: weight pairs by default from 4 KiB, or 8 KiB where the SwiGLU outputs park;
// their first two tiles share the weights' copies and the third has no partner (ThreeTiles). The launch
// counters say which clusters ran (expected_clusters: no clusters of four where SwiGLU outputs park).
TEST(CudaGroupedGemm, PersistentSwiGlusStoreWhatPerTileCtasStore) {
    SMOE_SKIP_WITHOUT_GPU();
    if (cuda::grouped_gemm_tile_rows() != 128)
        GTEST_SKIP() << "the schedules are the Hopper kernel's; this GPU runs the sm_80 kernel";
    const bool parks = parks_swiglu(true);  // (ManyItems' rows and weights are bf16)
    struct Case {
        bool bf16_out, weight_before_down, round_bf16;
        float limit;
    };
    for (int64_t k : {512, 2048, 4096}) {
        const ManyItems m(k);
        const int64_t I = m.N / 2;
        for (const Case c :
             {Case{true, false, true, 0.0f}, Case{true, true, true, 4.0f}, Case{false, true, true, 0.0f},
              Case{false, false, true, 4.0f}, Case{false, true, false, 4.0f}}) {
            SCOPED_TRACE("k " + std::to_string(k) + ", " + (c.bf16_out ? "bf16" : "f32") +
                         " outputs, weights " + (c.weight_before_down ? "in SwiGLU" : "not applied") +
                         (c.round_bf16 ? ", rounded to bf16" : ", not rounded") + ", limit " +
                         std::to_string(c.limit));
            const size_t size = c.bf16_out ? 2 : 4;
            std::vector<uint8_t> per_tile;
            for (const auto schedule : {cuda::TiledSchedule::PerTile, cuda::TiledSchedule::Persistent}) {
                const uint64_t parked_before = cuda::grouped_gemm_parked_swiglu_launches(),
                               weight_pairs_before = cuda::grouped_gemm_weight_pair_launches(),
                               quads_before = cuda::grouped_gemm_quad_launches(),
                               pairs_before = cuda::grouped_gemm_paired_launches();
                const std::vector<uint8_t> got =
                    m.outputs(schedule, I, c.bf16_out, [&](cuda::GroupedGemmLaunch& g) {
                        g.epilogue = cuda::GemmEpilogue::SwiGlu, g.row_weight = m.w_buf.as<float>(),
                        g.weight_before_down = c.weight_before_down;
                        g.round_bf16 = c.round_bf16, g.swiglu_limit = c.limit;
                    });
                const bool persistent = schedule == cuda::TiledSchedule::Persistent,
                           parked = parks && c.round_bf16 && persistent;
                const ExpectedClusters clusters = expected_clusters(
                    k, 2, (m.N + 127) / 128 % 2 == 0, !parked,
                    parked ? cuda::kSwiGluWeightPairColumnBytes : cuda::kWeightPairColumnBytes);
                EXPECT_EQ(cuda::grouped_gemm_parked_swiglu_launches() - parked_before, parked ? 1u : 0u)
                    << "parked: " << parked;
                EXPECT_EQ(cuda::grouped_gemm_weight_pair_launches() - weight_pairs_before,
                          persistent && clusters.weight_pairs ? 1u : 0u)
                    << "weight pairs expected: " << (persistent && clusters.weight_pairs);
                EXPECT_EQ(cuda::grouped_gemm_quad_launches() - quads_before,
                          persistent && clusters.quads ? 1u : 0u);
                EXPECT_EQ(cuda::grouped_gemm_paired_launches() - pairs_before,
                          persistent && clusters.pairs ? 1u : 0u);
                if (per_tile.empty()) {
                    per_tile = got;
                    EXPECT_EQ(unwritten(got, size), 0) << "a value not written";
                    continue;
                }
                const auto [first, wrong] = first_difference(got, per_tile, size);
                EXPECT_EQ(wrong, 0) << "first at row " << first / I << " output " << first % I;
            }
        }
    }
}

// The SwiGLU and scatter epilogues storing bf16 (out_bf16: the layer's bf16 stage buffers) write the bf16 of
// the values they store as f32 — which are rounded to bf16 already — for every row and feature, from the
// consumers' registers (persistent CTAs: the scatter's own path), from shared memory (one CTA per tile) and
// parked (epilogue warps; the persistent scatter's as bf16 unless STEADYMOE_PARKED_SCATTER=0, SwiGLU's
// outputs as bf16 as parks_swiglu says); and every schedule stores the bits of the first. FP8 weights
// (scaled) and bf16 ones with bf16 activations (unscaled: persistent CTAs take 256 features an item where
// STEADYMOE_WIDE_CTAS=1, but for parked scatters and parked SwiGLU outputs). The counts of parked launches
// are checked on the Hopper kernel only.
TEST(CudaGroupedGemm, Bf16EpiloguesStoreWhatTheF32OnesStore) {
    SMOE_SKIP_WITHOUT_GPU();
    Problem fp8 = make_problem({-3.0f, -1.0f, -0.375f, 0.5f, 1.25f, 2.0f}, {-1.5f, -0.25f, 0.75f, 1.0f}, {0.5f, 1.0f, 2.0f}, 11);
    Problem bf16_weights = fp8;
    bf16_weights.bf16 = true;
    std::mt19937 rng(5);
    std::vector<float> weights(static_cast<size_t>(kRows));
    for (auto& w : weights) w = float(rng() % 1000) / 997.0f;
    const EpilogueRows rows(weights);  // (scattered in reverse)
    for (const auto epilogue : {cuda::GemmEpilogue::SwiGlu, cuda::GemmEpilogue::Scatter})
        for (const Problem* p : {&fp8, &bf16_weights})
            for (bool fp8_a : {false, true}) {
                if (fp8_a && (p->bf16 || !fp8_path_here(false))) continue;
                const bool swiglu = epilogue == cuda::GemmEpilogue::SwiGlu, scaled = !p->bf16;
                std::vector<float> first;  // the first schedule's f32 results
                for (const auto schedule : {cuda::TiledSchedule::Persistent, cuda::TiledSchedule::PerTile, cuda::TiledSchedule::Parked}) {
                    SCOPED_TRACE(std::string(swiglu ? "SwiGLU" : "scatter") + (p->bf16 ? ", bf16 weights" : ", FP8 weights") +
                                 (fp8_a ? ", e4m3 activations" : ", bf16 activations") + ", schedule " + std::to_string(int(schedule)));
                    const int64_t width = swiglu ? kN / 2 : kN;
                    auto stage = [&](cuda::GroupedGemmLaunch& g) {
                        g.epilogue = epilogue, g.round_bf16 = true, g.ldo = width, g.schedule = schedule;
                        g.row_weight = rows.weights.as<float>(), g.row_dest = swiglu ? nullptr : rows.dests.as<int64_t>();
                    };
                    const std::vector<float> f32 = run(*p, fp8_a, false, scaled, stage);
                    const uint64_t parked_before = cuda::grouped_gemm_parked_scatter_launches();
                    const uint64_t swiglus_before = cuda::grouped_gemm_parked_swiglu_launches();
                    (void)run(*p, fp8_a, false, scaled, [&](cuda::GroupedGemmLaunch& g) {
                        stage(g);
                        g.out = nullptr, g.out_bf16 = rows.bf16_out.as<uint16_t>();
                    });
                    // The persistent scatter parks its bf16 results where rows and weights are both bf16 or
                    // both FP8 (unless STEADYMOE_PARKED_SCATTER=0, or f32 parking is asked for)
                    const bool parked_scatter = !cuda::env_equals("STEADYMOE_PARKED_SCATTER", "0") &&
                                                !cuda::env_equals("STEADYMOE_PARKED_EPILOGUES", "1") && !swiglu &&
                                                schedule == cuda::TiledSchedule::Persistent && (fp8_a || p->bf16);
                    // and SwiGLU's on those paths as parks_swiglu says (the Parked schedule too)
                    const bool parked_swiglu = parks_swiglu(p->bf16 && !fp8_a) && swiglu &&
                                               schedule != cuda::TiledSchedule::PerTile && (fp8_a || p->bf16);
                    if (cuda::grouped_gemm_tile_rows() == 128) {  // (the Hopper kernel's)
                        EXPECT_EQ(cuda::grouped_gemm_parked_scatter_launches() - parked_before, parked_scatter ? 1u : 0u);
                        EXPECT_EQ(cuda::grouped_gemm_parked_swiglu_launches() - swiglus_before, parked_swiglu ? 1u : 0u);
                    }
                    std::vector<uint16_t> bf16(size_t(kRows * width));
                    rows.bf16_out.download(bf16.data(), bf16.size() * 2);
                    int64_t wrong = 0;
                    for (size_t i = 0; i < bf16.size(); ++i)
                        if (bf16[i] != f32_to_bf16(f32[i]) || round_to_bf16(f32[i]) != f32[i]) ++wrong;
                    EXPECT_EQ(wrong, 0);
                    if (first.empty()) first = f32;
                    else EXPECT_EQ(std::memcmp(first.data(), f32.data(), f32.size() * 4), 0) << "against the persistent schedule's";
                }
            }
}
