#include "cuda_tensor_core_path.hpp"

#include "cuda_graph_cache.hpp"

#include "steadymoe/kernels/cpu/experts.hpp"

#include "../kernels/cuda/check.hpp"
#include "../kernels/cuda/layer_kernels.hpp"
#include "../kernels/cuda/quant_mode.hpp"
#include "../kernels/cuda/routing.hpp"
#include "steadymoe/kernels/cpu/router.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace steadymoe {

namespace {

using cuda::DeviceBuffer;

// Grows `b` to at least `bytes`; `moved` becomes true when it was reallocated.
void grow(DeviceBuffer& b, size_t bytes, const char* what, bool& moved) {
    if (b.bytes() < bytes) {
        b = DeviceBuffer();  // free first: the old and new buffers need not fit together
        b = DeviceBuffer(bytes, what);
        moved = true;
    }
}

// A permutation's device buffers, grown to the largest batch so far.
struct PermBuffers {
    DeviceBuffer rows, dest, weight, tiles, load, offsets;

    void reserve(int64_t max_rows, int64_t tiles_bound, int64_t experts, bool& moved) {
        grow(rows, size_t(max_rows) * 4, "permuted rows", moved);
        grow(dest, size_t(max_rows) * 8, "row destinations", moved);
        grow(weight, size_t(max_rows) * 4, "row weights", moved);
        grow(tiles, size_t(3 * tiles_bound + 1) * 4, "tile list", moved);
        grow(load, size_t(experts) * 4, "expert loads", moved);
        grow(offsets, size_t(2 * (experts + 1)) * 4, "expert offsets", moved);
    }
    cuda::PermutationOut view(int64_t tiles_bound, int64_t experts) {
        int32_t* t = tiles.as<int32_t>();
        int32_t* o = offsets.as<int32_t>();
        return {rows.as<int32_t>(), dest.as<int64_t>(), weight.as<float>(), t, t + tiles_bound, t + 2 * tiles_bound,
                t + 3 * tiles_bound, load.as<int32_t>(), o, o + experts + 1};
    }
};

// One group's stage buffers.
struct StageBuffers {
    DeviceBuffer a1, a1_scale, mid, a2, a2_scale;

    void reserve(int64_t rows, int64_t H, int64_t I, bool& moved) {
        grow(a1, size_t(rows * H) * 2, "expert inputs", moved);
        grow(a1_scale, size_t(rows * (H / 128)) * 4, "expert input scales", moved);
        grow(mid, size_t(rows * I) * 4, "SwiGLU outputs", moved);
        grow(a2, size_t(rows * I) * 2, "down inputs", moved);
        grow(a2_scale, size_t(rows * (I / 128)) * 4, "down input scales", moved);
    }
};

cuda::GroupedGemmLaunch gemm_launch(const cuda::DeviceMatrixSet& w, const cuda::PermutationOut& perm, int64_t tiles,
                                    const uint16_t* a, const float* a_scale, cudaStream_t s) {
    cuda::GroupedGemmLaunch g;
    g.tile_expert = perm.tile_expert;
    g.tile_row0 = perm.tile_row0;
    g.tile_rows = perm.tile_rows;
    g.tile_count = perm.tile_count;
    g.max_tiles = int32_t(tiles);
    g.a = a;
    g.a_scale = a_scale;
    g.code = w.code;
    g.w = w.data.get();
    g.w_expert_bytes = w.expert_bytes;
    g.w_scale = w.scale.get();
    g.scale_expert_bytes = w.scale_expert_bytes;
    g.fp8_half_blocks = w.fp8_half_blocks;
    g.n = w.n;
    g.k = w.k;
    g.scaled = w.code == cuda::WeightCode::Fp8 || a_scale != nullptr;
    g.stream = s;
    return g;
}

// A pair of timing events around part of a forward. Inside a graph capture the records become the
// graph's own event nodes (external records), so a replay is timed the same way as eager launches.
class EventTimer {
public:
    EventTimer() {
        SMOE_CUDA_CHECK(cudaEventCreate(&begin_));
        SMOE_CUDA_CHECK(cudaEventCreate(&end_));
    }
    ~EventTimer() {
        cudaEventDestroy(begin_);
        cudaEventDestroy(end_);
    }
    EventTimer(const EventTimer&) = delete;
    EventTimer& operator=(const EventTimer&) = delete;
    void begin(cudaStream_t s, bool capturing) { record(begin_, s, capturing); }
    void end(cudaStream_t s, bool capturing) { record(end_, s, capturing); }
    double ms() const {
        float v = 0;
        SMOE_CUDA_CHECK(cudaEventElapsedTime(&v, begin_, end_));
        return v;
    }

private:
    static void record(cudaEvent_t e, cudaStream_t s, bool capturing) {
        SMOE_CUDA_CHECK(cudaEventRecordWithFlags(e, s, capturing ? cudaEventRecordExternal : cudaEventRecordDefault));
    }
    cudaEvent_t begin_ = nullptr, end_ = nullptr;
};

// The timers of one forward's stages (CudaStageTimes), or none.
struct StageTimers {
    EventTimer router, routed, shared, combine, total, gate_up, down;
};

}  // namespace

struct TensorCorePath::Workspace {
    cudaStream_t main = nullptr, side = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    DeviceBuffer hidden, token_ids, active, logits, logit_parts, topk_ids, topk_weights, contributions, out;
    PermBuffers router_tiles, routed_perm, shared_perm;
    StageBuffers routed, shared;
    StageTimers timers;
    GraphCache graphs{kGraphCapacity};  // after the timers: graphs hold their events

    Workspace() {
        SMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
        SMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        SMOE_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
        SMOE_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    }
    ~Workspace() {
        cudaEventDestroy(fork);
        cudaEventDestroy(join);
        cudaStreamDestroy(main);
        cudaStreamDestroy(side);
    }
};

std::string TensorCorePath::blocker(const MoeLayer& layer) {
    const MoeLayerWeights& w = layer.weights();
    if (layer.config().hidden_size % 128 != 0)
        return fmt::format("hidden size {} is not a multiple of 128", layer.config().hidden_size);
    std::vector<const ExpertWeights*> routed;
    for (const ExpertWeights& e : w.experts) routed.push_back(&e);
    if (std::string why = cuda::tensor_core_blocker(routed); !why.empty()) return why;
    if (layer.config().n_routed_experts > cuda::kMaxRoutedExperts || layer.config().top_k > 32 ||
        layer.config().n_group > cuda::kMaxGroups)
        return fmt::format("more than {} experts, 32 per token or {} groups", cuda::kMaxRoutedExperts, cuda::kMaxGroups);
    if (w.shared_gate.defined()) return "the shared expert's sigmoid gate is not on the tensor-core path yet";
    if (layer.config().n_routed_experts % 8 != 0)
        return fmt::format("{} routed experts is not a multiple of 8", layer.config().n_routed_experts);
    if (w.tid2eid.defined() && w.tid2eid.dtype() != DType::I32) return "tid2eid is not I32";
    if (w.has_shared) return cuda::tensor_core_blocker({&w.shared});
    return {};
}

TensorCorePath::TensorCorePath(const MoeLayer& layer) : layer_(layer), ws_(std::make_unique<Workspace>()) {
    const MoeLayerWeights& w = layer.weights();
    if (w.router.dtype() == DType::BF16) router_ = cuda::upload_bf16_matrix(w.router, "router");
    router_exact_ = cuda::upload_weight(layer.packed().router, "router");
    std::vector<const ExpertWeights*> routed;
    for (const ExpertWeights& e : w.experts) routed.push_back(&e);
    routed_ = cuda::upload_expert_group(routed, "routed experts");
    if (w.has_shared) shared_ = cuda::upload_expert_group({&w.shared}, "shared expert");
    if (w.selection_bias.defined()) {
        bias_ = DeviceBuffer(w.selection_bias.nbytes(), "selection bias");
        bias_.upload(w.selection_bias.raw(), w.selection_bias.nbytes());
    }
    if (w.tid2eid.defined()) {
        tid2eid_ = DeviceBuffer(w.tid2eid.nbytes(), "tid2eid");
        tid2eid_.upload(w.tid2eid.raw(), w.tid2eid.nbytes());
    }
    cuda::synchronize();
}

TensorCorePath::~TensorCorePath() = default;

bool TensorCorePath::accepts(bool bf16_hidden) const {
    // Every GEMM input must be exact in bf16: bf16 activations, or FP8-quantised ones.
    const ActivationQuant aq = layer_.activation_quant();
    return bf16_hidden || (aq != ActivationQuant::None && routed_.gate_up.quantized && routed_.down.quantized &&
                           (!shared_ || (shared_->gate_up.quantized && shared_->down.quantized)));
}

namespace {

struct GroupRun {
    const cuda::DeviceExpertGroup* group;
    const cuda::PermutationOut* perm;
    int64_t max_rows;
    int64_t max_tiles;
    const int32_t* live_rows;  // device: rows of this batch
    StageBuffers* buffers;
    float swiglu_limit;
    bool weight_before_down;
    EventTimer* gate_up_time = nullptr;  // around the gate/up GEMM, when timing
    EventTimer* down_time = nullptr;
};

// The expert stages of one group on stream `s`: gather (and quantise) its rows, gate/up with SwiGLU,
// quantise, down with the routing weight and scatter into `contributions`. Launches only: the buffers
// were reserved before.
void run_group(const GroupRun& r, const void* hidden, bool bf16, int64_t H, ActivationQuant aq, float* contributions,
               cudaStream_t s, bool capturing) {
    StageBuffers& b = *r.buffers;
    const int64_t R = r.max_rows, I = r.group->intermediate;
    const int mode1 = cuda::activation_quant_mode(aq, r.group->gate_up.quantized);
    SMOE_CUDA_CHECK(cuda::launch_gather_bf16(hidden, bf16, H, r.perm->rows, R, r.live_rows, H, mode1,
                                             b.a1.as<uint16_t>(), b.a1_scale.as<float>(), s));
    cuda::GroupedGemmLaunch g1 = gemm_launch(r.group->gate_up, *r.perm, r.max_tiles, b.a1.as<const uint16_t>(),
                                             mode1 == 1 ? b.a1_scale.as<const float>() : nullptr, s);
    g1.epilogue = cuda::GemmEpilogue::SwiGlu;
    g1.out = b.mid.as<float>();
    g1.ldo = I;
    g1.row_weight = r.perm->weight;
    g1.swiglu_limit = r.swiglu_limit;
    g1.weight_before_down = r.weight_before_down;
    g1.round_bf16 = bf16;
    if (r.gate_up_time) r.gate_up_time->begin(s, capturing);
    SMOE_CUDA_CHECK(cuda::launch_grouped_gemm(g1));
    if (r.gate_up_time) r.gate_up_time->end(s, capturing);

    const int mode2 = cuda::activation_quant_mode(aq, r.group->down.quantized);
    SMOE_CUDA_CHECK(cuda::launch_gather_bf16(b.mid.get(), false, I, nullptr, R, r.live_rows, I, mode2,
                                             b.a2.as<uint16_t>(), b.a2_scale.as<float>(), s));
    cuda::GroupedGemmLaunch g2 = gemm_launch(r.group->down, *r.perm, r.max_tiles, b.a2.as<const uint16_t>(),
                                             mode2 == 1 ? b.a2_scale.as<const float>() : nullptr, s);
    g2.epilogue = cuda::GemmEpilogue::Scatter;
    g2.out = contributions;
    g2.ldo = H;
    g2.row_weight = r.perm->weight;
    g2.row_dest = r.perm->dest;
    g2.weight_before_down = r.weight_before_down;
    g2.round_bf16 = bf16;
    if (r.down_time) r.down_time->begin(s, capturing);
    SMOE_CUDA_CHECK(cuda::launch_grouped_gemm(g2));
    if (r.down_time) r.down_time->end(s, capturing);
}

// The router GEMM's k split: blocks of at most 512 k (a multiple of 128 that divides H), at least two
// when H allows, so that a decode step's router streams its weights from many SMs rather than one or
// two. It depends on H alone, so every batch size gets the same logits.
int32_t router_k_splits(int64_t H) {
    if (H < 256) return 1;
    int64_t chunk = std::min<int64_t>(512, H / 2) / 128 * 128;
    while (H % chunk != 0) chunk -= 128;
    return int32_t(H / chunk);
}

int score_func_code(ScoreFunc f) { return f == ScoreFunc::Softmax ? 0 : f == ScoreFunc::Sigmoid ? 1 : 2; }

}  // namespace

// Everything about a batch that fixes the buffers' sizes and the launches' shapes.
struct TensorCorePath::Shape {
    int64_t tokens = 0;
    bool bf16 = false;
    bool hash = false;
    int32_t tile_m = 0;
    int64_t pairs = 0;          // tokens x top-k
    int64_t router_tiles = 0;   // row tiles of the router GEMM (and of the shared expert)
    int64_t routed_tiles = 0;   // a bound on the routed experts' row tiles
    size_t hidden_bytes = 0;
    size_t out_bytes = 0;
};

void TensorCorePath::set_graph_max_tokens(int64_t tokens) {
    const std::lock_guard<std::mutex> lock(busy_);
    graph_max_tokens_ = tokens;
    if (tokens <= 0) ws_->graphs.clear();
}

bool TensorCorePath::reserve(const Shape& b) const {
    Workspace& ws = *ws_;
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k, T = b.tokens;
    bool moved = false;
    grow(ws.hidden, b.hidden_bytes, "hidden states", moved);
    grow(ws.active, size_t(T), "mask", moved);
    if (b.hash) grow(ws.token_ids, size_t(T) * 8, "token ids", moved);
    grow(ws.logits, size_t(T * E) * 4, "router logits", moved);
    if (router_ && b.bf16) {
        ws.router_tiles.reserve(0, b.router_tiles, 1, moved);
        const int32_t splits = router_k_splits(H);
        if (splits > 1) grow(ws.logit_parts, size_t(splits * T * E) * 4, "router partial logits", moved);
    }
    grow(ws.topk_ids, size_t(T * K) * 4, "top-k ids", moved);
    grow(ws.topk_weights, size_t(T * K) * 4, "top-k weights", moved);
    ws.routed_perm.reserve(b.pairs, b.routed_tiles, E, moved);
    grow(ws.contributions, size_t((T * K + T) * H) * 4, "expert contributions", moved);
    ws.routed.reserve(b.pairs, H, routed_.intermediate, moved);
    if (shared_) {
        ws.shared_perm.reserve(T, b.router_tiles, 1, moved);
        ws.shared.reserve(T, H, shared_->intermediate, moved);
    }
    grow(ws.out, b.out_bytes, "output", moved);
    return moved;
}

void TensorCorePath::enqueue(const Shape& b, bool timed, bool capturing) const {
    Workspace& ws = *ws_;
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k, T = b.tokens;
    const ActivationQuant aq = layer_.activation_quant();
    StageTimers* t = timed ? &ws.timers : nullptr;
    auto begin = [&](EventTimer StageTimers::*timer, cudaStream_t s) { if (t) (t->*timer).begin(s, capturing); };
    auto end = [&](EventTimer StageTimers::*timer, cudaStream_t s) { if (t) (t->*timer).end(s, capturing); };
    cudaStream_t main = ws.main;

    // Router logits, then the routing, on the GPU.
    begin(&StageTimers::total, main);
    begin(&StageTimers::router, main);
    if (router_ && b.bf16) {
        const cuda::PermutationOut tiles = ws.router_tiles.view(b.router_tiles, 1);
        SMOE_CUDA_CHECK(cuda::launch_identity_tiles(T, b.tile_m, tiles, main));
        cuda::GroupedGemmLaunch g = gemm_launch(*router_, tiles, b.router_tiles, ws.hidden.as<const uint16_t>(),
                                                nullptr, main);
        g.k_splits = router_k_splits(H);
        g.out = g.k_splits > 1 ? ws.logit_parts.as<float>() : ws.logits.as<float>();
        g.split_stride = T * E;
        g.ldo = E;
        SMOE_CUDA_CHECK(cuda::launch_grouped_gemm(g));
        if (g.k_splits > 1)
            SMOE_CUDA_CHECK(cuda::launch_sum_splits(ws.logit_parts.as<const float>(), T * E, g.k_splits, T * E,
                                                    ws.logits.as<float>(), main));
    } else {
        SMOE_CHECK(!b.bf16, Internal, "bf16 inputs without a bf16 router");
        cuda::gemm({ws.hidden.as<const float>(), nullptr, T, H}, router_exact_, ws.logits.as<float>(), E, main);
    }
    cuda::RouteLaunch route;
    route.logits = ws.logits.as<const float>();
    route.tokens = T;
    route.experts = int32_t(E);
    route.top_k = int32_t(K);
    route.score_func = score_func_code(cfg.score_func);
    route.bias = bias_.get() ? bias_.as<const float>() : nullptr;
    route.groups = int32_t(cfg.n_group);
    route.top_groups = int32_t(cfg.topk_group);
    route.group_score = cfg.group_score == GroupScore::Max ? 0 : 1;
    route.tid2eid = b.hash ? tid2eid_.as<const int32_t>() : nullptr;
    route.token_ids = b.hash ? ws.token_ids.as<const int64_t>() : nullptr;
    route.active = ws.active.as<const uint8_t>();
    const cpu::WeightRule rule = cpu::weight_rule(cfg);
    route.normalise = rule.normalise;
    route.normalise_eps = rule.eps;
    route.scale = rule.scale;
    route.topk_ids = ws.topk_ids.as<int32_t>();
    route.topk_weights = ws.topk_weights.as<float>();
    route.stream = main;
    SMOE_CUDA_CHECK(cuda::launch_route(route));
    end(&StageTimers::router, main);

    float* contributions = ws.contributions.as<float>();
    const float limit = float(cfg.swiglu_limit);
    const bool before = cfg.weight_placement == WeightPlacement::BeforeDown;

    // The shared expert on the side stream, overlapping the routed experts.
    SMOE_CUDA_CHECK(cudaEventRecord(ws.fork, main));
    SMOE_CUDA_CHECK(cudaStreamWaitEvent(ws.side, ws.fork));
    if (shared_) {
        begin(&StageTimers::shared, ws.side);
        const cuda::PermutationOut perm = ws.shared_perm.view(b.router_tiles, 1);
        SMOE_CUDA_CHECK(cuda::launch_permute_shared(ws.active.as<const uint8_t>(), T, T * K, b.tile_m, perm, ws.side));
        // The shared expert has no clamp and weight 1 (the CPU layer's shared job).
        run_group({&*shared_, &perm, T, b.router_tiles, perm.load, &ws.shared, 0.0f, false}, ws.hidden.get(), b.bf16,
                  H, aq, contributions, ws.side, capturing);
        end(&StageTimers::shared, ws.side);
    }
    SMOE_CUDA_CHECK(cudaEventRecord(ws.join, ws.side));
    begin(&StageTimers::routed, main);
    const cuda::PermutationOut routed_perm = ws.routed_perm.view(b.routed_tiles, E);
    SMOE_CUDA_CHECK(cuda::launch_permute_routed(ws.topk_ids.as<const int32_t>(), ws.topk_weights.as<const float>(),
                                                b.pairs, int32_t(K), int32_t(E), b.tile_m, routed_perm, main));
    run_group({&routed_, &routed_perm, b.pairs, b.routed_tiles, routed_perm.offsets + E, &ws.routed, limit, before,
               t ? &t->gate_up : nullptr, t ? &t->down : nullptr},
              ws.hidden.get(), b.bf16, H, aq, contributions, main, capturing);
    end(&StageTimers::routed, main);
    SMOE_CUDA_CHECK(cudaStreamWaitEvent(main, ws.join));

    begin(&StageTimers::combine, main);
    SMOE_CUDA_CHECK(cuda::launch_combine(contributions, T, K, H, ws.active.as<const uint8_t>(), shared_.has_value(),
                                         b.bf16, ws.out.get(), main));
    end(&StageTimers::combine, main);
    end(&StageTimers::total, main);
}

void TensorCorePath::forward(const MoeInput& input, BatchPlan& plan, CudaStageTimes* times) const {
    const std::lock_guard<std::mutex> lock(busy_);
    Workspace& ws = *ws_;
    const MoeConfig& cfg = layer_.config();
    const int64_t E = cfg.n_routed_experts, K = cfg.top_k, T = plan.tokens;
    Shape b;
    b.tokens = T;
    b.bf16 = plan.act_dtype == cpu::ActDType::BF16;
    b.hash = layer_.is_hash_layer();
    SMOE_CHECK(accepts(b.bf16), Unsupported,
               "the tensor-core path needs bf16 hidden states for bf16 experts (got f32): pass bf16, or "
               "use the portable CUDA path");
    b.tile_m = cuda::grouped_gemm_tile_rows();
    b.pairs = T * K;
    b.router_tiles = (T + b.tile_m - 1) / b.tile_m;
    b.routed_tiles = std::min(b.pairs, (b.pairs + b.tile_m - 1) / b.tile_m + E);
    SMOE_CHECK(b.routed_tiles <= 65535 && b.router_tiles <= 65535, InvalidArgument,
               "a batch of {} tokens needs more row tiles than one launch holds (65535 of {} rows); split it", T,
               b.tile_m);
    b.hidden_bytes = input.hidden.nbytes();
    b.out_bytes = plan.out.output.nbytes();
    try {
        if (reserve(b)) ws.graphs.clear();  // captured graphs point at the old buffers
    } catch (...) {
        ws.graphs.clear();  // some buffers may have moved before the one that did not fit
        throw;
    }

    // Inputs as they are: hidden states in their own dtype, the mask, token ids for hash layers.
    cudaStream_t main = ws.main;
    ws.hidden.upload(input.hidden.raw(), b.hidden_bytes, main);
    ws.active.upload(plan.active.data(), size_t(T), main);
    if (b.hash) ws.token_ids.upload(plan.token_ids.data(), size_t(T) * 8, main);

    const bool timed = times != nullptr;
    if (T <= graph_max_tokens_) {
        // Graphs are keyed by everything that changes the launches: token count, input dtype, timing.
        const uint64_t key = uint64_t(T) | uint64_t(b.bf16) << 62 | uint64_t(timed) << 63;
        ws.graphs.run(key, main, [&](bool capturing) { enqueue(b, timed, capturing); });
    } else {
        enqueue(b, timed, false);
    }
    ws.out.download(plan.out.output.mutable_raw(), b.out_bytes, main);
    ws.topk_ids.download(plan.out.topk_ids.mutable_raw(), size_t(T * K) * 4, main);
    ws.topk_weights.download(plan.out.topk_weights.mutable_raw(), size_t(T * K) * 4, main);
    std::vector<int32_t> load(static_cast<size_t>(E));
    ws.routed_perm.load.download(load.data(), size_t(E) * 4, main);
    cuda::synchronize(main);
    for (int64_t e = 0; e < E; ++e) plan.out.expert_load[size_t(e)] = load[size_t(e)];
    if (timed) {
        const StageTimers& tm = ws.timers;
        *times = {tm.router.ms(), tm.routed.ms(), shared_ ? tm.shared.ms() : 0.0, tm.combine.ms(), tm.total.ms(),
                  tm.gate_up.ms(), tm.down.ms()};
    }
}

}  // namespace steadymoe
