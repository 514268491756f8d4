// Routing and the permutation of tokens to experts on the GPU: plain pointers and sizes only.
//
// route: one warp per token (one block per token for a decode step's few tokens of many experts:
// route_wide.hpp) computes the scores, the biased and group-limited selection and the canonical top-k
// (score descending, lower expert id first on ties, NaN below every number) exactly as the CPU router
// defines them, then the weights. The selection is a maximum under a total order, so its result does not
// depend on the order lanes compare in; both kernels give the same bits.
//
// permute: each expert's rows are its (token, slot) pairs in ascending order, placed by prefix sums
// over the routing — no atomics — so the row a pair lands in is a pure function of the routing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "early_route.hpp"

namespace steadymoe::cuda {

inline constexpr int kMaxRoutedExperts = 512;  // experts per lane: 16
inline constexpr int kMaxGroups = 64;

struct RouteLaunch {
    // [T][E], or the router GEMM's logit_splits partial sums, split z at logits + z * split_stride: a
    // token's logits are their sum in split order, split 0 first (one fewer launch per layer). Every token's
    // row is written, masked tokens' too: the routing kernels load them beside the mask.
    const float* logits = nullptr;
    int32_t logit_splits = 1;
    int64_t split_stride = 0;
    int64_t tokens = 0;
    int32_t experts = 0;
    int32_t top_k = 0;
    int32_t score_func = 0;            // 0 softmax, 1 sigmoid, 2 sqrt(softplus)
    const float* bias = nullptr;       // [E] or null
    int32_t groups = 1;                // group-limited selection when > 1
    int32_t top_groups = 1;
    int32_t group_score = 0;           // 0 max, 1 sum of the top two
    const int32_t* tid2eid = nullptr;  // [vocab][K]: hash routing when set
    const int64_t* token_ids = nullptr;
    const uint8_t* active = nullptr;   // [T] or null (all real)
    bool normalise = false;
    bool normalise_eps = false;        // add 1e-20 to the denominator
    float scale = 1.0f;                // applied after normalising (1: none)
    int32_t* topk_ids = nullptr;       // out [T][K], -1 for masked tokens
    float* topk_weights = nullptr;     // out [T][K], 0 for masked tokens
    cudaStream_t stream = nullptr;
    // Which kernel (the same bits): a block per token (route_wide.hpp) or a warp per token. Default: the first
    // where wide_route_pays, unless STEADYMOE_ROUTE_KERNEL=unrolled (to compare).
    enum class Form { Default, Wide, Unrolled } form = Form::Default;
    // The block kernel's earlier selection, to compare (the same ids): K block-wide steps, and one thread a group
    // for group limits, where by default each warp takes its top K first and a warp takes a group of 32
    // (route_wide.cu). STEADYMOE_ROUTE_SELECT=steps sets it for every launch.
    bool block_steps = false;
    // Where launch_route_and_permute publishes the one token's experts as soon as it has chosen them, for the
    // routed gate/up GEMM launched after it (early_route.hpp; GroupedGemmLaunch::early_route): only for launches
    // route_publishes_early takes, else null.
    EarlyRoute* early = nullptr;
};

cudaError_t launch_route(const RouteLaunch& launch);

// Rows of a grouped GEMM, in expert order (the layout of grouped_gemm.hpp's tile list).
struct PermutationOut {
    int32_t* rows = nullptr;         // [max rows] input row (token) of each row
    int64_t* dest = nullptr;         // [max rows] contribution row
    float* weight = nullptr;         // [max rows] routing weight
    int32_t* tile_expert = nullptr;  // [max tiles]
    int32_t* tile_row0 = nullptr;
    int32_t* tile_rows = nullptr;
    int32_t* tile_count = nullptr;   // [1]
    int32_t* load = nullptr;         // [experts] rows per expert
    int32_t* offsets = nullptr;      // [experts + 1] scratch: first row of each expert
    int32_t* tile_offsets = nullptr; // [experts + 1] scratch
    int32_t* chunk_counts = nullptr; // [permutation_chunks(pairs)][experts] scratch, for more than kPermuteChunk pairs
};

// A large permutation's chunks of pairs (each counted and placed by one block).
inline constexpr int64_t kPermuteChunk = 1024;
inline constexpr int64_t permutation_chunks(int64_t pairs) { return (pairs + kPermuteChunk - 1) / kPermuteChunk; }

// Tiles hold tile_m rows (at most grouped_gemm_tile_rows(), or tall tiles' grouped_gemm_tall_tile_rows(); the
// layer's decode batches take fewer: grouped_gemm_decode_tile_rows), the last of each expert's partly.
// Routed experts: pair i = t*K + k with id e >= 0 becomes a row of expert e with dest i, reading input
// row t (or row_of_pair[i] when given: pairs that arrived from other GPUs, K = 1). With live_pairs,
// only the first *live_pairs of the `pairs` (a bound) are read.
cudaError_t launch_permute_routed(const int32_t* topk_ids, const float* topk_weights, int64_t pairs,
                                  int32_t top_k, int32_t experts, int32_t tile_m, const PermutationOut& out,
                                  cudaStream_t stream, const int32_t* row_of_pair = nullptr,
                                  const int32_t* live_pairs = nullptr);

// What launch_route, then launch_permute_routed of its top-k (no row_of_pair, no live_pairs), would do, in
// one launch of one block, for a decode step's few tokens (routes_and_permutes_in_one_launch): up to 16
// tokens of at most 128 experts, a warp each, or one token where launch_route takes a block per token; then
// the permutation of at most 128 pairs into tiles of tile_m rows. The same ids, weights, rows and tiles, one
// kernel fewer between the router's GEMM and the experts'. cudaErrorInvalidValue for any other launch.
cudaError_t launch_route_and_permute(const RouteLaunch& launch, int32_t tile_m, const PermutationOut& out);
// Whether launch_route_and_permute takes `launch`; never with STEADYMOE_ROUTE_AND_PERMUTE=0 (to compare).
bool routes_and_permutes_in_one_launch(const RouteLaunch& launch);
// Whether launch_route_and_permute can publish `launch`'s experts early (RouteLaunch::early): one token, a warp
// routing it, chosen by its scores (not hash routing), each expert chosen at most once, so that each has one
// row and one tile. (The layer asks for it only with STEADYMOE_EARLY_ROUTE=1: RouterStage::enqueue_routing.)
bool route_publishes_early(const RouteLaunch& launch);

// The shared expert: every real token t (ascending), dest base + t, weight 1.
cudaError_t launch_permute_shared(const uint8_t* active, int64_t tokens, int64_t dest_base, int32_t tile_m,
                                  const PermutationOut& out, cudaStream_t stream);

}  // namespace steadymoe::cuda
