// Expert parallelism on CPU ranks in one process: placements, the in-process transport, and the
// promise — a token's output bytes are the one-rank layer's whatever the number of ranks, the
// placement (contiguous, strided, replicated) and how the batch is split over ranks — plus agreement
// checks and bounded waits.
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/kernels/cpu/activation.hpp"
#include "steadymoe/engine/ep_layer.hpp"
#include "steadymoe/engine/load_balance.hpp"
#include "steadymoe/parallel/eplb.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/parallel/collective_queue.hpp"
#include "steadymoe/model/checkpoint.hpp"

#include "../src/engine/expert_transfer.hpp"
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

namespace {

// Runs fn(rank) on `ranks` threads; rethrows the first failure.
void on_ranks(int ranks, const std::function<void(int)>& fn) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                fn(r);
            } catch (...) {
                errors[size_t(r)] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

// A placement with replicas: a shuffled table plus the first `extra` experts again, padded so every
// rank holds the same number of slots.
ExpertPlacement replicated(int64_t experts, int ranks, int64_t extra) {
    std::vector<int32_t> table;
    for (int64_t e = 0; e < experts; ++e) table.push_back(int32_t((e * 7 + 3) % experts));
    for (int64_t e = 0; e < extra; ++e) table.push_back(int32_t(e));
    while (table.size() % size_t(ranks) != 0) table.push_back(int32_t(table.size() % size_t(experts)));
    return ExpertPlacement::from_table(experts, ranks, table);
}

// Splits `in` unevenly over the ranks (one rank may get no tokens), runs the EP layer (in nodes of
// `ranks_per_node` ranks when set), and checks every rank's rows against the one-rank layer on the
// whole batch, bit for bit. Returns every rank's statistics.
std::vector<EpStats> expect_same_as_one_rank(const MoeLayer& layer, const MoeInput& in, const ExpertPlacement& placement,
                                             int64_t chunk_tokens = 0, int ranks_per_node = 0) {
    const int ranks = placement.ranks();
    const int64_t T = in.hidden.dim(0), H = layer.config().hidden_size;
    const MoeOutput want = layer.forward(in);
    std::vector<int64_t> bounds = {0};
    for (int r = 1; r < ranks; ++r) bounds.push_back(std::min(T, bounds.back() + (r == 1 ? 0 : T / ranks + r)));
    bounds.push_back(T);
    LocalGroup group(ranks, std::chrono::seconds(60));
    std::vector<MoeOutput> outs(static_cast<size_t>(ranks));
    std::vector<EpStats> stats(static_cast<size_t>(ranks));
    on_ranks(ranks, [&](int r) {
        EpMoeLayer ep(layer, placement, group.transport(r));
        ep.set_chunk_tokens(chunk_tokens + r % 2);  // ranks may choose different chunk sizes
        if (ranks_per_node > 0) ep.set_ranks_per_node(ranks_per_node);
        outs[size_t(r)] = ep.forward(in.rows(bounds[size_t(r)], bounds[size_t(r) + 1]), &stats[size_t(r)]);
    });
    const size_t row = size_t(H) * dtype_size(in.hidden.dtype());
    for (int r = 0; r < ranks; ++r) {
        const int64_t b = bounds[size_t(r)], n = bounds[size_t(r) + 1] - b;
        EXPECT_EQ(outs[size_t(r)].output.dim(0), n);
        if (n == 0 || outs[size_t(r)].output.dim(0) != n) continue;
        EXPECT_EQ(test::first_bit_difference(outs[size_t(r)].output.raw(), want.output.rows(b, b + n).raw(), row * size_t(n)),
                  -1)
            << "rank " << r << " of " << ranks << ", " << placement.fingerprint();
        EXPECT_EQ(test::first_bit_difference(outs[size_t(r)].topk_ids.raw(), want.topk_ids.rows(b, b + n).raw(),
                                             outs[size_t(r)].topk_ids.nbytes()),
                  -1);
        EXPECT_EQ(stats[size_t(r)].global_expert_load, want.expert_load) << "rank " << r;
    }
    return stats;
}

// Layer 1 of the deepseek-v3-tiny golden, whole, with its input.
struct V3Golden {
    std::filesystem::path dir = test::golden_dir() / "deepseek-v3-tiny";
    Checkpoint ckpt = Checkpoint::open(dir);
    MoeLayer whole = MoeLayer::from_checkpoint(ckpt, 1, {.threads = 1});
    MoeInput in{SafetensorsFile::open(dir / "io.safetensors").get("input"), Tensor(), Tensor()};
};

MoeInput demo_input(const DemoModelShape& s, int64_t T, DType dtype) {
    MoeInput in;
    in.hidden = synthetic::tensor(dtype, {T, s.hidden}, 9, synthetic::kHidden, 1.0f);
    in.token_ids = demo_token_ids(s, T, 4);
    in.mask = Tensor::zeros(DType::U8, {T});
    for (int64_t t = 0; t < T; ++t) in.mask.mutable_data<uint8_t>()[t] = t % 5 != 2;
    return in;
}

}  // namespace

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

namespace {

// A rank whose input cannot run (a NaN in token 9, refused by default) still takes part in the
// exchanges, saying so: every rank stops naming it — the token by its index in the batch, not in a
// chunk — and the next batch runs, bitwise.
void expect_a_bad_input_stops_every_rank(int ranks, int ranks_per_node, int64_t chunk_tokens) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1), {.threads = 1});
    const MoeInput good = demo_input(s, 12, DType::F32);
    MoeInput bad = demo_input(s, 12, DType::F32);
    bad.hidden = bad.hidden.to_f32();
    bad.hidden.mutable_data<float>()[9 * s.hidden + 3] = std::nanf("");
    const int bad_rank = ranks - 1;
    const MoeOutput want = layer.forward(good);
    LocalGroup group(ranks, std::chrono::seconds(30));
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<MoeOutput> after(static_cast<size_t>(ranks));
    on_ranks(ranks, [&](int r) {
        EpMoeLayer ep(layer, ExpertPlacement::contiguous(s.experts, ranks), group.transport(r));
        ep.set_chunk_tokens(chunk_tokens);
        if (ranks_per_node > 0) ep.set_ranks_per_node(ranks_per_node);
        try {
            (void)ep.forward(r == bad_rank ? bad : good);
        } catch (const Error& e) {
            errors[size_t(r)] = e.what();
        }
        after[size_t(r)] = ep.forward(good);
    });
    for (int r = 0; r < ranks; ++r) {
        const std::string& e = errors[size_t(r)];
        if (r != bad_rank)
            EXPECT_NE(e.find("rank " + std::to_string(bad_rank) + " could not take part"), std::string::npos) << e;
        EXPECT_NE(e.find("token 9"), std::string::npos) << e;
        EXPECT_EQ(test::first_bit_difference(after[size_t(r)].output.raw(), want.output.raw(), want.output.nbytes()), -1);
    }
}

}  // namespace

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

TEST(EpPlacementChange, SwitchingBetweenBatchesKeepsTheBits) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1), {.threads = 1});
    const MoeInput in = demo_input(s, 30, DType::BF16);
    const MoeOutput want = layer.forward(in);
    const std::vector<double> load(want.expert_load.begin(), want.expert_load.end());
    const ExpertPlacement first = replicated(16, 3, 2), second = plan_placement({load, 21, 1, 1, 3});
    LocalGroup group(3, std::chrono::seconds(60));
    std::vector<std::string> refused(3);
    std::vector<MoeOutput> before(3), after(3), kept(3);
    on_ranks(3, [&](int r) {
        EpMoeLayer ep(layer, first, group.transport(r));
        const MoeInput mine = in.rows(10 * r, 10 * r + 10);
        before[size_t(r)] = ep.forward(mine);
        ep.change_placement(second);
        EXPECT_EQ(ep.placement().fingerprint(), second.fingerprint());
        after[size_t(r)] = ep.forward(mine);
        try {  // rank 1 asks for another table: everyone refuses and keeps `second`
            ep.change_placement(r == 1 ? first : second);
        } catch (const Error& e) {
            refused[size_t(r)] = e.what();
        }
        kept[size_t(r)] = ep.forward(mine);
        EXPECT_EQ(ep.placement().fingerprint(), second.fingerprint());
    });
    for (int r = 0; r < 3; ++r) {
        const size_t bytes = size_t(10 * s.hidden) * 2;
        const void* want_rows = want.output.rows(10 * r, 10 * r + 10).raw();
        EXPECT_EQ(test::first_bit_difference(before[size_t(r)].output.raw(), want_rows, bytes), -1) << r;
        EXPECT_EQ(test::first_bit_difference(after[size_t(r)].output.raw(), want_rows, bytes), -1) << r;
        EXPECT_EQ(test::first_bit_difference(kept[size_t(r)].output.raw(), want_rows, bytes), -1) << r;
        EXPECT_FALSE(refused[size_t(r)].empty()) << "rank " << r << " accepted a placement the others did not";
    }
}

TEST(EpPartialLayers, RanksLoadingOnlyTheirExpertsGiveTheOneRankBits) {
    const V3Golden g;
    const Checkpoint& ckpt = g.ckpt;
    const MoeLayer& whole = g.whole;
    const MoeInput& in = g.in;
    const MoeOutput want = whole.forward(in);
    const ExpertPlacement placement = replicated(16, 3, 2);
    std::vector<MoeLayer> shares;
    for (int r = 0; r < 3; ++r) {
        const std::vector<bool> held = placement.experts_of(r);
        shares.push_back(MoeLayer::from_checkpoint(ckpt, 1, {.threads = 1}, &held));
        EXPECT_TRUE(shares.back().weights().partial);
        EXPECT_LT(shares.back().weights().stored_bytes(), whole.weights().stored_bytes());
    }
    EXPECT_THROW(shares[0].forward(in), Error);  // a share is not a layer on its own
    const int64_t T = in.hidden.dim(0), per = T / 3, H = whole.config().hidden_size;
    LocalGroup group(3, std::chrono::seconds(60));
    std::vector<MoeOutput> outs(3);
    on_ranks(3, [&](int r) {
        const EpMoeLayer ep(shares[size_t(r)], placement, group.transport(r));
        outs[size_t(r)] = ep.forward(in.rows(r * per, r == 2 ? T : (r + 1) * per));
    });
    for (int r = 0; r < 3; ++r) {
        const int64_t b = r * per, n = outs[size_t(r)].output.dim(0);
        EXPECT_EQ(test::first_bit_difference(outs[size_t(r)].output.raw(), want.output.rows(b, b + n).raw(),
                                             size_t(n * H) * 4),
                  -1)
            << "rank " << r;
    }
    // A placement whose slots need experts a rank did not load: every rank refuses, naming it.
    std::vector<int32_t> shifted;
    for (int64_t p = 0; p < 18; ++p) shifted.push_back(placement.logical_of((p + 6) % 18));
    const ExpertPlacement moved = ExpertPlacement::from_table(16, 3, shifted);
    std::vector<std::string> errors(3);
    on_ranks(3, [&](int r) {
        try {
            const EpMoeLayer ep(shares[size_t(r)], moved, group.transport(r));
        } catch (const Error& e) {
            errors[size_t(r)] = e.what();
        }
    });
    for (int r = 0; r < 3; ++r) EXPECT_NE(errors[size_t(r)].find("did not load expert"), std::string::npos) << errors[size_t(r)];
}

// A live placement change that needs experts a rank did not load: their weights move from the lowest
// rank holding them, every rank switches, and the outputs keep their bits — also after moving back.
TEST(EpPlacementChange, MissingExpertsMoveOverTheTransport) {
    const V3Golden g;
    const Checkpoint& ckpt = g.ckpt;
    const MoeLayer& whole = g.whole;
    const MoeInput& in = g.in;
    const MoeOutput want = whole.forward(in);
    const ExpertPlacement first = ExpertPlacement::contiguous(16, 2), second = ExpertPlacement::strided(16, 2);
    std::vector<MoeLayer> shares;
    for (int r = 0; r < 2; ++r) {
        const std::vector<bool> held = first.experts_of(r);
        shares.push_back(MoeLayer::from_checkpoint(ckpt, 1, {.threads = 1}, &held));
    }
    const int64_t T = in.hidden.dim(0), half = T / 2, H = whole.config().hidden_size;
    LocalGroup group(2, std::chrono::seconds(60));
    std::vector<std::vector<MoeOutput>> outs(2);
    std::vector<std::vector<size_t>> received(2);
    on_ranks(2, [&](int r) {
        EpMoeLayer ep(shares[size_t(r)], first, group.transport(r));
        const MoeInput mine = in.rows(r * half, r == 0 ? half : T);
        outs[size_t(r)].push_back(ep.forward(mine));
        received[size_t(r)].push_back(ep.change_placement(second));  // half of each rank's new experts move
        outs[size_t(r)].push_back(ep.forward(mine));
        received[size_t(r)].push_back(ep.change_placement(first));   // back: nothing needs to move
        outs[size_t(r)].push_back(ep.forward(mine));
    });
    for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(received[size_t(r)], (std::vector<size_t>{4, 0})) << "rank " << r;
        for (size_t i = 0; i < outs[size_t(r)].size(); ++i) {
            const MoeOutput& o = outs[size_t(r)][i];
            const int64_t b = r * half, n = o.output.dim(0);
            EXPECT_EQ(test::first_bit_difference(o.output.raw(), want.output.rows(b, b + n).raw(), size_t(n * H) * 4), -1)
                << "rank " << r << ", batch " << i;
        }
    }
}

// Expert weights on the way between ranks: a changed byte is caught by the digest, and so is a cut.
TEST(EpPlacementChange, DamagedExpertWeightsAreRefused) {
    const V3Golden g;
    const MoeLayer& whole = g.whole;
    Bytes bytes;
    pack_expert_bytes(3, whole.weights().experts[3], bytes);
    size_t at = 0;
    int64_t id = -1;
    const ExpertWeights back = unpack_expert_bytes(bytes, at, whole.config(), 1, &id);
    EXPECT_EQ(id, 3);
    EXPECT_EQ(at, bytes.size());
    EXPECT_EQ(back.stored_bytes(), whole.weights().experts[3].stored_bytes());
    Bytes flipped = bytes;
    flipped[bytes.size() / 2] ^= 0x10;
    at = 0;
    try {
        (void)unpack_expert_bytes(flipped, at, whole.config(), 1, &id);
        ADD_FAILURE() << "a damaged expert was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("arrived damaged"), std::string::npos) << e.what();
    }
    Bytes cut(bytes.begin(), bytes.begin() + bytes.size() / 3);
    at = 0;
    EXPECT_THROW((void)unpack_expert_bytes(cut, at, whole.config(), 1, &id), Error);
}

// Ranks grouped into nodes: the exchanges take two levels (along rails, then within nodes) and every
// rank's bytes stay the one-rank layer's — demo layers (hash routing, masks, bf16 and f32) and the
// DeepSeek-V3 golden, contiguous, strided and replicated placements, whole batches and chunks.
TEST(EpTwoLevel, NodesOfRanksGiveTheOneRankBytes) {
    const DemoModelShape s = test::small_demo_shape();
    const V3Golden g;
    for (int layer_index : {0, 1}) {
        const MoeLayer layer(demo_config(s), demo_layer_weights(s, layer_index), {.threads = 1});
        for (DType dtype : {DType::BF16, DType::F32}) {
            const MoeInput in = demo_input(s, 37, dtype);
            expect_same_as_one_rank(layer, in, ExpertPlacement::contiguous(s.experts, 4), 0, 2);
            expect_same_as_one_rank(layer, in, ExpertPlacement::strided(s.experts, 4), 7, 2);
            expect_same_as_one_rank(layer, in, replicated(s.experts, 4, 3), 0, 2);
        }
    }
    for (auto [ranks, per_node] : {std::pair{4, 2}, {8, 2}, {8, 4}, {4, 1}}) {
        SCOPED_TRACE(std::to_string(ranks) + " ranks in nodes of " + std::to_string(per_node));
        expect_same_as_one_rank(g.whole, g.in, ExpertPlacement::contiguous(16, ranks), 0, per_node);
        expect_same_as_one_rank(g.whole, g.in, replicated(16, ranks, 5), 5, per_node);
    }
}

// DeepSeek-V3's node-limited routing: with each expert group on its own node (4 nodes of 2 ranks, the
// golden's 4 groups of 4 experts) and topk_group = 2, every token leaves for at most 2 nodes — exactly
// the nodes of its experts — where one level sends it once per rank.
TEST(EpTwoLevel, ATokenCrossesOnceToEachNodeOfItsExperts) {
    const V3Golden g;
    const ExpertPlacement placement = ExpertPlacement::contiguous(16, 8);
    const MoeOutput want = g.whole.forward(g.in);
    const std::vector<EpStats> two = expect_same_as_one_rank(g.whole, g.in, placement, 0, 2);
    const std::vector<EpStats> one = expect_same_as_one_rank(g.whole, g.in, placement, 0, 8);
    const int64_t T = g.in.hidden.dim(0), K = g.whole.config().top_k;
    // The rows each node should get: the batch's tokens with an expert there (node = group = expert / 4).
    std::vector<int64_t> expected(4, 0);
    int64_t most_nodes = 0;
    for (int64_t t = 0; t < T; ++t) {
        std::vector<bool> hit(4, false);
        for (int64_t k = 0; k < K; ++k) hit[size_t(want.topk_ids.data<int32_t>()[t * K + k] / 4)] = true;
        const int64_t nodes = std::count(hit.begin(), hit.end(), true);
        most_nodes = std::max(most_nodes, nodes);
        for (int n = 0; n < 4; ++n) expected[size_t(n)] += hit[size_t(n)];
    }
    EXPECT_LE(most_nodes, 2);
    std::vector<int64_t> sent(4, 0);
    int64_t one_level = 0;
    for (int r = 0; r < 8; ++r) {
        ASSERT_EQ(two[size_t(r)].rows_to_nodes.size(), 4u);
        for (int n = 0; n < 4; ++n) sent[size_t(n)] += two[size_t(r)].rows_to_nodes[size_t(n)];
        for (int64_t rows : one[size_t(r)].rows_to_nodes) one_level += rows;
    }
    EXPECT_EQ(sent, expected);
    int64_t two_level = 0;
    for (int64_t rows : sent) two_level += rows;
    std::printf("token rows sent: two levels %lld (to nodes), one level %lld (to ranks)\n", (long long)two_level,
                (long long)one_level);
    EXPECT_LT(two_level, one_level);
}

// In nodes too. forward() checks the whole batch before any rows move; through the phase calls, the
// failing rank's note travels along its rail, then through each node, and every rank's finish_dispatch
// names it. The layer goes on, bitwise.
TEST(EpTwoLevel, ABadInputOnOneRankStopsEveryRank) {
    expect_a_bad_input_stops_every_rank(4, 2, 0);
    expect_a_bad_input_stops_every_rank(4, 2, 4);
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1), {.threads = 1});
    const MoeInput good = demo_input(s, 12, DType::F32);
    MoeInput bad = demo_input(s, 12, DType::F32);
    bad.hidden.mutable_data<float>()[5 * s.hidden + 1] = std::nanf("");
    const MoeOutput want = layer.forward(good);
    LocalGroup group(6, std::chrono::seconds(30));
    std::vector<std::string> errors(6);
    std::vector<MoeOutput> after(6);
    on_ranks(6, [&](int r) {
        EpMoeLayer ep(layer, replicated(s.experts, 6, 4), group.transport(r));
        ep.set_ranks_per_node(3);  // rank 4 is on node 1, rail 1: ranks 0, 2, 3 and 5 hear of it through relays
        EpBatch batch = ep.begin_dispatch(r == 4 ? bad : good);
        try {
            ep.finish_dispatch(batch);
        } catch (const Error& e) {
            errors[size_t(r)] = e.what();
        }
        after[size_t(r)] = ep.forward(good);
    });
    for (int r = 0; r < 6; ++r) {
        const std::string& e = errors[size_t(r)];
        EXPECT_NE(e.find(r == 4 ? "token 5" : "rank 4 could not take part"), std::string::npos) << "rank " << r << ": " << e;
        EXPECT_EQ(test::first_bit_difference(after[size_t(r)].output.raw(), want.output.raw(), want.output.nbytes()), -1);
    }
}

// forward() refuses ranks that group the ranks into nodes differently, naming one, before any rows move.
TEST(EpTwoLevel, RanksMustAgreeOnTheNodes) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1), {.threads = 1});
    const MoeInput in = demo_input(s, 8, DType::BF16);
    LocalGroup group(4, std::chrono::seconds(30));
    std::vector<std::string> errors(4);
    on_ranks(4, [&](int r) {
        EpMoeLayer ep(layer, ExpertPlacement::contiguous(s.experts, 4), group.transport(r));
        ep.set_ranks_per_node(r == 2 ? 4 : 2);
        try {
            (void)ep.forward(in);
        } catch (const Error& e) {
            errors[size_t(r)] = e.what();
        }
    });
    for (int r = 0; r < 4; ++r) EXPECT_NE(errors[size_t(r)].find("nodes of"), std::string::npos) << "rank " << r << ": " << errors[size_t(r)];
}

TEST(EpTwoLevel, NodesMustDivideTheRanks) {
    LocalGroup group(1);
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1));
    EpMoeLayer ep(layer, ExpertPlacement::contiguous(s.experts, 1), group.transport(0));
    EXPECT_THROW(ep.set_ranks_per_node(2), Error);
    EXPECT_THROW(ep.set_ranks_per_node(0), Error);
    ep.set_ranks_per_node(1);
    EXPECT_EQ(ep.ranks_per_node(), 1);
}

// A relayed all-to-all: what arrives in the first exchange is forwarded by the second, on the queue's
// thread. A rank whose relay fails still takes part (sending nothing): the others finish, and only its
// own future throws.
TEST(CollectiveQueue, RelayedAllToAllForwardsAndAFailedRelayBlocksNoOne) {
    LocalGroup group(3, std::chrono::seconds(10));
    std::vector<std::vector<Bytes>> got(3);
    std::vector<std::string> errors(3);
    on_ranks(3, [&](int r) {
        CollectiveQueue queue(group.transport(r));
        std::vector<Bytes> send(3);
        for (int d = 0; d < 3; ++d) send[size_t(d)] = Bytes{uint8_t(10 * r + d)};
        // Rank r forwards everything it got to rank (r + 1) % 3, in source order; rank 2's relay fails.
        auto relay = [r](const std::vector<Bytes>& arrived) {
            if (r == 2) throw Error(ErrorKind::Communication, "relay refused");
            std::vector<Bytes> onward(3);
            for (const Bytes& b : arrived) onward[size_t((r + 1) % 3)].insert(onward[size_t((r + 1) % 3)].end(), b.begin(), b.end());
            return onward;
        };
        try {
            got[size_t(r)] = queue.all_to_all_relayed(send, relay).get();
        } catch (const Error& e) {
            errors[size_t(r)] = e.what();
        }
    });
    for (int r = 0; r < 3; ++r) ASSERT_EQ(got[size_t(r)].size(), r == 2 ? 0u : 3u) << "rank " << r << ": " << errors[size_t(r)];
    // Rank 1 gets from rank 0 what rank 0 received (10 s + 0 from each source s), nothing else; rank 0
    // nothing from rank 2, whose relay failed.
    EXPECT_EQ(got[1][0], (Bytes{0, 10, 20}));
    EXPECT_TRUE(got[1][1].empty() && got[1][2].empty());
    EXPECT_TRUE(got[0][0].empty() && got[0][1].empty() && got[0][2].empty());
    EXPECT_NE(errors[2].find("relay refused"), std::string::npos) << errors[2];
    EXPECT_TRUE(errors[0].empty() && errors[1].empty());
}
