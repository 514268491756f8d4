// The CPU GEMM and the whole layer against float64 references, for every weight format; row
// independence and out-of-bounds guards.
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/kernels/cpu/activation.hpp"
#include "steadymoe/kernels/cpu/gemm.hpp"
#include "steadymoe/model/quantize.hpp"

#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

using namespace steadymoe;

namespace {

enum class Fmt { Bf16, F32, Fp8F32Scale, Fp8E8m0, Mxfp4, Nvfp4 };
const char* fmt_name(Fmt f) {
    switch (f) {
        case Fmt::Bf16: return "bf16";
        case Fmt::F32: return "f32";
        case Fmt::Fp8F32Scale: return "fp8-f32scale";
        case Fmt::Fp8E8m0: return "fp8-e8m0";
        case Fmt::Mxfp4: return "mxfp4";
        case Fmt::Nvfp4: return "nvfp4";
    }
    return "?";
}

// gtest names allow only letters, digits and '_'.
std::string format_test_name(const ::testing::TestParamInfo<Fmt>& info) {
    std::string s = fmt_name(info.param);
    for (auto& ch : s)
        if (ch == '-') ch = '_';
    return s;
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, float std) {
    const Tensor t = synthetic::tensor(DType::F32, {rows, cols}, seed, 2, std);
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

WeightMatrix make_matrix(Fmt f, int64_t rows, int64_t cols, uint32_t seed) {
    std::vector<float> w = random_matrix(rows, cols, seed, 0.05f);
    switch (f) {
        case Fmt::Bf16:
        case Fmt::F32: {
            WeightMatrix m;
            m.rows = rows, m.cols = cols, m.name = "w";
            m.data = Tensor::zeros(f == Fmt::Bf16 ? DType::BF16 : DType::F32, {rows, cols});
            for (int64_t i = 0; i < rows * cols; ++i) {
                if (f == Fmt::Bf16) m.data.mutable_data<uint16_t>()[i] = f32_to_bf16(w[size_t(i)]);
                else m.data.mutable_data<float>()[i] = w[size_t(i)];
            }
            return m;
        }
        case Fmt::Fp8F32Scale: return quantize_fp8(w.data(), rows, cols, false, "w");
        case Fmt::Fp8E8m0: return quantize_fp8(w.data(), rows, cols, true, "w");
        case Fmt::Mxfp4: return quantize_mxfp4(w.data(), rows, cols, E8M0Rounding::Up, "w");
        case Fmt::Nvfp4: return quantize_nvfp4(w.data(), rows, cols, "w");
    }
    return {};
}

// C = A . W^T in float64 from the dequantised weight.
std::vector<double> reference_gemm(const std::vector<float>& a, int64_t m, const WeightMatrix& w) {
    std::vector<double> c(size_t(m * w.rows), 0.0);
    std::vector<float> row(size_t(w.cols));
    for (int64_t n = 0; n < w.rows; ++n) {
        w.dequantize_row(n, row.data());
        for (int64_t i = 0; i < m; ++i) {
            double s = 0;
            for (int64_t k = 0; k < w.cols; ++k) s += double(a[size_t(i * w.cols + k)]) * double(row[size_t(k)]);
            c[size_t(i * w.rows + n)] = s;
        }
    }
    return c;
}

std::vector<float> run_gemm(const std::vector<float>& a, int64_t m, const cpu::PackedWeight& w, int64_t ldc,
                            const float* block_scale = nullptr) {
    cpu::PackedActivations pa;
    cpu::pack_activations({a.data(), block_scale, m, w.cols}, pa);
    // Sentinels: C is wider than N and has a guard row; none of it may be written.
    std::vector<float> c(size_t((m + 1) * ldc), -12345.0f);
    cpu::gemm_tiles(pa, w, 0, w.panels(), 0, pa.tile_count(), c.data(), ldc);
    for (int64_t i = 0; i < m + 1; ++i)
        for (int64_t n = (i < m ? w.rows : 0); n < ldc; ++n)
            EXPECT_EQ(c[size_t(i * ldc + n)], -12345.0f) << "out-of-bounds write at row " << i << " col " << n;
    return c;
}

}  // namespace

class GemmFormats : public ::testing::TestWithParam<Fmt> {};

TEST_P(GemmFormats, MatchesFloat64AndRowsAreIndependent) {
    const Fmt f = GetParam();
    for (auto [N, K] : {std::pair<int64_t, int64_t>{33, 160}, {64, 256}, {96, 384}}) {
        SCOPED_TRACE(testing::Message() << fmt_name(f) << " N=" << N << " K=" << K);
        const WeightMatrix w = make_matrix(f, N, K, uint32_t(N * K));
        const cpu::PackedWeight pw = cpu::pack_weight(w);
        const int64_t m = 19;
        const std::vector<float> a = random_matrix(m, K, 5, 1.0f);
        const std::vector<double> ref = reference_gemm(a, m, w);
        const int64_t ldc = N + 7;
        const std::vector<float> c = run_gemm(a, m, pw, ldc);
        double num = 0, den = 0;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t n = 0; n < N; ++n) {
                const double d = c[size_t(i * ldc + n)] - ref[size_t(i * N + n)];
                num += d * d;
                den += ref[size_t(i * N + n)] * ref[size_t(i * N + n)];
            }
        EXPECT_LE(std::sqrt(num / den), 2e-6);
        // Each row alone gives the bytes it had inside the 19-row batch.
        for (int64_t i : {0, 7, 8, 18}) {
            std::vector<float> one(a.begin() + i * K, a.begin() + (i + 1) * K);
            const std::vector<float> c1 = run_gemm(one, 1, pw, ldc);
            EXPECT_EQ(test::first_bit_difference(c1.data(), c.data() + i * ldc, size_t(N) * 4), -1) << "row " << i;
        }
    }
}

// Unscaled formats: every output element is exactly one fma chain over k in ascending order — the
// contract every instruction-set path of the kernel (AVX-512, AVX2, scalar) and the portable CUDA GEMM
// keep, so their bits agree.
TEST(GemmChains, EveryElementIsOneFmaChainInAscendingK) {
    for (Fmt f : {Fmt::Bf16, Fmt::F32}) {
        const int64_t N = 70, K = 640, m = 13;
        const WeightMatrix w = make_matrix(f, N, K, 99);
        const cpu::PackedWeight pw = cpu::pack_weight(w);
        const std::vector<float> a = random_matrix(m, K, 6, 1.0f);
        const std::vector<float> c = run_gemm(a, m, pw, N);
        std::vector<float> row(static_cast<size_t>(K));
        int64_t bad = 0;
        for (int64_t n = 0; n < N; ++n) {
            w.dequantize_row(n, row.data());
            for (int64_t i = 0; i < m; ++i) {
                float want = 0.0f;
                for (int64_t k = 0; k < K; ++k) want = std::fma(a[size_t(i * K + k)], row[size_t(k)], want);
                bad += std::memcmp(&want, &c[size_t(i * N + n)], 4) != 0;
            }
        }
        EXPECT_EQ(bad, 0) << fmt_name(f);
    }
}

TEST_P(GemmFormats, Fp8ActivationBlocksMatchFloat64) {
    const Fmt f = GetParam();
    const int64_t N = 40, K = 320, m = 9;  // K not a multiple of 128: a partial last block
    const WeightMatrix w = make_matrix(f, N, K, 77);
    const cpu::PackedWeight pw = cpu::pack_weight(w);
    const std::vector<float> x = random_matrix(m, K, 8, 1.0f);
    std::vector<float> q(size_t(m * K)), scales(size_t(m * 3));
    for (int64_t i = 0; i < m; ++i)
        cpu::quantize_row_fp8(x.data() + i * K, K, ActivationQuant::Fp8Block, q.data() + i * K, scales.data() + i * 3);
    // Reference: the dequantised activation (q * s per 128 group) times the dequantised weight.
    std::vector<float> deq(q.size());
    for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < K; ++k) deq[size_t(i * K + k)] = q[size_t(i * K + k)] * scales[size_t(i * 3 + k / 128)];
    const std::vector<double> ref = reference_gemm(deq, m, w);
    const std::vector<float> c = run_gemm(q, m, pw, N, scales.data());
    double num = 0, den = 0;
    for (int64_t i = 0; i < m * N; ++i) {
        num += (c[size_t(i)] - ref[size_t(i)]) * (c[size_t(i)] - ref[size_t(i)]);
        den += ref[size_t(i)] * ref[size_t(i)];
    }
    EXPECT_LE(std::sqrt(num / den), 2e-6) << fmt_name(f);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, GemmFormats,
                         ::testing::Values(Fmt::Bf16, Fmt::F32, Fmt::Fp8F32Scale, Fmt::Fp8E8m0, Fmt::Mxfp4, Fmt::Nvfp4),
                         format_test_name);

// A row quantised as codes and scales (how it travels between ranks) turns back into exactly the values
// and kept scales of quantising it in place, under both schemes: groups of large, tiny and zero values,
// and a last group shorter than 128.
TEST(ActivationQuantisation, CodesAndScalesGiveTheQuantisedRowBack) {
    constexpr int64_t n = 300, groups = 3;
    std::vector<float> x = random_matrix(1, n, 11, 3.0f);
    for (int64_t k = 128; k < 256; ++k) x[size_t(k)] *= 1e-7f;  // below the amax floor
    for (int64_t k = 256; k < n; ++k) x[size_t(k)] = 0.0f;      // the short last group all zeros
    for (ActivationQuant mode : {ActivationQuant::Fp8Block, ActivationQuant::Fp8Pow2}) {
        std::vector<float> want(n), want_scales(groups), got(n), got_scales(groups), scales(groups);
        std::vector<uint8_t> codes(n);
        cpu::quantize_row_fp8(x.data(), n, mode, want.data(), want_scales.data());
        cpu::quantize_row_fp8_codes(x.data(), n, mode, codes.data(), scales.data());
        cpu::fp8_codes_to_operand(codes.data(), scales.data(), n, mode, got.data(), got_scales.data());
        EXPECT_EQ(std::memcmp(want.data(), got.data(), n * 4), 0) << activation_quant_name(mode);
        EXPECT_EQ(std::memcmp(want_scales.data(), got_scales.data(), groups * 4), 0) << activation_quant_name(mode);
    }
}

TEST(GemmPacking, QuantisedFormatsDecodeExactlyIntoBf16Panels) {
    for (Fmt f : {Fmt::Fp8E8m0, Fmt::Mxfp4, Fmt::Nvfp4, Fmt::Fp8F32Scale}) {
        const cpu::PackedWeight pw = cpu::pack_weight(make_matrix(f, 64, 128, 3));
        EXPECT_FALSE(pw.f32_panels) << fmt_name(f);
        EXPECT_EQ(pw.block_scale.empty(), f != Fmt::Fp8F32Scale && f != Fmt::Nvfp4) << fmt_name(f);
    }
    EXPECT_TRUE(cpu::pack_weight(make_matrix(Fmt::F32, 32, 64, 3)).f32_panels);
}

// The whole layer, every routed-expert format, fp32 activations: within 1e-5 of a float64 layer
// computed from the same dequantised weights and the engine's own routing.
class LayerFormats : public ::testing::TestWithParam<Fmt> {};

TEST_P(LayerFormats, LayerMatchesFloat64Reference) {
    const Fmt f = GetParam();
    const int64_t H = 160, I = 96, E = 8, K = 3, T = 37;
    MoeConfig cfg;
    cfg.family = ModelFamily::DeepseekV3;
    cfg.hidden_size = H, cfg.moe_intermediate_size = I, cfg.n_routed_experts = E, cfg.top_k = K;
    cfg.n_shared_experts = 1, cfg.shared_intermediate_size = I;
    cfg.score_func = ScoreFunc::Sigmoid, cfg.norm_topk_prob = true, cfg.routed_scaling_factor = 2.5;
    cfg.num_hidden_layers = 1;
    MoeLayerWeights w;
    w.router = synthetic::tensor(DType::BF16, {E, H}, 1, 6, 0.05f);
    for (int64_t e = 0; e < E; ++e)
        w.experts.push_back({make_matrix(f, I, H, uint32_t(100 + e)), make_matrix(f, I, H, uint32_t(200 + e)),
                             make_matrix(f, H, I, uint32_t(300 + e))});
    w.has_shared = true;
    w.shared = {make_matrix(Fmt::Bf16, I, H, 400), make_matrix(Fmt::Bf16, I, H, 401), make_matrix(Fmt::Bf16, H, I, 402)};
    const MoeLayer layer(cfg, w, {.activation_quant = ActivationQuant::None});
    MoeInput in;
    in.hidden = synthetic::tensor(DType::F32, {T, H}, 9, 0, 1.0f);
    const MoeOutput out = layer.forward(in);

    auto expert_f64 = [&](const ExpertWeights& ex, const float* x, std::vector<double>& y) {
        const int64_t width = ex.gate.rows;
        std::vector<float> g(static_cast<size_t>(H)), u(static_cast<size_t>(H)), d(static_cast<size_t>(width));
        std::vector<double> h(static_cast<size_t>(width));
        for (int64_t n = 0; n < width; ++n) {
            ex.gate.dequantize_row(n, g.data());
            ex.up.dequantize_row(n, u.data());
            double sg = 0, su = 0;
            for (int64_t k = 0; k < H; ++k) sg += double(x[k]) * g[size_t(k)], su += double(x[k]) * u[size_t(k)];
            h[size_t(n)] = sg / (1 + std::exp(-sg)) * su;
        }
        y.assign(size_t(H), 0.0);
        for (int64_t n = 0; n < H; ++n) {
            ex.down.dequantize_row(n, d.data());
            for (int64_t k = 0; k < width; ++k) y[size_t(n)] += h[size_t(k)] * d[size_t(k)];
        }
    };
    double num = 0, den = 0;
    std::vector<double> y;
    for (int64_t t = 0; t < T; ++t) {
        const float* x = in.hidden.data<float>() + t * H;
        std::vector<double> acc(size_t(H), 0.0);
        for (int64_t k = 0; k < K; ++k) {
            expert_f64(w.experts[size_t(out.topk_ids.data<int32_t>()[t * K + k])], x, y);
            for (int64_t n = 0; n < H; ++n) acc[size_t(n)] += out.topk_weights.data<float>()[t * K + k] * y[size_t(n)];
        }
        expert_f64(w.shared, x, y);
        for (int64_t n = 0; n < H; ++n) {
            acc[size_t(n)] += y[size_t(n)];
            const double d = out.output.data<float>()[t * H + n] - acc[size_t(n)];
            num += d * d;
            den += acc[size_t(n)] * acc[size_t(n)];
        }
    }
    const double err = std::sqrt(num / den);
    EXPECT_LE(err, 1e-5) << fmt_name(f);
    std::printf("%s experts: layer relative error vs float64 = %.3g\n", fmt_name(f), err);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, LayerFormats,
                         ::testing::Values(Fmt::Bf16, Fmt::F32, Fmt::Fp8F32Scale, Fmt::Fp8E8m0, Fmt::Mxfp4, Fmt::Nvfp4),
                         format_test_name);
