#include "steadymoe/engine/moe_layer.hpp"

#include "steadymoe/core/numeric.hpp"
#include "steadymoe/core/parallel.hpp"
#include "steadymoe/kernels/cpu/experts.hpp"
#include "steadymoe/kernels/cpu/router.hpp"
#include "steadymoe/model/checkpoint.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>

namespace steadymoe {

namespace {

// Per calling thread, grown to the largest batch seen and kept: a forward pass in steady state
// allocates no large buffers.
thread_local std::vector<float> t_logits;
thread_local std::vector<float> t_contributions;

void grow(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
}

// NaN/Inf codes anywhere in the weights (one pass over them, the experts on several threads; where several
// are damaged, parallel_for passes on the first one's error).
void check_weights_finite(const MoeLayerWeights& w, int threads) {
    auto check = [](const ExpertWeights& e) {
        e.gate.check_finite();
        e.up.check_finite();
        e.down.check_finite();
    };
    parallel_for(int64_t(w.experts.size()), threads, [&](int64_t e) {
        if (w.experts[size_t(e)].held()) check(w.experts[size_t(e)]);
    });
    if (w.has_shared) check(w.shared);
    WeightMatrix router{ExpertFormat::Dense, w.router.dim(0), w.router.dim(1), w.router, {}, 1.0f, "router"};
    router.check_finite();
    for (int64_t h = 0; w.shared_gate.defined() && h < w.shared_gate.numel(); ++h)
        SMOE_CHECK(std::isfinite(w.shared_gate.data<float>()[h]), BadFormat,
                   "layer {}: shared expert gate weight {} is not finite", w.layer, h);
}

// The caller's hidden states as exact float32 values, and its dtype for rounding.
void check_hidden(const Tensor& h, int64_t H, cpu::ActDType& dtype) {
    SMOE_CHECK(h.defined(), InvalidArgument, "no hidden states given");
    SMOE_CHECK(h.rank() == 2 && h.dim(1) == H, InvalidArgument,
               "hidden states have shape {}, expected [tokens, {}] for this layer's hidden size", shape_str(h.shape()),
               H);
    SMOE_CHECK(h.dtype() == DType::F32 || h.dtype() == DType::BF16, InvalidArgument,
               "hidden states have dtype {}; F32 or BF16 expected", dtype_name(h.dtype()));
    dtype = h.dtype() == DType::BF16 ? cpu::ActDType::BF16 : cpu::ActDType::F32;
}

std::vector<uint8_t> active_tokens(const Tensor& mask, int64_t T) {
    std::vector<uint8_t> active(size_t(T), 1);
    if (!mask.defined()) return active;
    SMOE_CHECK(mask.rank() == 1 && mask.dim(0) == T, InvalidArgument, "mask has shape {}, expected [{}]",
               shape_str(mask.shape()), T);
    SMOE_CHECK(mask.dtype() == DType::BOOL || mask.dtype() == DType::U8 || mask.dtype() == DType::I32 ||
                   mask.dtype() == DType::I64,
               InvalidArgument, "mask has dtype {}; BOOL, U8, I32 or I64 expected", dtype_name(mask.dtype()));
    for (int64_t t = 0; t < T; ++t) active[size_t(t)] = mask.get(t) != 0;
    return active;
}

std::vector<int64_t> checked_token_ids(const Tensor& ids, int64_t T, int64_t vocab, const std::vector<uint8_t>& active) {
    SMOE_CHECK(ids.defined(), InvalidArgument, "this layer routes by token id (hash layer): token ids are required");
    SMOE_CHECK(ids.rank() == 1 && ids.dim(0) == T, InvalidArgument, "token ids have shape {}, expected [{}]",
               shape_str(ids.shape()), T);
    SMOE_CHECK(ids.dtype() == DType::I32 || ids.dtype() == DType::I64, InvalidArgument,
               "token ids have dtype {}; I32 or I64 expected", dtype_name(ids.dtype()));
    std::vector<int64_t> out(size_t(T), 0);
    for (int64_t t = 0; t < T; ++t) {
        if (!active[size_t(t)]) continue;  // padding carries no meaningful id
        const int64_t id = ids.dtype() == DType::I64 ? ids.data<int64_t>()[t] : ids.data<int32_t>()[t];
        SMOE_CHECK(0 <= id && id < vocab, InvalidArgument, "token {} has id {}, outside the vocabulary [0, {})", t,
                   id, vocab);
        out[size_t(t)] = id;
    }
    return out;
}

// Rejects the batch when a real token's hidden vector holds NaN or Inf, naming the first such token
// and column. Rows are scanned in parallel; the report is the lowest bad index whatever the threads.
void reject_nonfinite(const Tensor& hidden, int64_t T, int64_t H, const std::vector<uint8_t>& active, int threads) {
    const int64_t chunk = 64, chunks = (T + chunk - 1) / chunk;
    std::vector<int64_t> first(size_t(chunks), -1);
    const bool bf16 = hidden.dtype() == DType::BF16;
    parallel_for(chunks, threads, [&](int64_t c) {
        for (int64_t t = c * chunk; t < std::min(T, (c + 1) * chunk); ++t) {
            if (!active[size_t(t)]) continue;
            for (int64_t h = 0; h < H; ++h) {
                const float v = bf16 ? bf16_to_f32(hidden.data<uint16_t>()[t * H + h]) : hidden.data<float>()[t * H + h];
                if (!std::isfinite(v)) {
                    first[size_t(c)] = t * H + h;
                    return;
                }
            }
        }
    });
    for (int64_t f : first) {
        if (f < 0) continue;
        const double v = bf16 ? bf16_to_f32(hidden.data<uint16_t>()[f]) : hidden.data<float>()[f];
        SMOE_THROW(InvalidArgument, "token {} has a non-finite hidden value ({}) at column {}", f / H, v, f % H);
    }
}

}  // namespace

// Slot e < E: routed expert e; slot E: the shared expert. Each slot's decoding runs once (a failed one, its
// exception passed on, is tried again by the next caller); layer.experts is sized at construction, so slots
// never move. `decoded` spares batches whose experts are all decoded a parallel region.
struct MoeLayer::Packing {
    explicit Packing(std::shared_ptr<const MoeLayerWeights> w)
        : weights(std::move(w)), once(std::make_unique<std::once_flag[]>(weights->experts.size() + 1)),
          decoded(std::make_unique<std::atomic<bool>[]>(weights->experts.size() + 1)) {
        layer.router = cpu::pack_dense(weights->router, "router");
        layer.experts.resize(weights->experts.size());
        layer.has_shared = weights->has_shared;
    }
    const cpu::PackedExpert& expert(int64_t slot) {
        const bool shared = slot == int64_t(layer.experts.size());
        if (!decoded[size_t(slot)].load(std::memory_order_acquire)) {
            std::call_once(once[size_t(slot)], [&] {
                if (shared) layer.shared = cpu::pack_expert(weights->shared);
                else layer.experts[size_t(slot)] = cpu::pack_expert(weights->experts[size_t(slot)]);
            });
            decoded[size_t(slot)].store(true, std::memory_order_release);
        }
        return shared ? layer.shared : layer.experts[size_t(slot)];
    }
    // Decodes those of the given slots not yet decoded, several at a time.
    void ensure(const std::vector<int64_t>& slots, int threads) {
        std::vector<int64_t> missing;
        for (const int64_t slot : slots)
            if (!decoded[size_t(slot)].load(std::memory_order_acquire)) missing.push_back(slot);
        if (missing.empty()) return;
        parallel_for(int64_t(missing.size()), int(std::min<int64_t>(threads, int64_t(missing.size()))),
                     [&](int64_t i) { expert(missing[size_t(i)]); });
    }

    const std::shared_ptr<const MoeLayerWeights> weights;
    cpu::PackedLayer layer;
    std::unique_ptr<std::once_flag[]> once;
    std::unique_ptr<std::atomic<bool>[]> decoded;
    std::atomic<bool> all_decoded{false};  // every held slot (packed())
};

MoeLayer::MoeLayer(MoeConfig config, MoeLayerWeights weights, MoeLayerOptions options)
    : config_(std::move(config)), options_(options) {
    config_.validate();
    validate_layer_weights(config_, weights);
    // The bias is tiny and steers every token: always checked, whatever check_weights says.
    for (int64_t e = 0; weights.selection_bias.defined() && e < config_.n_routed_experts; ++e)
        SMOE_CHECK(std::isfinite(weights.selection_bias.data<float>()[e]), BadFormat,
                   "layer {}: selection bias of expert {} is not finite", weights.layer, e);
    options_.threads = resolve_threads(options_.threads);
    if (options_.check_weights) check_weights_finite(weights, options_.threads);
    act_quant_ = options_.activation_quant.value_or(config_.native_activation_quant());
    // What decoding an expert would refuse, refused now rather than at its first batch.
    for (const ExpertWeights& e : weights.experts)
        if (e.held()) cpu::check_packable(e);
    if (weights.has_shared) cpu::check_packable(weights.shared);
    weights_ = std::make_shared<const MoeLayerWeights>(std::move(weights));
    packing_ = std::make_shared<Packing>(weights_);
}

const cpu::PackedLayer& MoeLayer::packed() const {
    if (packing_->all_decoded.load(std::memory_order_acquire)) return packing_->layer;
    std::vector<int64_t> slots;
    for (int64_t e = 0; e < int64_t(weights_->experts.size()); ++e)
        if (weights_->experts[size_t(e)].held()) slots.push_back(e);
    if (weights_->has_shared) slots.push_back(int64_t(weights_->experts.size()));
    packing_->ensure(slots, options_.threads);
    packing_->all_decoded.store(true, std::memory_order_release);
    return packing_->layer;
}

const cpu::PackedWeight& MoeLayer::packed_router() const { return packing_->layer.router; }

void MoeLayer::decode_for(const MoeInput& input) const { (void)routed_batch(input); }

std::vector<int64_t> MoeLayer::decoded_experts() const {
    std::vector<int64_t> out;
    for (int64_t e = 0; e < int64_t(weights_->experts.size()); ++e)
        if (packing_->decoded[size_t(e)].load(std::memory_order_acquire)) out.push_back(e);
    return out;
}

const cpu::PackedExpert& MoeLayer::packed_expert(int64_t e) const {
    SMOE_CHECK(e >= 0 && e < int64_t(weights_->experts.size()) && weights_->experts[size_t(e)].held(), InvalidArgument,
               "layer {}: routed expert {} is not one this layer holds", weights_->layer, e);
    return packing_->expert(e);
}

const cpu::PackedExpert& MoeLayer::packed_shared() const {
    SMOE_CHECK(weights_->has_shared, InvalidArgument, "layer {} has no shared expert", weights_->layer);
    return packing_->expert(int64_t(weights_->experts.size()));
}

MoeLayer MoeLayer::from_checkpoint(const Checkpoint& ckpt, int64_t layer, MoeLayerOptions options,
                                   const std::vector<bool>* held) {
    return MoeLayer(ckpt.config(), load_moe_layer(ckpt, layer, held), options);
}

MoeLayer MoeLayer::with_threads(int threads) const {
    MoeLayer copy = *this;
    copy.options_.threads = resolve_threads(threads);
    return copy;
}

MoeLayer MoeLayer::with_nonfinite(NonFinitePolicy policy) const {
    MoeLayer copy = *this;
    copy.options_.nonfinite = policy;
    return copy;
}

BatchPlan MoeLayer::begin_batch(const MoeInput& input, bool convert_hidden, bool values_checked) const {
    const MoeConfig& cfg = config_;
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k;
    BatchPlan plan;
    check_into(input, values_checked, plan);
    const int64_t T = plan.tokens;
    if (convert_hidden) plan.x = input.hidden.dtype() == DType::F32 ? input.hidden : input.hidden.to_f32();
    plan.out.output = Tensor::zeros(input.hidden.dtype(), {T, H});
    plan.out.topk_ids = Tensor::zeros(DType::I32, {T, K});
    plan.out.topk_weights = Tensor::zeros(DType::F32, {T, K});
    plan.out.expert_load.assign(size_t(E), 0);
    return plan;
}

void MoeLayer::check_into(const MoeInput& input, bool values_checked, BatchPlan& plan) const {
    const int64_t H = config_.hidden_size;
    check_hidden(input.hidden, H, plan.act_dtype);
    const int64_t T = input.hidden.dim(0);
    plan.tokens = T;
    plan.active = active_tokens(input.mask, T);
    if (is_hash_layer()) plan.token_ids = checked_token_ids(input.token_ids, T, weights_->tid2eid.dim(0), plan.active);
    if (options_.nonfinite == NonFinitePolicy::Error && !values_checked)
        reject_nonfinite(input.hidden, T, H, plan.active, options_.threads);
}

void MoeLayer::check_input(const MoeInput& input) const {
    BatchPlan plan;
    check_into(input, false, plan);
}

void MoeLayer::route_batch(BatchPlan& plan, const float* logits) const {
    const MoeConfig& cfg = config_;
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k, T = plan.x.dim(0);
    const float* xv = plan.x.data<float>();
    const bool hash = is_hash_layer();
    MoeOutput& out = plan.out;
    cpu::RouterParams rp;
    rp.config = &cfg;
    rp.hash = hash;
    rp.tokens = T;
    rp.logits = logits;
    rp.bias = weights_->selection_bias.defined() ? weights_->selection_bias.data<float>() : nullptr;
    rp.tid2eid = hash ? weights_->tid2eid.data<int32_t>() : nullptr;
    rp.token_ids = hash ? plan.token_ids.data() : nullptr;
    rp.active = plan.active.data();
    rp.topk_ids = out.topk_ids.mutable_data<int32_t>();
    rp.topk_weights = out.topk_weights.mutable_data<float>();
    const int64_t chunk = 64;
    parallel_for((T + chunk - 1) / chunk, options_.threads,
                 [&](int64_t c) { cpu::route_tokens(rp, c * chunk, std::min(T, (c + 1) * chunk)); });

    // Each expert's tokens in ascending token order (a counting sort: no atomics, no races).
    const int32_t* ids = rp.topk_ids;
    const float* wts = rp.topk_weights;
    for (int64_t i = 0; i < T * K; ++i)
        if (ids[i] >= 0) ++out.expert_load[size_t(ids[i])];
    std::vector<cpu::ExpertJob>& jobs = plan.jobs;
    jobs.assign(static_cast<size_t>(E), cpu::ExpertJob{});
    for (int64_t e = 0; e < E; ++e) {
        jobs[size_t(e)].expert = &packing_->layer.experts[size_t(e)];  // (decoded below where it has tokens)
        jobs[size_t(e)].swiglu_limit = float(cfg.swiglu_limit);
        jobs[size_t(e)].weight_before_down = cfg.weight_placement == WeightPlacement::BeforeDown;
        jobs[size_t(e)].tokens.reserve(size_t(out.expert_load[size_t(e)]));
    }
    for (int64_t i = 0; i < T * K; ++i) {
        if (ids[i] < 0) continue;
        cpu::ExpertJob& job = jobs[size_t(ids[i])];
        job.tokens.push_back(i / K);
        job.destinations.push_back(i);  // slot row t*K + k
        job.weights.push_back(wts[i]);
    }
    std::erase_if(jobs, [](const cpu::ExpertJob& j) { return j.tokens.empty(); });
    // The experts the jobs need decoded, those this layer holds (an expert-parallel share's others run
    // elsewhere).
    std::vector<int64_t> slots;
    for (const cpu::ExpertJob& job : jobs)
        if (const int64_t e = job.expert - packing_->layer.experts.data(); weights_->experts[size_t(e)].held()) slots.push_back(e);

    // The shared expert is one more job over every real token, its rows after the slot rows.
    if (!weights_->has_shared) return packing_->ensure(slots, options_.threads);
    cpu::ExpertJob shared;
    shared.expert = &packing_->layer.shared;
    for (int64_t t = 0; t < T; ++t) {
        if (!plan.active[size_t(t)]) continue;
        shared.tokens.push_back(t);
        shared.destinations.push_back(T * K + t);
        float w = 1.0f;
        if (weights_->shared_gate.defined()) {
            // Qwen2-MoE: sigmoid(x . w_gate) scales the shared expert's output.
            const float* g = weights_->shared_gate.data<float>();
            float dot = 0.0f;
            for (int64_t h = 0; h < H; ++h) dot = std::fma(xv[t * H + h], g[h], dot);
            w = 1.0f / (1.0f + std::exp(-dot));
        }
        shared.weights.push_back(w);
    }
    if (!shared.tokens.empty()) {
        jobs.push_back(std::move(shared));
        slots.push_back(E);
    }
    packing_->ensure(slots, options_.threads);
}

void MoeLayer::router_logits(const BatchPlan& plan, float* logits) const {
    const int64_t H = config_.hidden_size, E = config_.n_routed_experts, T = plan.tokens;
    cpu::PackedActivations packed;
    cpu::pack_activations({plan.x.data<float>(), nullptr, T, H}, packed);
    cpu::parallel_gemm(packed, packing_->layer.router, logits, E, options_.threads);
}

void MoeLayer::combine(BatchPlan& plan, const float* contributions) const {
    const int64_t H = config_.hidden_size, K = config_.top_k, T = plan.tokens;
    const std::vector<uint8_t>& active = plan.active;
    MoeOutput& out = plan.out;
    const bool has_shared = weights_->has_shared;
    const int64_t chunk = 64;
    // The k slots in slot order, then the shared expert, in fp32; rounded once.
    parallel_for((T + chunk - 1) / chunk, options_.threads, [&](int64_t c) {
        std::vector<float> acc(static_cast<size_t>(H));
        for (int64_t t = c * chunk; t < std::min(T, (c + 1) * chunk); ++t) {
            if (!active[size_t(t)]) continue;
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (int64_t k = 0; k < K; ++k) {
                const float* s = contributions + (t * K + k) * H;
                for (int64_t h = 0; h < H; ++h) acc[size_t(h)] += s[h];
            }
            if (has_shared) {
                const float* s = contributions + (T * K + t) * H;
                for (int64_t h = 0; h < H; ++h) acc[size_t(h)] += s[h];
            }
            if (out.output.dtype() == DType::BF16) {
                uint16_t* o = out.output.mutable_data<uint16_t>() + t * H;
                for (int64_t h = 0; h < H; ++h) o[h] = f32_to_bf16(acc[size_t(h)]);
            } else {
                std::memcpy(out.output.mutable_data<float>() + t * H, acc.data(), size_t(H) * 4);
            }
        }
    });
}

BatchPlan MoeLayer::routed_batch(const MoeInput& input) const {
    SMOE_CHECK(!weights_->partial, Unsupported,
               "layer {} holds only some of its experts (an expert-parallel share); run it through EpMoeLayer",
               weights_->layer);
    BatchPlan plan = begin_batch(input);
    if (plan.tokens == 0) return plan;
    // Router logits in fp32, then per-token routing and the work list.
    std::vector<float>& logits = t_logits;
    grow(logits, plan.tokens * config_.n_routed_experts);
    router_logits(plan, logits.data());
    route_batch(plan, logits.data());
    return plan;
}

MoeOutput MoeLayer::forward(const MoeInput& input) const {
    const MoeConfig& cfg = config_;
    const int64_t H = cfg.hidden_size, K = cfg.top_k;
    const int threads = options_.threads;
    BatchPlan plan = routed_batch(input);
    const int64_t T = plan.x.dim(0);
    if (T == 0) return std::move(plan.out);
    const float* xv = plan.x.data<float>();
    const std::vector<cpu::ExpertJob>& jobs = plan.jobs;
    const cpu::ActDType act_dtype = plan.act_dtype;

    // Row t*K+k: slot k of token t; row T*K+t: token t's shared expert. Only real tokens' rows are
    // written and read, so the reused buffer needs no clearing.
    std::vector<float>& contributions = t_contributions;
    grow(contributions, (T * K + T) * H);
    cpu::ExpertStageParams sp;
    sp.hidden = xv;
    sp.hidden_size = H;
    sp.act_dtype = act_dtype;
    sp.act_quant = act_quant_;
    sp.out = contributions.data();
    sp.threads = threads;
    cpu::run_expert_jobs(sp, jobs);

    combine(plan, contributions.data());
    return std::move(plan.out);
}

}  // namespace steadymoe
