// Bitwise invariance: a token's output bytes do not depend on the batch around it, its position,
// the batch order, the thread count, masked or non-finite neighbours.
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/invariance.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/model/checkpoint.hpp"

#include "test_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace steadymoe;

namespace {

DemoModelShape small_demo() { return test::small_demo_shape(); }

void expect_invariant(const MoeLayer& layer, const MoeInput& probe) {
    InvarianceOptions opt;  // batch sizes 1, 2, 3, 7, 64, 257, 1000; threads 1, 2, 8
    const InvarianceReport report = run_invariance(layer, probe, opt);
    EXPECT_GE(report.cases.size(), 20u);
    for (const auto& c : report.cases) EXPECT_TRUE(c.passed) << c.name << ": " << c.first_difference;
}

}  // namespace

class DemoInvariance : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(DemoInvariance, EveryBatchPositionOrderAndThreadCount) {
    const auto [L, dtype] = GetParam();
    const DemoModelShape s = small_demo();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, L));
    MoeInput probe;
    probe.hidden = synthetic::tensor(dtype, {4, s.hidden}, 99, synthetic::kHidden, 1.0f);
    probe.token_ids = demo_token_ids(s, 4, 3);
    expect_invariant(layer, probe);
}

// Batches smaller than the probe count times three: every case still places its probes inside the
// batch (the masked case once wrote past a 3-token batch) and passes.
TEST(DemoInvariance, BatchesBarelyLargerThanTheProbes) {
    const DemoModelShape s = small_demo();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1));
    MoeInput probe;
    probe.hidden = synthetic::tensor(DType::BF16, {4, s.hidden}, 99, synthetic::kHidden, 1.0f);
    InvarianceOptions opt;
    opt.batch_sizes = {1, 3};
    opt.thread_counts = {1};
    const InvarianceReport report = run_invariance(layer, probe, opt);
    EXPECT_GE(report.cases.size(), 6u);
    for (const auto& c : report.cases) EXPECT_TRUE(c.passed) << c.name << ": " << c.first_difference;
}

// Experts are decoded for the CPU kernels the first time a batch needs them. Several threads running a fresh
// layer's first batches at once (one decoding an expert while others wait for it) give the bytes the same
// batches give on a layer whose every expert was decoded first.
TEST(DemoInvariance, FirstBatchesOnSeveralThreadsAtOnceGiveTheDecodedLayersBits) {
    const DemoModelShape s = small_demo();
    const MoeLayer decoded(demo_config(s), demo_layer_weights(s, 1));
    decoded.packed();
    constexpr int kThreads = 6;
    std::vector<MoeInput> inputs(kThreads);
    std::vector<Tensor> want(kThreads), got(kThreads);
    for (int i = 0; i < kThreads; ++i) {
        inputs[size_t(i)].hidden = demo_hidden(s, 3 + 5 * i, uint64_t(i));
        want[size_t(i)] = decoded.forward(inputs[size_t(i)]).output;
    }
    const MoeLayer fresh(demo_config(s), demo_layer_weights(s, 1));
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)  // copies share the decoded experts, as the layer's users' copies do
        threads.emplace_back([&, i] { got[size_t(i)] = fresh.with_threads(2).forward(inputs[size_t(i)]).output; });
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < kThreads; ++i)
        EXPECT_EQ(std::memcmp(got[size_t(i)].raw(), want[size_t(i)].raw(), want[size_t(i)].nbytes()), 0) << "batch " << i;
}

// decode_for decodes exactly the routed experts forward() would need for its input (none for a fully masked
// one), on the hash-routed layer and the scored one, with a token masked; and the forward after it gives a
// fully decoded layer's bytes, decoding nothing more.
TEST(DemoInvariance, DecodeForDecodesTheBatchsExpertsAlone) {
    const DemoModelShape s = small_demo();
    for (const int layer : {0, 1}) {
        SCOPED_TRACE("layer " + std::to_string(layer));
        const MoeLayer decoded(demo_config(s), demo_layer_weights(s, layer));
        ASSERT_EQ(decoded.is_hash_layer(), layer == 0);
        decoded.packed();
        MoeInput in;
        in.hidden = demo_hidden(s, 3, 9);
        if (decoded.is_hash_layer()) in.token_ids = demo_token_ids(s, 3, 9);
        in.mask = Tensor::zeros(DType::BOOL, {3});
        in.mask.mutable_data<uint8_t>()[0] = in.mask.mutable_data<uint8_t>()[2] = 1;  // token 1 masked
        const MoeOutput want = decoded.forward(in);
        std::vector<int64_t> reached;
        for (int64_t i = 0; i < want.topk_ids.numel(); ++i)
            if (const int32_t e = want.topk_ids.data<int32_t>()[i]; e >= 0) reached.push_back(e);
        std::sort(reached.begin(), reached.end());
        reached.erase(std::unique(reached.begin(), reached.end()), reached.end());
        ASSERT_FALSE(reached.empty());
        ASSERT_LT(reached.size(), size_t(s.experts)) << "the probe reaches every expert, so it tests nothing";

        const MoeLayer fresh(demo_config(s), demo_layer_weights(s, layer));
        MoeInput masked = in;
        masked.mask = Tensor::zeros(DType::BOOL, {3});
        fresh.decode_for(masked);
        EXPECT_TRUE(fresh.decoded_experts().empty());
        fresh.decode_for(in);
        EXPECT_EQ(fresh.decoded_experts(), reached);
        const MoeOutput got = fresh.forward(in);
        EXPECT_EQ(fresh.decoded_experts(), reached);
        EXPECT_EQ(std::memcmp(got.output.raw(), want.output.raw(), want.output.nbytes()), 0);
    }
}

// decode_for refuses a partial layer (an expert-parallel share), as forward does: its rank decodes every
// expert it holds (packed()), since any token may reach them.
TEST(DemoInvariance, DecodeForRefusesAPartialLayer) {
    const DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    w.partial = true;
    for (size_t e = 1; e < w.experts.size(); e += 2) w.experts[e] = ExpertWeights{};
    const MoeLayer share(demo_config(s), std::move(w));
    MoeInput in;
    in.hidden = demo_hidden(s, 2, 9);
    try {
        share.decode_for(in);
        ADD_FAILURE() << "a partial layer decoded for a batch";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("holds only some of its experts"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(share.decoded_experts().empty());
}

INSTANTIATE_TEST_SUITE_P(LayersAndDtypes, DemoInvariance,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(DType::BF16, DType::F32)));

TEST(GoldenInvariance, DeepseekV3AndQwen3Layers) {
    for (auto [name, L] : {std::pair<const char*, int>{"deepseek-v3-tiny", 1}, {"qwen3-moe-tiny", 0}}) {
        SCOPED_TRACE(name);
        const auto dir = test::golden_dir() / name;
        const Checkpoint ckpt = Checkpoint::open(dir);
        const SafetensorsFile io = SafetensorsFile::open(dir / "io.safetensors");
        MoeInput probe;
        probe.hidden = io.get("input").rows(0, 4);
        expect_invariant(MoeLayer::from_checkpoint(ckpt, L), probe);
    }
}

TEST(AdversarialRouting, EveryTokenToTheSameExperts) {
    DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 0);
    int32_t* table = w.tid2eid.mutable_data<int32_t>();
    for (int64_t v = 0; v < s.vocab; ++v)
        for (int64_t k = 0; k < s.top_k; ++k) table[v * s.top_k + k] = int32_t(k);
    const MoeLayer layer(demo_config(s), std::move(w));
    MoeInput in;
    in.hidden = demo_hidden(s, 300, 1);
    in.token_ids = demo_token_ids(s, 300, 1);
    const MoeOutput out = layer.forward(in);
    for (int64_t e = 0; e < s.experts; ++e) EXPECT_EQ(out.expert_load[size_t(e)], e < s.top_k ? 300 : 0) << e;
    // Token 123 alone gives the same bytes as inside the lopsided batch.
    MoeInput one;
    one.hidden = in.hidden.rows(123, 124);
    one.token_ids = in.token_ids.rows(123, 124);
    const MoeOutput alone = layer.forward(one);
    EXPECT_EQ(test::first_bit_difference(alone.output.raw(),
                                         static_cast<const char*>(out.output.raw()) + 123 * s.hidden * 2,
                                         alone.output.nbytes()),
              -1);
}

TEST(AdversarialRouting, BiasPullsEveryTokenToOneExpertOfTheScoredLayer) {
    DemoModelShape s = small_demo();
    MoeLayerWeights w = demo_layer_weights(s, 1);
    w.selection_bias.mutable_data<float>()[5] = 100.0f;  // selection only: weights stay unbiased
    const MoeLayer layer(demo_config(s), std::move(w));
    MoeInput in;
    in.hidden = demo_hidden(s, 65, 2);
    const MoeOutput out = layer.forward(in);
    EXPECT_EQ(out.expert_load[5], 65);
    for (int64_t t = 0; t < 65; ++t) {
        EXPECT_EQ(out.topk_ids.data<int32_t>()[t * s.top_k], 5) << "slot 0 of token " << t;
        EXPECT_LT(out.topk_weights.data<float>()[t * s.top_k], 1.5f);
    }
}

TEST(AdversarialRouting, EmptyAndSingleTokenBatches) {
    const DemoModelShape s = small_demo();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1));
    MoeInput empty;
    empty.hidden = Tensor::zeros(DType::BF16, {0, s.hidden});
    const MoeOutput out0 = layer.forward(empty);
    EXPECT_EQ(out0.output.dim(0), 0);
    EXPECT_EQ(out0.topk_ids.dim(0), 0);
    MoeInput one;
    one.hidden = demo_hidden(s, 1, 5);
    const MoeOutput out1 = layer.forward(one);
    int64_t routed = 0;
    for (int64_t v : out1.expert_load) routed += v;
    EXPECT_EQ(routed, s.top_k);
}

TEST(Masking, MaskedTokensAreZeroUnroutedAndUncounted) {
    const DemoModelShape s = small_demo();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1));
    MoeInput in;
    in.hidden = demo_hidden(s, 10, 6);
    in.mask = Tensor::zeros(DType::BOOL, {10});
    for (int64_t t = 0; t < 10; t += 2) in.mask.mutable_data<uint8_t>()[t] = 1;
    const MoeOutput out = layer.forward(in);
    int64_t routed = 0;
    for (int64_t v : out.expert_load) routed += v;
    EXPECT_EQ(routed, 5 * s.top_k);
    for (int64_t t = 1; t < 10; t += 2) {
        for (int64_t h = 0; h < s.hidden; ++h) ASSERT_EQ(out.output.data<uint16_t>()[t * s.hidden + h], 0) << t;
        for (int64_t k = 0; k < s.top_k; ++k) {
            EXPECT_EQ(out.topk_ids.data<int32_t>()[t * s.top_k + k], -1);
            EXPECT_EQ(out.topk_weights.data<float>()[t * s.top_k + k], 0.0f);
        }
    }
}
