// The CUDA layer's tensor-core path on layers in every expert format: the same experts and outputs
// within the format's rounding of the CPU backend, and on the GPU itself bitwise batch invariance —
// a token alone, or first, middle or last of batches of 2 to 16384, or in a reversed batch, gives the
// same bytes, and so do two runs. Skips, saying so, without a GPU.
#include "steadymoe/engine/cuda_moe_layer.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/model/quantize.hpp"

#include "../src/kernels/cuda/fp4_blocks.hpp"
#include "gpu_test_util.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace steadymoe;

namespace {

using test::kE;
using test::kH;
using test::kI;
using test::expect_same_bytes;
using test::kK;
using test::routing_variant;
using test::tensor_core_config;
using test::tensor_core_layer;

MoeInput hidden(int64_t tokens, DType dtype = DType::BF16, uint32_t seed = 3) {
    return {synthetic::tensor(dtype, {tokens, kH}, seed, synthetic::kHidden, 1.0f), Tensor(), Tensor()};
}

// A parameter's expert format and how its FP8 / FP4 products run: "fp4-fp8-block-exact" is the "fp4-fp8"
// layer with FP4 weights on the FP8 weights' arithmetic (Fp8Products::TensorCoresBlockExact).
constexpr const char* kBlockExact = "-block-exact";
std::string format_of(const std::string& param) {
    return param.ends_with(kBlockExact) ? param.substr(0, param.size() - std::strlen(kBlockExact)) : param;
}
Fp8Products products_of(const std::string& param) {
    return param.ends_with(kBlockExact) ? Fp8Products::TensorCoresBlockExact : Fp8Products::TensorCores;
}

}  // namespace

// The "fp4-fp8" layer's FP4 matrices (routed and shared) are exact in e4m3 per 128 x 128 block, so
// "fp4-fp8-block-exact" can take them (no GPU needed to check).
TEST(CudaTensorCoreLayers, Fp4WeightsAreBlockExact) {
    const MoeLayer layer = tensor_core_layer("fp4-fp8");
    std::vector<const ExpertWeights*> experts;
    for (const ExpertWeights& e : layer.weights().experts) experts.push_back(&e);
    experts.push_back(&layer.weights().shared);
    for (const ExpertWeights* e : experts)
        for (const WeightMatrix* w : {&e->gate, &e->up, &e->down}) EXPECT_TRUE(cuda::fp4_block_exponents(*w).has_value()) << w->name;
}

class CudaTensorCore : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTensorCore, MatchesTheCpuBackendWithinRounding) {
    SMOE_SKIP_WITHOUT_GPU();
    const MoeLayer cpu = tensor_core_layer(format_of(GetParam()));
    const CudaMoeLayer gpu(cpu, CudaPath::TensorCore, products_of(GetParam()));
    const MoeInput in = hidden(300);
    const MoeOutput want = cpu.forward(in), got = gpu.forward(in);
    EXPECT_EQ(test::first_bit_difference(want.topk_ids.raw(), got.topk_ids.raw(), want.topk_ids.nbytes()), -1);
    EXPECT_LE(test::relative_error(got.topk_weights, want.topk_weights), 1e-5);
    const double err = test::relative_error(got.output, want.output);
    EXPECT_LE(err, 1e-2);
    std::printf("%s experts, tensor-core path vs CPU backend: relative difference %.3g\n", GetParam().c_str(), err);
    if (products_of(GetParam()) == Fp8Products::TensorCoresBlockExact && CudaMoeLayer::fp8_tensor_cores())
        EXPECT_EQ(gpu.fp4_arithmetic(), test::block_exact_fp4_arithmetic());
    if (GetParam() == "bf16") return;
    // FP8 / FP4 products summed in fp32: the CPU's arithmetic up to the order of fp32 additions.
    const CudaMoeLayer exact(cpu, CudaPath::TensorCore, Fp8Products::Fp32Sums);
    const double exact_err = test::relative_error(exact.forward(in).output, want.output);
    EXPECT_LE(exact_err, 1e-4);
    std::printf("%s experts, FP8 products summed in fp32 vs CPU backend: relative difference %.3g\n", GetParam().c_str(), exact_err);
}

TEST_P(CudaTensorCore, IsBitwiseBatchInvariant) {
    SMOE_SKIP_WITHOUT_GPU();
    const MoeLayer cpu = tensor_core_layer(format_of(GetParam()));
    const CudaMoeLayer gpu(cpu, CudaPath::TensorCore, products_of(GetParam()));
    const MoeInput probe = hidden(3);
    // (decode batches of 16 and 30 rows an expert at 65 and 120 tokens: the decode kernel's 32- and 64-token
    // CTAs for bf16 weights, its 32- and 64-token ones for FP8)
    for (int64_t size : {2, 3, 65, 120, 1000, 16384}) {
        SCOPED_TRACE(size);
        if (size < 3) {  // the first two probes in a batch of two
            MoeInput two;
            two.hidden = probe.hidden.rows(0, 2);
            const MoeOutput both = gpu.forward(two);
            for (int64_t i = 0; i < 2; ++i) {
                MoeInput one;
                one.hidden = probe.hidden.rows(i, i + 1);
                const MoeOutput alone = gpu.forward(one);
                EXPECT_EQ(test::first_bit_difference(alone.output.raw(), both.output.rows(i, i + 1).raw(),
                                                     alone.output.nbytes()),
                          -1);
            }
            continue;
        }
        test::expect_batch_invariant_on_gpu(gpu, probe, size);
    }
}

TEST_P(CudaTensorCore, ReversedBatchesAndRepeatedRunsGiveTheSameBytes) {
    SMOE_SKIP_WITHOUT_GPU();
    const MoeLayer cpu = tensor_core_layer(format_of(GetParam()));
    const CudaMoeLayer gpu(cpu, CudaPath::TensorCore, products_of(GetParam()));
    const int64_t T = 777;
    const MoeInput in = hidden(T);
    MoeInput reversed;
    reversed.hidden = Tensor::zeros(DType::BF16, {T, kH});
    for (int64_t t = 0; t < T; ++t)
        std::memcpy(reversed.hidden.mutable_data<uint16_t>() + t * kH, in.hidden.data<uint16_t>() + (T - 1 - t) * kH,
                    size_t(kH) * 2);
    const MoeOutput a = gpu.forward(in), b = gpu.forward(in), r = gpu.forward(reversed);
    EXPECT_EQ(test::first_bit_difference(a.output.raw(), b.output.raw(), a.output.nbytes()), -1);
    for (int64_t t = 0; t < T; ++t)
        ASSERT_EQ(test::first_bit_difference(a.output.rows(t, t + 1).raw(), r.output.rows(T - 1 - t, T - t).raw(),
                                             size_t(kH) * 2),
                  -1)
            << "token " << t;
}

// Decode-sized batches replay a captured graph from their second run on: every run — eager, capture,
// replays, replays on new inputs of the same size, runs after the workspace grew (which drops the
// graphs), timed runs — gives the bytes of a layer that never uses graphs.
TEST_P(CudaTensorCore, GraphReplaysGiveTheBytesOfEagerLaunches) {
    SMOE_SKIP_WITHOUT_GPU();
    const MoeLayer cpu = tensor_core_layer(format_of(GetParam()));
    CudaMoeLayer eager(cpu, CudaPath::TensorCore, products_of(GetParam()));
    eager.set_graph_max_tokens(0);
    const CudaMoeLayer graphed(cpu, CudaPath::TensorCore, products_of(GetParam()));
    ASSERT_GE(graphed.graph_max_tokens(), 256);
    // Largest first: a batch that grows the workspace drops every graph (their buffers moved), and only
    // the first does here.
    for (int64_t size : {256, 64, 5, 1}) {
        SCOPED_TRACE(size);
        for (uint32_t seed : {3u, 4u, 5u, 6u}) {  // eager, capture, replay, replay on new inputs each time
            const MoeInput in = hidden(size, DType::BF16, seed);
            expect_same_bytes(graphed.forward(in), eager.forward(in));
        }
    }
    // Every size ran as a replay: its graph (with its dependent-launch edges on Hopper) instantiated.
    EXPECT_EQ(graphed.graph_count(), 4u);
    (void)graphed.forward(hidden(1000));  // grows the workspace past the graphs' buffers
    for (uint32_t seed : {7u, 8u, 9u}) {
        const MoeInput in = hidden(5, DType::BF16, seed);
        CudaStageTimes times;
        expect_same_bytes(graphed.forward(in, &times), eager.forward(in));
        EXPECT_GT(times.total_ms, 0.0);
        EXPECT_GT(times.gate_up_ms, 0.0);
        EXPECT_GT(times.untimed_ms, 0.0);  // the same layer run before, without stage timers
        EXPECT_GT(times.experts_untimed_ms, 0.0);  // its experts alone after, on the same routing: the bytes unchanged
        EXPECT_GT(times.routed_untimed_ms, 0.0);   // and its routed experts alone (this layer has a shared expert)
    }
    // The timed forwards of one size kept four graphs, none replacing another: the layer untimed and timed, its
    // experts alone, its routed experts alone.
    EXPECT_EQ(graphed.graph_count(), 4u);
}

// "fp4-fp8": FP4 experts meeting FP8 activations (on a Hopper the FP8 tensor cores, per-32 sums, in every
// batch); "fp4-fp8-block-exact": the same on the FP8 weights' arithmetic (per-128 sums).
INSTANTIATE_TEST_SUITE_P(Formats, CudaTensorCore, ::testing::Values("bf16", "fp8", "fp4", "fp4-fp8", "fp4-fp8-block-exact"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             std::string name = info.param;
                             for (char& c : name) c = c == '-' ? '_' : c;  // test names take letters, digits and _
                             return name;
                         });

class CudaRouting : public ::testing::TestWithParam<std::string> {};

// The GPU router picks the CPU router's experts for every score function and group rule, and a token with
// NaN hidden values (NonFinitePolicy::Propagate) changes no other token's bytes.
TEST_P(CudaRouting, PicksTheCpuExpertsAndIsolatesNaNTokens) {
    SMOE_SKIP_WITHOUT_GPU();
    const MoeConfig routing = routing_variant(GetParam());
    const MoeLayer cpu = tensor_core_layer("bf16", &routing).with_nonfinite(NonFinitePolicy::Propagate);
    const CudaMoeLayer gpu(cpu, CudaPath::TensorCore);
    const MoeInput in = hidden(300);
    const MoeOutput want = cpu.forward(in), got = gpu.forward(in);
    EXPECT_EQ(test::first_bit_difference(want.topk_ids.raw(), got.topk_ids.raw(), want.topk_ids.nbytes()), -1);
    EXPECT_LE(test::relative_error(got.topk_weights, want.topk_weights), 1e-5);
    EXPECT_EQ(want.expert_load, got.expert_load);
    EXPECT_LE(test::relative_error(got.output, want.output), 1e-2);

    MoeInput poisoned;
    poisoned.hidden = Tensor::zeros(DType::BF16, {300, kH});
    std::memcpy(poisoned.hidden.mutable_raw(), in.hidden.raw(), in.hidden.nbytes());
    poisoned.hidden.mutable_data<uint16_t>()[7 * kH + 5] = 0x7FC0;  // a bf16 NaN in token 7
    const MoeOutput mixed = gpu.forward(poisoned);
    for (int64_t t = 0; t < 300; ++t) {
        if (t == 7) continue;
        ASSERT_EQ(test::first_bit_difference(got.output.rows(t, t + 1).raw(), mixed.output.rows(t, t + 1).raw(),
                                             size_t(kH) * 2),
                  -1)
            << "token " << t;
    }
}

INSTANTIATE_TEST_SUITE_P(ScoreFunctionsAndGroups, CudaRouting,
                         ::testing::Values("softmax", "group-max", "group-top2", "sqrt-softplus"));

TEST(CudaTensorCoreInputs, F32HiddenStatesForBf16ExpertsTakeThePortablePathUnderAuto) {
    SMOE_SKIP_WITHOUT_GPU();
    const MoeLayer cpu = tensor_core_layer("bf16");
    const CudaMoeLayer gpu(cpu);
    ASSERT_EQ(gpu.path(), CudaPath::TensorCore);
    const MoeInput in = hidden(40, DType::F32);
    const MoeOutput want = cpu.forward(in), got = gpu.forward(in);
    test::expect_same_routing_bits(want, got);  // the portable path repeats the CPU's arithmetic
    EXPECT_LE(test::relative_error(got.output, want.output), 1e-5);
    // bf16 batches still take the tensor-core path: bitwise the same as an explicit tensor-core layer.
    const CudaMoeLayer explicit_tc(cpu, CudaPath::TensorCore);
    const MoeInput b = hidden(40);
    const MoeOutput x = gpu.forward(b), y = explicit_tc.forward(b);
    EXPECT_EQ(test::first_bit_difference(x.output.raw(), y.output.raw(), x.output.nbytes()), -1);
}

TEST(CudaTensorCoreInputs, F32HiddenStatesForBf16ExpertsAreRefusedWithAReason) {
    SMOE_SKIP_WITHOUT_GPU();
    const MoeLayer cpu = tensor_core_layer("bf16");
    const CudaMoeLayer gpu(cpu, CudaPath::TensorCore);
    try {
        gpu.forward(hidden(4, DType::F32));
        FAIL() << "f32 inputs were accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
        EXPECT_NE(std::string(e.what()).find("bf16 hidden states"), std::string::npos) << e.what();
    }
}

TEST(CudaTensorCoreInputs, TheAskedPathIsRefusedWhenTheLayerCannotTakeIt) {
    SMOE_SKIP_WITHOUT_GPU();
    MoeConfig c = tensor_core_config("bf16");
    c.hidden_size = 192;  // not a multiple of 128
    MoeLayerWeights w;
    w.router = synthetic::tensor(DType::BF16, {kE, 192}, 3, synthetic::kRouter, 0.02f);
    w.selection_bias = synthetic::tensor(DType::F32, {kE}, 3, synthetic::kBias, 0.01f);
    for (int64_t e = 0; e < kE; ++e)
        w.experts.push_back({{ExpertFormat::Dense, kI, 192, synthetic::tensor(DType::BF16, {kI, 192}, 3, 2, 0.02f), {}, 1.0f, "g"},
                             {ExpertFormat::Dense, kI, 192, synthetic::tensor(DType::BF16, {kI, 192}, 3, 2, 0.02f), {}, 1.0f, "u"},
                             {ExpertFormat::Dense, 192, kI, synthetic::tensor(DType::BF16, {192, kI}, 3, 3, 0.02f), {}, 1.0f, "d"}});
    c.n_shared_experts = 0, c.shared_intermediate_size = 0;
    const MoeLayer cpu(c, std::move(w));
    EXPECT_THROW({ const CudaMoeLayer gpu(cpu, CudaPath::TensorCore); }, Error);
    const CudaMoeLayer automatic(cpu);
    EXPECT_EQ(automatic.path(), CudaPath::Portable);
    EXPECT_NE(automatic.portable_reason().find("multiple of 128"), std::string::npos) << automatic.portable_reason();
}
