// Expert parallelism on CPU ranks in one process, continued: placements changed between batches (experts
// moved over the transport, damaged ones refused), ranks that load only their own experts, two-level
// exchanges over nodes of ranks, and the relayed collectives under them — each bitwise the one-rank layer.
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
