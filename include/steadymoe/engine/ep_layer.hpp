// The MoE layer with its routed experts spread over ranks (expert parallelism). Every rank routes its
// own tokens, sends each token once to every rank holding one of its experts (counts and slots from the
// routing alone: prefix order, no atomics), the ranks compute the (token, expert) pairs they received,
// the results return to the token's home rank, and the home rank adds the shared expert and combines
// the slots in canonical order. Each pair's arithmetic is the one-rank layer's, so a token's output
// bytes do not depend on the number of ranks or on the placement (docs/determinism.md).
#pragma once

#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/parallel/placement.hpp"
#include "steadymoe/parallel/transport.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace steadymoe {

struct EpStats {
    std::vector<int64_t> global_expert_load;  // tokens per logical expert on all ranks (summed in rank order)
    std::vector<int64_t> tokens_sent;         // token rows this rank sent to each rank (itself included)
};

class EpMoeLayer {
public:
    // Collective. Checks with every rank that they run the same config, shared weights and placement,
    // and throws Error(Communication) naming the first rank that differs, or InvalidArgument naming a
    // rank that did not load an expert its slots hold. `layer` may be partial (only this rank's experts,
    // MoeLayer::from_checkpoint with `held`). `layer` and `transport` must outlive this object.
    EpMoeLayer(const MoeLayer& layer, ExpertPlacement placement, Transport& transport);

    // Collective: every rank calls it with its own tokens (any count, zero included). Returns this
    // rank's output — bitwise what `layer.forward` gives for the same tokens.
    MoeOutput forward(const MoeInput& input, EpStats* stats = nullptr) const;

    const ExpertPlacement& placement() const { return placement_; }

    // Collective, between batches: every rank switches to `next` together, after the same agreement
    // check as construction (a rank passing another table makes all of them refuse, keeping the old
    // one). Outputs do not change by a bit. No weights move: each rank must already hold the experts
    // of its new slots (with every expert loaded, any table works).
    void change_placement(ExpertPlacement next);

    // What the agreement check compares: config, a digest of the weights every rank holds (router,
    // bias, hash table, shared expert), the placement.
    static std::string fingerprint(const MoeLayer& layer, const ExpertPlacement& placement);

private:
    // Throws Error(Communication) unless every rank runs this layer with `placement`.
    void agree(const ExpertPlacement& placement) const;

    const MoeLayer& layer_;
    ExpertPlacement placement_;
    Transport& transport_;
};

}  // namespace steadymoe
