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

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace steadymoe {

namespace cpu {
struct PackedExpert;
}
namespace ep {
struct Nodes;
}

struct EpStats {
    std::vector<int64_t> global_expert_load;  // tokens per logical expert on all ranks (summed in rank order)
    std::vector<int64_t> tokens_sent;         // token rows this rank sent to each rank (itself included)
    std::vector<int64_t> rows_to_nodes;       // token rows that left this rank for each node (its own included)
    int64_t row_bytes = 0;                    // bytes of one token row on the wire (EpMoeLayer::fp8_rows)
};

class CollectiveQueue;

// One batch between the phases of EpMoeLayer (begin_dispatch ... finish_combine). Move-only.
class EpBatch {
public:
    EpBatch();
    ~EpBatch();
    EpBatch(EpBatch&&) noexcept;
    EpBatch& operator=(EpBatch&&) noexcept;

private:
    friend class EpMoeLayer;
    struct State;
    std::unique_ptr<State> s_;
};

class EpMoeLayer {
public:
    // Collective. Checks with every rank that they run the same config, shared weights and placement,
    // and throws Error(Communication) naming the first rank that differs, or InvalidArgument naming a
    // rank that did not load an expert its slots hold. `layer` may be partial (only this rank's experts,
    // MoeLayer::from_checkpoint with `held`). `layer` and `transport` must outlive this object.
    EpMoeLayer(const MoeLayer& layer, ExpertPlacement placement, Transport& transport);

    ~EpMoeLayer();

    // Collective: every rank calls it with its own tokens (any count, zero included). Returns this
    // rank's output — bitwise what `layer.forward` gives for the same tokens. With a chunk size set,
    // the batch runs as a pipeline of chunks: the rows of one chunk travel while the experts compute
    // the one before and its results travel back — the same bytes, whatever the chunk size.
    MoeOutput forward(const MoeInput& input, EpStats* stats = nullptr) const;

    // Tokens per chunk of forward()'s pipeline (0, the default: the whole batch at once). Ranks may
    // choose differently: each forward starts with a small exchange of chunk counts, and every rank
    // runs as many chunks as the rank with the most (empty ones after its own).
    void set_chunk_tokens(int64_t tokens);
    int64_t chunk_tokens() const { return chunk_tokens_; }

    // Ranks as nodes of `ranks` consecutive ranks (it must divide the rank count; every rank must set the
    // same, between batches; the default is one node). With more than one node the exchanges take two
    // levels: a token crosses to another node once — to the rank of its sender's local index there —
    // and that rank hands it to the node's ranks that hold its experts; results return the same way.
    // With routing limited to topk_group groups and each group's experts on one node (the planner's
    // placements), a token leaves for at most topk_group nodes. The output bytes are the same. Both hops
    // of an exchange run on the communication thread, overlapping compute as one level's exchange does.
    // forward() refuses ranks that group differently.
    void set_ranks_per_node(int ranks);
    int ranks_per_node() const { return ranks_per_node_ > 0 ? ranks_per_node_ : transport_.size(); }

    // The layer in phases, for callers that overlap other work with the exchanges (two micro-batches
    // in turn, as DeepSeek serves). Every phase call is collective: all ranks make the same calls in
    // the same order. begin_* start an exchange on the layer's communication thread and return;
    // finish_* wait for it. forward() is these four calls in a row.
    //   begin_dispatch:  routes the tokens and starts sending each to the ranks holding its experts;
    //   finish_dispatch: waits until every rank's rows for this rank have arrived;
    //   begin_combine:   runs this rank's experts on them and starts sending the results home;
    //   finish_combine:  waits for them, adds the shared expert, combines: the batch's output.
    // The input must stay alive until finish_combine (the shared expert reads it there). A rank whose
    // input cannot run (a NaN, a bad mask) still takes part in the dispatch, saying so: every rank's
    // finish_dispatch then throws, naming it, and the layer stays usable. A failure after that (a rank
    // that stops, a malformed message) leaves the layer refusing further batches.
    EpBatch begin_dispatch(const MoeInput& input) const;
    void finish_dispatch(EpBatch& batch) const;
    void begin_combine(EpBatch& batch) const;
    MoeOutput finish_combine(EpBatch& batch, EpStats* stats = nullptr) const;

    const ExpertPlacement& placement() const { return placement_; }

    // Collective, between batches (none in flight): every rank switches to `next` together, after the
    // same agreement check as construction (a rank passing another table makes all of them refuse,
    // keeping the old one). A rank whose new slots hold experts it lacks receives their weights from the
    // lowest rank that has them (checked against a digest and the layer's sizes on arrival); every rank
    // then confirms, and all switch — or, if any rank failed, all keep the old table and throw, naming
    // it. Outputs do not change by a bit. Returns how many experts this rank received.
    size_t change_placement(ExpertPlacement next);

    // What the agreement check compares: config, a digest of the weights every rank holds (router,
    // bias, hash table, shared expert), the placement.
    static std::string fingerprint(const MoeLayer& layer, const ExpertPlacement& placement);

    // Whether token rows travel as FP8 (e4m3 codes and per-128 scales, about half of bf16's bytes): when
    // the layer quantises activations to FP8 and every routed expert is quantised, the sender quantises
    // each row once — exactly as the experts would — and they take its codes as they are. Decided at
    // construction, the same on every rank.
    bool fp8_rows() const { return fp8_rows_; }

private:
    struct MovedExpert;
    // Throws Error(Communication) unless every rank runs this layer with `placement`; with
    // `require_held`, also InvalidArgument on every rank when some rank lacks an expert its slots hold.
    // `vote` travels in the same collective: the result says whether every rank voted yes.
    bool agree(const ExpertPlacement& placement, bool require_held, bool vote = true) const;
    // An all-gather through the communication thread.
    std::vector<Bytes> gather(const Bytes& mine) const;
    // Throws once a failure may have left the ranks' exchanges out of step.
    void check_usable() const;
    // begin_dispatch, for the chunks of an input forward() has checked whole (values_checked: its
    // values are not scanned again).
    EpBatch begin_dispatch(const MoeInput& input, bool values_checked) const;
    // begin_dispatch's work before the exchange: checks, routing, what goes to each rank.
    std::vector<Bytes> dispatch_messages(const MoeInput& input, EpBatch::State& state, bool values_checked) const;
    // Whether this rank has expert e's weights (loaded, or received on a placement change).
    bool holds(int64_t e) const;
    const ExpertWeights& weights_of(int64_t e) const;
    const cpu::PackedExpert& packed_expert(int64_t e) const;

    const MoeLayer& layer_;
    ExpertPlacement placement_;
    Transport& transport_;
    std::unique_ptr<CollectiveQueue> queue_;
    int64_t chunk_tokens_ = 0;
    int ranks_per_node_ = 0;  // 0: one node
    ep::Nodes nodes() const;
    bool two_level() const { return ranks_per_node() < transport_.size(); }
    std::map<int64_t, std::shared_ptr<const MovedExpert>> moved_;  // experts received from other ranks
    uint64_t generation_ = 0;                  // placement changes so far (checked in every dispatch)
    bool fp8_rows_ = false;
    mutable std::atomic<bool> broken_{false};  // see check_usable
};

}  // namespace steadymoe
