// The MoE layer on the GPU: the same routing as the CPU backend, outputs within rounding of it and
// of the goldens, and bitwise batch invariance on the GPU. Skips, saying so, without a GPU.
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/engine/cuda_moe_layer.hpp"
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#include "steadymoe/model/checkpoint.hpp"

#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>

using namespace steadymoe;

namespace {


void expect_same_routing_bits(const MoeOutput& a, const MoeOutput& b) {
    EXPECT_EQ(test::first_bit_difference(a.topk_ids.raw(), b.topk_ids.raw(), a.topk_ids.nbytes()), -1);
    EXPECT_EQ(test::first_bit_difference(a.topk_weights.raw(), b.topk_weights.raw(), a.topk_weights.nbytes()), -1);
    EXPECT_EQ(a.expert_load, b.expert_load);
}

// Probe tokens alone vs first, middle and last of a batch of `size` filler tokens: identical bytes.
void expect_batch_invariant_on_gpu(const CudaMoeLayer& gpu, const MoeInput& probe, int64_t size) {
    const int64_t n = probe.hidden.dim(0), H = gpu.layer().config().hidden_size;
    const size_t row = size_t(H) * dtype_size(probe.hidden.dtype());
    std::vector<MoeOutput> alone;
    for (int64_t i = 0; i < n; ++i) {
        MoeInput one;
        one.hidden = probe.hidden.rows(i, i + 1);
        if (probe.token_ids.defined()) one.token_ids = probe.token_ids.rows(i, i + 1);
        alone.push_back(gpu.forward(one));
    }
    for (int64_t at : {int64_t(0), (size - n) / 2, size - n}) {
        MoeInput batch;
        batch.hidden = synthetic::tensor(probe.hidden.dtype(), {size, H}, 11, synthetic::kFillerHidden, 1.0f);
        batch.token_ids = Tensor::zeros(DType::I32, {size});
        for (int64_t i = 0; i < size; ++i) batch.token_ids.mutable_data<int32_t>()[i] = int32_t((i * 37) % 512);
        for (int64_t i = 0; i < n; ++i) {
            std::memcpy(static_cast<char*>(batch.hidden.mutable_raw()) + size_t(at + i) * row,
                        static_cast<const char*>(probe.hidden.raw()) + size_t(i) * row, row);
            if (probe.token_ids.defined())
                batch.token_ids.mutable_data<int32_t>()[at + i] = int32_t(probe.token_ids.get(i));
        }
        const MoeOutput out = gpu.forward(batch);
        for (int64_t i = 0; i < n; ++i)
            EXPECT_EQ(test::first_bit_difference(alone[size_t(i)].output.raw(),
                                                 static_cast<const char*>(out.output.raw()) + size_t(at + i) * row, row),
                      -1)
                << "probe " << i << " at row " << at + i << " of " << size;
    }
}

}  // namespace

class CudaDemoLayer : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(CudaDemoLayer, MatchesTheCpuBackendAndIsBatchInvariant) {
    SMOE_SKIP_WITHOUT_GPU();
    const auto [L, dtype] = GetParam();
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer cpu(demo_config(s), demo_layer_weights(s, L));
    const CudaMoeLayer gpu(cpu);
    MoeInput in;
    in.hidden = synthetic::tensor(dtype, {200, s.hidden}, 5, synthetic::kHidden, 1.0f);
    in.token_ids = demo_token_ids(s, 200, 2);
    in.mask = Tensor::zeros(DType::U8, {200});
    for (int64_t t = 0; t < 200; ++t) in.mask.mutable_data<uint8_t>()[t] = t % 7 != 3;
    const MoeOutput want = cpu.forward(in);
    const MoeOutput got = gpu.forward(in);
    expect_same_routing_bits(want, got);
    const double err = test::relative_error(got.output, want.output);
    EXPECT_LE(err, dtype == DType::F32 ? 1e-5 : 1e-2);
    std::printf("layer %d %s: GPU vs CPU relative difference %.3g\n", L, dtype == DType::F32 ? "f32" : "bf16", err);
    for (int64_t t = 3; t < 200; t += 7)
        for (int64_t h = 0; h < s.hidden; ++h) ASSERT_EQ(got.output.get(t * s.hidden + h), 0.0) << "masked token " << t;
    // Two runs give the same bits.
    const MoeOutput again = gpu.forward(in);
    EXPECT_EQ(test::first_bit_difference(got.output.raw(), again.output.raw(), got.output.nbytes()), -1);
    MoeInput probe;
    probe.hidden = in.hidden.rows(0, 3);
    probe.token_ids = in.token_ids.rows(0, 3);
    expect_batch_invariant_on_gpu(gpu, probe, 257);
}

INSTANTIATE_TEST_SUITE_P(LayersAndDtypes, CudaDemoLayer,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(DType::BF16, DType::F32)));

TEST(CudaGolden, HuggingFaceLayersMatchFloat64) {
    SMOE_SKIP_WITHOUT_GPU();
    for (auto [name, L] : {std::pair<const char*, int>{"deepseek-v3-tiny", 1}, {"qwen3-moe-tiny", 0}}) {
        SCOPED_TRACE(name);
        const auto dir = test::golden_dir() / name;
        const Checkpoint ckpt = Checkpoint::open(dir);
        const SafetensorsFile io = SafetensorsFile::open(dir / "io.safetensors");
        const MoeLayer cpu = MoeLayer::from_checkpoint(ckpt, L);
        const CudaMoeLayer gpu(cpu);
        MoeInput in;
        in.hidden = io.get("input");
        const MoeOutput out = gpu.forward(in);
        const double err = test::relative_error(out.output, io.get("output_f64"));
        EXPECT_LE(err, 1e-5);
        std::printf("%s layer %d on the GPU: relative error vs float64 %.3g\n", name, L, err);
    }
}

TEST(CudaGolden, DeepseekV4LayersMatchTheReference) {
    SMOE_SKIP_WITHOUT_GPU();
    const auto dir = test::golden_dir() / "deepseek-v4-tiny";
    const Checkpoint ckpt = Checkpoint::open(dir);
    const SafetensorsFile io = SafetensorsFile::open(dir / "io.safetensors");
    for (int L : {0, 1}) {
        const MoeLayer cpu = MoeLayer::from_checkpoint(ckpt, L);
        const CudaMoeLayer gpu(cpu);
        const Tensor f = io.get("input");
        MoeInput in;
        in.hidden = Tensor::zeros(DType::BF16, f.shape());
        for (int64_t i = 0; i < f.numel(); ++i)
            in.hidden.mutable_data<uint16_t>()[i] = uint16_t(f32_bits(f.data<float>()[i]) >> 16);
        in.token_ids = io.get("token_ids");
        const MoeOutput out = gpu.forward(in);
        const double err = test::relative_error(out.output, io.get("output." + std::to_string(L)));
        EXPECT_LE(err, 3e-3) << "layer " << L;
        std::printf("deepseek-v4-tiny layer %d on the GPU: relative error vs reference %.3g\n", L, err);
    }
}
