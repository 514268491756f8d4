// One routed expert's stored weights as bytes, for moving replicas between ranks when a placement
// changes: every matrix's format, sizes, data and scales, followed by a digest of all of it, so damage on
// the way is caught instead of computed with.
#pragma once

#include "steadymoe/model/config.hpp"
#include "steadymoe/model/weights.hpp"
#include "steadymoe/parallel/transport.hpp"

#include <cstdint>

namespace steadymoe {

// Appends expert `id`'s matrices (gate, up, down) to `out`.
void pack_expert_bytes(int64_t id, const ExpertWeights& expert, Bytes& out);

// Reads one expert written by pack_expert_bytes starting at `at` (advanced past it), checking the
// digest, every matrix against its format, and its sizes against `config` ([I, H] gate and up, [H, I]
// down). Throws Error(Communication) naming `from` for a truncated or damaged message.
ExpertWeights unpack_expert_bytes(const Bytes& in, size_t& at, const MoeConfig& config, int from, int64_t* id);

}  // namespace steadymoe
