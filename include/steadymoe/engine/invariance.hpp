// The invariance battery: runs a layer on the same tokens alone, inside batches of other tokens of
// several sizes, at several positions, reversed, with other thread counts and with masked and
// non-finite neighbours — and compares the bytes of every token's output.
#pragma once

#include "steadymoe/engine/moe_layer.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace steadymoe {

struct InvarianceOptions {
    std::vector<int64_t> batch_sizes = {1, 2, 3, 7, 64, 257, 1000};
    std::vector<int> thread_counts = {1, 2, 8};
    int64_t probe_tokens = 4;   // tokens checked at each position
    uint32_t seed = 7;          // filler tokens come from the filler streams with this seed
    std::function<void(const std::string&)> progress;  // one line per case
};

struct InvarianceCase {
    std::string name;  // e.g. "batch 257, probe in the middle"
    bool passed = true;
    std::string first_difference;  // "token 3, column 17: 0x3f80 vs 0x3f81" when failed
};

struct InvarianceReport {
    std::vector<InvarianceCase> cases;
    bool passed() const;
    int64_t failures() const;
};

using LayerForward = std::function<MoeOutput(const MoeInput&)>;

// How the battery runs a layer. The reference (each probe token alone) and the batch cases use
// `forward`; the NaN-neighbour case `forward_propagating` (non-finite inputs propagated, not refused);
// each variant is checked once, on a batch of `batch` tokens (0: the largest batch size) with the
// probes in the middle — on the CPU backend, other thread counts; on a GPU, launches without graphs.
struct InvarianceRunner {
    struct Variant {
        std::string name;  // "8 threads"
        int64_t batch = 0;
        LayerForward forward;
    };
    LayerForward forward;
    LayerForward forward_propagating;
    std::vector<Variant> variants;
};

// The CPU backend: the layer on options.thread_counts.front() threads, variants for every thread count.
InvarianceRunner cpu_invariance_runner(const MoeLayer& layer, const InvarianceOptions& options);

// Probe tokens are made from the layer's hidden width with `make_probe(n)` -> MoeInput of n tokens.
InvarianceReport run_invariance(const MoeLayer& layer, const MoeInput& probe, const InvarianceOptions& options);
// The same battery through another runner (a GPU's, say); `layer` gives the shapes and filler tokens.
InvarianceReport run_invariance(const MoeLayer& layer, const MoeInput& probe, const InvarianceOptions& options,
                                const InvarianceRunner& runner);

}  // namespace steadymoe
