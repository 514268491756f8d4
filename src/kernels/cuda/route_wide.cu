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
// - the weights: their sum in slot order by one thread.
#include "dependent_launch.cuh"
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

// Experts outside the top_groups best groups drop to -inf (key kNegInfKey): a group's score is its largest
// key's value, or (group_score 1) that plus its second largest's, NaN counting as -inf.
__device__ uint32_t limit_to_groups(uint32_t key, bool mine, const RouteLaunch& p, uint32_t* keys_of,
                                    uint32_t* group_key) {
    const int e = threadIdx.x, per = p.experts / p.groups;
    if (mine) keys_of[e] = key;
    __syncthreads();
    if (e < p.groups) {
        uint32_t a = kAbsent, b = kAbsent;  // the group's largest and second largest
        for (int x = e * per; x < (e + 1) * per; ++x) {
            const uint32_t v = keys_of[x] == kNanKey ? kNegInfKey : keys_of[x];
            if (v > a) b = a, a = v;
            else if (v > b) b = v;
        }
        const float first_value = rank_value(a);
        group_key[e] = rank_key_bits(p.group_score == 0 ? first_value : first_value + rank_value(b));
    }
    __syncthreads();
    if (!mine) return key;
    const int g = e / per;
    int before = 0;  // groups that rank before g
    for (int h = 0; h < p.groups; ++h) before += group_key[h] > group_key[g] || (group_key[h] == group_key[g] && h < g);
    return before < p.top_groups ? key : kNegInfKey;
}

__global__ void __launch_bounds__(kMaxRoutedExperts) route_wide_kernel(const RouteLaunch p) {
    begin_dependent_kernel();
    __shared__ float scores_of[kMaxRoutedExperts];
    __shared__ uint32_t keys_of[kMaxRoutedExperts];
    __shared__ uint32_t group_key[kMaxGroups];
    __shared__ uint32_t best_key[2][kMaxWarps], best_id[2][kMaxWarps];  // by step parity
    __shared__ int32_t ids_of[32];
    __shared__ float shared_value;
    const int e = threadIdx.x, lane = e & 31, warp = e >> 5, warps = int(blockDim.x) >> 5;
    const int64_t t = blockIdx.x;
    const int E = p.experts, K = p.top_k;
    int32_t* ids = p.topk_ids + t * K;
    float* weights = p.topk_weights + t * K;
    if (p.active && !p.active[t]) {
        if (e < K) ids[e] = -1, weights[e] = 0.0f;
        return;
    }
    const bool mine = e < E;
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
    if (p.score_func == 0) score = softmax(score, mine, E, scores_of, &shared_value);
    else if (p.score_func == 1) score = 1.0f / (1.0f + expf(-score));
    else score = sqrtf(score > 20.0f ? score : log1pf(expf(score)));
    if (mine) scores_of[e] = score;

    if (p.tid2eid) {
        if (e < K) ids_of[e] = p.tid2eid[p.token_ids[t] * K + e];
    } else {
        uint32_t key = mine ? rank_key_bits(p.bias ? score + p.bias[e] : score) : kAbsent;
        if (p.groups > 1) key = limit_to_groups(key, mine, p, keys_of, group_key);
        bool taken = false;
        for (int s = 0; s < K; ++s) {
            const uint32_t candidate = taken ? kAbsent : key;
            const uint32_t top = __reduce_max_sync(0xffffffffu, candidate);
            const uint32_t id = __reduce_min_sync(0xffffffffu, candidate == top ? uint32_t(e) : 0xffffffffu);
            if (lane == 0) best_key[s & 1][warp] = top, best_id[s & 1][warp] = id;
            __syncthreads();
            uint32_t chosen_key = kAbsent, chosen = 0xffffffffu;
            for (int w = 0; w < warps; ++w) {
                const uint32_t k = best_key[s & 1][w], i = best_id[s & 1][w];
                if (k > chosen_key || (k == chosen_key && i < chosen)) chosen_key = k, chosen = i;
            }
            if (uint32_t(e) == chosen) taken = true;
            if (e == 0) ids_of[s] = int32_t(chosen);
        }
    }
    __syncthreads();
    // The weights, in slot order as the CPU router forms them.
    if (e == 0) shared_value = slot_order_sum(scores_of, ids_of, K, p.normalise_eps);
    __syncthreads();
    if (e < K) {
        const float v = slot_weight(scores_of[ids_of[e]], shared_value, p.normalise, p.scale);
        ids[e] = ids_of[e];
        weights[e] = v;
    }
}

}  // namespace

cudaError_t launch_route_wide(const RouteLaunch& p) {
    const unsigned threads = unsigned(std::max(32, (p.experts + 31) / 32 * 32));
    return launch_dependent(route_wide_kernel, unsigned(p.tokens), threads, 0, p.stream, p);
}

}  // namespace steadymoe::cuda
