// The routing kernel's two forms (routing.cu: the staged one, which copies the logits through shared memory
// and loops over the score function, and the unrolled one) give the same top-k ids and weights, bit for bit:
// logits in 1 to 14 k splits, 8 to 512 experts, each score function, with and without a selection bias and
// group limits (the group's best, or its best two), with NaN and infinite logits and masked tokens. Skips,
// saying so, without a GPU. How close both come to the CPU router is test_cuda_tensor_core's CudaRouting.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

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
};

std::string describe(const Case& c) {
    return std::to_string(c.tokens) + " tokens, " + std::to_string(c.splits) + " splits, " + std::to_string(c.experts) +
           " experts, top " + std::to_string(c.top_k) + ", score " + std::to_string(c.score_func) +
           (c.bias ? ", bias" : "") + ", groups " + std::to_string(c.groups) + "/" + std::to_string(c.top_groups) +
           " by " + std::to_string(c.group_score);
}

struct Routing {
    std::vector<int32_t> ids;
    std::vector<float> weights;
};

Routing route(const Case& c, const cuda::DeviceBuffer& logits, const cuda::DeviceBuffer& bias,
              const cuda::DeviceBuffer& active, cuda::RouteLaunch::Form form) {
    const size_t pairs = size_t(c.tokens * c.top_k);
    cuda::DeviceBuffer ids(pairs * 4, "ids"), weights(pairs * 4, "weights");
    EXPECT_EQ(cudaMemset(ids.get(), 0x7F, ids.bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemset(weights.get(), 0x7F, weights.bytes()), cudaSuccess);
    cuda::RouteLaunch p;
    p.logits = logits.as<const float>();
    p.logit_splits = c.splits;
    p.split_stride = c.tokens * c.experts;
    p.tokens = c.tokens;
    p.experts = c.experts;
    p.top_k = c.top_k;
    p.score_func = c.score_func;
    p.bias = c.bias ? bias.as<const float>() : nullptr;
    p.groups = c.groups;
    p.top_groups = c.top_groups;
    p.group_score = c.group_score;
    p.active = active.as<const uint8_t>();
    p.normalise = c.score_func != 0;
    p.normalise_eps = c.score_func == 1;
    p.scale = c.score_func == 2 ? 1.5f : 1.0f;
    p.topk_ids = ids.as<int32_t>();
    p.topk_weights = weights.as<float>();
    p.form = form;
    EXPECT_EQ(cuda::launch_route(p), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    Routing r{std::vector<int32_t>(pairs), std::vector<float>(pairs)};
    ids.download(r.ids.data(), pairs * 4);
    weights.download(r.weights.data(), pairs * 4);
    return r;
}

void check(const Case& c, uint32_t seed) {
    SCOPED_TRACE(describe(c));
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
    cuda::DeviceBuffer logits_buf(logits.size() * 4, "logits"), bias_buf(bias.size() * 4, "bias"),
        active_buf(active.size(), "active");
    logits_buf.upload(logits.data(), logits.size() * 4);
    bias_buf.upload(bias.data(), bias.size() * 4);
    active_buf.upload(active.data(), active.size());
    const Routing staged = route(c, logits_buf, bias_buf, active_buf, cuda::RouteLaunch::Form::Staged);
    const Routing unrolled = route(c, logits_buf, bias_buf, active_buf, cuda::RouteLaunch::Form::Unrolled);
    EXPECT_EQ(staged.ids, unrolled.ids);
    EXPECT_EQ(test::first_bit_difference(staged.weights.data(), unrolled.weights.data(), staged.weights.size() * 4), -1);
    // The ids are real experts, or -1 for the masked tokens.
    for (int64_t t = 0; t < c.tokens; ++t)
        for (int32_t s = 0; s < c.top_k; ++s) {
            const int32_t id = staged.ids[size_t(t * c.top_k + s)];
            if (active[size_t(t)]) EXPECT_TRUE(id >= 0 && id < c.experts) << "token " << t << " slot " << s;
            else EXPECT_EQ(id, -1) << "token " << t << " slot " << s;
        }
}

}  // namespace

TEST(CudaRouteKernel, StagedAndUnrolledFormsGiveTheSameBits) {
    SMOE_SKIP_WITHOUT_GPU();
    uint32_t seed = 1;
    for (const Case& c : {Case{8, 256, 6, 2, true, 1, 1, 0, 1},     // deepseek-v4-flash's decode step
                          Case{14, 256, 8, 1, true, 8, 4, 1, 1},    // deepseek-v3's
                          Case{4, 128, 8, 0, false, 1, 1, 0, 1},    // qwen3's
                          Case{14, 256, 8, 1, true, 8, 4, 1, 37},   // more tokens than a block's warps
                          Case{8, 256, 6, 2, true, 1, 1, 0, 8},
                          Case{1, 64, 4, 0, false, 1, 1, 0, 9},     // one split (the exact f32 router)
                          Case{16, 512, 8, 1, true, 16, 4, 0, 5},   // 16 experts a lane, two stages of splits
                          Case{9, 8, 2, 2, false, 1, 1, 0, 6},      // fewer experts than lanes
                          Case{20, 384, 8, 0, true, 64, 8, 1, 3},   // 64 groups, experts past a lane's share
                          Case{17, 160, 6, 1, false, 32, 3, 0, 2}})
        check(c, seed++);
}
