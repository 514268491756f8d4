#include <cub/block/block_scan.cuh>

#include "ep_kernels.hpp"

namespace steadymoe::cuda {

namespace {

constexpr int kPlanThreads = 512;

// Rows and pairs per destination: what one thread's tokens send, and, scanned, where they start.
struct Counts {
    int rows[kMaxEpRanks];
    int pairs[kMaxEpRanks];
};

struct AddCounts {
    __device__ Counts operator()(const Counts& a, const Counts& b) const {
        Counts c;
        for (int d = 0; d < kMaxEpRanks; ++d)
            c.rows[d] = a.rows[d] + b.rows[d], c.pairs[d] = a.pairs[d] + b.pairs[d];
        return c;
    }
};

__device__ int32_t physical_slot(const EpPlanLaunch& p, int32_t expert, int64_t token, int64_t k) {
    const int32_t first = p.replica_offsets[expert], count = p.replica_offsets[expert + 1] - first;
    return p.replicas[first + int32_t((token + k) % count)];  // ExpertPlacement::replica_for
}

// One block: each thread walks a contiguous run of tokens twice — counting, then (after one scan gives
// every thread its starting positions) writing. Tokens ascend with the thread index, so each
// destination's rows come out in token order.
__global__ void __launch_bounds__(kPlanThreads) plan_kernel(EpPlanLaunch p) {
    using Scan = cub::BlockScan<Counts, kPlanThreads, cub::BLOCK_SCAN_WARP_SCANS>;
    __shared__ typename Scan::TempStorage temp;
    __shared__ int row_base[kMaxEpRanks], pair_base[kMaxEpRanks];
    const int64_t per = (p.tokens + kPlanThreads - 1) / kPlanThreads;
    const int64_t t0 = min(p.tokens, per * threadIdx.x), t1 = min(p.tokens, t0 + per);
    const int K = p.top_k;

    Counts mine = {};
    for (int64_t t = t0; t < t1; ++t) {
        unsigned seen = 0;
        for (int k = 0; k < K; ++k) {
            const int32_t e = p.topk_ids[t * K + k];
            if (e < 0) continue;
            const int d = physical_slot(p, e, t, k) / p.slots_per_rank;
            mine.rows[d] += !(seen >> d & 1u);
            mine.pairs[d] += 1;
            seen |= 1u << d;
        }
    }
    Counts start, total;
    Scan(temp).ExclusiveScan(mine, start, Counts{}, AddCounts(), total);
    if (threadIdx.x == 0) {
        int rows = 0, pairs = 0;
        for (int d = 0; d < p.ranks; ++d) {
            row_base[d] = rows, pair_base[d] = pairs;
            rows += total.rows[d], pairs += total.pairs[d];
            int32_t* h = p.headers + d * kEpHeaderInts;
            h[0] = p.header_status, h[1] = total.rows[d], h[2] = total.pairs[d], h[3] = p.header_tag;
            h[4] = pair_base[d], h[5] = h[6] = h[7] = 0;
        }
    }
    __syncthreads();

    for (int64_t t = t0; t < t1; ++t) {
        int row_of[kMaxEpRanks];
        unsigned seen = 0;
        for (int k = 0; k < K; ++k) {
            const int32_t e = p.topk_ids[t * K + k];
            if (e < 0) {
                p.home_index[t * K + k] = -1;
                continue;
            }
            const int32_t phys = physical_slot(p, e, t, k);
            const int d = phys / p.slots_per_rank;
            if (!(seen >> d & 1u)) {
                row_of[d] = start.rows[d]++;
                p.send_token[row_base[d] + row_of[d]] = int32_t(t);
                seen |= 1u << d;
            }
            const int at = pair_base[d] + start.pairs[d]++;
            p.send_pairs[at] = {row_of[d], phys % p.slots_per_rank, p.topk_weights[t * K + k], 0};
            p.home_index[t * K + k] = at;
        }
    }
}

__global__ void pack_rows_kernel(const uint4* src, int64_t row_vectors, const int32_t* send_token,
                                 const int32_t* headers, int32_t ranks, int64_t bound, uint4* rows) {
    int64_t total = 0;
    for (int d = 0; d < ranks; ++d) total += headers[d * kEpHeaderInts + 1];
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < min(total, bound) * row_vectors;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / row_vectors, c = i % row_vectors;
        rows[i] = src[int64_t(send_token[r]) * row_vectors + c];
    }
}

__global__ void unpack_pairs_kernel(const EpPair* pairs, EpSources s, int32_t slots, int32_t* slot,
                                    float* weight, int32_t* row, int32_t* error) {
    const int32_t i = int32_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= s.pair_base[s.ranks]) return;
    int src = 0;
    while (i >= s.pair_base[src + 1]) ++src;
    const EpPair p = pairs[i];
    const int32_t rows = s.row_base[src + 1] - s.row_base[src];
    const bool ok = p.slot >= 0 && p.slot < slots && p.row >= 0 && p.row < rows;
    if (!ok) *error = 1;
    slot[i] = ok ? p.slot : -1;
    weight[i] = p.weight;
    row[i] = ok ? s.row_base[src] + p.row : 0;
}

}  // namespace

cudaError_t launch_ep_plan(const EpPlanLaunch& p) {
    if (p.ranks < 1 || p.ranks > kMaxEpRanks) return cudaErrorInvalidValue;
    plan_kernel<<<1, kPlanThreads, 0, p.stream>>>(p);
    return cudaGetLastError();
}

cudaError_t launch_ep_pack_rows(const void* src, int64_t row_bytes, const int32_t* send_token,
                                const int32_t* headers, int32_t ranks, int64_t bound, void* rows,
                                cudaStream_t stream) {
    if (row_bytes % 16 != 0) return cudaErrorInvalidValue;
    if (bound <= 0) return cudaSuccess;
    const int64_t vectors = bound * (row_bytes / 16);
    const unsigned blocks = unsigned(std::min<int64_t>((vectors + 255) / 256, 1024));
    pack_rows_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint4*>(src), row_bytes / 16, send_token,
                                                 headers, ranks, bound, static_cast<uint4*>(rows));
    return cudaGetLastError();
}

cudaError_t launch_ep_unpack_pairs(const EpPair* pairs, EpSources sources, int32_t slots_per_rank,
                                   int32_t* slot, float* weight, int32_t* row, int32_t* error,
                                   cudaStream_t stream) {
    const int32_t n = sources.pair_base[sources.ranks];
    if (n > 0)
        unpack_pairs_kernel<<<unsigned((n + 255) / 256), 256, 0, stream>>>(pairs, sources, slots_per_rank,
                                                                           slot, weight, row, error);
    return cudaGetLastError();
}

}  // namespace steadymoe::cuda
