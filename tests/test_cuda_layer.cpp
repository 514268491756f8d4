// The MoE layer on the GPU: the same routing as the CPU backend, outputs within rounding of it and
// of the goldens, and bitwise batch invariance on the GPU. Skips, saying so, without a GPU.
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/engine/cuda_moe_layer.hpp"
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#include "steadymoe/model/checkpoint.hpp"

#include "gpu_test_util.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>

using namespace steadymoe;


class CudaDemoLayer : public ::testing::TestWithParam<std::tuple<int, DType, CudaPath>> {};

TEST_P(CudaDemoLayer, MatchesTheCpuBackendAndIsBatchInvariant) {
    SMOE_SKIP_WITHOUT_GPU();
    const auto [L, dtype, path] = GetParam();
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer cpu(demo_config(s), demo_layer_weights(s, L));
    const CudaMoeLayer gpu(cpu, path);
    ASSERT_EQ(gpu.path(), path) << gpu.portable_reason();
    const bool exact_gemms = path == CudaPath::Portable;
    MoeInput in;
    in.hidden = synthetic::tensor(dtype, {200, s.hidden}, 5, synthetic::kHidden, 1.0f);
    in.token_ids = demo_token_ids(s, 200, 2);
    in.mask = Tensor::zeros(DType::U8, {200});
    for (int64_t t = 0; t < 200; ++t) in.mask.mutable_data<uint8_t>()[t] = t % 7 != 3;
    const MoeOutput want = cpu.forward(in);
    const MoeOutput got = gpu.forward(in);
    if (exact_gemms) {
        test::expect_same_routing_bits(want, got);
    } else {  // the same experts; weights within the rounding of logits summed in another order
        EXPECT_EQ(test::first_bit_difference(want.topk_ids.raw(), got.topk_ids.raw(), want.topk_ids.nbytes()), -1);
        EXPECT_LE(test::relative_error(got.topk_weights, want.topk_weights), 1e-5);
    }
    const double err = test::relative_error(got.output, want.output);
    EXPECT_LE(err, dtype == DType::F32 && exact_gemms ? 1e-5 : 1e-2);
    std::printf("layer %d %s, %s path: GPU vs CPU relative difference %.3g\n", L, dtype == DType::F32 ? "f32" : "bf16",
                cuda_path_name(path), err);
    for (int64_t t = 3; t < 200; t += 7)
        for (int64_t h = 0; h < s.hidden; ++h) ASSERT_EQ(got.output.get(t * s.hidden + h), 0.0) << "masked token " << t;
    // Two runs give the same bits.
    const MoeOutput again = gpu.forward(in);
    EXPECT_EQ(test::first_bit_difference(got.output.raw(), again.output.raw(), got.output.nbytes()), -1);
    MoeInput probe;
    probe.hidden = in.hidden.rows(0, 3);
    probe.token_ids = in.token_ids.rows(0, 3);
    test::expect_batch_invariant_on_gpu(gpu, probe, 257);
}

INSTANTIATE_TEST_SUITE_P(LayersDtypesPaths, CudaDemoLayer,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(DType::BF16, DType::F32),
                                            ::testing::Values(CudaPath::Portable, CudaPath::TensorCore)));

// A decode batch with masked tokens as a tensor-core layer's first batch (its buffers just allocated, the
// combine loading every token's rows beside its mask): the masked tokens' outputs are zeros, the live ones the
// bits the same tokens get with no mask, and within rounding of the CPU layer.
TEST(CudaDemoLayerDecode, MaskedTokensInTheFirstDecodeBatch) {
    SMOE_SKIP_WITHOUT_GPU();
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer cpu(demo_config(s), demo_layer_weights(s, 1));
    const CudaMoeLayer gpu(cpu, CudaPath::TensorCore);
    ASSERT_EQ(gpu.path(), CudaPath::TensorCore) << gpu.portable_reason();
    constexpr int64_t kTokens = 6;
    MoeInput all;
    all.hidden = synthetic::tensor(DType::BF16, {kTokens, s.hidden}, 9, synthetic::kHidden, 1.0f);
    all.token_ids = demo_token_ids(s, kTokens, 4);
    MoeInput masked = all;
    masked.mask = Tensor::zeros(DType::U8, {kTokens});
    for (int64_t t = 0; t < kTokens; ++t) masked.mask.mutable_data<uint8_t>()[t] = t % 3 != 1;
    const MoeOutput got = gpu.forward(masked);  // first: the layer's buffers are allocated for it
    const MoeOutput unmasked = gpu.forward(all);
    const MoeOutput want = cpu.forward(masked);
    const size_t row = got.output.nbytes() / size_t(kTokens);
    for (int64_t t = 0; t < kTokens; ++t) {
        if (t % 3 == 1) {
            for (int64_t h = 0; h < s.hidden; ++h) ASSERT_EQ(got.output.get(t * s.hidden + h), 0.0) << "masked token " << t;
        } else {
            EXPECT_EQ(std::memcmp(static_cast<const char*>(got.output.raw()) + t * row,
                                  static_cast<const char*>(unmasked.output.raw()) + t * row, row), 0)
                << "token " << t << " masked beside others against unmasked";
        }
    }
    EXPECT_LE(test::relative_error(got.output, want.output), 1e-2);
}

TEST(CudaGolden, HuggingFaceLayersMatchFloat64) {
    SMOE_SKIP_WITHOUT_GPU();
    for (auto [name, L] : {std::pair<const char*, int>{"deepseek-v3-tiny", 1}, {"qwen3-moe-tiny", 0}}) {
        SCOPED_TRACE(name);
        const auto dir = test::golden_dir() / name;
        const Checkpoint ckpt = Checkpoint::open(dir);
        const SafetensorsFile io = SafetensorsFile::open(dir / "io.safetensors");
        const MoeLayer cpu = MoeLayer::from_checkpoint(ckpt, L);
        const CudaMoeLayer gpu(cpu, CudaPath::Portable);  // f32 inputs: the f32 arithmetic
        MoeInput in;
        in.hidden = io.get("input");
        const MoeOutput out = gpu.forward(in);
        const double err = test::relative_error(out.output, io.get("output_f64"));
        EXPECT_LE(err, 1e-5);
        std::printf("%s layer %d on the GPU: relative error vs float64 %.3g\n", name, L, err);
    }
}

// The reference sums FP8 / FP4 products exactly; so does the layer with Fp8Products::Fp32Sums (within
// bf16 rounding). On a Hopper the default adds the shared expert's FP8 products and the routed experts'
// FP4 ones (per 32-wide group) on the FP8 tensor cores, whose narrower adder costs a few 1e-3 more
// (DeepSeek's own kernels work the same way); so does TensorCoresBlockExact, per 128-wide block (the
// golden's FP4 weights are exact in e4m3 per 128 x 128 block).
TEST(CudaGolden, DeepseekV4LayersMatchTheReference) {
    SMOE_SKIP_WITHOUT_GPU();
    const auto dir = test::golden_dir() / "deepseek-v4-tiny";
    const Checkpoint ckpt = Checkpoint::open(dir);
    const SafetensorsFile io = SafetensorsFile::open(dir / "io.safetensors");
    const Tensor f = io.get("input");
    MoeInput in;
    in.hidden = Tensor::zeros(DType::BF16, f.shape());
    for (int64_t i = 0; i < f.numel(); ++i)
        in.hidden.mutable_data<uint16_t>()[i] = uint16_t(f32_bits(f.data<float>()[i]) >> 16);
    in.token_ids = io.get("token_ids");
    for (int L : {0, 1}) {
        const MoeLayer cpu = MoeLayer::from_checkpoint(ckpt, L);
        for (const Fp8Products fp8 : {Fp8Products::Fp32Sums, Fp8Products::TensorCores, Fp8Products::TensorCoresBlockExact}) {
            const bool exact = fp8 == Fp8Products::Fp32Sums;
            const CudaMoeLayer gpu(cpu, CudaPath::Auto, fp8);
            std::printf("deepseek-v4-tiny layer %d: %s path %s; FP4 arithmetic: %s\n", L, cuda_path_name(gpu.path()),
                        gpu.portable_reason().c_str(), gpu.fp4_arithmetic().c_str());
            if (fp8 == Fp8Products::TensorCoresBlockExact && CudaMoeLayer::fp8_tensor_cores())
                EXPECT_EQ(gpu.fp4_arithmetic(), test::block_exact_fp4_arithmetic()) << "layer " << L;
            const MoeOutput out = gpu.forward(in);
            const double err = test::relative_error(out.output, io.get("output." + std::to_string(L)));
            EXPECT_LE(err, exact ? 3e-3 : 2e-2) << "layer " << L;
            std::printf("deepseek-v4-tiny layer %d on the GPU (FP8 products %s): relative error vs reference %.3g\n", L,
                        exact                                      ? "summed in fp32"
                        : fp8 == Fp8Products::TensorCoresBlockExact ? "on the FP8 tensor cores, FP4 block-exact"
                                                                    : "on the FP8 tensor cores",
                        err);
        }
    }
}
