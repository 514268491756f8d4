#include "steadymoe/engine/ep_layer.hpp"

#include "steadymoe/core/digest.hpp"
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/core/parallel.hpp"
#include "steadymoe/kernels/cpu/activation.hpp"
#include "steadymoe/kernels/cpu/experts.hpp"
#include "steadymoe/parallel/collective_queue.hpp"

#include "break_on_throw.hpp"
#include "ep_relay.hpp"
#include "expert_transfer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <cstring>

namespace steadymoe {

using ep::kDispatchFailed;
using ep::kDispatchHeader;
using ep::kDispatchOk;
using ep::Outgoing;
using ep::Reader;
using ep::Writer;

namespace {

// Every active token's row as it travels in FP8: H e4m3 codes, then one f32 scale per 128 values — the
// quantisation the experts would make of it (quantize_row_fp8_codes), made once by the sender from the
// input's values as the one-rank layer holds them (plan.x).
Bytes quantised_rows(const BatchPlan& plan, int64_t H, ActivationQuant mode, size_t row_bytes, int threads) {
    Bytes out(size_t(plan.tokens) * row_bytes);
    const int64_t groups = cpu::fp8_groups(H);
    parallel_for(plan.tokens, threads, [&](int64_t t) {
        if (!plan.active[size_t(t)]) return;  // never sent
        thread_local std::vector<float> scales;
        scales.resize(size_t(groups));
        uint8_t* dst = out.data() + size_t(t) * row_bytes;
        cpu::quantize_row_fp8_codes(plan.x.data<float>() + t * H, H, mode, dst, scales.data());
        std::memcpy(dst + H, scales.data(), size_t(groups) * 4);
    });
    return out;
}

// A message's token rows as the experts' input: the values (and, for Fp8Block, the kept scales, one row
// of groups per token) of FP8 rows, or the bf16 / f32 values as they came.
void received_rows(ep::RowEncoding encoding, const uint8_t* rows, int64_t tokens, int64_t H, ActivationQuant mode,
                   std::vector<float>& hidden, std::vector<float>& kept_scales) {
    if (!ep::is_fp8(encoding)) {
        const bool bf16 = encoding == ep::RowEncoding::Bf16;
        for (int64_t i = 0; i < tokens * H; ++i) {
            if (bf16) {
                uint16_t b;
                std::memcpy(&b, rows + 2 * i, 2);
                hidden[size_t(i)] = bf16_to_f32(b);
            } else {
                std::memcpy(&hidden[size_t(i)], rows + 4 * i, 4);
            }
        }
        return;
    }
    const int64_t groups = cpu::fp8_groups(H);
    const size_t row_bytes = ep::row_bytes(encoding, H);
    const bool kept = cpu::fp8_keeps_scales(mode);
    if (kept) kept_scales.resize(size_t(tokens * groups));
    std::vector<float> scales(static_cast<size_t>(groups));
    for (int64_t t = 0; t < tokens; ++t) {
        const uint8_t* codes = rows + size_t(t) * row_bytes;
        std::memcpy(scales.data(), codes + H, size_t(groups) * 4);
        cpu::fp8_codes_to_operand(codes, scales.data(), H, mode, hidden.data() + t * H,
                                  kept ? kept_scales.data() + t * groups : nullptr);
    }
}

// The first and last bytes and the shape of a tensor: cheap, and different for any other checkpoint.
uint64_t sample(uint64_t h, const Tensor& t) {
    if (!t.defined()) return fnv1a(h, "-", 1);
    const size_t n = t.nbytes(), k = std::min<size_t>(n, 256);
    h = fnv1a(h, &n, sizeof n);
    h = fnv1a(h, t.raw(), k);
    return fnv1a(h, static_cast<const uint8_t*>(t.raw()) + (n - k), k);
}

}  // namespace

std::string EpMoeLayer::fingerprint(const MoeLayer& layer, const ExpertPlacement& placement) {
    const MoeConfig& c = layer.config();
    const MoeLayerWeights& w = layer.weights();
    uint64_t h = kFnvOffset;
    // The tensors every rank holds: router, bias, hash table, shared expert (routed experts differ by rank).
    h = sample(h, w.router), h = sample(h, w.selection_bias), h = sample(h, w.tid2eid);
    if (w.has_shared)
        for (const WeightMatrix* m : {&w.shared.gate, &w.shared.up, &w.shared.down}) h = sample(sample(h, m->data), m->scale);
    return fmt::format("config {} H={} I={} E={} K={} layer {} activations {}; weights {:016x}; placement {}",
                       c.model_type, c.hidden_size, c.moe_intermediate_size, c.n_routed_experts, c.top_k, w.layer,
                       activation_quant_name(layer.activation_quant()), h, placement.fingerprint());
}

EpMoeLayer::EpMoeLayer(const MoeLayer& layer, ExpertPlacement placement, Transport& transport)
    : layer_(layer), placement_(std::move(placement)), transport_(transport),
      queue_(std::make_unique<CollectiveQueue>(transport_)) {
    // FP8 rows need every routed expert quantised: each rank vouches for the experts it loaded (together
    // they hold every expert), and all must — a vote in the agreement's collective. Experts moved in later
    // are copies of loaded ones.
    // Every expert this rank loaded, decoded now, several at a time (batches would one by one)
    layer_.packed();
    bool quantised = layer_.activation_quant() != ActivationQuant::None;
    for (int64_t e = 0; e < layer_.config().n_routed_experts && quantised; ++e)
        if (holds(e)) quantised = packed_expert(e).gate.quantized;
    fp8_rows_ = agree(placement_, true, quantised);
}

std::vector<Bytes> EpMoeLayer::gather(const Bytes& mine) const { return queue_->all_gather(mine).get(); }

void EpMoeLayer::check_usable() const {
    SMOE_CHECK(!broken_, Communication,
               "rank {}: an earlier batch failed after its results began to move, so the ranks may be out of step; "
               "make a new EpMoeLayer on every rank",
               transport_.rank());
}

struct EpMoeLayer::MovedExpert {
    ExpertWeights weights;
    cpu::PackedExpert packed;
};

bool EpMoeLayer::holds(int64_t e) const { return layer_.weights().experts[size_t(e)].held() || moved_.count(e) > 0; }

const ExpertWeights& EpMoeLayer::weights_of(int64_t e) const {
    const ExpertWeights& loaded = layer_.weights().experts[size_t(e)];
    return loaded.held() ? loaded : moved_.at(e)->weights;
}

const cpu::PackedExpert& EpMoeLayer::packed_expert(int64_t e) const {
    return layer_.weights().experts[size_t(e)].held() ? layer_.packed_expert(e) : moved_.at(e)->packed;
}

bool EpMoeLayer::agree(const ExpertPlacement& placement, bool require_held, bool vote) const {
    SMOE_CHECK(placement.ranks() == transport_.size() && placement.logical_experts() == layer_.config().n_routed_experts,
               InvalidArgument, "a placement of {} experts on {} ranks for {} experts on {} ranks",
               placement.logical_experts(), placement.ranks(), layer_.config().n_routed_experts, transport_.size());
    // Each rank also says whether it loaded every expert its slots need, so that all refuse together.
    std::string missing;
    const std::vector<bool> needed = placement.experts_of(transport_.rank());
    for (size_t e = 0; e < needed.size() && missing.empty() && require_held; ++e)
        if (needed[e] && !holds(int64_t(e)))
            missing = fmt::format("rank {} did not load expert {}, which its slots hold", transport_.rank(), e);
    const std::string mine = fingerprint(layer_, placement);
    const std::string said = (vote ? "1" : "0") + mine + "\n" + missing;  // vote, fingerprint, what is missing
    const std::vector<Bytes> all = gather(Bytes(said.begin(), said.end()));
    bool all_yes = true;
    for (int r = 0; r < transport_.size(); ++r) {
        const std::string with_vote(all[size_t(r)].begin(), all[size_t(r)].end());
        SMOE_CHECK(!with_vote.empty(), Communication, "rank {} sent rank {} an empty agreement message", r, transport_.rank());
        all_yes = all_yes && with_vote[0] == '1';
        const std::string theirs = with_vote.substr(1);
        const size_t cut = theirs.find('\n');
        SMOE_CHECK(theirs.substr(0, cut) == mine, Communication, "rank {} runs {} but rank {} runs {}",
                   transport_.rank(), mine, r, theirs.substr(0, cut));
        SMOE_CHECK(cut == std::string::npos || cut + 1 == theirs.size(), InvalidArgument, "placement: {}",
                   theirs.substr(cut + 1));
    }
    return all_yes;
}

size_t EpMoeLayer::change_placement(ExpertPlacement next) {
    check_usable();
    agree(next, false);
    const int64_t E = layer_.config().n_routed_experts;
    const int ranks = transport_.size(), me = transport_.rank();

    // Who holds what, from every rank: all derive the same transfers from the same sets. Each expert a
    // rank's new slots need and it lacks comes from the lowest rank that holds it.
    Bytes have(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) have[size_t(e)] = uint8_t(holds(e));
    const std::vector<Bytes> haves = gather(have);
    // Any failure from here on — packing, a missing holder, the exchange, unpacking — is voted on, so
    // that every rank refuses together instead of some waiting for a collective the others skipped.
    std::string problem;
    std::vector<Bytes> send(static_cast<size_t>(ranks));
    try {
        for (int r = 0; r < ranks; ++r) {
            SMOE_CHECK(haves[size_t(r)].size() == size_t(E), Communication, "rank {} sent a malformed expert list", r);
            const std::vector<bool> needed = next.experts_of(r);
            for (int64_t e = 0; e < E; ++e) {
                if (!needed[size_t(e)] || haves[size_t(r)][size_t(e)]) continue;
                int sender = 0;
                while (sender < ranks && !haves[size_t(sender)][size_t(e)]) ++sender;
                SMOE_CHECK(sender < ranks, InvalidArgument, "placement: expert {} is needed by rank {} and held by no rank",
                           e, r);
                if (sender == me) pack_expert_bytes(e, weights_of(e), send[size_t(r)]);
            }
        }
    } catch (const std::exception& e) {
        problem = e.what();
        send.assign(static_cast<size_t>(ranks), Bytes{});
    }
    std::vector<Bytes> received = queue_->all_to_all(std::move(send)).get();

    // Unpack (digest, sizes and formats checked; values too when the layer checks weights), then every
    // rank says whether it got all it needs: all switch, or none does.
    std::map<int64_t, std::shared_ptr<const MovedExpert>> arrived;
    try {
        for (int s = 0; s < ranks && problem.empty(); ++s) {
            for (size_t at = 0; at < received[size_t(s)].size();) {
                int64_t id = -1;
                ExpertWeights w = unpack_expert_bytes(received[size_t(s)], at, layer_.config(), s, &id);
                if (layer_.options().check_weights)
                    for (const WeightMatrix* m : {&w.gate, &w.up, &w.down}) m->check_finite();
                auto moved = std::make_shared<MovedExpert>();
                moved->packed = cpu::pack_expert(w);
                moved->weights = std::move(w);
                arrived[id] = std::move(moved);
            }
        }
        const std::vector<bool> needed = next.experts_of(me);
        for (int64_t e = 0; e < E && problem.empty(); ++e)
            if (needed[size_t(e)] && !holds(e) && !arrived.count(e)) problem = fmt::format("expert {} did not arrive", e);
    } catch (const std::exception& e) {
        problem = e.what();
    }
    const std::vector<Bytes> verdicts = gather(Bytes(problem.begin(), problem.end()));
    for (int r = 0; r < ranks; ++r)
        SMOE_CHECK(verdicts[size_t(r)].empty(), Communication, "placement change refused: rank {}: {}", r,
                   std::string(verdicts[size_t(r)].begin(), verdicts[size_t(r)].end()));
    const size_t count = arrived.size();
    for (auto& [e, moved] : arrived) moved_[e] = std::move(moved);
    placement_ = std::move(next);
    ++generation_;
    // Received experts the new table no longer puts on this rank are let go.
    const std::vector<bool> mine = placement_.experts_of(me);
    std::erase_if(moved_, [&](const auto& kv) { return !mine[size_t(kv.first)]; });
    return count;
}

struct EpBatch::State {
    BatchPlan plan;
    std::vector<Outgoing> out;                // what went to each rank
    std::future<std::vector<Bytes>> dispatch;  // rows from every rank
    std::vector<Bytes> received;
    std::future<std::vector<Bytes>> combine;   // results back from every rank
    std::future<std::vector<Bytes>> loads;     // every rank's expert loads
    int phase = 0;                            // phases done: 1 begin_dispatch ... 4 finish_combine
    uint64_t generation = 0;                  // the placement it was dispatched under
    std::exception_ptr error;                 // this rank could not take part (its input, say)
    std::vector<int64_t> rows_to_nodes;       // token rows sent to each node
    int64_t row_bytes = 0;                    // bytes of one token row on the wire
};


EpBatch::EpBatch() = default;
EpBatch::~EpBatch() = default;
EpBatch::EpBatch(EpBatch&&) noexcept = default;
EpBatch& EpBatch::operator=(EpBatch&&) noexcept = default;

EpMoeLayer::~EpMoeLayer() = default;

void EpMoeLayer::set_ranks_per_node(int ranks) {
    SMOE_CHECK(ranks >= 1 && transport_.size() % ranks == 0, InvalidArgument,
               "nodes of {} ranks do not divide the {} ranks", ranks, transport_.size());
    ranks_per_node_ = ranks;
}

ep::Nodes EpMoeLayer::nodes() const {
    return {transport_.size(), ranks_per_node_ > 0 ? ranks_per_node_ : transport_.size()};
}

void EpMoeLayer::set_chunk_tokens(int64_t tokens) {
    SMOE_CHECK(tokens >= 0, InvalidArgument, "chunk size {} is negative", tokens);
    chunk_tokens_ = tokens;
}

namespace {
// `phase`: the phases a batch has done, -1 for a batch never begun.
void expect_phase(int phase, int done, const char* call) {
    SMOE_CHECK(phase == done, InvalidArgument, "EpMoeLayer::{} on a batch {}", call,
               phase < 0 ? "that was never begun" : fmt::format("at phase {} (it needs phase {} done)", phase, done));
}
}  // namespace

EpBatch EpMoeLayer::begin_dispatch(const MoeInput& input) const { return begin_dispatch(input, false); }

EpBatch EpMoeLayer::begin_dispatch(const MoeInput& input, bool values_checked) const {
    check_usable();
    const int ranks = transport_.size();
    EpBatch batch;
    batch.s_ = std::make_unique<EpBatch::State>();
    EpBatch::State& st = *batch.s_;
    st.generation = generation_;
    std::vector<Bytes> messages;
    try {
        messages = dispatch_messages(input, st, values_checked);
    } catch (const std::exception& e) {
        // This rank's input cannot run (a NaN, a bad mask, ...). Every rank still gets a message from it —
        // one that says so — so all make the same exchanges and all stop at finish_dispatch, naming it.
        // In two levels the note goes to this rank's rail, whose gateways tell their nodes.
        st.error = std::current_exception();
        const std::string why = e.what();
        Writer w;
        w.put(kDispatchFailed), w.put(uint64_t(generation_));
        w.append(why.data(), why.size());
        if (two_level())
            messages = ep::rail_bundles(nodes(), transport_.rank(), {}, generation_, ep::RowEncoding::F32, nullptr, 0,
                                        w.bytes);
        else
            messages.assign(static_cast<size_t>(ranks), w.bytes);
    }
    if (two_level()) {  // along the rail, then the node's gateways hand every rank its messages
        const ep::Nodes n = nodes();
        const int me = transport_.rank();
        const int64_t H = layer_.config().hidden_size;
        st.dispatch = queue_->all_to_all_relayed(
            std::move(messages), [n, me, H](const std::vector<Bytes>& bundles) { return ep::node_forward(n, me, bundles, H); });
    } else {
        st.dispatch = queue_->all_to_all(std::move(messages));
    }
    st.phase = 1;
    return batch;
}

std::vector<Bytes> EpMoeLayer::dispatch_messages(const MoeInput& input, EpBatch::State& st, bool values_checked) const {
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k;
    const int ranks = transport_.size();
    st.plan = layer_.begin_batch(input, true, values_checked);
    BatchPlan& plan = st.plan;
    const int64_t T = plan.tokens;
    std::vector<float> logits(static_cast<size_t>(T * E));
    if (T > 0) layer_.router_logits(plan, logits.data());
    layer_.route_batch(plan, logits.data());

    // Dispatch: which tokens go where, from the routing alone.
    const int32_t* ids = plan.out.topk_ids.data<int32_t>();
    const float* weights = plan.out.topk_weights.data<float>();
    st.out.assign(static_cast<size_t>(ranks), Outgoing{});
    for (int64_t t = 0; t < T; ++t) {
        if (!plan.active[size_t(t)]) continue;
        for (int64_t k = 0; k < K; ++k) {
            const int32_t e = ids[t * K + k];
            const int64_t physical = placement_.replica_for(e, t, k);
            Outgoing& o = st.out[size_t(placement_.rank_of(physical))];
            if (o.tokens.empty() || o.tokens.back() != t) o.tokens.push_back(t);
            o.pair_row.push_back(int32_t(o.tokens.size() - 1));
            o.pair_slot.push_back(int32_t(physical % placement_.slots_per_rank()));
            o.pair_weight.push_back(weights[t * K + k]);
            o.pair_home.push_back(t * K + k);
        }
    }
    const bool bf16 = plan.act_dtype == cpu::ActDType::BF16;
    const ep::RowEncoding encoding = fp8_rows_ ? (bf16 ? ep::RowEncoding::Fp8OfBf16 : ep::RowEncoding::Fp8OfF32)
                                               : (bf16 ? ep::RowEncoding::Bf16 : ep::RowEncoding::F32);
    const size_t row_bytes = ep::row_bytes(encoding, H);
    st.row_bytes = int64_t(row_bytes);
    const auto* rows = static_cast<const uint8_t*>(input.hidden.raw());
    Bytes fp8;  // the rows as they travel, quantised once here
    if (fp8_rows_) {
        fp8 = quantised_rows(plan, H, layer_.activation_quant(), row_bytes, layer_.options().threads);
        rows = fp8.data();
    }
    // Rows crossing to each node: a token once per node in two levels (what each bundle carries), once per
    // rank in one.
    const ep::Nodes n = nodes();
    st.rows_to_nodes.assign(size_t(n.nodes()), 0);
    if (two_level())
        return ep::rail_bundles(n, transport_.rank(), st.out, generation_, encoding, rows, row_bytes, {}, &st.rows_to_nodes);
    for (int d = 0; d < ranks; ++d) st.rows_to_nodes[size_t(n.node(d))] += int64_t(st.out[size_t(d)].tokens.size());
    std::vector<Bytes> messages(static_cast<size_t>(ranks));
    for (int d = 0; d < ranks; ++d)
        messages[size_t(d)] = ep::dispatch_message(st.out[size_t(d)], generation_, encoding, rows, row_bytes);
    return messages;
}

void EpMoeLayer::finish_dispatch(EpBatch& batch) const {
    expect_phase(batch.s_ ? batch.s_->phase : -1, 1, "finish_dispatch");
    EpBatch::State& st = *batch.s_;
    if (two_level()) {  // messages relayed by the node's gateways (failure notes too)
        BreakOnThrow guard(broken_);
        st.phase = 2;
        st.received = ep::unpack_by_source(nodes(), st.dispatch.get());
    } else {
        st.received = st.dispatch.get();
        st.phase = 2;
    }
    if (st.error) std::rethrow_exception(st.error);
    for (int s = 0; s < int(st.received.size()); ++s) {
        Reader r(st.received[size_t(s)], s);
        const uint8_t status = r.get<uint8_t>();
        const uint64_t generation = r.get<uint64_t>();
        if (status == kDispatchFailed) {
            const uint8_t* why = r.take(r.remaining());
            SMOE_THROW(Communication, "rank {} could not take part in the batch: {}", s,
                       std::string(reinterpret_cast<const char*>(why), st.received[size_t(s)].size() - kDispatchHeader));
        }
        SMOE_CHECK(status == kDispatchOk && generation == st.generation, Communication,
                   "rank {} dispatched under placement {} ({}), this rank under {}: ranks out of step", s, generation,
                   status == kDispatchOk ? "ok" : "malformed", st.generation);
    }
}

void EpMoeLayer::begin_combine(EpBatch& batch) const {
    expect_phase(batch.s_ ? batch.s_->phase : -1, 2, "begin_combine");
    // A failure past this point may leave the ranks' exchanges out of step: the layer refuses further use.
    BreakOnThrow guard(broken_);
    EpBatch::State& st = *batch.s_;
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts;
    const int ranks = transport_.size(), me = transport_.rank();

    // The pairs this rank serves, one source at a time (each in its own activation dtype).
    std::vector<Bytes> replies(static_cast<size_t>(ranks));
    for (int s = 0; s < ranks; ++s) {
        Reader r(st.received[size_t(s)], s);
        r.take(kDispatchHeader);  // checked by finish_dispatch
        const uint8_t code = r.get<uint8_t>();
        SMOE_CHECK(code < ep::kRowEncodings && (ep::is_fp8(ep::RowEncoding(code)) == fp8_rows_), Communication,
                   "rank {} sent its token rows in encoding {} (0 f32, 1 bf16, 2-3 FP8), this rank takes them {}", s, code,
                   fp8_rows_ ? "in FP8" : "in the input's dtype");
        const ep::RowEncoding encoding{code};
        const int64_t tokens = r.get<int64_t>(), pairs = r.get<int64_t>();
        // Sizes from the wire are checked against the bytes that came before anything is allocated.
        const size_t row_bytes = ep::row_bytes(encoding, H);
        SMOE_CHECK(tokens >= 0 && pairs >= 0 && size_t(tokens) <= r.remaining() / row_bytes &&
                       size_t(pairs) <= (r.remaining() - size_t(tokens) * row_bytes) / 12,
                   Communication, "rank {} sent a malformed message ({} tokens, {} pairs in {} bytes)", s, tokens, pairs,
                   r.remaining());
        std::vector<float> hidden(static_cast<size_t>(tokens * H)), scales;
        received_rows(encoding, r.take(size_t(tokens) * row_bytes), tokens, H, layer_.activation_quant(), hidden, scales);
        std::vector<int32_t> pair_row(static_cast<size_t>(pairs)), pair_slot(static_cast<size_t>(pairs));
        std::vector<float> pair_weight(static_cast<size_t>(pairs));
        std::memcpy(pair_row.data(), r.take(size_t(pairs) * 4), size_t(pairs) * 4);
        std::memcpy(pair_slot.data(), r.take(size_t(pairs) * 4), size_t(pairs) * 4);
        std::memcpy(pair_weight.data(), r.take(size_t(pairs) * 4), size_t(pairs) * 4);
        std::vector<cpu::ExpertJob> jobs(static_cast<size_t>(placement_.slots_per_rank()));
        for (int64_t p = 0; p < pairs; ++p) {
            const int32_t slot = pair_slot[size_t(p)], row = pair_row[size_t(p)];
            SMOE_CHECK(slot >= 0 && slot < placement_.slots_per_rank() && row >= 0 && row < tokens, Communication,
                       "rank {} sent pair {} for slot {} row {}, outside this rank's {} slots / {} rows", s, p, slot,
                       row, placement_.slots_per_rank(), tokens);
            cpu::ExpertJob& job = jobs[size_t(slot)];
            job.tokens.push_back(row);
            job.destinations.push_back(p);
            job.weights.push_back(pair_weight[size_t(p)]);
        }
        for (int64_t slot = 0; slot < placement_.slots_per_rank(); ++slot) {
            cpu::ExpertJob& job = jobs[size_t(slot)];
            job.expert = &packed_expert(placement_.logical_of(me * placement_.slots_per_rank() + slot));
            job.swiglu_limit = float(cfg.swiglu_limit);
            job.weight_before_down = cfg.weight_placement == WeightPlacement::BeforeDown;
        }
        std::erase_if(jobs, [](const cpu::ExpertJob& j) { return j.tokens.empty(); });
        Bytes result(size_t(pairs * H) * 4);
        cpu::ExpertStageParams sp;
        sp.hidden = hidden.data();
        sp.hidden_size = H;
        sp.act_dtype = ep::has_bf16_activations(encoding) ? cpu::ActDType::BF16 : cpu::ActDType::F32;
        sp.act_quant = layer_.activation_quant();
        sp.hidden_quantised = ep::is_fp8(encoding);
        sp.hidden_scales = scales.empty() ? nullptr : scales.data();
        sp.out = reinterpret_cast<float*>(result.data());
        sp.threads = layer_.options().threads;
        cpu::run_expert_jobs(sp, jobs);
        replies[size_t(s)] = std::move(result);
    }
    st.received.clear();
    if (two_level()) {  // back through the node's gateways, then along the rails
        const ep::Nodes n = nodes();
        st.combine = queue_->all_to_all_relayed(
            ep::node_return(n, me, replies), [n, me](const std::vector<Bytes>& in_node) { return ep::rail_return(n, me, in_node); });
    } else {
        st.combine = queue_->all_to_all(std::move(replies));
    }
    // Expert loads of every rank travel with the results (always exchanged: collectives must match).
    Bytes load(size_t(E) * 8);
    std::memcpy(load.data(), st.plan.out.expert_load.data(), load.size());
    st.loads = queue_->all_gather(load);
    st.phase = 3;
}

MoeOutput EpMoeLayer::finish_combine(EpBatch& batch, EpStats* stats) const {
    expect_phase(batch.s_ ? batch.s_->phase : -1, 3, "finish_combine");
    BreakOnThrow guard(broken_);
    EpBatch::State& st = *batch.s_;
    BatchPlan& plan = st.plan;
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k, T = plan.tokens;
    const int ranks = transport_.size();
    const std::vector<Bytes> returned =
        two_level() ? ep::unpack_by_destination(nodes(), st.combine.get()) : st.combine.get();
    const std::vector<Bytes> loads = st.loads.get();
    st.phase = 4;

    // Combine at home: every slot's row where the one-rank layer puts it, then the shared expert.
    std::vector<float> contributions(static_cast<size_t>((T * K + T) * H));
    for (int d = 0; d < ranks; ++d) {
        const Outgoing& o = st.out[size_t(d)];
        SMOE_CHECK(returned[size_t(d)].size() == o.pair_home.size() * size_t(H) * 4, Communication,
                   "rank {} returned {} bytes for {} pairs", d, returned[size_t(d)].size(), o.pair_home.size());
        for (size_t p = 0; p < o.pair_home.size(); ++p)
            std::memcpy(contributions.data() + o.pair_home[p] * H, returned[size_t(d)].data() + p * size_t(H) * 4,
                        size_t(H) * 4);
    }
    const cpu::PackedExpert* shared_expert = layer_.weights().has_shared ? &layer_.packed_shared() : nullptr;
    std::vector<cpu::ExpertJob> shared;
    for (cpu::ExpertJob& job : plan.jobs)
        if (job.expert == shared_expert) shared.push_back(std::move(job));
    if (!shared.empty()) {
        cpu::ExpertStageParams sp;
        sp.hidden = plan.x.data<float>();
        sp.hidden_size = H;
        sp.act_dtype = plan.act_dtype;
        sp.act_quant = layer_.activation_quant();
        sp.out = contributions.data();
        sp.threads = layer_.options().threads;
        cpu::run_expert_jobs(sp, shared);
    }
    layer_.combine(plan, contributions.data());

    if (stats) {
        stats->global_expert_load.assign(size_t(E), 0);
        for (int r = 0; r < ranks; ++r) {
            SMOE_CHECK(loads[size_t(r)].size() == size_t(E) * 8, Communication, "rank {} sent a malformed load", r);
            const auto* l = reinterpret_cast<const int64_t*>(loads[size_t(r)].data());
            for (int64_t e = 0; e < E; ++e) stats->global_expert_load[size_t(e)] += l[e];
        }
        stats->tokens_sent.assign(size_t(ranks), 0);
        for (int d = 0; d < ranks; ++d) stats->tokens_sent[size_t(d)] = int64_t(st.out[size_t(d)].tokens.size());
        stats->rows_to_nodes = st.rows_to_nodes;
        stats->row_bytes = st.row_bytes;
    }
    return std::move(plan.out);
}

namespace {

// Rows [0, n) of every part's tensor `field`, one part after another, as one tensor.
Tensor stack_rows(const std::vector<MoeOutput>& parts, Tensor MoeOutput::*field) {
    const Tensor& first = parts.front().*field;
    int64_t rows = 0;
    for (const MoeOutput& p : parts) rows += (p.*field).dim(0);
    Tensor all = Tensor::zeros(first.dtype(), {rows, first.dim(1)});
    size_t at = 0;
    for (const MoeOutput& p : parts) {
        const Tensor& t = p.*field;
        std::memcpy(static_cast<uint8_t*>(all.mutable_raw()) + at, t.raw(), t.nbytes());
        at += t.nbytes();
    }
    return all;
}

// The chunks' outputs as the batch's: rows in order; expert loads and statistics summed.
MoeOutput join_chunks(const std::vector<MoeOutput>& parts, const std::vector<EpStats>& part_stats, EpStats* stats) {
    MoeOutput out;
    out.output = stack_rows(parts, &MoeOutput::output);
    out.topk_ids = stack_rows(parts, &MoeOutput::topk_ids);
    out.topk_weights = stack_rows(parts, &MoeOutput::topk_weights);
    out.expert_load.assign(parts.front().expert_load.size(), 0);
    for (const MoeOutput& p : parts)
        for (size_t e = 0; e < p.expert_load.size(); ++e) out.expert_load[e] += p.expert_load[e];
    if (stats) {
        *stats = part_stats.front();
        for (size_t c = 1; c < part_stats.size(); ++c) {
            SMOE_CHECK(part_stats[c].rows_to_nodes.size() == stats->rows_to_nodes.size() &&
                           part_stats[c].tokens_sent.size() == stats->tokens_sent.size(),
                       Internal, "chunk {} counted its rows over another layout of ranks", c);
            for (size_t e = 0; e < stats->global_expert_load.size(); ++e)
                stats->global_expert_load[e] += part_stats[c].global_expert_load[e];
            for (size_t d = 0; d < stats->tokens_sent.size(); ++d) stats->tokens_sent[d] += part_stats[c].tokens_sent[d];
            for (size_t n = 0; n < stats->rows_to_nodes.size(); ++n) stats->rows_to_nodes[n] += part_stats[c].rows_to_nodes[n];
        }
    }
    return out;
}

}  // namespace

MoeOutput EpMoeLayer::forward(const MoeInput& input, EpStats* stats) const {
    check_usable();
    // Every rank runs as many chunks as the rank with the most of them, so the collectives pair up
    // whatever chunk size (none included) each rank chose. The whole input is checked first and a
    // problem travels with the count, so that every rank stops together, before any rows move.
    std::exception_ptr own_problem;
    std::string problem;
    try {
        layer_.check_input(input);
    } catch (const std::exception& e) {
        own_problem = std::current_exception();
        problem = e.what();
    }
    const int64_t T = input.hidden.defined() ? input.hidden.dim(0) : 0;
    const int64_t size = chunk_tokens_ > 0 ? std::min(chunk_tokens_, std::max<int64_t>(T, 1)) : std::max<int64_t>(T, 1);
    const int64_t mine = (T + size - 1) / size;
    Writer said;
    said.put(mine), said.put(int32_t(ranks_per_node()));  // the node size travels too: all must agree
    said.append(problem.data(), problem.size());
    const std::vector<Bytes> counts = gather(said.bytes);
    if (own_problem) std::rethrow_exception(own_problem);
    int64_t chunks = std::max<int64_t>(1, mine);
    for (int r = 0; r < int(counts.size()); ++r) {
        Reader in(counts[size_t(r)], r);
        chunks = std::max(chunks, in.get<int64_t>());
        const int32_t per_node = in.get<int32_t>();
        SMOE_CHECK(per_node == ranks_per_node(), Communication, "rank {} groups the ranks into nodes of {}, this rank into {}",
                   r, per_node, ranks_per_node());
        const size_t rest = in.remaining();
        SMOE_CHECK(rest == 0, Communication, "rank {} could not take part in the batch: {}", r,
                   std::string(reinterpret_cast<const char*>(in.take(rest)), rest));
    }
    auto chunk = [&](int64_t c) {
        const int64_t begin = std::min(T, c * size), end = std::min(T, begin + size);
        return input.rows(begin, end);
    };
    // Chunk c's rows travel while chunk c - 1 computes; its results travel while chunk c + 1's rows do.
    std::vector<MoeOutput> parts(static_cast<size_t>(chunks));
    std::vector<EpStats> part_stats(static_cast<size_t>(chunks));
    std::vector<EpBatch> batches(static_cast<size_t>(chunks));
    batches[0] = begin_dispatch(chunk(0), true);
    for (int64_t c = 0; c < chunks; ++c) {
        finish_dispatch(batches[size_t(c)]);
        if (c + 1 < chunks) batches[size_t(c + 1)] = begin_dispatch(chunk(c + 1), true);
        begin_combine(batches[size_t(c)]);
        if (c > 0) parts[size_t(c - 1)] = finish_combine(batches[size_t(c - 1)], &part_stats[size_t(c - 1)]);
    }
    parts[size_t(chunks - 1)] = finish_combine(batches[size_t(chunks - 1)], &part_stats[size_t(chunks - 1)]);
    if (chunks == 1) {
        if (stats) *stats = std::move(part_stats[0]);
        return std::move(parts[0]);
    }
    return join_chunks(parts, part_stats, stats);
}

}  // namespace steadymoe
