// The routing kernel for a decode step's few tokens: a block per token and a thread per expert, where
// routing.cu's route_kernel gives a token one warp (each lane E / 32 experts), which spent a decode step's
// routing issuing that warp's instructions one after another: 8.8 µs for deepseek-v4-flash's one token, in
// isolation too, with the caches warm or flushed (bench/results/2026-12-03-cuda-route-and-fork.md). The same
// operations in the same order where order matters, so the same ids and bits:
// - the logits, summed over the router GEMM's k splits in split order;
// - softmax: the maximum and the sum as route_kernel's lanes form them (lane l's experts l, l + 32, ... in
//   turn, then across lanes by xor shuffles), here by warp 0 over the scores in shared memory;
// - the selection: the same keys (route_keys.cuh), each step the largest key and the lowest id among
//   equals, group scores from each group's two largest keys (a maximum under a total order, so in any order);
// - the weights: their sum in slot order, the same adds as route_kernel's (slot_of_lane).
#include "dependent_launch.cuh"
#include "env_switch.hpp"
#include "permute_small.cuh"
#include "route_keys.cuh"
#include "route_wide.hpp"

#include <algorithm>

namespace steadymoe::cuda {

namespace {

constexpr int kSplitsInFlight = 16;  // a thread's logit loads issued before it waits for any
constexpr int kMaxWarps = kMaxRoutedExperts / 32;

// Softmax of the experts' scores in scores_of (score: this thread's), as route_kernel forms it.
__device__ float softmax(float score, bool mine, int E, float* scores_of, float* shared_value) {
    const int e = threadIdx.x, lane = e & 31;
    if (mine) scores_of[e] = score;
    __syncthreads();
    if (e < 32) {
        float mx = kNegInf;
        for (int x = lane; x < E; x += 32) mx = max_skipping_nan(mx, scores_of[x]);
        mx = warp_max_skipping_nan(mx);
        if (lane == 0) *shared_value = mx;
    }
    __syncthreads();
    const float v = expf(score - *shared_value);
    if (mine) scores_of[e] = v;  // (warp 0 read scores_of before the barrier above)
    __syncthreads();
    if (e < 32) {
        float sum = 0.0f;
        for (int x = lane; x < E; x += 32) sum += scores_of[x];
        sum = warp_sum(sum);
        if (lane == 0) *shared_value = sum;
    }
    __syncthreads();
    return v / *shared_value;  // every lane's xor-shuffled sum is the same (a + b == b + a)
}

// This thread's key where its expert's group ranks among the top_groups best by group_key (equal keys by lower
// group), else kNegInfKey.
__device__ __forceinline__ uint32_t limit_by_group_keys(uint32_t key, bool mine, const RouteLaunch& p, const uint32_t* group_key) {
    if (!mine) return key;
    const int g = int(threadIdx.x) / (p.experts / p.groups);
    int before = 0;  // groups that rank before g
    for (int h = 0; h < p.groups; ++h) before += group_key[h] > group_key[g] || (group_key[h] == group_key[g] && h < g);
    return before < p.top_groups ? key : kNegInfKey;
}

// A group's key from its largest key a and second largest b (kAbsent where it has one expert): a's value, or
// (group_score 1) that plus b's.
__device__ __forceinline__ uint32_t group_rank_key(uint32_t a, uint32_t b, int group_score) {
    const float first_value = rank_value(a);
    return rank_key_bits(group_score == 0 ? first_value : first_value + rank_value(b));
}

// Experts outside the top_groups best groups drop to -inf (key kNegInfKey): a group's score is its largest
// key's value, or (group_score 1) that plus its second largest's, NaN counting as -inf. Groups of 32 experts
// (deepseek-v3's 8 of 256) are a warp's: its largest key by one max-reduction, the second largest by another
// over the other lanes (one lane holding the largest left out), where one thread a group would read its 32
// keys one after another; other sizes take that loop.
__device__ uint32_t limit_to_groups(uint32_t key, bool mine, const RouteLaunch& p, uint32_t* keys_of,
                                    uint32_t* group_key) {
    const int e = threadIdx.x, per = p.experts / p.groups, lane = e & 31;
    if (per == 32 && !p.block_steps) {
        const uint32_t v = !mine ? kAbsent : key == kNanKey ? kNegInfKey : key;
        const uint32_t a = __reduce_max_sync(0xffffffffu, v);
        const uint32_t at = __reduce_min_sync(0xffffffffu, v == a ? uint32_t(lane) : 32u);
        const uint32_t b = __reduce_max_sync(0xffffffffu, uint32_t(lane) == at ? kAbsent : v);
        if (lane == 0 && e / 32 < p.groups) group_key[e / 32] = group_rank_key(a, b, p.group_score);
        __syncthreads();
        return limit_by_group_keys(key, mine, p, group_key);
    }
    if (mine) keys_of[e] = key;
    __syncthreads();
    if (e < p.groups) {
        uint32_t a = kAbsent, b = kAbsent;  // the group's largest and second largest
        for (int x = e * per; x < (e + 1) * per; ++x) {
            const uint32_t v = keys_of[x] == kNanKey ? kNegInfKey : keys_of[x];
            if (v > a) b = a, a = v;
            else if (v > b) b = v;
        }
        group_key[e] = group_rank_key(a, b, p.group_score);
    }
    __syncthreads();
    return limit_by_group_keys(key, mine, p, group_key);
}

// Whether (k, i) ranks before (key, id): the larger key, the lower id among equals.
__device__ __forceinline__ bool ranks_before(uint32_t k, uint32_t i, uint32_t key, uint32_t id) {
    return k > key || (k == key && i < id);
}

// The warp's largest key and, among the lanes holding it, the lowest id.
__device__ __forceinline__ uint2 warp_best(uint32_t key, uint32_t id) {
    const uint32_t top = __reduce_max_sync(0xffffffffu, key);
    return make_uint2(top, __reduce_min_sync(0xffffffffu, key == top ? id : 0xffffffffu));
}

// The top K by key (the larger first, the lower id among equals) into ids_of[0..K): each warp's top K of its
// lanes' keys by K max- and min-reductions, then warp 0's top K of those candidates the same way, a lane
// holding candidates lane, lane + 32, .... The whole block's top K lies among its warps' top Ks (an expert
// with K of its warp before it has them before it in the block too), so these are the ids of K block-wide steps
// (select_by_block_steps, STEADYMOE_ROUTE_SELECT=steps to compare), with one block barrier where those take K.
// deepseek-v4-flash's one-token routing kernel ended 0.4-0.7 µs sooner, deepseek-v3's 1.1
// (bench/results/2026-12-04-cuda-route-select.md).
__device__ void select_by_warp_candidates(uint32_t key, int K, int32_t* ids_of, uint32_t* cand_key, uint32_t* cand_id) {
    const int e = threadIdx.x, lane = e & 31, warp = e >> 5, warps = int(blockDim.x) >> 5;
    bool taken = false;
    for (int s = 0; s < K; ++s) {
        const uint2 best = warp_best(taken ? kAbsent : key, uint32_t(e));
        const uint32_t top = best.x, id = best.y;
        if (uint32_t(e) == id) taken = true;
        if (lane == 0) cand_key[warp * K + s] = top, cand_id[warp * K + s] = id;
    }
    __syncthreads();
    if (warp != 0) return;
    const int n = warps * K;
    uint32_t taken_mask = 0;  // bit j: candidate lane + 32 j chosen (n <= kMaxWarps * 32, so j < 16)
    for (int s = 0; s < K; ++s) {
        uint32_t best_key = kAbsent, best_id = 0xffffffffu;
        int best_j = -1;
        for (int j = 0; lane + 32 * j < n; ++j) {
            const uint32_t k = cand_key[lane + 32 * j], i = cand_id[lane + 32 * j];
            if (!(taken_mask >> j & 1u) && ranks_before(k, i, best_key, best_id)) best_key = k, best_id = i, best_j = j;
        }
        const uint2 best = warp_best(best_key, best_id);
        const uint32_t top = best.x, id = best.y;
        if (best_j >= 0 && best_id == id && best_key == top) taken_mask |= 1u << best_j;
        if (lane == 0) ids_of[s] = int32_t(id);
    }
}

// The same ids by K block-wide steps: each step every warp's best untaken key and its lowest id, then the
// block's best of those.
__device__ void select_by_block_steps(uint32_t key, int K, int32_t* ids_of, uint32_t (*best_key)[kMaxWarps],
                                      uint32_t (*best_id)[kMaxWarps]) {
    const int e = threadIdx.x, lane = e & 31, warp = e >> 5, warps = int(blockDim.x) >> 5;
    bool taken = false;
    for (int s = 0; s < K; ++s) {
        const uint2 best = warp_best(taken ? kAbsent : key, uint32_t(e));
        const uint32_t top = best.x, id = best.y;
        if (lane == 0) best_key[s & 1][warp] = top, best_id[s & 1][warp] = id;
        __syncthreads();
        uint32_t chosen_key = kAbsent, chosen = 0xffffffffu;
        for (int w = 0; w < warps; ++w) {
            const uint32_t k = best_key[s & 1][w], i = best_id[s & 1][w];
            if (ranks_before(k, i, chosen_key, chosen)) chosen_key = k, chosen = i;
        }
        if (uint32_t(e) == chosen) taken = true;
        if (e == 0) ids_of[s] = int32_t(chosen);
    }
}

// What a block's routing of one token keeps in shared memory.
struct BlockRouting {
    float scores_of[kMaxRoutedExperts];
    uint32_t keys_of[kMaxRoutedExperts];
    uint32_t group_key[kMaxGroups];
    uint32_t best_key[2][kMaxWarps], best_id[2][kMaxWarps];  // by step parity (select_by_block_steps)
    uint32_t cand_key[kMaxRoutedExperts], cand_id[kMaxRoutedExperts];  // warps' top Ks (K <= 32)
    int32_t ids_of[32];
    float weights_of[32];  // the token's weights in slot order, for a permutation in the same block
    float shared_value;
};

// Token t's routing by the block, thread e holding expert e (a block of at least the experts, whole warps).
__device__ void route_token_by_block(const RouteLaunch& p, int64_t t, BlockRouting& r) {
    const int e = threadIdx.x;
    const int E = p.experts, K = p.top_k;
    int32_t* ids = p.topk_ids + t * K;
    float* weights = p.topk_weights + t * K;
    const bool mine = e < E;
    // The mask's, the bias's and the hash id's loads issued beside the first round of the logits' (each a
    // trip to L2 or DRAM, which the routed gate/up waits for), not one after another. A masked token's logits
    // are loaded and not used: the router's GEMM writes every token's row. (The bias is loaded for hash
    // routing too, which does not use it.) With the permutation below reading shared memory, the one-token
    // kernel took 0.2-0.9 µs less in the traces and the layer was level
    // (bench/results/2026-12-06-cuda-route-kernels.md).
    const bool masked = p.active && !p.active[t];
    const float bias = mine && p.bias ? p.bias[e] : 0.0f;
    const int64_t token_id = p.tid2eid ? p.token_ids[t] : 0;
    float score = 0.0f;
    if (mine) {
        const float* logits = p.logits + t * E + e;
        score = logits[0];
#pragma unroll 1
        for (int z0 = 1; z0 < p.logit_splits; z0 += kSplitsInFlight) {
            float part[kSplitsInFlight];
#pragma unroll
            for (int q = 0; q < kSplitsInFlight; ++q) part[q] = z0 + q < p.logit_splits ? logits[(z0 + q) * p.split_stride] : 0.0f;
#pragma unroll
            for (int q = 0; q < kSplitsInFlight; ++q)
                if (z0 + q < p.logit_splits) score = __fadd_rn(score, part[q]);
        }
    }
    if (masked) {
        if (e < K) ids[e] = r.ids_of[e] = -1, weights[e] = r.weights_of[e] = 0.0f;
        return;
    }
    if (p.score_func == 0) score = softmax(score, mine, E, r.scores_of, &r.shared_value);
    else if (p.score_func == 1) score = 1.0f / (1.0f + expf(-score));
    else score = sqrtf(score > 20.0f ? score : log1pf(expf(score)));
    if (mine) r.scores_of[e] = score;

    if (p.tid2eid) {
        if (e < K) r.ids_of[e] = p.tid2eid[token_id * K + e];
    } else {
        uint32_t key = mine ? rank_key_bits(p.bias ? score + bias : score) : kAbsent;
        if (p.groups > 1) key = limit_to_groups(key, mine, p, r.keys_of, r.group_key);
        if (p.block_steps) select_by_block_steps(key, K, r.ids_of, r.best_key, r.best_id);
        else select_by_warp_candidates(key, K, r.ids_of, r.cand_key, r.cand_id);
    }
    __syncthreads();
    // The weights, as the CPU router forms them: warp 0's lane s slot s's.
    if (e >= 32) return;
    const SlotOfLane slot = slot_of_lane(r.scores_of, r.ids_of, K, p.normalise_eps, p.normalise, p.scale);
    if (e < K) ids[e] = slot.id, weights[e] = r.weights_of[e] = slot.weight;
}

__global__ void __launch_bounds__(kMaxRoutedExperts) route_wide_kernel(const RouteLaunch p) {
    begin_dependent_kernel();
    __shared__ BlockRouting r;
    route_token_by_block(p, blockIdx.x, r);
}

// One token's routing (the same block), then its pairs' permutation (permute_small.cuh's permute_small_block;
// permute_one_token where `scan_free` and the selection chose them), in one block.
// Without the scans this kernel took 1.0 µs less at one token, yet deepseek-v3's and deepseek-v4-flash's
// one-token layers 1.1-1.3 µs more by the medians of two runs (H100, against the same build with its scans):
// their routed GEMMs, starting sooner, ran beside more of the shared expert's down GEMM, where before it had
// mostly run in the routed gate/up's tail (bench/results/2026-12-07-cuda-one-token-permute.md, calls 1 and 3).
// STEADYMOE_WIDE_SCAN_FREE_PERMUTE=1 takes it, to compare (the same rows, slots and tiles).
// The permutation takes the ids and weights from shared memory, where reading back what the block had just
// written to global memory took two more trips to L2, one after the other (measured with the early loads
// above: bench/results/2026-12-06-cuda-route-kernels.md). (Warp 0 alone permuting the token's pairs, its lanes
// over the experts in turn, made the kernel 0.5 µs longer: bench/results/2026-12-07-cuda-route-early-loads.md.)
__global__ void __launch_bounds__(permute::kScanThreads)
    route_wide_and_permute_kernel(const RouteLaunch p, int32_t tile_m, PermutationOut out, bool scan_free) {
    begin_dependent_kernel();
    __shared__ BlockRouting r;
    __shared__ permute::SmallPermutation s;
    route_token_by_block(p, 0, r);
    __syncthreads();  // (the block's writes of the ids and weights, for its reads below)
    if (scan_free && !p.tid2eid && p.top_k <= p.experts)
        permute::permute_one_token(r.ids_of, r.weights_of, p.top_k, p.experts, tile_m, out);
    else
        permute::permute_small_block(r.ids_of, r.weights_of, nullptr, p.top_k, nullptr, p.top_k, p.experts, tile_m, out, s);
}

// The launch as the kernels take it: STEADYMOE_ROUTE_SELECT=steps sets block_steps for every launch.
RouteLaunch with_selection(const RouteLaunch& launch) {
    static const bool steps = env_equals("STEADYMOE_ROUTE_SELECT", "steps");
    RouteLaunch p = launch;
    p.block_steps = p.block_steps || steps;
    return p;
}

}  // namespace

cudaError_t launch_route_wide(const RouteLaunch& launch) {
    const unsigned threads = unsigned(std::max(32, (launch.experts + 31) / 32 * 32));
    return launch_dependent(route_wide_kernel, unsigned(launch.tokens), threads, 0, launch.stream, with_selection(launch));
}

cudaError_t launch_route_wide_and_permute(const RouteLaunch& launch, int32_t tile_m, const PermutationOut& out) {
    static const bool scan_free = env_equals("STEADYMOE_WIDE_SCAN_FREE_PERMUTE", "1");
    return launch_dependent(route_wide_and_permute_kernel, 1, permute::kScanThreads, 0, launch.stream, with_selection(launch), tile_m,
                            out, scan_free);
}

}  // namespace steadymoe::cuda
