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

// Probe tokens are made from the layer's hidden width with `make_probe(n)` -> MoeInput of n tokens.
InvarianceReport run_invariance(const MoeLayer& layer, const MoeInput& probe, const InvarianceOptions& options);

}  // namespace steadymoe
