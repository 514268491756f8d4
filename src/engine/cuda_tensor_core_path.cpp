#include "cuda_tensor_core_path.hpp"

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

void grow(DeviceBuffer& b, size_t bytes, const char* what) {
    if (b.bytes() < bytes) {
        b = DeviceBuffer();  // free first: the old and new buffers need not fit together
        b = DeviceBuffer(bytes, what);
    }
}

// A permutation's device buffers, grown to the largest batch so far.
struct PermBuffers {
    DeviceBuffer rows, dest, weight, tiles, load, offsets;

    cuda::PermutationOut reserve(int64_t max_rows, int64_t tiles_bound, int64_t experts) {
        grow(rows, size_t(max_rows) * 4, "permuted rows");
        grow(dest, size_t(max_rows) * 8, "row destinations");
        grow(weight, size_t(max_rows) * 4, "row weights");
        grow(tiles, size_t(3 * tiles_bound + 1) * 4, "tile list");
        grow(load, size_t(experts) * 4, "expert loads");
        grow(offsets, size_t(2 * (experts + 1)) * 4, "expert offsets");
        int32_t* t = tiles.as<int32_t>();
        int32_t* o = offsets.as<int32_t>();
        return {rows.as<int32_t>(), dest.as<int64_t>(), weight.as<float>(), t, t + tiles_bound, t + 2 * tiles_bound,
                t + 3 * tiles_bound, load.as<int32_t>(), o, o + experts + 1};
    }
};

// One group's stage buffers.
struct StageBuffers {
    DeviceBuffer a1, a1_scale, mid, a2, a2_scale;
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

class EventTimer {
public:
    explicit EventTimer(bool on) : on_(on) {
        if (on_) {
            SMOE_CUDA_CHECK(cudaEventCreate(&begin_));
            SMOE_CUDA_CHECK(cudaEventCreate(&end_));
        }
    }
    ~EventTimer() {
        if (on_) {
            cudaEventDestroy(begin_);
            cudaEventDestroy(end_);
        }
    }
    void begin(cudaStream_t s) { if (on_) SMOE_CUDA_CHECK(cudaEventRecord(begin_, s)); }
    void end(cudaStream_t s) { if (on_) SMOE_CUDA_CHECK(cudaEventRecord(end_, s)); }
    double ms() const {
        float v = 0;
        if (on_) SMOE_CUDA_CHECK(cudaEventElapsedTime(&v, begin_, end_));
        return v;
    }

private:
    bool on_;
    cudaEvent_t begin_ = nullptr, end_ = nullptr;
};

}  // namespace

struct TensorCorePath::Workspace {
    cudaStream_t main = nullptr, side = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    DeviceBuffer hidden, token_ids, active, logits, topk_ids, topk_weights, contributions, out;
    PermBuffers router_tiles, routed_perm, shared_perm;
    StageBuffers routed, shared;

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
// quantise, down with the routing weight and scatter into `contributions`.
void run_group(const GroupRun& r, const void* hidden, bool bf16, int64_t H, ActivationQuant aq, float* contributions,
               cudaStream_t s) {
    StageBuffers& b = *r.buffers;
    const int64_t R = r.max_rows, I = r.group->intermediate;
    grow(b.a1, size_t(R * H) * 2, "expert inputs");
    grow(b.a1_scale, size_t(R * (H / 128)) * 4, "expert input scales");
    grow(b.mid, size_t(R * I) * 4, "SwiGLU outputs");
    grow(b.a2, size_t(R * I) * 2, "down inputs");
    grow(b.a2_scale, size_t(R * (I / 128)) * 4, "down input scales");

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
    if (r.gate_up_time) r.gate_up_time->begin(s);
    SMOE_CUDA_CHECK(cuda::launch_grouped_gemm(g1));
    if (r.gate_up_time) r.gate_up_time->end(s);

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
    if (r.down_time) r.down_time->begin(s);
    SMOE_CUDA_CHECK(cuda::launch_grouped_gemm(g2));
    if (r.down_time) r.down_time->end(s);
}

int score_func_code(ScoreFunc f) { return f == ScoreFunc::Softmax ? 0 : f == ScoreFunc::Sigmoid ? 1 : 2; }

}  // namespace

void TensorCorePath::forward(const MoeInput& input, BatchPlan& plan, CudaStageTimes* times) const {
    const std::lock_guard<std::mutex> lock(busy_);
    Workspace& ws = *ws_;
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k, T = plan.tokens;
    const bool bf16 = plan.act_dtype == cpu::ActDType::BF16;
    const ActivationQuant aq = layer_.activation_quant();
    SMOE_CHECK(accepts(bf16), Unsupported,
               "the tensor-core path needs bf16 hidden states for bf16 experts (got f32): pass bf16, or "
               "use the portable CUDA path");
    EventTimer router_time(times), routed_time(times), shared_time(times), combine_time(times), total_time(times),
        gate_up_time(times), down_time(times);
    cudaStream_t main = ws.main;
    const int32_t tile_m = cuda::grouped_gemm_tile_rows();

    // Inputs as they are: hidden states in their own dtype, the mask, token ids for hash layers.
    const size_t hidden_bytes = input.hidden.nbytes();
    grow(ws.hidden, hidden_bytes, "hidden states");
    ws.hidden.upload(input.hidden.raw(), hidden_bytes, main);
    grow(ws.active, size_t(T), "mask");
    ws.active.upload(plan.active.data(), size_t(T), main);
    const bool hash = layer_.is_hash_layer();
    if (hash) {
        grow(ws.token_ids, size_t(T) * 8, "token ids");
        ws.token_ids.upload(plan.token_ids.data(), size_t(T) * 8, main);
    }

    // Router logits, then the routing, on the GPU.
    total_time.begin(main);
    router_time.begin(main);
    grow(ws.logits, size_t(T * E) * 4, "router logits");
    if (router_ && bf16) {
        const int64_t router_tiles = (T + tile_m - 1) / tile_m;
        const cuda::PermutationOut tiles = ws.router_tiles.reserve(0, router_tiles, 1);
        SMOE_CUDA_CHECK(cuda::launch_identity_tiles(T, tile_m, tiles, main));
        cuda::GroupedGemmLaunch g = gemm_launch(*router_, tiles, router_tiles,
                                                ws.hidden.as<const uint16_t>(), nullptr, main);
        g.out = ws.logits.as<float>();
        g.ldo = E;
        SMOE_CUDA_CHECK(cuda::launch_grouped_gemm(g));
    } else {
        SMOE_CHECK(!bf16, Internal, "bf16 inputs without a bf16 router");
        cuda::gemm({ws.hidden.as<const float>(), nullptr, T, H}, router_exact_, ws.logits.as<float>(), E, main);
    }
    grow(ws.topk_ids, size_t(T * K) * 4, "top-k ids");
    grow(ws.topk_weights, size_t(T * K) * 4, "top-k weights");
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
    route.tid2eid = hash ? tid2eid_.as<const int32_t>() : nullptr;
    route.token_ids = hash ? ws.token_ids.as<const int64_t>() : nullptr;
    route.active = ws.active.as<const uint8_t>();
    const cpu::WeightRule rule = cpu::weight_rule(cfg);
    route.normalise = rule.normalise;
    route.normalise_eps = rule.eps;
    route.scale = rule.scale;
    route.topk_ids = ws.topk_ids.as<int32_t>();
    route.topk_weights = ws.topk_weights.as<float>();
    route.stream = main;
    SMOE_CUDA_CHECK(cuda::launch_route(route));
    router_time.end(main);

    // Each expert's rows by prefix sums over the routing.
    const int64_t pairs = T * K;
    const int64_t routed_tiles = std::min(pairs, (pairs + tile_m - 1) / tile_m + E);
    SMOE_CHECK(routed_tiles <= 65535 && (T + tile_m - 1) / tile_m <= 65535, InvalidArgument,
               "a batch of {} tokens needs more row tiles than one launch holds (65535 of {} rows); split it", T,
               tile_m);
    const cuda::PermutationOut routed_perm = ws.routed_perm.reserve(pairs, routed_tiles, E);
    grow(ws.contributions, size_t((T * K + T) * H) * 4, "expert contributions");
    float* contributions = ws.contributions.as<float>();
    const float limit = float(cfg.swiglu_limit);
    const bool before = cfg.weight_placement == WeightPlacement::BeforeDown;

    // The shared expert on the side stream, overlapping the routed experts.
    SMOE_CUDA_CHECK(cudaEventRecord(ws.fork, main));
    SMOE_CUDA_CHECK(cudaStreamWaitEvent(ws.side, ws.fork));
    if (shared_) {
        shared_time.begin(ws.side);
        const int64_t tiles = (T + tile_m - 1) / tile_m;
        const cuda::PermutationOut perm = ws.shared_perm.reserve(T, tiles, 1);
        SMOE_CUDA_CHECK(cuda::launch_permute_shared(ws.active.as<const uint8_t>(), T, T * K, tile_m, perm, ws.side));
        // The shared expert has no clamp and weight 1 (the CPU layer's shared job).
        run_group({&*shared_, &perm, T, tiles, perm.load, &ws.shared, 0.0f, false}, ws.hidden.get(), bf16, H, aq,
                  contributions, ws.side);
        shared_time.end(ws.side);
    }
    SMOE_CUDA_CHECK(cudaEventRecord(ws.join, ws.side));
    routed_time.begin(main);
    SMOE_CUDA_CHECK(cuda::launch_permute_routed(ws.topk_ids.as<const int32_t>(), ws.topk_weights.as<const float>(),
                                                pairs, int32_t(K), int32_t(E), tile_m, routed_perm, main));
    run_group({&routed_, &routed_perm, pairs, routed_tiles, routed_perm.offsets + E, &ws.routed, limit, before,
               &gate_up_time, &down_time},
              ws.hidden.get(), bf16, H, aq, contributions, main);
    routed_time.end(main);
    SMOE_CUDA_CHECK(cudaStreamWaitEvent(main, ws.join));

    combine_time.begin(main);
    grow(ws.out, plan.out.output.nbytes(), "output");
    SMOE_CUDA_CHECK(cuda::launch_combine(contributions, T, K, H, ws.active.as<const uint8_t>(), shared_.has_value(),
                                         bf16, ws.out.get(), main));
    combine_time.end(main);
    total_time.end(main);
    ws.out.download(plan.out.output.mutable_raw(), plan.out.output.nbytes(), main);
    ws.topk_ids.download(plan.out.topk_ids.mutable_raw(), size_t(T * K) * 4, main);
    ws.topk_weights.download(plan.out.topk_weights.mutable_raw(), size_t(T * K) * 4, main);
    std::vector<int32_t> load(static_cast<size_t>(E));
    ws.routed_perm.load.download(load.data(), size_t(E) * 4, main);
    cuda::synchronize(main);
    for (int64_t e = 0; e < E; ++e) plan.out.expert_load[size_t(e)] = load[size_t(e)];
    if (times)
        *times = {router_time.ms(), routed_time.ms(), shared_ ? shared_time.ms() : 0.0, combine_time.ms(),
                  total_time.ms(), gate_up_time.ms(), down_time.ms()};
}

}  // namespace steadymoe
