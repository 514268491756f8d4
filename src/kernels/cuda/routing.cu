#include "dependent_launch.cuh"
#include "early_route.cuh"
#include "env_switch.hpp"
#include "grouped_gemm.hpp"
#include "live_rows.cuh"
#include "permute_small.cuh"
#include "route_keys.cuh"
#include "route_wide.hpp"
#include "routing.hpp"

#include <cub/block/block_scan.cuh>

#include <cmath>

namespace steadymoe::cuda {

namespace {

using namespace permute;

constexpr int kRouteWarps = 4;
// Token t's routing by the calling warp, each lane kPerLane experts, with a row of kMaxRoutedExperts scores
// and one of 32 ids in shared memory of its own; where pair_ids is given, its pairs' ids and weights are
// copied there too (pair_ids, pair_weights), for a permutation in the same block.
template <int kPerLane>
__device__ __forceinline__ void route_token_by_warp(const RouteLaunch& p, int64_t t, float* scores_of, int32_t* ids_of,
                                                   int32_t* pair_ids = nullptr, float* pair_weights = nullptr) {
    const int lane = threadIdx.x & 31;
    const int E = p.experts, K = p.top_k;
    int32_t* ids = p.topk_ids + t * K;
    float* weights = p.topk_weights + t * K;
    // The mask's and the hash id's loads issued beside the logits' (each a trip to L2 or DRAM), not before
    // them: a masked token's logits are loaded and not used (the router's GEMM writes every token's row).
    const bool masked = p.active && !p.active[t];
    const int64_t token_id = p.tid2eid ? p.token_ids[t] : 0;
    // The lane's logits, summed over the router GEMM's k splits in split order (split 0 as it is, the others
    // added). A chunk of kChunk splits of all the lane's experts is loaded before any of it is added: a
    // decode token's logits come from L2 or DRAM, and each round of loads waits for them. With each split's
    // loads in turn the one-token kernel took 22.5 µs (14 splits of 256 experts, deepseek-v3), with chunks of
    // 4 splits 14.0 (five rounds), and 48.1 with each expert's loads in turn too
    // (bench/results/2026-12-02-cuda-stage-loop.md, 2026-12-02-cuda-dependent-launches.md). A chunk holds up
    // to 16 splits and 128 values a lane: one round for deepseek-v3's 14 splits and qwen3's 4 (more splits a
    // chunk cost registers, hence occupancy, with no round saved).
    constexpr int kChunk = 128 / kPerLane < 16 ? 128 / kPerLane : 16;
    const float* logits = p.logits + t * E;
    float score[kPerLane] = {};
#pragma unroll 1
    for (int z0 = 0; z0 < p.logit_splits; z0 += kChunk) {
        float part[kChunk][kPerLane];
#pragma unroll
        for (int q = 0; q < kChunk; ++q)
#pragma unroll
            for (int j = 0; j < kPerLane; ++j)
                part[q][j] = z0 + q < p.logit_splits && lane + 32 * j < E ? logits[(z0 + q) * p.split_stride + lane + 32 * j] : 0.0f;
#pragma unroll
        for (int q = 0; q < kChunk; ++q)
            if (z0 + q < p.logit_splits)
#pragma unroll
                for (int j = 0; j < kPerLane; ++j)
                    score[j] = z0 + q == 0 ? part[q][j] : __fadd_rn(score[j], part[q][j]);
    }
    if (masked) {
        for (int s = lane; s < K; s += 32) {
            ids[s] = -1, weights[s] = 0.0f;
            if (pair_ids) pair_ids[s] = -1, pair_weights[s] = 0.0f;
        }
        if (p.early) publish_early_route(p.early, ids_of, 0, E);  // no experts
        return;
    }
    if (p.score_func == 0) {  // softmax
        float mx = kNegInf;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
            if (lane + 32 * j < E) mx = max_skipping_nan(mx, score[j]);
        mx = warp_max_skipping_nan(mx);
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
            if (lane + 32 * j < E) score[j] = expf(score[j] - mx), sum += score[j];
        sum = warp_sum(sum);
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) score[j] = score[j] / sum;
    } else if (p.score_func == 1) {
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) score[j] = 1.0f / (1.0f + expf(-score[j]));
    } else {
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const float x = score[j];
            score[j] = sqrtf(x > 20.0f ? x : log1pf(expf(x)));
        }
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
        if (lane + 32 * j < E) scores_of[lane + 32 * j] = score[j];

    if (p.tid2eid) {
        if (lane < K) ids_of[lane] = p.tid2eid[token_id * K + lane];
    } else {
        // Keys of the selection scores (score + bias): one max- and one min-reduction find a warp's best,
        // where a tournament of shuffles took five rounds.
        uint32_t key[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int e = lane + 32 * j;
            key[j] = e < E ? rank_key_bits(p.bias ? score[j] + p.bias[e] : score[j]) : kAbsent;
        }
        if (p.groups > 1) {
            const int per = E / p.groups;
            int group_of[kPerLane];  // worked out once: an integer division per value is slow
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) group_of[j] = lane + 32 * j < E ? (lane + 32 * j) / per : -1;
            // Lane g holds the score keys of groups g and g + 32.
            uint32_t group_key[2] = {kAbsent, kAbsent};
            for (int g = 0; g < p.groups; ++g) {
                uint32_t a = kAbsent, b = kAbsent;  // the lane's largest and second largest in the group
#pragma unroll
                for (int j = 0; j < kPerLane; ++j) {
                    if (group_of[j] != g) continue;
                    const uint32_t v = key[j] == kNanKey ? kNegInfKey : key[j];  // NaN counts as -inf here
                    if (v > a) b = a, a = v;
                    else if (v > b) b = v;
                }
                const uint32_t top = __reduce_max_sync(0xffffffffu, a);
                const bool twice = __popc(__ballot_sync(0xffffffffu, a == top)) > 1;
                const uint32_t second = twice ? top : __reduce_max_sync(0xffffffffu, a == top ? b : a);
                const float first_value = rank_value(top);
                const float score_of_group = p.group_score == 0 ? first_value : first_value + rank_value(second);
                if ((g & 31) == lane) {
                    if (g < 32) group_key[0] = rank_key_bits(score_of_group);
                    else group_key[1] = rank_key_bits(score_of_group);
                }
            }
            // A group is kept when fewer than top_groups groups rank before it.
            uint64_t keep = 0;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int g = lane + 32 * half;
                int before = 0;
                for (int h = 0; h < p.groups; ++h) {
                    const uint32_t other = __shfl_sync(0xffffffffu, h < 32 ? group_key[0] : group_key[1], h & 31);
                    before += other > group_key[half] || (other == group_key[half] && h < g);
                }
                keep |= uint64_t(__ballot_sync(0xffffffffu, g < p.groups && before < p.top_groups)) << (32 * half);
            }
#pragma unroll
            for (int j = 0; j < kPerLane; ++j)
                if (group_of[j] >= 0 && !(keep >> group_of[j] & 1)) key[j] = kNegInfKey;
        }
        uint32_t taken = 0;  // bit j: this lane's expert lane + 32 j is chosen (a mask keeps key[] in registers)
        for (int s = 0; s < K; ++s) {
            // The lane's best: ascending j keeps the lowest id among equal keys.
            uint32_t best = kAbsent;
            int best_id = 0;
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) {
                const uint32_t k = taken >> j & 1 ? kAbsent : key[j];
                if (k > best) best = k, best_id = lane + 32 * j;
            }
            const uint32_t top = __reduce_max_sync(0xffffffffu, best);
            const int id = int(__reduce_min_sync(0xffffffffu, best == top ? uint32_t(best_id) : 0xffffffffu));
            if ((id & 31) == lane) taken |= 1u << (id >> 5);
            if (lane == 0) ids_of[s] = id;
        }
    }
    __syncwarp();
    // The experts are known: the gate/up GEMM's CTAs may start their weights' copies while the weights and the
    // permutation are made (RouteLaunch::early: one token, routed by this warp).
    if (p.early) publish_early_route(p.early, ids_of, K, E);
    // The weights, as the CPU router forms them: lane s slot s's.
    const SlotOfLane slot = slot_of_lane(scores_of, ids_of, K, p.normalise_eps, p.normalise, p.scale);
    if (lane < K) {
        ids[lane] = slot.id, weights[lane] = slot.weight;
        if (pair_ids) pair_ids[lane] = slot.id, pair_weights[lane] = slot.weight;
    }
}

// A warp per token. kPerLane experts per lane: the launch picks the smallest that holds the layer's experts
// (the least work per lane; fetching the kernel's code cold did not cost it time: ncu, with the caches warm
// and flushed, bench/results/2026-12-03-cuda-route-and-fork.md).
template <int kPerLane>
__global__ void __launch_bounds__(kRouteWarps * 32) route_kernel(const RouteLaunch p) {
    begin_dependent_kernel();
    __shared__ float scores_of[kRouteWarps][kMaxRoutedExperts];
    __shared__ int32_t ids_of[kRouteWarps][32];
    const int warp = threadIdx.x >> 5;
    const int64_t t = int64_t(blockIdx.x) * kRouteWarps + warp;
    if (t < p.tokens) route_token_by_warp<kPerLane>(p, t, scores_of[warp], ids_of[warp]);
}

constexpr int kPermuteThreads = 256;
using BlockScan = cub::BlockScan<int, kPermuteThreads>;
constexpr int kChunkRounds = kPermuteChunk / kPermuteThreads;

// A large permutation works on chunks of kPermuteChunk pairs, a block each, in rounds of one pair per
// thread: a pair's rank among its expert's pairs of the chunk is its rank in its warp (a warp match),
// plus the earlier warps' counts of that expert, plus the earlier rounds'. Pairs then stay in ascending
// order within each expert, as the one-block kernel and the CPU place them. A round is kThreads pairs
// (one per thread of the block).
template <int kThreads>
struct ChunkCounts {
    static constexpr int kWarps = kThreads / 32;
    int warp[kWarps][kMaxRoutedExperts];  // this round's pairs per warp and expert
    int before[kMaxRoutedExperts];        // running: earlier chunks' and rounds' pairs (+ first row)
};

// This thread's pair i of a round: its expert (-1 for none: masked pairs and pairs past the live ones)
// and its rank among the round's pairs of that expert; fills c.warp.
template <int kThreads>
__device__ int2 round_ranks(const int32_t* ids, int64_t pairs, int32_t experts, int64_t i, ChunkCounts<kThreads>& c) {
    constexpr int kWarps = ChunkCounts<kThreads>::kWarps;
    int e = i < pairs ? ids[i] : -1;
    if (e < 0 || e >= experts) e = -1;
    for (int x = threadIdx.x; x < kWarps * experts; x += kThreads) c.warp[x / experts][x % experts] = 0;
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    int rank = __popc(same & ((1u << lane) - 1u));
    if (e >= 0 && rank == 0) c.warp[warp][e] = __popc(same);
    __syncthreads();
    if (e >= 0)
        for (int w = 0; w < warp; ++w) rank += c.warp[w][e];
    return make_int2(e, rank);
}

// Adds the round's pairs per expert to c.before (after every thread has read it for the round).
template <int kThreads>
__device__ void end_round(int32_t experts, ChunkCounts<kThreads>& c) {
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += kThreads) {
        int n = 0;
        for (int w = 0; w < ChunkCounts<kThreads>::kWarps; ++w) n += c.warp[w][e];
        c.before[e] += n;
    }
    __syncthreads();  // before the next round clears c.warp (and before c.before is read)
}

// chunk_counts[chunk][e] = the chunk's pairs of expert e.
__global__ void __launch_bounds__(kPermuteThreads) chunk_count_kernel(const int32_t* ids, int64_t pairs, const int32_t* live,
                                                                      int32_t experts, int32_t* chunk_counts) {
    begin_dependent_kernel();
    __shared__ ChunkCounts<kPermuteThreads> c;
    pairs = live_count(pairs, live);
    for (int e = threadIdx.x; e < experts; e += kPermuteThreads) c.before[e] = 0;
    for (int round = 0; round < kChunkRounds; ++round) {
        (void)round_ranks(ids, pairs, experts, int64_t(blockIdx.x) * kPermuteChunk + round * kPermuteThreads + threadIdx.x, c);
        end_round(experts, c);
    }
    for (int e = threadIdx.x; e < experts; e += kPermuteThreads) chunk_counts[int64_t(blockIdx.x) * experts + e] = c.before[e];
}

// Thread e: expert e's rows (its chunk counts added in chunk order, each replaced by the rows before
// it), then every expert's first row and tiles.
__global__ void __launch_bounds__(kScanThreads) chunk_offsets_kernel(int32_t experts, int32_t tile_m, int64_t chunks,
                                                                     int32_t* chunk_counts, PermutationOut out) {
    begin_dependent_kernel();
    __shared__ OffsetScan::TempStorage temp;
    const int e = threadIdx.x;
    int rows = 0;
    if (e < experts) {
#pragma unroll 8
        for (int64_t c = 0; c < chunks; ++c) {
            const int n = chunk_counts[c * experts + e];
            chunk_counts[c * experts + e] = rows;
            rows += n;
        }
    }
    const int2 first = expert_offsets(rows, experts, tile_m, out, temp);
    if (e < experts) {
        out.load[e] = rows;
        write_tiles(e, first.x, rows, first.y, tile_m, out, 0, 1);
    }
}

// The block's chunk of pairs into their rows: expert e's first row, plus its rows in earlier chunks,
// plus its rank within the chunk.
__global__ void __launch_bounds__(kPermuteThreads) chunk_place_kernel(const int32_t* ids, const float* topk_weights,
                                                                      const int32_t* row_of_pair, int64_t pairs,
                                                                      const int32_t* live, int32_t top_k, int32_t experts,
                                                                      const int32_t* chunk_rows_before, PermutationOut out) {
    begin_dependent_kernel();
    __shared__ ChunkCounts<kPermuteThreads> c;
    pairs = live_count(pairs, live);
    for (int e = threadIdx.x; e < experts; e += kPermuteThreads)
        c.before[e] = out.offsets[e] + chunk_rows_before[int64_t(blockIdx.x) * experts + e];
    for (int round = 0; round < kChunkRounds; ++round) {
        const int64_t i = int64_t(blockIdx.x) * kPermuteChunk + round * kPermuteThreads + threadIdx.x;
        const int2 er = round_ranks(ids, pairs, experts, i, c);  // (its barriers publish c.before too)
        if (er.x >= 0) place_pair(i, c.before[er.x] + er.y, topk_weights, row_of_pair, top_k, out);
        end_round(experts, c);
    }
}

// A permutation of at most kPermuteChunk pairs in one block: chunk_count_kernel's rounds, chunk_offsets_kernel's
// prefix sums and chunk_place_kernel's rounds for the one chunk, where the three kernels take three launches
// (2.5 µs of qwen3's layer at 128 tokens, bench/results/2026-12-02-cuda-decode-kernel.md) — the same prefix
// sums, so the same rows, slots and tiles.
__global__ void __launch_bounds__(kScanThreads) permute_chunk_kernel(const int32_t* ids, const float* topk_weights,
                                                                     const int32_t* row_of_pair, int64_t pairs,
                                                                     const int32_t* live, int32_t top_k, int32_t experts,
                                                                     int32_t tile_m, PermutationOut out) {
    begin_dependent_kernel();
    constexpr int kRounds = int(kPermuteChunk / kScanThreads);
    static_assert(kRounds >= 1 && kPermuteChunk % kScanThreads == 0, "whole rounds cover the chunk");
    __shared__ ChunkCounts<kScanThreads> c;
    __shared__ OffsetScan::TempStorage temp;
    pairs = live_count(pairs, live);
    for (int e = threadIdx.x; e < experts; e += kScanThreads) c.before[e] = 0;
    for (int round = 0; round < kRounds; ++round) {
        (void)round_ranks(ids, pairs, experts, int64_t(round) * kScanThreads + threadIdx.x, c);
        end_round(experts, c);
    }
    const int e = threadIdx.x;  // expert e's rows: their first row and tiles
    const int2 first = expert_offsets(e < experts ? c.before[e] : 0, experts, tile_m, out, temp);
    if (e < experts) {
        out.load[e] = c.before[e];
        write_tiles(e, first.x, c.before[e], first.y, tile_m, out, 0, 1);
        c.before[e] = first.x;  // (published by the next round's barriers)
    }
    for (int round = 0; round < kRounds; ++round) {
        const int64_t i = int64_t(round) * kScanThreads + threadIdx.x;
        const int2 er = round_ranks(ids, pairs, experts, i, c);
        if (er.x >= 0) place_pair(i, c.before[er.x] + er.y, topk_weights, row_of_pair, top_k, out);
        end_round(experts, c);
    }
}

// The smallest permutations (up to kSmallPairs pairs) in one block: permute_small_block.
__global__ void __launch_bounds__(kScanThreads) permute_small_kernel(const int32_t* ids, const float* topk_weights,
                                                                     const int32_t* row_of_pair, int64_t pairs_bound,
                                                                     const int32_t* live, int32_t top_k, int32_t experts,
                                                                     int32_t tile_m, PermutationOut out) {
    begin_dependent_kernel();
    __shared__ SmallPermutation s;
    permute_small_block(ids, topk_weights, row_of_pair, pairs_bound, live, top_k, experts, tile_m, out, s);
}

// A decode step's routing and permutation in one block (kRouteAndPermuteTokens tokens at most, a warp each,
// kSmallPairs pairs, and kRouteAndPermuteExperts experts): route_kernel's warps, then permute_small_kernel's
// block — the same ids, weights, rows and tiles, one launch where those take two (launch_route_and_permute).
// The permutation takes the ids and weights from shared memory (pair_ids, pair_weights: pair t * top_k + s),
// where reading back what the block had just written to global memory took two more trips to L2 (qwen3's
// one-token layer level with it: bench/results/2026-12-06-cuda-route-kernels.md).
// One token's pairs, when a selection chose them, take permute_one_token (the same rows and tiles, without the
// block's scans): qwen3's one-token layer took 0.7-1.2 µs less in three calls (H100:
// bench/results/2026-12-07-cuda-one-token-permute.md; route_wide.cu's kernel keeps the scans).
// Four experts a lane only: with eight or sixteen, 512 threads would spill (route_kernel's take 167 and 162
// registers), and launch_route gives more than 128 experts a block per token at a decode step's few tokens.
constexpr int kRouteAndPermuteTokens = kScanThreads / 32, kRouteAndPermuteExperts = 128;
// Whether route_and_permute_kernel permutes by permute_one_token: one token whose experts a selection chose
// (each at most once, so one row and one tile each, in ascending order: what route_publishes_early relies on).
__host__ __device__ inline bool permutes_one_token(const RouteLaunch& p) {
    return p.tokens == 1 && !p.tid2eid && p.top_k <= p.experts;
}
__global__ void __launch_bounds__(kScanThreads) route_and_permute_kernel(const RouteLaunch p, int32_t tile_m, PermutationOut out) {
    wait_for_prior_kernels();
    if (p.early) {  // (a CTA's first trigger lets the next kernel start: the barrier keeps every one after the clearing)
        if (threadIdx.x == 0) retract_early_route(p.early);
        __syncthreads();
    }
    allow_next_kernel();
    __shared__ float scores_of[kRouteAndPermuteTokens][kMaxRoutedExperts];
    __shared__ int32_t ids_of[kRouteAndPermuteTokens][32];
    __shared__ SmallPermutation s;
    __shared__ int32_t pair_ids[kSmallPairs];
    __shared__ float pair_weights[kSmallPairs];
    const int warp = threadIdx.x >> 5;
    if (warp < p.tokens)
        route_token_by_warp<kRouteAndPermuteExperts / 32>(p, warp, scores_of[warp], ids_of[warp], pair_ids + warp * p.top_k,
                                                          pair_weights + warp * p.top_k);
    __syncthreads();  // (the block's writes of the ids and weights, for its reads below)
    if (permutes_one_token(p))
        permute_one_token(pair_ids, pair_weights, p.top_k, p.experts, tile_m, out);
    else
        permute_small_block(pair_ids, pair_weights, nullptr, p.tokens * p.top_k, nullptr, p.top_k, p.experts, tile_m, out, s);
}

__global__ void __launch_bounds__(kPermuteThreads) shared_kernel(const uint8_t* active, int64_t tokens, int64_t dest_base,
                                                                 int32_t tile_m, PermutationOut out) {
    begin_dependent_kernel();
    __shared__ typename BlockScan::TempStorage temp;
    int base = 0;
    for (int64_t c0 = 0; c0 < tokens; c0 += kPermuteThreads) {
        const int64_t t = c0 + threadIdx.x;
        const int flag = t < tokens && (!active || active[t]);
        int rank = 0, count = 0;
        BlockScan(temp).ExclusiveSum(flag, rank, count);
        if (flag) {
            out.rows[base + rank] = int32_t(t);
            out.dest[base + rank] = dest_base + t;
            out.weight[base + rank] = 1.0f;
        }
        base += count;
        __syncthreads();
    }
    write_tiles(0, 0, base, 0, tile_m, out, threadIdx.x, blockDim.x);
    if (threadIdx.x == 0) *out.tile_count = (base + tile_m - 1) / tile_m, out.load[0] = base;
}

bool valid_route(const RouteLaunch& p) { return p.experts <= kMaxRoutedExperts && p.top_k <= 32 && p.groups <= kMaxGroups; }

// Whether launch_route takes the kernel of a block per token (route_wide.hpp).
bool routes_wide(const RouteLaunch& p) {
    static const bool unrolled_by_default = env_equals("STEADYMOE_ROUTE_KERNEL", "unrolled");
    return p.form == RouteLaunch::Form::Wide || (p.form == RouteLaunch::Form::Default && !unrolled_by_default && wide_route_pays(p));
}

// The kernel's form for the layer's experts: the fewest experts a lane that hold them all.
auto route_kernel_for(int32_t experts) {
    return experts <= 128 ? route_kernel<4> : experts <= 256 ? route_kernel<8> : route_kernel<kMaxRoutedExperts / 32>;
}

}  // namespace

cudaError_t launch_route(const RouteLaunch& p) {
    if (!valid_route(p) || p.early) return cudaErrorInvalidValue;  // (early: launch_route_and_permute's alone)
    if (p.tokens <= 0) return cudaSuccess;
    if (routes_wide(p)) return launch_route_wide(p);
    const unsigned blocks = unsigned((p.tokens + kRouteWarps - 1) / kRouteWarps);
    return launch_dependent(route_kernel_for(p.experts), blocks, kRouteWarps * 32, 0, p.stream, p);
}

bool routes_and_permutes_in_one_launch(const RouteLaunch& p) {
    static const bool apart = env_equals("STEADYMOE_ROUTE_AND_PERMUTE", "0");
    if (apart || !valid_route(p) || p.tokens <= 0 || p.tokens * p.top_k > kSmallPairs) return false;
    return routes_wide(p) ? p.tokens == 1 : p.tokens <= kRouteAndPermuteTokens && p.experts <= kRouteAndPermuteExperts;
}

bool route_publishes_early(const RouteLaunch& p) {
    return valid_route(p) && routes_and_permutes_in_one_launch(p) && !routes_wide(p) && permutes_one_token(p);
}

cudaError_t launch_route_and_permute(const RouteLaunch& p, int32_t tile_m, const PermutationOut& out) {
    if (!routes_and_permutes_in_one_launch(p) || tile_m <= 0) return cudaErrorInvalidValue;
    if (p.early && !route_publishes_early(p)) return cudaErrorInvalidValue;
    if (routes_wide(p)) return launch_route_wide_and_permute(p, tile_m, out);
    return launch_dependent(route_and_permute_kernel, 1, kScanThreads, 0, p.stream, p, tile_m, out);
}

cudaError_t launch_permute_routed(const int32_t* topk_ids, const float* topk_weights, int64_t pairs, int32_t top_k,
                                  int32_t experts, int32_t tile_m, const PermutationOut& out, cudaStream_t stream,
                                  const int32_t* row_of_pair, const int32_t* live_pairs) {
    if (experts > kMaxRoutedExperts) return cudaErrorInvalidValue;
    if (pairs <= kSmallPairs) {
        return launch_dependent(permute_small_kernel, 1, kScanThreads, 0, stream, topk_ids, topk_weights, row_of_pair, pairs,
                                live_pairs, top_k, experts, tile_m, out);
    }
    if (pairs <= kPermuteChunk) {
        return launch_dependent(permute_chunk_kernel, 1, kScanThreads, 0, stream, topk_ids, topk_weights, row_of_pair, pairs,
                                live_pairs, top_k, experts, tile_m, out);
    }
    if (!out.chunk_counts) return cudaErrorInvalidValue;
    const int64_t chunks = permutation_chunks(pairs);
    if (chunks > 0x7fffffff) return cudaErrorInvalidValue;
    cudaError_t err = launch_dependent(chunk_count_kernel, unsigned(chunks), kPermuteThreads, 0, stream, topk_ids, pairs,
                                       live_pairs, experts, out.chunk_counts);
    if (err == cudaSuccess)
        err = launch_dependent(chunk_offsets_kernel, 1, kScanThreads, 0, stream, experts, tile_m, chunks, out.chunk_counts, out);
    if (err == cudaSuccess)
        err = launch_dependent(chunk_place_kernel, unsigned(chunks), kPermuteThreads, 0, stream, topk_ids, topk_weights,
                               row_of_pair, pairs, live_pairs, top_k, experts, out.chunk_counts, out);
    return err;
}

cudaError_t launch_permute_shared(const uint8_t* active, int64_t tokens, int64_t dest_base, int32_t tile_m,
                                  const PermutationOut& out, cudaStream_t stream) {
    return launch_dependent(shared_kernel, 1, kPermuteThreads, 0, stream, active, tokens, dest_base, tile_m, out);
}

}  // namespace steadymoe::cuda
