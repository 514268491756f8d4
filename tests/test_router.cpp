// route_tokens() on hand-built logits: score functions against float64 formulas, biased selection with
// unbiased weights, group limits, the canonical slot order, NaN handling, hash routing, the
// normalisation and scaling rules of each family, masking, and independence from the batch range.
#include "steadymoe/kernels/cpu/router.hpp"

#include "steadymoe/core/error.hpp"
#include "steadymoe/core/numeric.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

using namespace steadymoe;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A validated config with only the routing fields set; norm off and scale 1 unless a test says so.
MoeConfig make_config(ModelFamily family, ScoreFunc score, int64_t experts, int64_t top_k) {
    MoeConfig c;
    c.family = family;
    c.hidden_size = 8;
    c.moe_intermediate_size = 8;
    c.n_routed_experts = experts;
    c.top_k = top_k;
    c.num_hidden_layers = 1;
    c.score_func = score;
    c.norm_topk_prob = false;
    c.routed_scaling_factor = 1.0;
    c.validate();
    return c;
}

MoeConfig with_groups(MoeConfig c, int64_t n_group, int64_t topk_group, GroupScore rule) {
    c.n_group = n_group;
    c.topk_group = topk_group;
    c.group_score = rule;
    c.validate();
    return c;
}

struct Routing {
    std::vector<int32_t> ids;    // [T][K]
    std::vector<float> weights;  // [T][K]
};

struct RouteArgs {
    const std::vector<float>* bias = nullptr;
    const std::vector<uint8_t>* active = nullptr;
    const std::vector<int32_t>* tid2eid = nullptr;   // hash routing when set
    const std::vector<int64_t>* token_ids = nullptr;
};

// Routes every token of `logits` ([T][E]) in one call.
Routing route(const MoeConfig& cfg, const std::vector<float>& logits, const RouteArgs& args = {}) {
    const int64_t E = cfg.n_routed_experts, K = cfg.top_k;
    const int64_t T = int64_t(logits.size()) / E;
    Routing r;
    r.ids.assign(size_t(T * K), -7);
    r.weights.assign(size_t(T * K), -7.0f);
    cpu::RouterParams p;
    p.config = &cfg;
    p.hash = args.tid2eid != nullptr;
    p.tokens = T;
    p.logits = logits.data();
    p.bias = args.bias ? args.bias->data() : nullptr;
    p.tid2eid = args.tid2eid ? args.tid2eid->data() : nullptr;
    p.token_ids = args.token_ids ? args.token_ids->data() : nullptr;
    p.active = args.active ? args.active->data() : nullptr;
    p.topk_ids = r.ids.data();
    p.topk_weights = r.weights.data();
    cpu::route_tokens(p, 0, T);
    return r;
}

// Float64 reference scores.
std::vector<double> scores64(ScoreFunc f, const std::vector<float>& logits) {
    std::vector<double> s(logits.size());
    switch (f) {
        case ScoreFunc::Softmax: {
            double mx = -INFINITY;
            for (float x : logits) mx = std::max(mx, double(x));
            double sum = 0;
            for (size_t e = 0; e < logits.size(); ++e) sum += s[e] = std::exp(double(logits[e]) - mx);
            for (double& v : s) v /= sum;
            break;
        }
        case ScoreFunc::Sigmoid:
            for (size_t e = 0; e < logits.size(); ++e) s[e] = 1.0 / (1.0 + std::exp(-double(logits[e])));
            break;
        case ScoreFunc::SqrtSoftplus:
            for (size_t e = 0; e < logits.size(); ++e) {
                const double x = logits[e];
                // log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)
                s[e] = std::sqrt(std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))));
            }
            break;
    }
    return s;
}

// |got - want| within `rel` of want, or within `abs_floor` for values float32 cannot resolve.
void expect_close(float got, double want, double rel, double abs_floor, const std::string& what) {
    EXPECT_LE(std::fabs(double(got) - want), std::max(rel * std::fabs(want), abs_floor))
        << what << ": got " << got << ", want " << want;
}

// The ids of one token, as a vector.
std::vector<int32_t> ids_of(const Routing& r, int64_t t, int64_t K) {
    return std::vector<int32_t>(r.ids.begin() + t * K, r.ids.begin() + (t + 1) * K);
}

// Expert ids sorted by float64 score descending, lower id first on ties (the canonical order).
std::vector<int32_t> order_by(const std::vector<double>& s) {
    std::vector<int32_t> idx(s.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return s[size_t(a)] > s[size_t(b)]; });
    return idx;
}

// Logit x with sigmoid(x) == p.
float logit_of(double p) { return float(std::log(p / (1.0 - p))); }

uint32_t bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}

// A deterministic pseudo-random logit in [-4, 4).
float pseudo_logit(uint32_t i) {
    uint32_t x = i * 2654435761u + 12345u;
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return float(x % 80000u) / 10000.0f - 4.0f;
}

// ---------------------------------------------------------------------------------------------------
// Score functions, K = E so every score shows up as a weight (no normalisation, scale 1).

void check_scores_against_float64(ScoreFunc f, const std::vector<float>& logits, double rel, double abs_floor) {
    const int64_t E = int64_t(logits.size());
    // DeepSeek-V3 family with norm off and scale 1 reports the raw scores of any score function.
    const MoeConfig cfg = make_config(ModelFamily::DeepseekV3, f, E, E);
    const Routing r = route(cfg, logits);
    const std::vector<double> want = scores64(f, logits);
    // The order is that of the float32 scores (25, 40 and 100 all have sigmoid 1.0f: a tie).
    std::vector<double> want_f32(want.size());
    for (size_t e = 0; e < want.size(); ++e) want_f32[e] = float(want[e]);
    EXPECT_EQ(ids_of(r, 0, E), order_by(want_f32));
    for (int64_t k = 0; k < E; ++k) {
        const int32_t e = r.ids[size_t(k)];
        ASSERT_TRUE(e >= 0 && e < E);
        expect_close(r.weights[size_t(k)], want[size_t(e)], rel, abs_floor,
                     "expert " + std::to_string(e) + " logit " + std::to_string(logits[size_t(e)]));
    }
}

}  // namespace

TEST(RouterScores, SoftmaxMatchesFloat64) {
    check_scores_against_float64(ScoreFunc::Softmax, {0.5f, -1.25f, 3.0f, 2.0f, -7.0f, 0.0f, 1.5f, -0.75f}, 1e-6,
                                 1e-12);
}

TEST(RouterScores, SoftmaxOfLargeLogitsDoesNotOverflow) {
    // exp(100) overflows float32: the scores must come from logits shifted by their maximum.
    check_scores_against_float64(ScoreFunc::Softmax, {100.0f, 99.0f, 97.5f, 60.0f, 21.0f, -30.0f}, 1e-6, 1e-30);
}

TEST(RouterScores, SoftmaxOfVeryNegativeLogits) {
    check_scores_against_float64(ScoreFunc::Softmax, {-200.0f, -201.0f, -203.0f, -250.0f}, 1e-6, 1e-30);
}

TEST(RouterScores, SigmoidMatchesFloat64) {
    check_scores_against_float64(ScoreFunc::Sigmoid, {0.0f, 1.0f, -1.0f, 2.5f, -3.75f, 0.125f, 6.0f, -0.5f}, 1e-6,
                                 1e-12);
}

TEST(RouterScores, SigmoidSaturatesForLargeAndVeryNegativeLogits) {
    // 1 / (1 + e^-x): 1 for x >= 17 in float32; e^x for very negative x (e^-60 ~ 8.8e-27 is a normal
    // float); below about -88 the exact value is a float32 subnormal or less.
    check_scores_against_float64(ScoreFunc::Sigmoid, {25.0f, 40.0f, 100.0f, -20.0f, -60.0f, -87.0f, -100.0f}, 1e-6,
                                 1e-40);
}

TEST(RouterScores, SqrtSoftplusMatchesFloat64) {
    check_scores_against_float64(ScoreFunc::SqrtSoftplus, {0.0f, 1.0f, -1.0f, 2.5f, -3.75f, 0.125f, 6.0f, -0.5f},
                                 1e-6, 1e-12);
}

TEST(RouterScores, SqrtSoftplusAroundAndAboveTheLinearTail) {
    // Above 20 softplus(x) is x in float32; just below, log1p(exp(x)); far above, exp(x) would overflow.
    check_scores_against_float64(ScoreFunc::SqrtSoftplus, {19.5f, 20.0f, 20.5f, 30.0f, 88.0f, 89.0f, 1000.0f, 1e30f},
                                 1e-6, 1e-12);
}

TEST(RouterScores, SqrtSoftplusOfVeryNegativeLogits) {
    // softplus(x) ~ e^x: sqrt(e^-30) = 3.06e-7, sqrt(e^-80) = 4.2e-18, e^-87 still a normal float.
    check_scores_against_float64(ScoreFunc::SqrtSoftplus, {-20.0f, -30.0f, -50.0f, -80.0f, -87.0f}, 1e-6, 1e-30);
}

// ---------------------------------------------------------------------------------------------------
// Selection bias

TEST(RouterBias, ChangesTheChoiceButNotTheWeights) {
    const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f, -2.0f, 0.5f};
    const MoeConfig cfg = make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 6, 2);
    // Unbiased: experts 0 and 1. The bias lifts expert 4 (the lowest score) to first place and expert
    // 2 past expert 0.
    const std::vector<float> bias = {0.0f, -0.5f, 0.5f, 0.0f, 2.0f, 0.0f};
    const Routing plain = route(cfg, logits);
    EXPECT_EQ(ids_of(plain, 0, 2), (std::vector<int32_t>{0, 1}));
    const Routing biased = route(cfg, logits, {.bias = &bias});
    // sel = sigmoid + bias: e4 = 0.12 + 2, e2 = 0.5 + 0.5 = 1.0, e0 = 0.88.
    ASSERT_EQ(ids_of(biased, 0, 2), (std::vector<int32_t>{4, 2}));

    // Weights are the unbiased scores: bitwise what the unbiased router gives those experts.
    const MoeConfig all = make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 6, 6);
    const Routing every = route(all, logits);
    for (int64_t k = 0; k < 2; ++k) {
        const int32_t e = biased.ids[size_t(k)];
        const auto pos = std::find(every.ids.begin(), every.ids.end(), e) - every.ids.begin();
        EXPECT_EQ(bits(biased.weights[size_t(k)]), bits(every.weights[size_t(pos)])) << "expert " << e;
    }
    expect_close(biased.weights[0], 1.0 / (1.0 + std::exp(2.0)), 1e-6, 0, "expert 4");
    expect_close(biased.weights[1], 0.5, 1e-7, 0, "expert 2");
}

TEST(RouterBias, SlotOrderFollowsTheBiasedScoreWithUnbiasedWeights) {
    // The slot order is by selection score, so the weights need not be descending.
    const std::vector<float> logits = {3.0f, 0.0f, 0.0f, 0.0f};
    const std::vector<float> bias = {0.0f, 0.0f, 10.0f, 0.0f};
    const MoeConfig cfg = make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 4, 2);
    const Routing r = route(cfg, logits, {.bias = &bias});
    ASSERT_EQ(ids_of(r, 0, 2), (std::vector<int32_t>{2, 0}));
    EXPECT_EQ(r.weights[0], 0.5f);
    EXPECT_GT(r.weights[1], r.weights[0]);
}

// ---------------------------------------------------------------------------------------------------
// Group-limited selection: 8 experts in 4 groups of 2.

namespace {

// Sigmoid scores chosen so that the two group rules keep different groups:
//   group 0 (e0, e1): 0.90, 0.10  max 0.90  top-2 sum 1.00
//   group 1 (e2, e3): 0.60, 0.60  max 0.60  top-2 sum 1.20
//   group 2 (e4, e5): 0.95, 0.01  max 0.95  top-2 sum 0.96
//   group 3 (e6, e7): 0.30, 0.30  max 0.30  top-2 sum 0.60
std::vector<float> group_logits() {
    std::vector<float> l;
    for (double p : {0.90, 0.10, 0.60, 0.60, 0.95, 0.01, 0.30, 0.30}) l.push_back(logit_of(p));
    return l;
}

}  // namespace

TEST(RouterGroups, MaxRuleKeepsTheGroupsWithTheBestExpert) {
    const MoeConfig cfg =
        with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 2), 4, 2, GroupScore::Max);
    const Routing r = route(cfg, group_logits());
    EXPECT_EQ(ids_of(r, 0, 2), (std::vector<int32_t>{4, 0}));  // groups 2 and 0
}

TEST(RouterGroups, Top2SumRuleKeepsDifferentGroupsAndDropsTheBestExpert) {
    const MoeConfig cfg =
        with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 3), 4, 2, GroupScore::Top2Sum);
    const Routing r = route(cfg, group_logits());
    // Groups 1 (1.20) and 0 (1.00) survive; expert 4 has the highest score but its group is dropped.
    EXPECT_EQ(ids_of(r, 0, 3), (std::vector<int32_t>{0, 2, 3}));
    for (int32_t e : ids_of(r, 0, 3)) EXPECT_NE(e, 4);
    // Without groups expert 4 would come first.
    const Routing free = route(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 3), group_logits());
    EXPECT_EQ(ids_of(free, 0, 3), (std::vector<int32_t>{4, 0, 2}));
}

TEST(RouterGroups, DroppedGroupsStayDroppedWhenKExceedsTheRestOfTheKeptGroups) {
    // K = 4 = every expert of the two kept groups: the dropped groups' experts still never appear,
    // even expert 4 with the highest score, and the weights are the kept experts' scores.
    const MoeConfig cfg =
        with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 4), 4, 2, GroupScore::Top2Sum);
    const Routing r = route(cfg, group_logits());
    EXPECT_EQ(ids_of(r, 0, 4), (std::vector<int32_t>{0, 2, 3, 1}));
    expect_close(r.weights[3], 0.10, 1e-6, 0, "expert 1");
}

TEST(RouterGroups, GroupScoresUseTheBiasedSelectionScores) {
    // All scores 0.5 (logit 0, exact); the bias alone decides. Group 3 gets the largest top-2 sum.
    const std::vector<float> logits(8, 0.0f);
    const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 0.0f, 0.25f, 0.0f, 0.25f, 0.25f};
    const MoeConfig cfg =
        with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 2), 4, 1, GroupScore::Top2Sum);
    const Routing r = route(cfg, logits, {.bias = &bias});
    EXPECT_EQ(ids_of(r, 0, 2), (std::vector<int32_t>{6, 7}));
    EXPECT_EQ(r.weights[0], 0.5f);
    EXPECT_EQ(r.weights[1], 0.5f);
}

namespace {

// Exactly representable selection scores (0.5 + bias) with a tie between groups 2 and 3 under top-2
// sum (1.375 each) but not under max (0.75 vs 0.875):
//   group 0: 1.0, 1.0    group 1: 0.0, 0.0    group 2: 0.75, 0.625    group 3: 0.5, 0.875
const std::vector<float> kTieBias = {0.5f, 0.5f, -0.5f, -0.5f, 0.25f, 0.125f, 0.0f, 0.375f};

}  // namespace

TEST(RouterGroups, EqualGroupScoresKeepTheLowerGroup) {
    const std::vector<float> logits(8, 0.0f);
    const MoeConfig cfg =
        with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 3), 4, 2, GroupScore::Top2Sum);
    const Routing r = route(cfg, logits, {.bias = &kTieBias});
    // Groups 0 and 2 (group 2 beats group 3 on its index): experts 0, 1, then 4 — not 7, which has the
    // higher selection score.
    EXPECT_EQ(ids_of(r, 0, 3), (std::vector<int32_t>{0, 1, 4}));
    // The max rule ranks group 3 above group 2 on the same scores.
    const MoeConfig by_max =
        with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 3), 4, 2, GroupScore::Max);
    EXPECT_EQ(ids_of(route(by_max, logits, {.bias = &kTieBias}), 0, 3), (std::vector<int32_t>{0, 1, 7}));
}

TEST(RouterGroups, AllGroupsEqualKeepsTheFirstGroups) {
    // Every group holds one 0.75 and one 0.5 (in alternating order), so all groups tie under both rules
    // and groups 0 and 1 are kept: experts 0 and 3 (0.75), then 1 (0.5, lower id than 2). Without the
    // group limit the third slot would go to expert 4 (0.75).
    const std::vector<float> logits(8, 0.0f);
    const std::vector<float> bias = {0.25f, 0.0f, 0.0f, 0.25f, 0.25f, 0.0f, 0.0f, 0.25f};
    for (GroupScore rule : {GroupScore::Max, GroupScore::Top2Sum}) {
        const MoeConfig cfg = with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 3), 4, 2, rule);
        EXPECT_EQ(ids_of(route(cfg, logits, {.bias = &bias}), 0, 3), (std::vector<int32_t>{0, 3, 1}))
            << (rule == GroupScore::Max ? "max" : "top-2 sum");
    }
    const MoeConfig free = make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 3);
    EXPECT_EQ(ids_of(route(free, logits, {.bias = &bias}), 0, 3), (std::vector<int32_t>{0, 3, 4}));
}

TEST(RouterGroups, MaxRuleTieKeepsTheLowerGroupEvenWhenItsOtherExpertsAreWorse) {
    // Groups 1 and 3 share the best expert score 0.875; group 3's second expert is better, but under
    // the max rule the groups tie and group 1 (lower index) is kept.
    const std::vector<float> logits(8, 0.0f);
    const std::vector<float> bias = {0.0f, 0.0f, 0.375f, -0.5f, 0.0f, 0.0f, 0.375f, 0.25f};
    const MoeConfig cfg =
        with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 2), 4, 1, GroupScore::Max);
    EXPECT_EQ(ids_of(route(cfg, logits, {.bias = &bias}), 0, 2), (std::vector<int32_t>{2, 3}));
    const MoeConfig sum =
        with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 8, 2), 4, 1, GroupScore::Top2Sum);
    EXPECT_EQ(ids_of(route(sum, logits, {.bias = &bias}), 0, 2), (std::vector<int32_t>{6, 7}));
}

// ---------------------------------------------------------------------------------------------------
// Canonical slot order

TEST(RouterOrder, AllEqualLogitsPickTheFirstKExpertsInOrder) {
    for (ScoreFunc f : {ScoreFunc::Softmax, ScoreFunc::Sigmoid, ScoreFunc::SqrtSoftplus}) {
        const MoeConfig cfg = make_config(ModelFamily::DeepseekV3, f, 16, 5);
        const Routing r = route(cfg, std::vector<float>(16, 0.75f));
        EXPECT_EQ(ids_of(r, 0, 5), (std::vector<int32_t>{0, 1, 2, 3, 4})) << score_func_name(f);
        for (int64_t k = 1; k < 5; ++k) EXPECT_EQ(bits(r.weights[size_t(k)]), bits(r.weights[0]));
    }
}

TEST(RouterOrder, ScoreDescendingThenLowerIdOnExactTies) {
    const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 2.0f, 3.0f, 0.0f};
    const MoeConfig cfg = make_config(ModelFamily::Qwen3Moe, ScoreFunc::Softmax, 8, 5);
    const Routing r = route(cfg, logits);
    EXPECT_EQ(ids_of(r, 0, 5), (std::vector<int32_t>{1, 3, 6, 2, 5}));
}

TEST(RouterOrder, SlotsAreSortedForManyRandomTokens) {
    const int64_t E = 32, K = 6, T = 200;
    const MoeConfig cfg = make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, E, K);
    std::vector<float> logits(size_t(T * E));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = pseudo_logit(uint32_t(i));
    const Routing r = route(cfg, logits);
    for (int64_t t = 0; t < T; ++t) {
        const std::vector<float> row(logits.begin() + t * E, logits.begin() + (t + 1) * E);
        const std::vector<int32_t> want = order_by(scores64(ScoreFunc::Sigmoid, row));
        // Slots descend by weight (= score here), lower id first on equal weights; the set is float64's top K.
        std::vector<int32_t> got = ids_of(r, t, K);
        for (int64_t k = 0; k + 1 < K; ++k) {
            const float a = r.weights[size_t(t * K + k)], b = r.weights[size_t(t * K + k + 1)];
            EXPECT_TRUE(a > b || (a == b && got[size_t(k)] < got[size_t(k + 1)])) << "token " << t << " slot " << k;
        }
        EXPECT_EQ(std::set<int32_t>(got.begin(), got.end()), std::set<int32_t>(want.begin(), want.begin() + K))
            << "token " << t;
    }
}

// ---------------------------------------------------------------------------------------------------
// NaN logits

TEST(RouterNaN, NaNScoresRankBelowEveryNumber) {
    const std::vector<float> logits = {kNaN, 1.0f, -50.0f, kNaN, 2.0f, -3.0f};
    const MoeConfig cfg = make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, 6, 6);
    const Routing r = route(cfg, logits);
    EXPECT_EQ(ids_of(r, 0, 6), (std::vector<int32_t>{4, 1, 5, 2, 0, 3}));
    EXPECT_TRUE(std::isnan(r.weights[4]));
    EXPECT_TRUE(std::isnan(r.weights[5]));
    EXPECT_FALSE(std::isnan(r.weights[3]));
}

TEST(RouterNaN, EveryScoreFunctionGivesKDistinctValidIds) {
    for (ScoreFunc f : {ScoreFunc::Softmax, ScoreFunc::Sigmoid, ScoreFunc::SqrtSoftplus}) {
        SCOPED_TRACE(score_func_name(f));
        const int64_t E = 8, K = 4;
        const MoeConfig cfg = make_config(ModelFamily::DeepseekV4, f, E, K);
        const std::vector<float> bias(size_t(E), 0.01f);
        // Token 0: all NaN. Token 1: one NaN among numbers. Token 2: NaN where the best logit would be.
        std::vector<float> logits(size_t(3 * E), 0.0f);
        std::fill(logits.begin(), logits.begin() + E, kNaN);
        for (int64_t e = 0; e < E; ++e) logits[size_t(E + e)] = float(e) * 0.5f;
        logits[size_t(E + 7)] = kNaN;
        for (int64_t e = 0; e < E; ++e) logits[size_t(2 * E + e)] = -float(e);
        logits[size_t(2 * E)] = kNaN;
        const Routing r = route(cfg, logits, {.bias = &bias});
        for (int64_t t = 0; t < 3; ++t) {
            const std::vector<int32_t> ids = ids_of(r, t, K);
            EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()).size(), size_t(K)) << "token " << t;
            for (int32_t e : ids) EXPECT_TRUE(e >= 0 && e < E) << "token " << t << " id " << e;
        }
        EXPECT_EQ(ids_of(r, 0, K), (std::vector<int32_t>{0, 1, 2, 3}));
        if (f != ScoreFunc::Softmax) {  // a softmax over a NaN row is NaN everywhere
            EXPECT_EQ(ids_of(r, 1, K), (std::vector<int32_t>{6, 5, 4, 3}));
            EXPECT_EQ(ids_of(r, 2, K), (std::vector<int32_t>{1, 2, 3, 4}));
        }
    }
}

TEST(RouterNaN, NaNInsideAGroupLimitStillGivesValidIds) {
    const int64_t E = 8, K = 4;
    const MoeConfig cfg =
        with_groups(make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, E, K), 4, 2, GroupScore::Top2Sum);
    std::vector<float> logits = {kNaN, kNaN, kNaN, 1.0f, kNaN, kNaN, kNaN, kNaN};
    const Routing r = route(cfg, logits);
    const std::vector<int32_t> ids = ids_of(r, 0, K);
    EXPECT_EQ(std::set<int32_t>(ids.begin(), ids.end()).size(), size_t(K));
    for (int32_t e : ids) EXPECT_TRUE(e >= 0 && e < E);
    // Every group scores -inf (NaN counts as -inf), so groups 0 and 1 are kept by index. Expert 3 comes
    // first; the dropped groups' experts are -inf, a number, and rank before the kept NaN experts.
    EXPECT_EQ(ids, (std::vector<int32_t>{3, 4, 5, 6}));
}

// ---------------------------------------------------------------------------------------------------
// Hash routing

TEST(RouterHash, CopiesTheTableRowInOrderWithUnbiasedScoreWeights) {
    const int64_t E = 8, K = 3;
    MoeConfig cfg = make_config(ModelFamily::DeepseekV4, ScoreFunc::SqrtSoftplus, E, K);
    cfg.routed_scaling_factor = 1.5;
    cfg.validate();
    // Rows in deliberately non-sorted order; token ids 2, 0, 2.
    const std::vector<int32_t> table = {7, 0, 3,  /**/ 1, 2, 4,  /**/ 5, 6, 0,  /**/ 0, 1, 2};
    const std::vector<int64_t> token_ids = {2, 0, 2};
    const std::vector<float> bias = {0.f, 0.f, 0.f, 0.f, 0.f, 100.f, 0.f, 0.f};  // ignored by hash layers
    std::vector<float> logits(size_t(3 * E));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = pseudo_logit(uint32_t(i + 1000));
    const Routing r = route(cfg, logits, {.bias = &bias, .tid2eid = &table, .token_ids = &token_ids});
    for (int64_t t = 0; t < 3; ++t) {
        const int32_t* row = table.data() + token_ids[size_t(t)] * K;
        EXPECT_EQ(ids_of(r, t, K), std::vector<int32_t>(row, row + K)) << "token " << t;
        const std::vector<float> lt(logits.begin() + t * E, logits.begin() + (t + 1) * E);
        const std::vector<double> s = scores64(ScoreFunc::SqrtSoftplus, lt);
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += s[size_t(row[k])];
        for (int64_t k = 0; k < K; ++k)
            expect_close(r.weights[size_t(t * K + k)], s[size_t(row[k])] / sum * 1.5, 2e-6, 0,
                         "token " + std::to_string(t) + " slot " + std::to_string(k));
    }
}

// ---------------------------------------------------------------------------------------------------
// Normalisation and scaling per family

namespace {

// The weights of a single token.
std::vector<float> weights_for(const MoeConfig& cfg, const std::vector<float>& logits) {
    return route(cfg, logits).weights;
}

MoeConfig family_config(ModelFamily family, ScoreFunc f, bool norm, double scale, int64_t E = 6, int64_t K = 3) {
    MoeConfig c = make_config(family, f, E, K);
    c.norm_topk_prob = norm;
    c.routed_scaling_factor = scale;
    c.validate();
    return c;
}

const std::vector<float> kSixLogits = {1.5f, -0.5f, 2.25f, 0.0f, -2.0f, 0.75f};  // top 3: e2, e0, e5

// Expected weights: the float64 scores of e2, e0, e5, normalised (with `eps`) or not, times `scale`.
std::vector<double> expected(ScoreFunc f, bool normalise, double eps, double scale) {
    const std::vector<double> s = scores64(f, kSixLogits);
    std::vector<double> w = {s[2], s[0], s[5]};
    if (normalise) {
        const double sum = w[0] + w[1] + w[2] + eps;
        for (double& v : w) v /= sum;
    }
    for (double& v : w) v *= scale;
    return w;
}

void expect_weights(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k)
        expect_close(got[k], want[k], 2e-6, 0, what + " slot " + std::to_string(k));
}

}  // namespace

TEST(RouterWeights, DeepseekV3NormalisesThenScales) {
    const MoeConfig cfg = family_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, true, 2.5);
    const Routing r = route(cfg, kSixLogits);
    EXPECT_EQ(ids_of(r, 0, 3), (std::vector<int32_t>{2, 0, 5}));
    expect_weights(r.weights, expected(ScoreFunc::Sigmoid, true, 0, 2.5), "v3");
    EXPECT_NEAR(double(r.weights[0]) + r.weights[1] + r.weights[2], 2.5, 1e-6);
}

TEST(RouterWeights, DeepseekV3WithoutNormOnlyScales) {
    const MoeConfig cfg = family_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, false, 2.5);
    expect_weights(weights_for(cfg, kSixLogits), expected(ScoreFunc::Sigmoid, false, 0, 2.5), "v3 no norm");
}

TEST(RouterWeights, DeepseekV3AddsTheEpsilonToTheDenominator) {
    // Scores near 1e-20 (sigmoid(-46) = 1.05e-20) make the 1e-20 in the denominator visible:
    // w = s / (3 s + 1e-20) * 2.5, about 0.62 instead of 0.83.
    const std::vector<float> tiny(4, -46.0f);
    const MoeConfig cfg = family_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, true, 2.5, 4, 3);
    const std::vector<float> w = weights_for(cfg, tiny);
    const double s = 1.0 / (1.0 + std::exp(46.0));
    for (int k = 0; k < 3; ++k) expect_close(w[size_t(k)], s / (3 * s + 1e-20) * 2.5, 1e-5, 0, "slot");
    EXPECT_LT(w[0], 0.7f);
}

TEST(RouterWeights, DeepseekV2WithNormNormalisesAndDoesNotScale) {
    const MoeConfig cfg = family_config(ModelFamily::DeepseekV2, ScoreFunc::Softmax, true, 16.0);
    const std::vector<float> w = weights_for(cfg, kSixLogits);
    expect_weights(w, expected(ScoreFunc::Softmax, true, 0, 1.0), "v2 norm");
    EXPECT_NEAR(double(w[0]) + w[1] + w[2], 1.0, 1e-6);
}

TEST(RouterWeights, DeepseekV2WithoutNormScalesOnly) {
    const MoeConfig cfg = family_config(ModelFamily::DeepseekV2, ScoreFunc::Softmax, false, 16.0);
    expect_weights(weights_for(cfg, kSixLogits), expected(ScoreFunc::Softmax, false, 0, 16.0), "v2 scale");
}

TEST(RouterWeights, DeepseekV2NormAddsTheEpsilonToo) {
    const std::vector<float> tiny(4, -46.0f);
    const MoeConfig cfg = family_config(ModelFamily::DeepseekV2, ScoreFunc::Sigmoid, true, 16.0, 4, 3);
    const std::vector<float> w = weights_for(cfg, tiny);
    const double s = 1.0 / (1.0 + std::exp(46.0));
    for (int k = 0; k < 3; ++k) expect_close(w[size_t(k)], s / (3 * s + 1e-20), 1e-5, 0, "slot");
}

TEST(RouterWeights, DeepseekV4NormalisesNonSoftmaxScoresRegardlessOfNormTopkProb) {
    for (ScoreFunc f : {ScoreFunc::SqrtSoftplus, ScoreFunc::Sigmoid}) {
        for (bool norm : {false, true}) {
            const MoeConfig cfg = family_config(ModelFamily::DeepseekV4, f, norm, 1.5);
            expect_weights(weights_for(cfg, kSixLogits), expected(f, true, 0, 1.5),
                           std::string("v4 ") + score_func_name(f) + (norm ? " norm" : " no norm"));
        }
    }
}

TEST(RouterWeights, DeepseekV4SoftmaxIsNotRenormalised) {
    for (bool norm : {false, true}) {
        const MoeConfig cfg = family_config(ModelFamily::DeepseekV4, ScoreFunc::Softmax, norm, 1.5);
        expect_weights(weights_for(cfg, kSixLogits), expected(ScoreFunc::Softmax, false, 0, 1.5),
                       norm ? "v4 softmax norm" : "v4 softmax");
    }
}

TEST(RouterWeights, DeepseekV4HasNoEpsilon) {
    // sqrt(softplus(-80)) = 4.2e-18: an added 1e-20 would shift the weights by 8e-4 relative.
    const std::vector<float> tiny(4, -80.0f);
    const MoeConfig cfg = family_config(ModelFamily::DeepseekV4, ScoreFunc::SqrtSoftplus, true, 1.5, 4, 3);
    for (float w : weights_for(cfg, tiny)) EXPECT_NEAR(w, 0.5f, 1e-6);
}

TEST(RouterWeights, Qwen3AndMixtralSoftmaxFollowNormTopkProb) {
    for (ModelFamily family : {ModelFamily::Qwen3Moe, ModelFamily::Qwen2Moe, ModelFamily::Mixtral}) {
        SCOPED_TRACE(model_family_name(family));
        const MoeConfig norm = family_config(family, ScoreFunc::Softmax, true, 1.0);
        const std::vector<float> wn = weights_for(norm, kSixLogits);
        expect_weights(wn, expected(ScoreFunc::Softmax, true, 0, 1.0), "normalised");
        EXPECT_NEAR(double(wn[0]) + wn[1] + wn[2], 1.0, 1e-6);
        const MoeConfig raw = family_config(family, ScoreFunc::Softmax, false, 1.0);
        expect_weights(weights_for(raw, kSixLogits), expected(ScoreFunc::Softmax, false, 0, 1.0), "raw");
    }
}

// ---------------------------------------------------------------------------------------------------
// Masking and batch independence

TEST(RouterMask, MaskedTokensGetMinusOneAndZero) {
    const int64_t E = 8, K = 3, T = 5;
    const MoeConfig cfg = make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, E, K);
    std::vector<float> logits(size_t(T * E));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = pseudo_logit(uint32_t(i + 77));
    logits[size_t(3 * E + 1)] = kNaN;  // a masked token's content does not matter
    const std::vector<uint8_t> active = {1, 0, 1, 0, 1};
    const Routing r = route(cfg, logits, {.active = &active});
    const Routing all = route(cfg, logits);
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t k = 0; k < K; ++k) {
            const size_t i = size_t(t * K + k);
            if (active[size_t(t)]) {
                EXPECT_EQ(r.ids[i], all.ids[i]);
                EXPECT_EQ(bits(r.weights[i]), bits(all.weights[i]));
            } else {
                EXPECT_EQ(r.ids[i], -1) << "token " << t;
                EXPECT_EQ(bits(r.weights[i]), bits(0.0f)) << "token " << t;
            }
        }
    }
}

TEST(RouterMask, MaskedHashTokensIgnoreTheirTokenId) {
    const int64_t E = 4, K = 2;
    const MoeConfig cfg = make_config(ModelFamily::DeepseekV4, ScoreFunc::SqrtSoftplus, E, K);
    const std::vector<int32_t> table = {3, 1, 0, 2};
    const std::vector<int64_t> token_ids = {1, 999};  // the masked token's id is outside the table: unused
    const std::vector<uint8_t> active = {1, 0};
    const Routing r = route(cfg, std::vector<float>(size_t(2 * E), 0.0f),
                            {.active = &active, .tid2eid = &table, .token_ids = &token_ids});
    EXPECT_EQ(ids_of(r, 0, K), (std::vector<int32_t>{0, 2}));
    EXPECT_EQ(ids_of(r, 1, K), (std::vector<int32_t>{-1, -1}));
    EXPECT_EQ(r.weights[2], 0.0f);
    EXPECT_EQ(r.weights[3], 0.0f);
}

TEST(RouterBatch, ATokenRoutesTheSameInsideARangeOfABigBatchAsAlone) {
    const int64_t E = 16, K = 4, T = 300;
    MoeConfig cfg = make_config(ModelFamily::DeepseekV3, ScoreFunc::Sigmoid, E, K);
    cfg.norm_topk_prob = true;
    cfg.routed_scaling_factor = 2.5;
    cfg = with_groups(cfg, 4, 2, GroupScore::Top2Sum);
    std::vector<float> bias(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) bias[size_t(e)] = pseudo_logit(uint32_t(e + 5000)) * 0.01f;
    std::vector<float> logits(size_t(T * E));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = pseudo_logit(uint32_t(i + 9));

    // Only [100, 200) is routed; the rest of the output must stay untouched.
    std::vector<int32_t> ids(size_t(T * K), -7);
    std::vector<float> w(size_t(T * K), -7.0f);
    cpu::RouterParams p;
    p.config = &cfg;
    p.tokens = T;
    p.logits = logits.data();
    p.bias = bias.data();
    p.topk_ids = ids.data();
    p.topk_weights = w.data();
    cpu::route_tokens(p, 100, 200);

    for (int64_t t = 0; t < T; ++t) {
        if (t < 100 || t >= 200) {
            for (int64_t k = 0; k < K; ++k) ASSERT_EQ(ids[size_t(t * K + k)], -7) << "token " << t << " was routed";
            continue;
        }
        const std::vector<float> one(logits.begin() + t * E, logits.begin() + (t + 1) * E);
        const Routing alone = route(cfg, one, {.bias = &bias});
        for (int64_t k = 0; k < K; ++k) {
            EXPECT_EQ(ids[size_t(t * K + k)], alone.ids[size_t(k)]) << "token " << t << " slot " << k;
            EXPECT_EQ(bits(w[size_t(t * K + k)]), bits(alone.weights[size_t(k)])) << "token " << t << " slot " << k;
        }
    }
}
