#include "steadymoe/parallel/eplb.hpp"

#include "steadymoe/core/error.hpp"

#include <algorithm>
#include <numeric>

namespace steadymoe {

namespace {

// Items (by weight, heaviest first, lower index first on ties) into `bins` bins of equal count, each
// to the lightest bin with room (lower bin first on ties). Returns the bin of every item.
std::vector<int64_t> balanced_packing(const std::vector<double>& weight, int64_t bins) {
    const int64_t n = int64_t(weight.size()), per = n / bins;
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return weight[size_t(a)] > weight[size_t(b)]; });
    std::vector<double> total(static_cast<size_t>(bins), 0.0);
    std::vector<int64_t> count(static_cast<size_t>(bins), 0), bin_of(static_cast<size_t>(n), -1);
    for (int64_t item : order) {
        int64_t best = -1;
        for (int64_t b = 0; b < bins; ++b)
            if (count[size_t(b)] < per && (best < 0 || total[size_t(b)] < total[size_t(best)])) best = b;
        bin_of[size_t(item)] = best;
        total[size_t(best)] += weight[size_t(item)];
        ++count[size_t(best)];
    }
    return bin_of;
}

// `slots` replicas over the experts: one each, then each extra to the highest load per replica.
std::vector<int64_t> replica_counts(const std::vector<double>& load, int64_t slots) {
    std::vector<int64_t> count(load.size(), 1);
    for (int64_t extra = int64_t(load.size()); extra < slots; ++extra) {
        size_t best = 0;
        for (size_t e = 1; e < load.size(); ++e)
            if (load[e] / double(count[e]) > load[best] / double(count[best])) best = e;
        ++count[best];
    }
    return count;
}

}  // namespace

ExpertPlacement plan_placement(const EplbRequest& r) {
    const int64_t experts = int64_t(r.load.size());
    SMOE_CHECK(experts > 0, InvalidArgument, "plan: no expert loads given");
    for (size_t e = 0; e < r.load.size(); ++e)
        SMOE_CHECK(r.load[e] >= 0.0, InvalidArgument, "plan: expert {} has a negative load ({})", e, r.load[e]);
    SMOE_CHECK(r.ranks > 0 && r.nodes > 0 && r.ranks % r.nodes == 0, InvalidArgument,
               "plan: {} ranks do not divide over {} nodes", r.ranks, r.nodes);
    SMOE_CHECK(r.physical >= experts && r.physical % r.ranks == 0, InvalidArgument,
               "plan: {} physical experts must be at least the {} experts and a multiple of the {} ranks",
               r.physical, experts, r.ranks);
    SMOE_CHECK(r.groups > 0 && experts % r.groups == 0, InvalidArgument, "plan: {} experts do not form {} groups",
               experts, r.groups);
    // Whole groups per node when they divide; otherwise one node spanning every rank.
    const bool by_node = r.groups % r.nodes == 0 && r.physical % r.nodes == 0;
    const int64_t nodes = by_node ? r.nodes : 1, groups = by_node ? r.groups : 1;
    const int64_t group_size = experts / groups, ranks_per_node = r.ranks / nodes;
    const int64_t slots_per_node = r.physical / nodes, slots_per_rank = r.physical / r.ranks;
    SMOE_CHECK(slots_per_node >= experts / nodes, InvalidArgument,
               "plan: {} physical experts per node cannot hold the node's {} experts", slots_per_node, experts / nodes);

    std::vector<double> group_load(static_cast<size_t>(groups), 0.0);
    for (int64_t e = 0; e < experts; ++e) group_load[size_t(e / group_size)] += r.load[size_t(e)];
    const std::vector<int64_t> node_of_group = balanced_packing(group_load, nodes);

    std::vector<int32_t> table(static_cast<size_t>(r.physical), -1);
    for (int64_t node = 0; node < nodes; ++node) {
        std::vector<int32_t> members;  // the node's experts, ascending
        for (int64_t g = 0; g < groups; ++g)
            if (node_of_group[size_t(g)] == node)
                for (int64_t e = g * group_size; e < (g + 1) * group_size; ++e) members.push_back(int32_t(e));
        std::vector<double> load;
        for (int32_t e : members) load.push_back(r.load[size_t(e)]);
        const std::vector<int64_t> count = replica_counts(load, slots_per_node);
        std::vector<int32_t> replica_expert;
        std::vector<double> replica_load;
        for (size_t i = 0; i < members.size(); ++i)
            for (int64_t c = 0; c < count[i]; ++c) {
                replica_expert.push_back(members[i]);
                replica_load.push_back(load[i] / double(count[i]));
            }
        const std::vector<int64_t> rank_of = balanced_packing(replica_load, ranks_per_node);
        std::vector<int64_t> next(static_cast<size_t>(ranks_per_node), 0);
        for (size_t i = 0; i < replica_expert.size(); ++i) {
            const int64_t rank = node * ranks_per_node + rank_of[i];
            table[size_t(rank * slots_per_rank + next[size_t(rank_of[i])]++)] = replica_expert[i];
        }
    }
    return ExpertPlacement::from_table(experts, r.ranks, std::move(table));
}

std::vector<double> rank_loads(const ExpertPlacement& placement, const std::vector<double>& load) {
    SMOE_CHECK(int64_t(load.size()) == placement.logical_experts(), InvalidArgument,
               "{} loads for a placement of {} experts", load.size(), placement.logical_experts());
    std::vector<double> out(static_cast<size_t>(placement.ranks()), 0.0);
    for (int64_t p = 0; p < placement.ranks() * placement.slots_per_rank(); ++p) {
        const int32_t e = placement.logical_of(p);
        out[size_t(placement.rank_of(p))] += load[size_t(e)] / double(placement.replicas(e).size());
    }
    return out;
}

}  // namespace steadymoe
