#include "cuda_tensor_core_path.hpp"

#include "cuda_graph_cache.hpp"

#include "steadymoe/kernels/cpu/experts.hpp"

#include "../kernels/cuda/check.hpp"
#include "../kernels/cuda/dependent_launch.hpp"
#include "../kernels/cuda/env_switch.hpp"
#include "../kernels/cuda/layer_kernels.hpp"
#include "../kernels/cuda/quant_mode.hpp"
#include "../kernels/cuda/routing.hpp"
#include "steadymoe/kernels/cpu/router.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace steadymoe {

using tc::DeviceBuffer;
using tc::EventTimer;
using tc::grow;
using tc::grow_filled;

namespace {

// The timers of one forward's stages (CudaStageTimes), or none; `untimed`, `experts_untimed` and
// `routed_untimed` each bracket a run without them.
struct StageTimers {
    EventTimer router, routed, shared, combine, total, gate_up, down, untimed, experts_untimed, routed_untimed;
};

}  // namespace

struct TensorCorePath::Workspace {
    cudaStream_t main = nullptr, side = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    DeviceBuffer hidden, token_ids, active, contributions, out;
    tc::RouterStage::Buffers router;
    tc::PermBuffers routed_perm, shared_perm;
    tc::StageBuffers routed, shared;
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

std::string TensorCorePath::blocker(const MoeLayer& layer, const std::vector<const ExpertWeights*>* only) {
    const MoeLayerWeights& w = layer.weights();
    if (layer.config().hidden_size % 128 != 0)
        return fmt::format("hidden size {} is not a multiple of 128", layer.config().hidden_size);
    std::vector<const ExpertWeights*> routed;
    for (const ExpertWeights& e : w.experts) routed.push_back(&e);
    if (std::string why = cuda::tensor_core_blocker(only ? *only : routed); !why.empty()) return why;
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

TensorCorePath::TensorCorePath(const MoeLayer& layer, Fp8Products fp8)
    : layer_(layer), router_(layer), fp8_tensor_cores_(fp8 != Fp8Products::Fp32Sums),
      ws_(std::make_unique<Workspace>()) {
    const MoeLayerWeights& w = layer.weights();
    std::vector<const ExpertWeights*> routed;
    for (const ExpertWeights& e : w.experts) routed.push_back(&e);
    const bool fp4_e4m3 = cuda::fp4_takes_e4m3(layer.activation_quant(), fp8_tensor_cores_);
    const bool block_exact = fp8 == Fp8Products::TensorCoresBlockExact || cuda::fp4_block_exact_requested();
    routed_ = cuda::upload_expert_group(routed, "routed experts", fp4_e4m3, block_exact);
    if (w.has_shared) shared_ = cuda::upload_expert_group({&w.shared}, "shared expert", fp4_e4m3, block_exact);
    cuda::synchronize();
}

TensorCorePath::~TensorCorePath() = default;

bool TensorCorePath::accepts(const MoeLayer& layer, bool bf16_hidden, const cuda::DeviceExpertGroup& routed,
                             const cuda::DeviceExpertGroup* shared) {
    // Every GEMM input must be exact in bf16: bf16 activations, or FP8-quantised ones.
    const ActivationQuant aq = layer.activation_quant();
    return bf16_hidden || (aq != ActivationQuant::None && routed.gate_up.quantized && routed.down.quantized &&
                           (!shared || (shared->gate_up.quantized && shared->down.quantized)));
}

bool TensorCorePath::accepts(bool bf16_hidden) const {
    return accepts(layer_, bf16_hidden, routed_, shared_ ? &*shared_ : nullptr);
}

// Everything about a batch that fixes the buffers' sizes and the launches' shapes.
struct TensorCorePath::Shape {
    int64_t tokens = 0;
    bool bf16 = false;
    bool hash = false;
    int64_t pairs = 0;  // tokens x top-k
    tc::TileCounts tiles;        // the router GEMM's
    tc::GroupTiles routed_tiles, shared_tiles;
    size_t hidden_bytes = 0;
    size_t out_bytes = 0;
};

size_t TensorCorePath::graph_count() const {
    const std::lock_guard<std::mutex> lock(busy_);
    return ws_->graphs.size();
}

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
    router_.reserve(ws.router, T, b.tiles, b.bf16, moved);
    ws.routed_perm.reserve(b.pairs, b.routed_tiles.room, E, moved);
    // Zeroed when allocated, so that every row the combine may load is initialised (a masked token's rows are
    // loaded beside its mask in decode batches: launch_combine's rows_initialised).
    grow_filled(ws.contributions, size_t((T * K + T) * H) * (b.bf16 ? 2 : 4), "expert contributions", 0, moved);
    const ActivationQuant aq = layer_.activation_quant();
    ws.routed.reserve(b.pairs, H, routed_.intermediate, moved, T,
                      tc::swiglu_mid_bytes(routed_, aq, fp8_tensor_cores_, b.bf16),
                      tc::gate_up_takes_e4m3(routed_, aq, fp8_tensor_cores_));
    if (shared_) {
        ws.shared_perm.reserve(T, b.shared_tiles.room, 1, moved);
        ws.shared.reserve(T, H, shared_->intermediate, moved, 0, tc::swiglu_mid_bytes(*shared_, aq, fp8_tensor_cores_, b.bf16));
    }
    grow(ws.out, b.out_bytes, "output", moved);
    return moved;
}

void TensorCorePath::enqueue(const Shape& b, bool timed, bool capturing, Launches launches) const {
    Workspace& ws = *ws_;
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k, T = b.tokens;
    const ActivationQuant aq = layer_.activation_quant();
    StageTimers* t = timed ? &ws.timers : nullptr;
    auto begin = [&](EventTimer StageTimers::*timer, cudaStream_t s) { if (t) (t->*timer).begin(s, capturing); };
    auto end = [&](EventTimer StageTimers::*timer, cudaStream_t s) { if (t) (t->*timer).end(s, capturing); };
    cudaStream_t main = ws.main;
    const bool experts_only = launches != Launches::Layer, with_shared = launches != Launches::RoutedExperts;

    const tc::ContributionRows contributions{ws.contributions.get(), b.bf16};
    const float limit = float(cfg.swiglu_limit);
    const bool before = cfg.weight_placement == WeightPlacement::BeforeDown;

    // The shared expert on the side stream, overlapping the routed experts. It needs no routing, so it forks
    // from the main stream between the router's GEMM and its routing kernel: at one token, 4-6% less time for
    // the layer than a fork after the routing, and 3% less than one before the router's GEMM
    // (deepseek-v4-flash; bench/results/2026-12-03-cuda-route-and-fork.md). STEADYMOE_SHARED_FORK=routing|start
    // forks it there instead, and =after runs it on the main stream after the routed experts (no overlap), to
    // compare.
    auto fork_shared = [&](bool on_side) {
        const cudaStream_t s = on_side ? ws.side : main;
        if (on_side) {
            SMOE_CUDA_CHECK(cudaEventRecord(ws.fork, main));
            SMOE_CUDA_CHECK(cudaStreamWaitEvent(ws.side, ws.fork));
        }
        if (shared_) {
            begin(&StageTimers::shared, s);
            const cuda::PermutationOut perm = ws.shared_perm.view(b.shared_tiles.tiles, 1);
            SMOE_CUDA_CHECK(cuda::launch_permute_shared(ws.active.as<const uint8_t>(), T, T * K, b.shared_tiles.tile_m,
                                                        perm, s));
            // The shared expert has no clamp and weight 1 (the CPU layer's shared job).
            tc::run_group({&*shared_, &perm, T, b.shared_tiles.tiles, perm.load, &ws.shared, 0.0f, false, nullptr,
                           nullptr, fp8_tensor_cores_, 0, b.shared_tiles.tile_m},
                          ws.hidden.get(), b.bf16, H, aq, contributions, s, capturing);
            end(&StageTimers::shared, s);
        }
        SMOE_CUDA_CHECK(cudaEventRecord(ws.join, s));
    };
    enum class Fork { Start, Logits, Routing, After };
    static const Fork fork_asked = cuda::env_equals("STEADYMOE_SHARED_FORK", "start")     ? Fork::Start
                                   : cuda::env_equals("STEADYMOE_SHARED_FORK", "routing") ? Fork::Routing
                                   : cuda::env_equals("STEADYMOE_SHARED_FORK", "after")   ? Fork::After
                                                                                          : Fork::Logits;
    // (experts alone: no router to fork beside)
    const Fork fork_at = experts_only && fork_asked != Fork::After ? Fork::Start : fork_asked;
    const auto fork_if = [&](Fork here) {
        if (with_shared && fork_at == here) fork_shared(here != Fork::After);
    };

    // Router logits, then the routing, on the GPU. At a decode step's few tokens the routing kernel permutes
    // the routed experts' rows too (cuda::launch_route_and_permute; timed, the permutation then counts in the
    // router's time), else the routed experts' stage starts with the permutation.
    const cuda::PermutationOut routed_perm = ws.routed_perm.view(b.routed_tiles.tiles, E);
    tc::RouterStage::Enqueued routing;
    begin(&StageTimers::total, main);
    fork_if(Fork::Start);
    begin(&StageTimers::router, main);
    if (!experts_only) {
        router_.enqueue_logits(ws.router, ws.hidden.get(), T, b.tiles, b.bf16, main);
        fork_if(Fork::Logits);
        const int64_t* token_ids = b.hash ? ws.token_ids.as<const int64_t>() : nullptr;
        routing = router_.enqueue_routing(ws.router, ws.active.as<const uint8_t>(), token_ids, T, b.bf16, main,
                                          &routed_perm, b.routed_tiles.tile_m);
    }
    end(&StageTimers::router, main);
    fork_if(Fork::Routing);

    begin(&StageTimers::routed, main);
    if (!routing.permuted)
        SMOE_CUDA_CHECK(cuda::launch_permute_routed(ws.router.topk_ids.as<const int32_t>(),
                                                    ws.router.topk_weights.as<const float>(), b.pairs, int32_t(K),
                                                    int32_t(E), b.routed_tiles.tile_m, routed_perm, main));
    tc::run_group({&routed_, &routed_perm, b.pairs, b.routed_tiles.tiles, routed_perm.offsets + E, &ws.routed,
                   limit, before, t ? &t->gate_up : nullptr, t ? &t->down : nullptr, fp8_tensor_cores_, T,
                   b.routed_tiles.tile_m, routing.early},
                  ws.hidden.get(), b.bf16, H, aq, contributions, main, capturing);
    end(&StageTimers::routed, main);
    fork_if(Fork::After);
    // (the routed experts alone fork nothing: no shared run recorded the join event for this one)
    if (with_shared) SMOE_CUDA_CHECK(cudaStreamWaitEvent(main, ws.join));
    if (experts_only) return;

    begin(&StageTimers::combine, main);
    SMOE_CUDA_CHECK(cuda::launch_combine(contributions.data, contributions.bf16, T, K, H, ws.active.as<const uint8_t>(),
                                         shared_.has_value(), b.bf16, ws.out.get(), main, true));
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
    b.pairs = T * K;
    b.tiles = tc::tile_counts(T, b.pairs, E);
    const ActivationQuant aq = layer_.activation_quant();
    b.routed_tiles = tc::group_tiles(routed_, b.pairs, E, aq, fp8_tensor_cores_);
    if (shared_) b.shared_tiles = tc::group_tiles(*shared_, T, 1, aq, fp8_tensor_cores_);
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
    // Dependent launches for graph-sized batches (dependent_launch.hpp): their graphs, and the first eager
    // run of each size (and every run of a size whose capture failed).
    const bool graph_sized = T <= graph_max_tokens_;
    const cuda::DependentLaunchScope dependent(graph_sized);
    auto run = [&](bool with_stage_timers, Launches launches) {
        if (graph_sized) {
            // Graphs are keyed by everything that changes the launches: token count, input dtype, timing, and which
            // launches (Launches).
            const uint64_t key = uint64_t(T) | uint64_t(launches) << 59 | uint64_t(b.bf16) << 62 |
                                 uint64_t(with_stage_timers) << 63;
            ws.graphs.run(key, main, [&](bool capturing) { enqueue(b, with_stage_timers, capturing, launches); });
        } else {
            enqueue(b, with_stage_timers, false, launches);
        }
    };
    if (timed) {
        // The layer as it runs when nobody times its stages, timed from outside: the stage timers' events
        // between kernels keep each kernel from starting before the one before it ends (dependent launches).
        ws.timers.untimed.begin(main);
        run(false, Launches::Layer);
        ws.timers.untimed.end(main);
    }
    run(timed, Launches::Layer);
    if (timed) {
        // Its experts alone, again on the routing just made: the same contributions, bit for bit.
        ws.timers.experts_untimed.begin(main);
        run(false, Launches::Experts);
        ws.timers.experts_untimed.end(main);
        // And its routed experts alone, where a shared expert streamed beside them (else that was the run
        // above): the time of the routed experts that their memory floor is set against, with neither the
        // stage timers' events between their kernels nor a shared expert's bytes in theirs.
        if (shared_) {
            ws.timers.routed_untimed.begin(main);
            run(false, Launches::RoutedExperts);
            ws.timers.routed_untimed.end(main);
        }
    }
    ws.out.download(plan.out.output.mutable_raw(), b.out_bytes, main);
    ws.router.topk_ids.download(plan.out.topk_ids.mutable_raw(), size_t(T * K) * 4, main);
    ws.router.topk_weights.download(plan.out.topk_weights.mutable_raw(), size_t(T * K) * 4, main);
    std::vector<int32_t> load(static_cast<size_t>(E));
    ws.routed_perm.load.download(load.data(), size_t(E) * 4, main);
    cuda::synchronize(main);
    for (int64_t e = 0; e < E; ++e) plan.out.expert_load[size_t(e)] = load[size_t(e)];
    if (timed) {
        const StageTimers& tm = ws.timers;
        *times = {tm.router.ms(), tm.routed.ms(), shared_ ? tm.shared.ms() : 0.0, tm.combine.ms(), tm.total.ms(),
                  tm.gate_up.ms(), tm.down.ms(), tm.untimed.ms(), tm.experts_untimed.ms(),
                  shared_ ? tm.routed_untimed.ms() : tm.experts_untimed.ms()};
    }
}

}  // namespace steadymoe
