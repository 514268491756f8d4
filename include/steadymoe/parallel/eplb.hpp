// The expert-parallel load-balancing planner: from per-expert loads, a placement with replicas of hot
// experts, in DeepSeek's hierarchical way — groups of experts packed onto nodes with equal group counts,
// the node's experts replicated (each extra replica to the expert with the highest load per replica),
// then the replicas packed onto the node's GPUs with equal slot counts, always the heaviest item onto
// the lightest bin. Every tie goes to the lower index, so the plan is a pure function of its inputs.
#pragma once

#include "steadymoe/parallel/placement.hpp"

#include <cstdint>
#include <vector>

namespace steadymoe {

struct EplbRequest {
    std::vector<double> load;  // per logical expert (tokens over some window)
    int64_t physical = 0;      // physical experts in all (>= experts, a multiple of ranks)
    int64_t groups = 1;        // expert groups (contiguous ids); node-level packing keeps them whole
    int nodes = 1;
    int ranks = 1;             // GPUs (or CPU ranks) in all, a multiple of nodes
};

// Throws InvalidArgument naming the inconsistent field. When groups do not divide over nodes the
// planner treats the whole cluster as one node (the global policy).
ExpertPlacement plan_placement(const EplbRequest& request);

// The load each rank carries under `placement` when every expert's load is split evenly over its
// replicas.
std::vector<double> rank_loads(const ExpertPlacement& placement, const std::vector<double>& load);

}  // namespace steadymoe
