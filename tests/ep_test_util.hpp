// Helpers of the expert-parallel tests on CPU ranks in one process (test_ep*.cpp): ranks as threads,
// placements with replicas, the one-rank comparison, the deepseek-v3-tiny golden and demo inputs.
#pragma once

#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/ep_layer.hpp"
#include "steadymoe/model/checkpoint.hpp"

#include "test_util.hpp"

#include <filesystem>
#include <functional>
#include <vector>

namespace steadymoe::ep_test {

// Runs fn(rank) on `ranks` threads; rethrows the first failure.
void on_ranks(int ranks, const std::function<void(int)>& fn);

// A placement with replicas: a shuffled table plus the first `extra` experts again, padded so every
// rank holds the same number of slots.
ExpertPlacement replicated(int64_t experts, int ranks, int64_t extra);

// Splits `in` unevenly over the ranks (one rank may get no tokens), runs the EP layer (in nodes of
// `ranks_per_node` ranks when set), and checks every rank's rows against the one-rank layer on the
// whole batch, bit for bit. Returns every rank's statistics.
std::vector<EpStats> expect_same_as_one_rank(const MoeLayer& layer, const MoeInput& in, const ExpertPlacement& placement,
                                             int64_t chunk_tokens = 0, int ranks_per_node = 0);

// Layer 1 of the deepseek-v3-tiny golden, whole, with its input.
struct V3Golden {
    std::filesystem::path dir = test::golden_dir() / "deepseek-v3-tiny";
    Checkpoint ckpt = Checkpoint::open(dir);
    MoeLayer whole = MoeLayer::from_checkpoint(ckpt, 1, {.threads = 1});
    MoeInput in{SafetensorsFile::open(dir / "io.safetensors").get("input"), Tensor(), Tensor()};
};

// T tokens of the demo model's shape: synthetic hidden states, the demo's token ids, every fifth masked.
MoeInput demo_input(const DemoModelShape& s, int64_t T, DType dtype);

// A rank whose input cannot run (a NaN in token 9, refused by default) still takes part in the
// exchanges, saying so: every rank stops naming it — the token by its index in the batch, not in a
// chunk — and the next batch runs, bitwise.
void expect_a_bad_input_stops_every_rank(int ranks, int ranks_per_node, int64_t chunk_tokens);

}  // namespace steadymoe::ep_test
