// Expert-load balancing as DeepSeek-V3 trains it: the auxiliary-loss-free bias update, and the
// sequence-wise balance loss that is kept as a small safeguard. Loads come from MoeOutput::expert_load
// (one rank) or EpStats::global_expert_load (all ranks, summed in rank order), so every rank computes
// the same update.
#pragma once

#include <cstdint>
#include <vector>

namespace steadymoe {

// b_i += gamma * sign(mean load - load_i): overloaded experts become less likely to be selected,
// underloaded ones more (the bias steers selection only, never the weights). sign(0) = 0. Returns the
// new biases; `bias` and `load` have one entry per routed expert.
std::vector<float> update_selection_bias(const std::vector<float>& bias, const std::vector<int64_t>& load,
                                         float gamma);

// The sequence-wise balance loss alpha * sum_i f_i * P_i over one sequence of T tokens:
//   f_i = E / (K * T) * (tokens whose top-k holds expert i),
//   P_i = 1/T * sum_t s_it / sum_j s_jt   (each token's affinities normalised over all experts).
// scores: [T][E] affinities (after the score function); topk_ids: [T][K]. Summed in double in index
// order, so it is the same number on every machine.
double sequence_balance_loss(const float* scores, const int32_t* topk_ids, int64_t tokens, int64_t experts,
                             int64_t top_k, double alpha);

}  // namespace steadymoe
