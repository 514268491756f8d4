// The CUDA layer's tensor-core path, all on the GPU between the input upload and the output download:
// the router GEMM, routing (routing.hpp), each expert's rows by prefix sums, and the experts as grouped
// tensor-core GEMMs over weights kept in their stored width — SwiGLU fused into the gate/up GEMM, the
// routing weight and the scatter into the down GEMM. The shared expert runs on a second stream, beside
// the routed ones. A workspace sized by the largest batch so far is kept between calls.
#pragma once

#include "steadymoe/engine/cuda_moe_layer.hpp"
#include "steadymoe/kernels/cuda/gemm.hpp"

#include "../kernels/cuda/expert_group.hpp"
#include "cuda_layer_stages.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace steadymoe {

// Decode-sized batches (up to this many tokens) run as CUDA graph replays by default.
inline constexpr int64_t kDefaultGraphMaxTokens = 256;
// Graphs kept per layer (one per batch size, input dtype, timing and launches seen: a timed forward of a
// size takes up to four), least recently used dropped first: every size up to the default limit fits for one
// dtype, untimed, so a serving loop cycling through sizes never recaptures.
inline constexpr size_t kGraphCapacity = 256;

class TensorCorePath {
public:
    // Why `layer` cannot run on this path ("" when it can): with `routed`, only those routed experts are
    // checked (the ones a rank of an expert-parallel group holds).
    static std::string blocker(const MoeLayer& layer, const std::vector<const ExpertWeights*>* routed = nullptr);
    // Whether a batch of bf16 (or else f32) hidden states has an exact bf16 form for every GEMM of
    // these expert groups.
    static bool accepts(const MoeLayer& layer, bool bf16_hidden, const cuda::DeviceExpertGroup& routed,
                        const cuda::DeviceExpertGroup* shared);

    explicit TensorCorePath(const MoeLayer& layer, Fp8Products fp8 = Fp8Products::TensorCores);
    ~TensorCorePath();

    // Whether a batch with bf16 (or else f32) hidden states has an exact bf16 form for every GEMM.
    bool accepts(bool bf16_hidden) const;

    // Runs a checked batch (begin_batch done) on the GPU — router, routing, permutation, experts,
    // combine — and fills plan.out. Batches of up to graph_max_tokens() tokens replay a captured CUDA
    // graph from the second batch of their size on (cuda_graph_cache.hpp).
    void forward(const MoeInput& input, BatchPlan& plan, CudaStageTimes* times) const;

    // 0 turns graphs off (every batch launches its kernels one by one).
    void set_graph_max_tokens(int64_t tokens);
    int64_t graph_max_tokens() const { return graph_max_tokens_.load(); }
    // CUDA graphs captured and kept (a shape whose capture or instantiation failed runs eagerly instead).
    size_t graph_count() const;
    // The routed experts' weights on the GPU.
    const cuda::DeviceExpertGroup& routed() const { return routed_; }

private:
    struct Workspace;
    struct Shape;
    // Grows the workspace for a batch; true when any buffer moved.
    bool reserve(const Shape& batch) const;
    // What one enqueue launches: the layer from the router through the combine; its experts alone (routed and
    // shared, on the routing in the workspace); or its routed experts alone (the permutation, gathers and both
    // GEMMs, on that routing, no shared expert).
    enum class Launches { Layer, Experts, RoutedExperts };
    // The batch's launches, on the workspace's streams.
    void enqueue(const Shape& batch, bool timed, bool capturing, Launches launches = Launches::Layer) const;

    const MoeLayer& layer_;
    tc::RouterStage router_;
    cuda::DeviceExpertGroup routed_;
    std::optional<cuda::DeviceExpertGroup> shared_;
    bool fp8_tensor_cores_;
    std::unique_ptr<Workspace> ws_;
    std::atomic<int64_t> graph_max_tokens_{kDefaultGraphMaxTokens};
    mutable std::mutex busy_;  // one batch at a time per layer: the workspace is shared
};

}  // namespace steadymoe
