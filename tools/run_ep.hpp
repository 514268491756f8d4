// `steadymoe run` under an MPI launcher: the layer with its routed experts spread over the ranks.
#pragma once

#include "steadymoe/engine/moe_layer.hpp"

#include <optional>
#include <string>

namespace steadymoe::cli {

struct EpRun {
    std::string placement = "contiguous";  // contiguous, strided, or a placement file (steadymoe plan)
    double timeout_s = 60;                 // bound on every wait for another rank
    bool root = true;                      // set: whether this rank writes the output
    int ranks = 1;                         // set: ranks in the run
};

// When this process was started by an MPI launcher with more than one rank: every rank takes its share
// of the tokens (contiguous, in rank order), runs them through an EpMoeLayer, and rank 0 receives every
// rank's rows, in token order — the output one process gives. Returns nullopt otherwise, and an empty
// output on ranks other than 0.
std::optional<MoeOutput> run_expert_parallel(const MoeLayer& layer, const MoeInput& in, EpRun& run);

}  // namespace steadymoe::cli
