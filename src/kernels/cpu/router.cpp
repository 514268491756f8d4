#include "steadymoe/kernels/cpu/router.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace steadymoe::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// NaN sorts below everything, so a poisoned token still picks valid experts deterministically.
inline float rank_key(float v) { return std::isnan(v) ? kNegInf : v; }
inline bool ranks_before(float va, int64_t a, float vb, int64_t b) {
    const float ka = rank_key(va), kb = rank_key(vb);
    if (ka != kb) return ka > kb;
    const bool na = std::isnan(va), nb = std::isnan(vb);
    if (na != nb) return nb;  // a real -inf ranks before NaN
    return a < b;
}

void compute_scores(ScoreFunc f, const float* logits, int64_t n, float* scores) {
    switch (f) {
        case ScoreFunc::Softmax: {
            float mx = kNegInf;
            for (int64_t e = 0; e < n; ++e) mx = std::max(mx, logits[e]);
            float sum = 0.0f;
            for (int64_t e = 0; e < n; ++e) {
                scores[e] = std::exp(logits[e] - mx);
                sum += scores[e];
            }
            for (int64_t e = 0; e < n; ++e) scores[e] /= sum;
            if (std::isnan(mx)) std::fill(scores, scores + n, std::numeric_limits<float>::quiet_NaN());
            break;
        }
        case ScoreFunc::Sigmoid:
            for (int64_t e = 0; e < n; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
            break;
        case ScoreFunc::SqrtSoftplus:
            for (int64_t e = 0; e < n; ++e) {
                const float x = logits[e];
                // softplus with the usual linear tail above 20, where log1p(exp(x)) == x in fp32
                const float sp = x > 20.0f ? x : std::log1p(std::exp(x));
                scores[e] = std::sqrt(sp);
            }
            break;
    }
}

// Drops all but the best topk_group groups of experts by setting their selection scores to -inf.
void limit_groups(const MoeConfig& cfg, float* sel) {
    const int64_t groups = cfg.n_group, per = cfg.n_routed_experts / cfg.n_group;
    std::vector<float> gscore(static_cast<size_t>(groups));
    for (int64_t g = 0; g < groups; ++g) {
        const float* s = sel + g * per;
        if (cfg.group_score == GroupScore::Max) {
            float best = kNegInf;
            for (int64_t j = 0; j < per; ++j) best = std::max(best, rank_key(s[j]));
            gscore[size_t(g)] = best;
        } else {
            float a = kNegInf, b = kNegInf;  // the two largest
            for (int64_t j = 0; j < per; ++j) {
                const float v = rank_key(s[j]);
                if (v > a) { b = a; a = v; }
                else if (v > b) b = v;
            }
            gscore[size_t(g)] = a + b;
        }
    }
    std::vector<int64_t> order(static_cast<size_t>(groups));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        return ranks_before(gscore[size_t(x)], x, gscore[size_t(y)], y);
    });
    for (int64_t r = cfg.topk_group; r < groups; ++r) {
        float* s = sel + order[size_t(r)] * per;
        std::fill(s, s + per, kNegInf);
    }
}

void select_topk(const float* sel, int64_t n, int64_t k, int32_t* ids) {
    // Partial selection: k passes, each taking the best remaining expert in canonical order.
    std::vector<uint8_t> taken(size_t(n), 0);
    for (int64_t slot = 0; slot < k; ++slot) {
        int64_t best = -1;
        for (int64_t e = 0; e < n; ++e) {
            if (taken[size_t(e)]) continue;
            if (best < 0 || ranks_before(sel[e], e, sel[best], best)) best = e;
        }
        taken[size_t(best)] = 1;
        ids[slot] = int32_t(best);
    }
}

void finish_weights(const MoeConfig& cfg, const float* scores, const int32_t* ids, float* w) {
    const int64_t k = cfg.top_k;
    const WeightRule rule = weight_rule(cfg);
    for (int64_t s = 0; s < k; ++s) w[s] = scores[ids[s]];
    if (rule.normalise) {
        float sum = 0.0f;
        for (int64_t s = 0; s < k; ++s) sum += w[s];
        if (rule.eps) sum += 1e-20f;
        for (int64_t s = 0; s < k; ++s) w[s] /= sum;
    }
    if (rule.scale != 1.0f)
        for (int64_t s = 0; s < k; ++s) w[s] *= rule.scale;
}

}  // namespace

WeightRule weight_rule(const MoeConfig& cfg) {
    const bool deepseek_v2 = cfg.family == ModelFamily::DeepseekV2;
    const bool v4 = cfg.family == ModelFamily::DeepseekV4;
    WeightRule r;
    // DeepSeek-V4 normalises every non-softmax score; the others follow norm_topk_prob.
    // (DeepSeek-V2 skips normalising a single expert's weight.)
    r.normalise = v4 ? cfg.score_func != ScoreFunc::Softmax : (cfg.norm_topk_prob && (!deepseek_v2 || cfg.top_k > 1));
    // The V2/V3 reference adds 1e-20 to the denominator; V4 and the softmax families do not.
    r.eps = deepseek_v2 || cfg.family == ModelFamily::DeepseekV3;
    // DeepSeek-V2 scales only weights it did not normalise; everyone else always scales.
    r.scale = deepseek_v2 && r.normalise ? 1.0f : float(cfg.routed_scaling_factor);
    return r;
}

void route_tokens(const RouterParams& p, int64_t begin, int64_t end) {
    const MoeConfig& cfg = *p.config;
    const int64_t E = cfg.n_routed_experts, K = cfg.top_k;
    std::vector<float> scores(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
    for (int64_t t = begin; t < end; ++t) {
        int32_t* ids = p.topk_ids + t * K;
        float* w = p.topk_weights + t * K;
        if (p.active && !p.active[t]) {
            std::fill(ids, ids + K, -1);
            std::fill(w, w + K, 0.0f);
            continue;
        }
        compute_scores(cfg.score_func, p.logits + t * E, E, scores.data());
        if (p.hash) {
            const int32_t* row = p.tid2eid + p.token_ids[t] * K;
            std::copy(row, row + K, ids);
        } else {
            for (int64_t e = 0; e < E; ++e) sel[size_t(e)] = p.bias ? scores[size_t(e)] + p.bias[e] : scores[size_t(e)];
            if (cfg.n_group > 1) limit_groups(cfg, sel.data());
            select_topk(sel.data(), E, K, ids);
        }
        finish_weights(cfg, scores.data(), ids, w);
    }
}

}  // namespace steadymoe::cpu
