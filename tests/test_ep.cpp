// Expert parallelism on CPU ranks in one process: placements, the in-process transport, and the
// promise — a token's output bytes are the one-rank layer's whatever the number of ranks, the
// placement (contiguous, strided, replicated) and how the batch is split over ranks — plus FP8 rows,
// agreement checks, bounded waits, pipelining, load balance and planned placements. Placement changes,
// partial layers and nodes of ranks: test_ep_placement.cpp.
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/kernels/cpu/activation.hpp"
#include "steadymoe/engine/ep_layer.hpp"
#include "steadymoe/engine/load_balance.hpp"
#include "steadymoe/parallel/eplb.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/parallel/collective_queue.hpp"
#include "steadymoe/model/checkpoint.hpp"

#include "../src/engine/expert_transfer.hpp"
#include "ep_test_util.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <thread>
#include <tuple>

using namespace steadymoe;
using namespace steadymoe::ep_test;

TEST(ExpertPlacement, TablesAndTheirChecks) {
    const ExpertPlacement c = ExpertPlacement::contiguous(8, 4);
    EXPECT_EQ(c.slots_per_rank(), 2);
    EXPECT_EQ(c.logical_of(5), 5);
    EXPECT_EQ(c.rank_of(5), 2);
    const ExpertPlacement s = ExpertPlacement::strided(8, 4);
    EXPECT_EQ(s.logical_of(1), 4);  // rank 0 holds 0 and 4
    EXPECT_EQ(s.rank_of(s.replicas(4)[0]), 0);
    const ExpertPlacement r = replicated(8, 4, 4);
    EXPECT_EQ(r.replicas(0).size(), 2u);
    EXPECT_NE(r.replica_for(0, 0, 0), r.replica_for(0, 1, 0));  // a hot expert's tokens spread over replicas
    EXPECT_THROW(ExpertPlacement::contiguous(6, 4), Error);
    try {
        ExpertPlacement::from_table(4, 2, {0, 1, 1, 1});
        FAIL() << "an expert on no rank was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("expert 2 is on no rank"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ExpertPlacement::from_table(4, 2, {0, 1, 2, 9}), Error);
    EXPECT_THROW(ExpertPlacement::from_table(4, 3, {0, 1, 2, 3}), Error);
}

TEST(ExpertPlacement, JsonRoundTripAndDamage) {
    const auto dir = test::scratch_dir("placement_json");
    const ExpertPlacement r = replicated(8, 4, 4);
    test::write_file(dir / "p.json", r.to_json());
    EXPECT_EQ(ExpertPlacement::read_json(dir / "p.json").fingerprint(), r.fingerprint());
    test::write_file(dir / "bad.json", R"({"logical_experts": 4, "phy2log": [[0, 1], [2]]})");
    EXPECT_THROW(ExpertPlacement::read_json(dir / "bad.json"), Error);
    test::write_file(dir / "count.json", R"({"logical_experts": 2, "phy2log": [[0], [1]], "logcnt": [1, 2]})");
    EXPECT_THROW(ExpertPlacement::read_json(dir / "count.json"), Error);
    test::write_file(dir / "junk.json", "{");
    EXPECT_THROW(ExpertPlacement::read_json(dir / "junk.json"), Error);
}

TEST(LocalGroup, AllToAllDeliversEveryMessage) {
    LocalGroup group(3);
    std::vector<std::vector<Bytes>> got(3);
    on_ranks(3, [&](int r) {
        for (int round = 0; round < 4; ++round) {
            std::vector<Bytes> send;
            for (int d = 0; d < 3; ++d) send.push_back(Bytes(size_t(r + d + round), uint8_t(10 * r + d)));
            got[size_t(r)] = group.transport(r).all_to_all(send);
            for (int s = 0; s < 3; ++s) {
                ASSERT_EQ(got[size_t(r)][size_t(s)].size(), size_t(s + r + round));
                for (uint8_t b : got[size_t(r)][size_t(s)]) ASSERT_EQ(b, uint8_t(10 * s + r));
            }
        }
    });
}

TEST(LocalGroup, AMissingOrFailedRankIsNamedWithinTheTimeout) {
    LocalGroup group(3, std::chrono::milliseconds(200));
    const auto t0 = std::chrono::steady_clock::now();
    try {  // rank 2 never arrives
        on_ranks(2, [&](int r) { group.transport(r).all_gather(Bytes{1}); });
        FAIL() << "a collective without rank 2 completed";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Communication);
        EXPECT_NE(std::string(e.what()).find("rank(s) 2 did not reach"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    LocalGroup other(2, std::chrono::seconds(60));
    other.fail(1);
    try {
        other.transport(0).all_gather(Bytes{1});
        FAIL() << "a collective with a failed rank completed";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 1 failed"), std::string::npos) << e.what();
    }
}

class EpDemoLayer : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(EpDemoLayer, BitwiseEqualToOneRankForEveryPlacement) {
    const auto [L, dtype] = GetParam();
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, L), {.threads = 2});
    const MoeInput in = demo_input(s, 37, dtype);
    for (int ranks : {1, 2, 4}) {
        SCOPED_TRACE(ranks);
        expect_same_as_one_rank(layer, in, ExpertPlacement::contiguous(s.experts, ranks));
        expect_same_as_one_rank(layer, in, ExpertPlacement::strided(s.experts, ranks));
        expect_same_as_one_rank(layer, in, replicated(s.experts, ranks, 5));
    }
    expect_same_as_one_rank(layer, in, replicated(s.experts, 3, 2));  // 18 slots over 3 ranks
}

// Rows travel as FP8 when every routed expert takes FP8-quantised activations (the demo layers' FP4
// experts): the sender's quantisation — codes and per-128 scales, under both activation schemes — is the
// experts' operand, so the bytes stay the one-rank layer's, in one level and two, whole and in chunks,
// with bf16 and f32 inputs (the experts still round to the input's dtype). Dense experts (the Qwen3
// golden, even when asked for FP8 activations, which only quantised experts take) keep their rows in the
// input's dtype.
TEST(EpFp8Rows, QuantisedExpertsTakeTheirRowsInFp8) {
    const DemoModelShape s = test::small_demo_shape();
    const int64_t H = s.hidden, fp8_row = H + 4 * cpu::fp8_groups(H);
    for (ActivationQuant aq : {ActivationQuant::Fp8Pow2, ActivationQuant::Fp8Block}) {
        const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1), {.activation_quant = aq, .threads = 1});
        for (DType dtype : {DType::BF16, DType::F32}) {
            SCOPED_TRACE(std::string(activation_quant_name(aq)) + (dtype == DType::BF16 ? ", bf16" : ", f32"));
            const MoeInput in = demo_input(s, 37, dtype);
            for (const std::vector<EpStats>& stats :
                 {expect_same_as_one_rank(layer, in, ExpertPlacement::strided(s.experts, 4)),
                  expect_same_as_one_rank(layer, in, replicated(s.experts, 4, 3), 5, 2)})
                for (const EpStats& st : stats) EXPECT_EQ(st.row_bytes, fp8_row);
        }
    }
    const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / "qwen3-moe-tiny");
    const MoeLayer dense = MoeLayer::from_checkpoint(ckpt, 0, {.activation_quant = ActivationQuant::Fp8Block, .threads = 1});
    MoeInput in;
    in.hidden = SafetensorsFile::open(test::golden_dir() / "qwen3-moe-tiny" / "io.safetensors").get("input");
    const int64_t E = dense.config().n_routed_experts, dense_row = dense.config().hidden_size * int64_t(dtype_size(in.hidden.dtype()));
    for (const EpStats& st : expect_same_as_one_rank(dense, in, ExpertPlacement::strided(E, 2))) EXPECT_EQ(st.row_bytes, dense_row);
}

// FP8 rows where ranks load only their slots' experts, and across placement changes that move experts
// between ranks (their weights travel, the rows stay FP8): still the whole layer's bytes.
TEST(EpFp8Rows, PartialLayersAndMovedExpertsKeepTheBits) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer whole(demo_config(s), demo_layer_weights(s, 1), {.threads = 1});
    const MoeInput in = demo_input(s, 37, DType::BF16);
    const MoeOutput want = whole.forward(in);
    const ExpertPlacement first = ExpertPlacement::contiguous(s.experts, 2), second = ExpertPlacement::strided(s.experts, 2);
    std::vector<MoeLayer> shares;
    for (int r = 0; r < 2; ++r) {
        MoeLayerWeights w = demo_layer_weights(s, 1);
        w.partial = true;
        const std::vector<bool> held = first.experts_of(r);
        for (size_t e = 0; e < w.experts.size(); ++e)
            if (!held[e]) w.experts[e] = ExpertWeights{};
        shares.emplace_back(demo_config(s), std::move(w), MoeLayerOptions{.threads = 1});
    }
    const int64_t T = in.hidden.dim(0), half = T / 2;
    LocalGroup group(2, std::chrono::seconds(60));
    std::vector<std::vector<MoeOutput>> outs(2);
    std::vector<size_t> moved(2);
    std::vector<bool> fp8(2);
    on_ranks(2, [&](int r) {
        EpMoeLayer ep(shares[size_t(r)], first, group.transport(r));
        fp8[size_t(r)] = ep.fp8_rows();
        const MoeInput mine = in.rows(r * half, r == 0 ? half : T);
        outs[size_t(r)].push_back(ep.forward(mine));
        moved[size_t(r)] = ep.change_placement(second);
        outs[size_t(r)].push_back(ep.forward(mine));
    });
    for (int r = 0; r < 2; ++r) {
        EXPECT_TRUE(fp8[size_t(r)]) << "rank " << r;
        EXPECT_GT(moved[size_t(r)], 0u) << "rank " << r;
        for (size_t i = 0; i < outs[size_t(r)].size(); ++i) {
            const MoeOutput& o = outs[size_t(r)][i];
            const int64_t b = r * half, n = o.output.dim(0);
            EXPECT_EQ(test::first_bit_difference(o.output.raw(), want.output.rows(b, b + n).raw(), o.output.nbytes()), -1)
                << "rank " << r << ", batch " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(LayersAndDtypes, EpDemoLayer,
                         ::testing::Combine(::testing::Values(0, 1), ::testing::Values(DType::BF16, DType::F32)));

TEST(EpGolden, HuggingFaceLayersBitwiseEqualToOneRank) {
    for (auto [name, L] : {std::pair<const char*, int>{"deepseek-v3-tiny", 1}, {"qwen3-moe-tiny", 0}}) {
        SCOPED_TRACE(name);
        const Checkpoint ckpt = Checkpoint::open(test::golden_dir() / name);
        const SafetensorsFile io = SafetensorsFile::open(test::golden_dir() / name / "io.safetensors");
        const MoeLayer layer = MoeLayer::from_checkpoint(ckpt, L, {.threads = 2});
        MoeInput in;
        in.hidden = io.get("input");
        const int64_t E = layer.config().n_routed_experts;
        for (int ranks : {2, 4})
            if (E % ranks == 0) expect_same_as_one_rank(layer, in, ExpertPlacement::strided(E, ranks));
        expect_same_as_one_rank(layer, in, replicated(E, 3, 3));
    }
}

TEST(EpAgreement, RanksWithDifferentPlacementsRefuseToRun) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1));
    LocalGroup group(2);
    std::vector<std::string> errors(2);
    on_ranks(2, [&](int r) {
        try {
            const EpMoeLayer ep(layer, r == 0 ? ExpertPlacement::contiguous(16, 2) : ExpertPlacement::strided(16, 2),
                                group.transport(r));
        } catch (const Error& e) {
            errors[size_t(r)] = e.what();
        }
    });
    for (int r = 0; r < 2; ++r) EXPECT_NE(errors[size_t(r)].find("runs config"), std::string::npos) << errors[size_t(r)];
}

TEST(EpFaults, ARankThatDiesMidLayerStopsTheOthersWithItsName) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1));
    const MoeInput in = demo_input(s, 8, DType::BF16);
    LocalGroup group(3, std::chrono::seconds(30));
    std::vector<std::string> errors(3);
    on_ranks(3, [&](int r) {
        const EpMoeLayer ep(layer, replicated(16, 3, 2), group.transport(r));
        if (r == 2) {
            group.fail(2);  // dies before dispatch
            return;
        }
        try {
            ep.forward(in);
        } catch (const Error& e) {
            errors[size_t(r)] = e.what();
        }
    });
    for (int r = 0; r < 2; ++r) EXPECT_NE(errors[size_t(r)].find("rank 2 failed"), std::string::npos) << errors[size_t(r)];
}

// forward() as a pipeline of chunks (one chunk's rows travelling while the previous one computes and its
// results travel back) gives the bytes and loads of the whole batch at once, whatever the chunk size
// and however many chunks each rank has (they agree on the most).
TEST(EpPipeline, ChunkedForwardIsBitwiseTheWholeBatch) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1), {.threads = 2});
    const MoeInput in = demo_input(s, 37, DType::BF16);
    for (int64_t chunk : {1, 4, 16}) {
        SCOPED_TRACE(chunk);
        expect_same_as_one_rank(layer, in, ExpertPlacement::contiguous(s.experts, 2), chunk);
        expect_same_as_one_rank(layer, in, replicated(s.experts, 3, 2), chunk);
    }
}

// The phase API with two micro-batches in turn — B's rows travel while A computes, A's results while B
// computes — gives each batch the bytes of the one-rank layer.
TEST(EpPipeline, TwoMicroBatchesInTurn) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 0), {.threads = 2});
    const MoeInput a = demo_input(s, 23, DType::BF16), b = demo_input(s, 30, DType::F32);
    const MoeOutput want_a = layer.forward(a), want_b = layer.forward(b);
    const int ranks = 3;
    LocalGroup group(ranks, std::chrono::seconds(60));
    std::vector<MoeOutput> got_a(ranks), got_b(ranks);
    auto part = [&](const MoeInput& in, int r) {
        const int64_t T = in.hidden.dim(0), per = (T + ranks - 1) / ranks;
        return in.rows(std::min(T, r * per), std::min(T, (r + 1) * per));
    };
    on_ranks(ranks, [&](int r) {
        const EpMoeLayer ep(layer, replicated(s.experts, ranks, 2), group.transport(r));
        EpBatch ba = ep.begin_dispatch(part(a, r));
        EpBatch bb = ep.begin_dispatch(part(b, r));
        ep.finish_dispatch(ba);
        ep.begin_combine(ba);
        ep.finish_dispatch(bb);
        ep.begin_combine(bb);
        got_a[size_t(r)] = ep.finish_combine(ba);
        got_b[size_t(r)] = ep.finish_combine(bb);
    });
    for (int r = 0; r < ranks; ++r) {
        for (const auto& [in, got, want] : {std::tuple{&a, &got_a, &want_a}, std::tuple{&b, &got_b, &want_b}}) {
            const int64_t T = in->hidden.dim(0), per = (T + ranks - 1) / ranks;
            const int64_t lo = std::min(T, r * per), hi = std::min(T, (r + 1) * per);
            const MoeOutput& g = (*got)[size_t(r)];
            ASSERT_EQ(g.output.dim(0), hi - lo);
            EXPECT_EQ(test::first_bit_difference(g.output.raw(), want->output.rows(lo, hi).raw(), g.output.nbytes()), -1)
                << "rank " << r;
        }
    }
}


TEST(EpPipeline, ABadInputOnOneRankStopsEveryRankAndTheLayerGoesOn) {
    expect_a_bad_input_stops_every_rank(2, 0, 4);  // token 9: the third chunk of 4
}

TEST(EpPipeline, PhasesOutOfOrderAreRefused) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1));
    LocalGroup group(1);
    const EpMoeLayer ep(layer, ExpertPlacement::contiguous(s.experts, 1), group.transport(0));
    EpBatch never;
    EXPECT_THROW(ep.finish_dispatch(never), Error);
    EpBatch batch = ep.begin_dispatch(demo_input(s, 5, DType::BF16));
    try {
        (void)ep.finish_combine(batch);
        ADD_FAILURE() << "finish_combine before begin_combine was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("finish_combine"), std::string::npos) << e.what();
    }
    ep.finish_dispatch(batch);  // the batch is still usable in order
    ep.begin_combine(batch);
    EXPECT_EQ(ep.finish_combine(batch).output.dim(0), 5);
}

TEST(LoadBalance, BiasMovesAgainstTheLoad) {
    // Mean load 3: expert 0 is over, 1 under, 2 exactly at the mean.
    const std::vector<float> b = update_selection_bias({0.5f, -0.25f, 0.0f}, {5, 1, 3}, 0.001f);
    EXPECT_EQ(b[0], 0.5f - 0.001f);
    EXPECT_EQ(b[1], -0.25f + 0.001f);
    EXPECT_EQ(b[2], 0.0f);
    EXPECT_THROW(update_selection_bias({0.0f}, {1, 2}, 0.001f), Error);
    EXPECT_THROW(update_selection_bias({0.0f, 0.0f}, {1, -2}, 0.001f), Error);
}

TEST(LoadBalance, SequenceLossByHand) {
    // Two tokens, two experts, top-1. Token 0 picks expert 0 with affinities (3, 1); token 1 picks
    // expert 1 with (1, 1). f = (2/2*1, 2/2*1) = (1, 1); P = ((0.75 + 0.5)/2, (0.25 + 0.5)/2).
    const float scores[] = {3.0f, 1.0f, 1.0f, 1.0f};
    const int32_t ids[] = {0, 1};
    EXPECT_DOUBLE_EQ(sequence_balance_loss(scores, ids, 2, 2, 1, 0.5), 0.5 * (0.625 + 0.375));
    // All tokens on one expert: f = (2, 0), P = (0.5, 0.5) -> the loss doubles.
    const int32_t same[] = {0, 0};
    const float flat[] = {1.0f, 1.0f, 1.0f, 1.0f};
    EXPECT_DOUBLE_EQ(sequence_balance_loss(flat, same, 2, 2, 1, 1.0), 1.0);
    const int32_t bad[] = {0, 7};
    EXPECT_THROW(sequence_balance_loss(flat, bad, 2, 2, 1, 1.0), Error);
}

namespace {
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
}  // namespace

TEST(Eplb, ReplicatesTheHotExpertsAndBalancesRanks) {
    // 16 experts in 4 groups, two hot ones; 2 nodes x 2 ranks, 24 physical slots.
    std::vector<double> load(16, 10.0);
    load[3] = 200.0, load[9] = 120.0;
    const EplbRequest request{load, 24, 4, 2, 4};
    const ExpertPlacement plan = plan_placement(request);
    EXPECT_EQ(plan.ranks(), 4);
    EXPECT_EQ(plan.slots_per_rank(), 6);
    EXPECT_GE(plan.replicas(3).size(), 3u);  // the hottest expert is spread
    EXPECT_GE(plan.replicas(9).size(), 2u);
    for (int32_t e = 0; e < 16; ++e) EXPECT_FALSE(plan.replicas(e).empty()) << e;
    // Whole groups per node: all replicas of a group's experts sit on one node (ranks 0-1 or 2-3).
    for (int32_t g = 0; g < 4; ++g) {
        const int node = plan.rank_of(plan.replicas(g * 4)[0]) / 2;
        for (int32_t e = g * 4; e < g * 4 + 4; ++e)
            for (int32_t p : plan.replicas(e)) EXPECT_EQ(plan.rank_of(p) / 2, node) << "expert " << e;
    }
    const double planned = max_of(rank_loads(plan, load));
    const double plain = max_of(rank_loads(ExpertPlacement::contiguous(16, 4), load));
    EXPECT_LT(planned, plain);
    std::printf("busiest rank: %.1f planned vs %.1f contiguous (mean %.1f)\n", planned, plain, 520.0 / 4);
    // A pure function of its inputs.
    EXPECT_EQ(plan_placement(request).fingerprint(), plan.fingerprint());
}

TEST(Eplb, InconsistentRequestsAreRefused) {
    const std::vector<double> load(8, 1.0);
    EXPECT_THROW(plan_placement({load, 6, 1, 1, 2}), Error);   // fewer slots than experts
    EXPECT_THROW(plan_placement({load, 9, 1, 1, 2}), Error);   // slots not a multiple of ranks
    EXPECT_THROW(plan_placement({load, 8, 3, 1, 2}), Error);   // groups do not divide the experts
    EXPECT_THROW(plan_placement({load, 8, 1, 2, 3}), Error);   // ranks do not divide over nodes
    EXPECT_THROW(plan_placement({{1.0, -1.0}, 2, 1, 1, 1}), Error);
    // Groups that do not divide over the nodes: one node spanning every rank.
    const ExpertPlacement global = plan_placement({load, 12, 2, 4, 4});
    EXPECT_EQ(global.ranks(), 4);
}

TEST(Eplb, APlannedPlacementKeepsTheBits) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1), {.threads = 2});
    const MoeInput in = demo_input(s, 37, DType::BF16);
    const MoeOutput out = layer.forward(in);
    std::vector<double> load(out.expert_load.begin(), out.expert_load.end());
    expect_same_as_one_rank(layer, in, plan_placement({load, 20, 4, 2, 4}));
}
