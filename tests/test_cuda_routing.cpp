// The routing kernel's two forms (route_wide.cu's block per token, routing.cu's warp per token) give the same
// top-k ids and weights, bit for bit: logits in 1 to 20 k splits, 8 to 512 experts, each score function, with
// and without a selection bias and group limits (the group's best, or its best two), hash routing, NaN and
// infinite logits and masked tokens; the block kernel's two selections (warps' candidates, block-wide steps)
// alike. The routing and permutation of a decode step's tokens in one launch give the bits of the two
// launches. Skips, saying so, without a GPU. How close both come to the CPU router is test_cuda_tensor_core's
// CudaRouting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../src/engine/cuda_layer_stages.hpp"
#include "../src/kernels/cuda/routing.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#include "test_util.hpp"

using namespace steadymoe;

namespace {

struct Case {
    int32_t splits, experts, top_k, score_func;
    bool bias;
    int32_t groups, top_groups, group_score;
    int64_t tokens;
    bool hash = false;  // ids from a token-id table (the scores still give the weights)
    bool first_masked = false;  // token 0 masked too (every fourth token from token 1 always is)
};

std::string describe(const Case& c) {
    return std::to_string(c.tokens) + " tokens, " + std::to_string(c.splits) + " splits, " + std::to_string(c.experts) +
           " experts, top " + std::to_string(c.top_k) + ", score " + std::to_string(c.score_func) +
           (c.bias ? ", bias" : "") + ", groups " + std::to_string(c.groups) + "/" + std::to_string(c.top_groups) +
           " by " + std::to_string(c.group_score) + (c.hash ? ", hash" : "") + (c.first_masked ? ", token 0 masked" : "");
}

struct Routing {
    std::vector<int32_t> ids;
    std::vector<float> weights;
};

struct Inputs {
    cuda::DeviceBuffer logits, bias, active, tid2eid, token_ids;
};

cuda::RouteLaunch route_launch(const Case& c, const Inputs& in, cuda::DeviceBuffer& ids, cuda::DeviceBuffer& weights) {
    cuda::RouteLaunch p;
    p.logits = in.logits.as<const float>();
    p.logit_splits = c.splits;
    p.split_stride = c.tokens * c.experts;
    p.tokens = c.tokens;
    p.experts = c.experts;
    p.top_k = c.top_k;
    p.score_func = c.score_func;
    p.bias = c.bias ? in.bias.as<const float>() : nullptr;
    p.groups = c.groups;
    p.top_groups = c.top_groups;
    p.group_score = c.group_score;
    p.active = in.active.as<const uint8_t>();
    if (c.hash) p.tid2eid = in.tid2eid.as<const int32_t>(), p.token_ids = in.token_ids.as<const int64_t>();
    p.normalise = c.score_func != 0;
    p.normalise_eps = c.score_func == 1;
    p.scale = c.score_func == 2 ? 1.5f : 1.0f;
    p.topk_ids = ids.as<int32_t>();
    p.topk_weights = weights.as<float>();
    return p;
}

Routing route(const Case& c, const Inputs& in, cuda::RouteLaunch::Form form, bool block_steps = false) {
    const size_t pairs = size_t(c.tokens * c.top_k);
    cuda::DeviceBuffer ids(pairs * 4, "ids"), weights(pairs * 4, "weights");
    EXPECT_EQ(cudaMemset(ids.get(), 0x7F, ids.bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemset(weights.get(), 0x7F, weights.bytes()), cudaSuccess);
    cuda::RouteLaunch p = route_launch(c, in, ids, weights);
    p.form = form;
    p.block_steps = block_steps;
    EXPECT_EQ(cuda::launch_route(p), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Routing r{std::vector<int32_t>(pairs), std::vector<float>(pairs)};
    ids.download(r.ids.data(), pairs * 4);
    weights.download(r.weights.data(), pairs * 4);
    return r;
}

Inputs make_inputs(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> logits(size_t(c.splits * c.tokens * c.experts)), bias(size_t(c.experts));
    for (float& v : logits) v = normal(rng) / float(c.splits);
    // Ties, NaN and infinities in some tokens' logits (split 0 holds a token's first partial sums).
    for (int64_t t = 0; t < c.tokens; t += 3) {
        float* row = logits.data() + t * c.experts;
        const uint32_t kind = rng() % 4;
        for (int32_t e = 0; e < c.experts; e += 5)
            row[e] = kind == 0 ? NAN : kind == 1 ? INFINITY : kind == 2 ? -INFINITY : 0.25f;
    }
    for (float& v : bias) v = normal(rng) * 0.1f;
    std::vector<uint8_t> active(size_t(c.tokens), 1);
    for (int64_t t = 1; t < c.tokens; t += 4) active[size_t(t)] = 0;
    if (c.first_masked) active[0] = 0;
    constexpr int64_t kVocab = 50;
    std::vector<int32_t> tid2eid(size_t(kVocab * c.top_k));
    for (int32_t& id : tid2eid) id = int32_t(rng() % uint32_t(c.experts));
    std::vector<int64_t> token_ids(size_t(c.tokens));
    for (int64_t& id : token_ids) id = int64_t(rng() % kVocab);
    Inputs in{cuda::DeviceBuffer(logits.size() * 4, "logits"), cuda::DeviceBuffer(bias.size() * 4, "bias"),
              cuda::DeviceBuffer(active.size(), "active"), cuda::DeviceBuffer(tid2eid.size() * 4, "tid2eid"),
              cuda::DeviceBuffer(token_ids.size() * 8, "token ids")};
    in.logits.upload(logits.data(), logits.size() * 4);
    in.bias.upload(bias.data(), bias.size() * 4);
    in.active.upload(active.data(), active.size());
    in.tid2eid.upload(tid2eid.data(), tid2eid.size() * 4);
    in.token_ids.upload(token_ids.data(), token_ids.size() * 8);
    return in;
}

void check(const Case& c, uint32_t seed) {
    SCOPED_TRACE(describe(c));
    const Inputs in = make_inputs(c, seed);
    std::vector<uint8_t> active(size_t(c.tokens));
    in.active.download(active.data(), active.size());
    const Routing wide = route(c, in, cuda::RouteLaunch::Form::Wide);
    const Routing unrolled = route(c, in, cuda::RouteLaunch::Form::Unrolled);
    EXPECT_EQ(wide.ids, unrolled.ids);
    EXPECT_EQ(test::first_bit_difference(wide.weights.data(), unrolled.weights.data(), wide.weights.size() * 4), -1);
    // and the block kernel's selection in K block-wide steps, one thread a group (RouteLaunch::block_steps)
    const Routing steps = route(c, in, cuda::RouteLaunch::Form::Wide, true);
    EXPECT_EQ(steps.ids, unrolled.ids);
    EXPECT_EQ(test::first_bit_difference(steps.weights.data(), unrolled.weights.data(), steps.weights.size() * 4), -1);
    // The ids are real experts, or -1 for the masked tokens.
    for (int64_t t = 0; t < c.tokens; ++t)
        for (int32_t s = 0; s < c.top_k; ++s) {
            const int32_t id = wide.ids[size_t(t * c.top_k + s)];
            if (active[size_t(t)]) EXPECT_TRUE(id >= 0 && id < c.experts) << "token " << t << " slot " << s;
            else EXPECT_EQ(id, -1) << "token " << t << " slot " << s;
        }
}

}  // namespace

TEST(CudaRouteKernel, BlockAndWarpPerTokenGiveTheSameBits) {
    SMOE_SKIP_WITHOUT_GPU();
    uint32_t seed = 1;
    for (const Case& c : {Case{8, 256, 6, 2, true, 1, 1, 0, 1},     // deepseek-v4-flash's decode step
                          Case{14, 256, 8, 1, true, 8, 4, 1, 1},    // deepseek-v3's
                          Case{4, 128, 8, 0, false, 1, 1, 0, 1},    // qwen3's
                          Case{14, 256, 8, 1, true, 8, 4, 1, 37},   // more tokens than a block's warps
                          Case{8, 256, 6, 2, true, 1, 1, 0, 8},
                          Case{1, 64, 4, 0, false, 1, 1, 0, 9},     // one split (the exact f32 router)
                          Case{16, 512, 8, 1, true, 16, 4, 0, 5},   // 16 experts a lane, 512 threads a block
                          Case{9, 8, 2, 2, false, 1, 1, 0, 6},      // fewer experts than lanes
                          Case{20, 384, 8, 0, true, 64, 8, 1, 3},   // 64 groups; more splits than one round of loads
                          Case{17, 160, 6, 1, false, 32, 3, 0, 2},
                          Case{8, 256, 6, 2, false, 1, 1, 0, 7, true},  // hash routing (deepseek-v4's first layers)
                          Case{2, 256, 6, 2, true, 1, 1, 0, 65},       // past the tokens the layer routes so
                          Case{8, 256, 32, 1, true, 1, 1, 0, 5}})      // top 32
        check(c, seed++);
}

namespace {

// One routing's outputs and its permutation's, every byte as the launches left it (all start as 0xFF bytes).
struct Permuted {
    static constexpr const char* kNames[8] = {"ids", "weights", "rows", "dest", "weight", "tiles", "load", "offsets"};
    std::vector<uint8_t> bytes[8];  // in kNames' order
};

// Routes and permutes c's tokens in tiles of tile_m rows: in one launch (launch_route_and_permute,
// captured in a CUDA graph to count its kernels: one), or in the two it stands for (launch_route, then
// launch_permute_routed).
Permuted route_and_permute(const Case& c, const Inputs& in, int32_t tile_m, bool one_launch, bool block_steps,
                           cuda::EarlyRoute* early = nullptr) {
    const int64_t pairs = c.tokens * c.top_k, max_tiles = tc::tile_bound(pairs, c.experts, tile_m);
    cuda::DeviceBuffer ids(size_t(pairs) * 4, "ids"), weights(size_t(pairs) * 4, "weights"), rows(size_t(pairs) * 4, "rows"),
        dest(size_t(pairs) * 8, "dest"), weight(size_t(pairs) * 4, "weight"), tiles(size_t(3 * max_tiles + 1) * 4, "tiles"),
        load(size_t(c.experts) * 4, "load"), offsets(size_t(2 * (c.experts + 1)) * 4, "offsets");
    for (const cuda::DeviceBuffer* b : {&ids, &weights, &rows, &dest, &weight, &tiles, &load, &offsets})
        EXPECT_EQ(cudaMemset(b->get(), 0xFF, b->bytes()), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    int32_t* t = tiles.as<int32_t>();
    int32_t* o = offsets.as<int32_t>();
    const cuda::PermutationOut out{rows.as<int32_t>(), dest.as<int64_t>(), weight.as<float>(), t, t + max_tiles, t + 2 * max_tiles,
                                   t + 3 * max_tiles, load.as<int32_t>(), o, o + c.experts + 1, nullptr};
    cuda::RouteLaunch p = route_launch(c, in, ids, weights);
    p.block_steps = block_steps;
    p.early = early;
    if (one_launch) {
        EXPECT_TRUE(cuda::routes_and_permutes_in_one_launch(p));
        cudaStream_t stream = nullptr;
        EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
        p.stream = stream;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        EXPECT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        EXPECT_EQ(cuda::launch_route_and_permute(p, tile_m, out), cudaSuccess);
        EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
        size_t kernels = 0;
        EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &kernels), cudaSuccess);
        EXPECT_EQ(kernels, 1u) << "launches for the routing and the permutation";
        EXPECT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(stream);
    } else {
        EXPECT_EQ(cuda::launch_route(p), cudaSuccess);
        EXPECT_EQ(cuda::launch_permute_routed(p.topk_ids, p.topk_weights, pairs, c.top_k, c.experts, tile_m, out, nullptr), cudaSuccess);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    auto bytes = [](const cuda::DeviceBuffer& b) {
        std::vector<uint8_t> v(b.bytes());
        b.download(v.data(), v.size());
        return v;
    };
    return {{bytes(ids), bytes(weights), bytes(rows), bytes(dest), bytes(weight), bytes(tiles), bytes(load), bytes(offsets)}};
}

}  // namespace

// A decode step's tokens routed and permuted in one launch (a block per token's routing for one token of
// many experts, a warp per token's for up to 16 tokens of 128 experts or fewer) against the two launches: the
// same ids, weights, rows, tiles and loads, every byte, in tiles of 128, 32, 8 and 1 rows; a block's routing
// also by block-wide steps (RouteLaunch::block_steps). The layer takes it for such batches (its tests and the
// bench's invariance check cover it there).
TEST(CudaRouteKernel, RoutingAndPermutationInOneLaunchGiveTheTwoLaunchesBytes) {
    SMOE_SKIP_WITHOUT_GPU();
    if (const char* apart = std::getenv("STEADYMOE_ROUTE_AND_PERMUTE"); apart && std::string(apart) == "0")
        GTEST_SKIP() << "STEADYMOE_ROUTE_AND_PERMUTE=0 asks for two launches always";
    uint32_t seed = 100;
    for (const Case& c : {Case{8, 256, 6, 2, true, 1, 1, 0, 1},   // deepseek-v4-flash's one token (a block)
                          Case{14, 256, 8, 1, true, 8, 4, 1, 1},  // deepseek-v3's
                          Case{14, 256, 8, 1, true, 8, 4, 1, 1, false, true},  // its one token masked
                          Case{17, 160, 6, 1, false, 32, 3, 0, 1},  // groups of 5: not whole warps
                          Case{8, 256, 6, 2, false, 1, 1, 0, 1, true},  // hash routing
                          Case{16, 512, 8, 1, true, 16, 4, 0, 1},  // 512 experts
                          Case{4, 128, 8, 0, false, 1, 1, 0, 1},   // qwen3's one token (a warp)
                          Case{4, 128, 8, 0, false, 1, 1, 0, 1, false, true},  // masked
                          Case{9, 8, 2, 2, false, 1, 1, 0, 1},     // one token of few experts
                          Case{4, 128, 32, 0, false, 1, 1, 0, 1},  // one token's top 32 (a warp)
                          Case{4, 128, 8, 0, false, 1, 1, 0, 4},   // 32 pairs (a token masked)
                          Case{4, 128, 8, 0, false, 1, 1, 0, 5},   // 40 pairs
                          Case{4, 128, 8, 0, false, 1, 1, 0, 16},  // 16 tokens, 128 pairs: the most
                          Case{4, 128, 8, 0, false, 1, 1, 0, 6},   // masked tokens among them
                          Case{1, 64, 4, 2, true, 4, 2, 1, 9},     // groups, one split
                          Case{9, 8, 2, 2, false, 1, 1, 0, 6},     // fewer experts than lanes
                          Case{4, 128, 8, 0, false, 1, 1, 0, 3, true},  // hash routing, a warp a token
                          Case{8, 256, 6, 2, false, 1, 1, 0, 1, true, true},  // hash routing, its token masked
                          Case{4, 128, 32, 0, false, 1, 1, 0, 4},  // top 32: 128 pairs, a token masked
                          Case{8, 256, 32, 1, true, 1, 1, 0, 1}}) {  // top 32 in a block
        SCOPED_TRACE(describe(c));
        const Inputs in = make_inputs(c, seed++);
        const bool by_block = c.experts > 128;  // (launch_route's choice at a decode step's few tokens)
        for (int32_t tile_m : {128, 32, 8, 1})
            for (bool steps : {false, true}) {
                if (steps && !by_block) continue;
                SCOPED_TRACE("tiles of " + std::to_string(tile_m) + (steps ? ", block-wide steps" : ""));
                const Permuted one = route_and_permute(c, in, tile_m, true, steps), two = route_and_permute(c, in, tile_m, false, steps);
                for (int i = 0; i < 8; ++i) {
                    ASSERT_EQ(one.bytes[i].size(), two.bytes[i].size());
                    EXPECT_EQ(test::first_bit_difference(one.bytes[i].data(), two.bytes[i].data(), one.bytes[i].size()), -1)
                        << Permuted::kNames[i];
                }
            }
    }
}

// A decode step's one token, routed by a warp and permuted in one launch, publishes its experts early
// (RouteLaunch::early, for the routed gate/up GEMM: early_route.hpp): the flag set, the count of chosen experts
// and the experts in ascending order, the permutation's tile experts; every other byte as without it. Left
// before the launch as an earlier step would leave it (flag set, other experts), the record is overwritten.
// Launches that cannot publish refuse it.
TEST(CudaRouteKernel, OneTokenPublishesItsExpertsEarly) {
    SMOE_SKIP_WITHOUT_GPU();
    if (const char* apart = std::getenv("STEADYMOE_ROUTE_AND_PERMUTE"); apart && std::string(apart) == "0")
        GTEST_SKIP() << "STEADYMOE_ROUTE_AND_PERMUTE=0 asks for two launches always";
    uint32_t seed = 300;
    cuda::DeviceBuffer early(sizeof(cuda::EarlyRoute), "early experts");
    for (const Case& c : {Case{4, 128, 8, 0, false, 1, 1, 0, 1},   // qwen3's one token
                          Case{4, 128, 8, 0, false, 1, 1, 0, 1, false, true},  // masked: no experts
                          Case{9, 8, 2, 2, false, 1, 1, 0, 1},     // few experts
                          Case{4, 128, 32, 0, false, 1, 1, 0, 1},  // top 32
                          Case{1, 64, 4, 2, true, 4, 2, 1, 1},     // groups, bias, one split
                          Case{4, 128, 8, 1, true, 1, 1, 0, 1}}) {  // sigmoid scores, a bias
        SCOPED_TRACE(describe(c));
        const Inputs in = make_inputs(c, seed++);
        cuda::EarlyRoute stale{1, 3, {}};
        for (int i = 0; i < 32; ++i) stale.experts[i] = 31 - i;
        early.upload(&stale, sizeof(stale));
        const Permuted with = route_and_permute(c, in, 8, true, false, early.as<cuda::EarlyRoute>());
        const Permuted without = route_and_permute(c, in, 8, true, false);
        for (int i = 0; i < 8; ++i)
            EXPECT_EQ(test::first_bit_difference(with.bytes[i].data(), without.bytes[i].data(), with.bytes[i].size()), -1)
                << Permuted::kNames[i];
        cuda::EarlyRoute got{};
        early.download(&got, sizeof(got));
        std::vector<int32_t> ids(size_t(c.top_k));
        std::memcpy(ids.data(), with.bytes[0].data(), ids.size() * 4);
        std::vector<int32_t> chosen;
        for (int32_t id : ids)
            if (id >= 0) chosen.push_back(id);
        std::sort(chosen.begin(), chosen.end());
        EXPECT_EQ(got.ready, 1u);
        ASSERT_EQ(got.count, int32_t(chosen.size()));
        EXPECT_EQ(std::vector<int32_t>(got.experts, got.experts + got.count), chosen);
        // the permutation's tiles: tile i is expert chosen[i] (tile_expert, the first max_tiles words of `tiles`)
        std::vector<int32_t> tile_expert(chosen.size());
        std::memcpy(tile_expert.data(), with.bytes[5].data(), tile_expert.size() * 4);
        EXPECT_EQ(tile_expert, chosen);
    }
    // Not for hash routing, several tokens, a block's routing (many experts), or the routing alone.
    cuda::DeviceBuffer ids(64 * 4, "ids"), weights(64 * 4, "weights");
    for (const Case& c : {Case{4, 128, 8, 0, false, 1, 1, 0, 1, true}, Case{4, 128, 8, 0, false, 1, 1, 0, 2},
                          Case{8, 256, 6, 2, true, 1, 1, 0, 1}}) {
        SCOPED_TRACE(describe(c));
        const Inputs in = make_inputs(c, seed++);
        cuda::RouteLaunch p = route_launch(c, in, ids, weights);
        EXPECT_FALSE(cuda::route_publishes_early(p));
        p.early = early.as<cuda::EarlyRoute>();
        EXPECT_EQ(cuda::launch_route_and_permute(p, 8, cuda::PermutationOut{}), cudaErrorInvalidValue);
    }
    const Case qwen3{4, 128, 8, 0, false, 1, 1, 0, 1};
    const Inputs in = make_inputs(qwen3, seed);
    cuda::RouteLaunch p = route_launch(qwen3, in, ids, weights);
    EXPECT_TRUE(cuda::route_publishes_early(p));
    p.early = early.as<cuda::EarlyRoute>();
    EXPECT_EQ(cuda::launch_route(p), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}
