// `steadymoe run` under an MPI launcher: the layer with its routed experts spread over the ranks.
#pragma once

#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/parallel/placement.hpp"
#include "steadymoe/parallel/transport.hpp"

#include <memory>
#include <optional>
#include <string>

namespace steadymoe::cli {

struct EpRun {
    std::string placement = "contiguous";  // contiguous, strided, or a placement file (steadymoe plan)
    double timeout_s = 60;                 // bound on every wait for another rank
    int ranks_per_node = 0;                // > 0: two-level exchanges over nodes of this many ranks
    bool root = true;                      // set: whether this rank writes the output
    int ranks = 1;                         // set: ranks in the run
    std::shared_ptr<Transport> transport;  // set by begin_expert_parallel
    std::optional<ExpertPlacement> table;  // set by begin_expert_parallel
};

// When this process was started by an MPI launcher with more than one rank: joins the other ranks and
// works out the placement; returns the routed experts this rank must load (its slots' experts).
// Returns nullopt otherwise: the run is one process.
std::optional<std::vector<bool>> begin_expert_parallel(const MoeConfig& config, EpRun& run);

// After begin_expert_parallel said yes: every rank takes its share of the tokens (contiguous, in rank
// order), runs them through an EpMoeLayer over its share of the experts, and rank 0 receives every
// rank's rows, in token order — the output one process gives. Other ranks get an empty output.
// Returns nullopt when the run is one process.
std::optional<MoeOutput> run_expert_parallel(const MoeLayer& layer, const MoeInput& in, EpRun& run);

}  // namespace steadymoe::cli
