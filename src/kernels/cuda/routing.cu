#include "grouped_gemm.hpp"
#include "routing.hpp"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <cmath>

namespace steadymoe::cuda {

namespace {

constexpr int kRouteWarps = 4;
constexpr float kNegInf = -INFINITY;

__device__ __forceinline__ bool is_nan(float v) { return v != v; }
// NaN ranks below every number (the CPU router's rule), so a poisoned token still picks valid experts.
__device__ __forceinline__ float rank_key(float v) { return is_nan(v) ? kNegInf : v; }
__device__ __forceinline__ bool ranks_before(float va, int a, float vb, int b) {
    const float ka = rank_key(va), kb = rank_key(vb);
    if (ka != kb) return ka > kb;
    const bool na = is_nan(va), nb = is_nan(vb);
    if (na != nb) return nb;
    return a < b;
}

__device__ __forceinline__ float max_skipping_nan(float a, float b) { return a < b ? b : a; }  // as std::max

// The best of (value, id) pairs across the warp under ranks_before; id < 0 marks "none".
__device__ __forceinline__ void warp_best(float& v, int& id) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
        const int oid = __shfl_xor_sync(0xffffffffu, id, offset);
        if (oid >= 0 && (id < 0 || ranks_before(ov, oid, v, id))) v = ov, id = oid;
    }
}

// kPerLane experts per lane: the launch picks the smallest that holds the layer's experts, which keeps
// the code small (a kernel's code is fetched cold every layer in decode).
template <int kPerLane>
__global__ void __launch_bounds__(kRouteWarps * 32) route_kernel(const RouteLaunch p) {
    __shared__ float scores_of[kRouteWarps][kMaxRoutedExperts];
    __shared__ int32_t ids_of[kRouteWarps][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t = int64_t(blockIdx.x) * kRouteWarps + warp;
    if (t >= p.tokens) return;
    const int E = p.experts, K = p.top_k;
    int32_t* ids = p.topk_ids + t * K;
    float* weights = p.topk_weights + t * K;
    if (p.active && !p.active[t]) {
        for (int s = lane; s < K; s += 32) ids[s] = -1, weights[s] = 0.0f;
        return;
    }
    const float* logits = p.logits + t * E;
    float score[kPerLane];
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) score[j] = lane + 32 * j < E ? logits[lane + 32 * j] : 0.0f;
    if (p.score_func == 0) {  // softmax
        float mx = kNegInf;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
            if (lane + 32 * j < E) mx = max_skipping_nan(mx, score[j]);
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) mx = max_skipping_nan(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
            if (lane + 32 * j < E) score[j] = expf(score[j] - mx), sum += score[j];
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
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
        if (lane + 32 * j < E) scores_of[warp][lane + 32 * j] = score[j];

    if (p.tid2eid) {
        if (lane < K) ids_of[warp][lane] = p.tid2eid[p.token_ids[t] * K + lane];
    } else {
        float sel[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) sel[j] = p.bias && lane + 32 * j < E ? score[j] + p.bias[lane + 32 * j] : score[j];
        if (p.groups > 1) {
            const int per = E / p.groups;
            int group_of[kPerLane];  // worked out once: an integer division per value is slow
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) group_of[j] = lane + 32 * j < E ? (lane + 32 * j) / per : -1;
            float group_score[kMaxGroups];
            for (int g = 0; g < p.groups; ++g) {
                float a = kNegInf, b = kNegInf;  // the group's largest and second largest
#pragma unroll
                for (int j = 0; j < kPerLane; ++j) {
                    if (group_of[j] != g) continue;
                    const float v = rank_key(sel[j]);
                    if (v > a) b = a, a = v;
                    else if (v > b) b = v;
                }
#pragma unroll
                for (int offset = 16; offset > 0; offset >>= 1) {
                    const float oa = __shfl_xor_sync(0xffffffffu, a, offset), ob = __shfl_xor_sync(0xffffffffu, b, offset);
                    const float hi = fmaxf(a, oa), lo = fminf(a, oa);
                    b = fmaxf(lo, fmaxf(b, ob)), a = hi;
                }
                group_score[g] = p.group_score == 0 ? a : a + b;
            }
            uint64_t keep = 0;
            for (int r = 0; r < p.top_groups; ++r) {
                int best = -1;
                for (int g = 0; g < p.groups; ++g)
                    if (!(keep >> g & 1) && (best < 0 || ranks_before(group_score[g], g, group_score[best], best))) best = g;
                keep |= uint64_t(1) << best;
            }
#pragma unroll
            for (int j = 0; j < kPerLane; ++j)
                if (group_of[j] >= 0 && !(keep >> group_of[j] & 1)) sel[j] = kNegInf;
        }
        uint32_t taken = 0;
        for (int s = 0; s < K; ++s) {
            // The lane's best untaken value by a tree over its values (depth log2 of a linear scan's):
            // the order is total, so any bracket gives the same winner.
            float bv[kPerLane];
            int bid[kPerLane];
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) {
                const int e = lane + 32 * j;
                const bool ok = e < E && !(taken >> j & 1);
                bv[j] = sel[j], bid[j] = ok ? e : -1;
            }
#pragma unroll
            for (int width = kPerLane / 2; width > 0; width /= 2)
#pragma unroll
                for (int j = 0; j < width; ++j)
                    if (bid[j + width] >= 0 && (bid[j] < 0 || ranks_before(bv[j + width], bid[j + width], bv[j], bid[j])))
                        bv[j] = bv[j + width], bid[j] = bid[j + width];
            float v = bv[0];
            int id = bid[0];
            warp_best(v, id);
            if ((id & 31) == lane) taken |= 1u << (id >> 5);
            if (lane == 0) ids_of[warp][s] = id;
        }
    }
    __syncwarp();
    if (lane != 0) return;
    // The weights, in slot order as the CPU router forms them.
    float w[32];
    float sum = 0.0f;
    for (int s = 0; s < K; ++s) w[s] = scores_of[warp][ids_of[warp][s]], sum += w[s];
    if (p.normalise_eps) sum += 1e-20f;
    for (int s = 0; s < K; ++s) {
        float v = p.normalise ? w[s] / sum : w[s];
        if (p.scale != 1.0f) v *= p.scale;
        ids[s] = ids_of[warp][s];
        weights[s] = v;
    }
}

constexpr int kPermuteThreads = 256;
using BlockScan = cub::BlockScan<int, kPermuteThreads>;

__global__ void __launch_bounds__(kPermuteThreads) count_kernel(const int32_t* ids, int64_t pairs, const int32_t* live,
                                                                int32_t* load) {
    using Reduce = cub::BlockReduce<int, kPermuteThreads>;
    __shared__ typename Reduce::TempStorage temp;
    const int e = blockIdx.x;
    if (live) pairs = min(pairs, int64_t(*live));
    int n = 0;
    for (int64_t i = threadIdx.x; i < pairs; i += kPermuteThreads) n += ids[i] == e;
    const int total = Reduce(temp).Sum(n);
    if (threadIdx.x == 0) load[e] = total;
}

constexpr int kScanThreads = kMaxRoutedExperts;
__global__ void __launch_bounds__(kScanThreads) offsets_kernel(int32_t experts, int32_t tile_m, PermutationOut out) {
    using Scan = cub::BlockScan<int, kScanThreads>;
    __shared__ typename Scan::TempStorage temp;
    const int e = threadIdx.x;
    const int rows = e < experts ? out.load[e] : 0;
    int first = 0, total = 0, first_tile = 0, tiles = 0;
    Scan(temp).ExclusiveSum(rows, first, total);
    __syncthreads();
    Scan(temp).ExclusiveSum((rows + tile_m - 1) / tile_m, first_tile, tiles);
    if (e < experts) out.offsets[e] = first, out.tile_offsets[e] = first_tile;
    if (e == 0) out.offsets[experts] = total, out.tile_offsets[experts] = tiles, *out.tile_count = tiles;
}

__device__ void write_tiles(int expert, int first_row, int rows, int first_tile, int tile_m, const PermutationOut& out) {
    for (int j = threadIdx.x; j * tile_m < rows; j += blockDim.x) {
        out.tile_expert[first_tile + j] = expert;
        out.tile_row0[first_tile + j] = first_row + j * tile_m;
        out.tile_rows[first_tile + j] = min(tile_m, rows - j * tile_m);
    }
}

__global__ void __launch_bounds__(kPermuteThreads) place_kernel(const int32_t* ids, const float* topk_weights,
                                                                const int32_t* row_of_pair, int64_t pairs,
                                                                const int32_t* live, int32_t top_k, int32_t tile_m,
                                                                PermutationOut out) {
    __shared__ typename BlockScan::TempStorage temp;
    const int e = blockIdx.x;
    if (live) pairs = min(pairs, int64_t(*live));
    int base = out.offsets[e];
    for (int64_t c0 = 0; c0 < pairs; c0 += kPermuteThreads) {
        const int64_t i = c0 + threadIdx.x;
        const int flag = i < pairs && ids[i] == e;
        int rank = 0, count = 0;
        BlockScan(temp).ExclusiveSum(flag, rank, count);
        if (flag) {
            out.rows[base + rank] = row_of_pair ? row_of_pair[i] : int32_t(i / top_k);
            out.dest[base + rank] = i;
            out.weight[base + rank] = topk_weights[i];
        }
        base += count;
        __syncthreads();  // the scan's storage is reused
    }
    write_tiles(e, out.offsets[e], out.load[e], out.tile_offsets[e], tile_m, out);
}

__global__ void __launch_bounds__(kPermuteThreads) shared_kernel(const uint8_t* active, int64_t tokens, int64_t dest_base,
                                                                 int32_t tile_m, PermutationOut out) {
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
    write_tiles(0, 0, base, 0, tile_m, out);
    if (threadIdx.x == 0) *out.tile_count = (base + tile_m - 1) / tile_m, out.load[0] = base;
}

__global__ void identity_tiles_kernel(int64_t rows, int32_t tile_m, PermutationOut out) {
    write_tiles(0, 0, int(rows), 0, tile_m, out);
    if (threadIdx.x == 0) *out.tile_count = int32_t((rows + tile_m - 1) / tile_m);
}

}  // namespace

cudaError_t launch_route(const RouteLaunch& p) {
    if (p.experts > kMaxRoutedExperts || p.top_k > 32 || p.groups > kMaxGroups) return cudaErrorInvalidValue;
    if (p.tokens <= 0) return cudaSuccess;
    const unsigned blocks = unsigned((p.tokens + kRouteWarps - 1) / kRouteWarps);
    if (p.experts <= 128)
        route_kernel<4><<<blocks, kRouteWarps * 32, 0, p.stream>>>(p);
    else if (p.experts <= 256)
        route_kernel<8><<<blocks, kRouteWarps * 32, 0, p.stream>>>(p);
    else
        route_kernel<kMaxRoutedExperts / 32><<<blocks, kRouteWarps * 32, 0, p.stream>>>(p);
    return cudaGetLastError();
}

cudaError_t launch_permute_routed(const int32_t* topk_ids, const float* topk_weights, int64_t pairs, int32_t top_k,
                                  int32_t experts, int32_t tile_m, const PermutationOut& out, cudaStream_t stream,
                                  const int32_t* row_of_pair, const int32_t* live_pairs) {
    if (experts > kMaxRoutedExperts) return cudaErrorInvalidValue;
    count_kernel<<<experts, kPermuteThreads, 0, stream>>>(topk_ids, pairs, live_pairs, out.load);
    offsets_kernel<<<1, kScanThreads, 0, stream>>>(experts, tile_m, out);
    place_kernel<<<experts, kPermuteThreads, 0, stream>>>(topk_ids, topk_weights, row_of_pair, pairs, live_pairs, top_k,
                                                          tile_m, out);
    return cudaGetLastError();
}

cudaError_t launch_permute_shared(const uint8_t* active, int64_t tokens, int64_t dest_base, int32_t tile_m,
                                  const PermutationOut& out, cudaStream_t stream) {
    shared_kernel<<<1, kPermuteThreads, 0, stream>>>(active, tokens, dest_base, tile_m, out);
    return cudaGetLastError();
}

cudaError_t launch_identity_tiles(int64_t rows, int32_t tile_m, const PermutationOut& out, cudaStream_t stream) {
    identity_tiles_kernel<<<1, kPermuteThreads, 0, stream>>>(rows, tile_m, out);
    return cudaGetLastError();
}

}  // namespace steadymoe::cuda
