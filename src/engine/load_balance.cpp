#include "steadymoe/engine/load_balance.hpp"

#include "steadymoe/core/error.hpp"

namespace steadymoe {

std::vector<float> update_selection_bias(const std::vector<float>& bias, const std::vector<int64_t>& load,
                                         float gamma) {
    SMOE_CHECK(bias.size() == load.size() && !load.empty(), InvalidArgument,
               "bias update: {} biases for {} expert loads", bias.size(), load.size());
    int64_t total = 0;
    for (int64_t l : load) {
        SMOE_CHECK(l >= 0, InvalidArgument, "bias update: a negative expert load ({})", l);
        total += l;
    }
    // Compare load_i * E with the total instead of load_i with a fractional mean: exact in integers.
    const int64_t experts = int64_t(load.size());
    std::vector<float> out(bias);
    for (size_t i = 0; i < load.size(); ++i) {
        const int64_t scaled = load[i] * experts;
        const float sign = scaled < total ? 1.0f : scaled > total ? -1.0f : 0.0f;
        out[i] = bias[i] + gamma * sign;
    }
    return out;
}

double sequence_balance_loss(const float* scores, const int32_t* topk_ids, int64_t tokens, int64_t experts,
                             int64_t top_k, double alpha) {
    SMOE_CHECK(tokens > 0 && experts > 0 && top_k > 0, InvalidArgument,
               "balance loss: {} tokens, {} experts, top-{}", tokens, experts, top_k);
    std::vector<double> selected(static_cast<size_t>(experts), 0.0), affinity(static_cast<size_t>(experts), 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
        double sum = 0.0;
        for (int64_t e = 0; e < experts; ++e) sum += double(scores[t * experts + e]);
        for (int64_t e = 0; e < experts; ++e) affinity[size_t(e)] += double(scores[t * experts + e]) / sum;
        for (int64_t k = 0; k < top_k; ++k) {
            const int32_t e = topk_ids[t * top_k + k];
            SMOE_CHECK(e >= 0 && e < experts, InvalidArgument, "balance loss: token {} slot {} names expert {}", t, k,
                       e);
            selected[size_t(e)] += 1.0;
        }
    }
    double loss = 0.0;
    for (int64_t e = 0; e < experts; ++e) {
        const double f = double(experts) / double(top_k * tokens) * selected[size_t(e)];
        const double p = affinity[size_t(e)] / double(tokens);
        loss += f * p;
    }
    return alpha * loss;
}

}  // namespace steadymoe
