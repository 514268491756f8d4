// What the permutation kernels share (routing.cu's, and route_wide.cu's routing fused with the permutation):
// pairs placed in their experts' rows, every expert's first row and tiles by one block's prefix sums, and the
// permutation of at most kSmallPairs pairs by one block.
#pragma once

#include "routing.hpp"

#include <cub/block/block_scan.cuh>

#include <cstdint>

namespace steadymoe::cuda {

// Pair i into its expert's row `slot`: the row it reads, where its output goes, its routing weight. (The
// weight is read past L1: in the fused kernel another CTA of the cluster wrote it.)
__device__ __forceinline__ void place_pair(int64_t i, int slot, const float* topk_weights, const int32_t* row_of_pair,
                                           int32_t top_k, const PermutationOut& out) {
    out.rows[slot] = row_of_pair ? row_of_pair[i] : int32_t(i / top_k);
    out.dest[slot] = i;
    out.weight[slot] = __ldcg(topk_weights + i);
}

constexpr int kScanThreads = kMaxRoutedExperts;
using OffsetScan = cub::BlockScan<int, kScanThreads>;

// Thread e of a kScanThreads block holds expert e's rows: every expert's first row and first tile by
// prefix sums, written to out with the totals and the tile count. Returns e's first row and first tile.
__device__ __forceinline__ int2 expert_offsets(int rows, int32_t experts, int32_t tile_m, const PermutationOut& out,
                                               OffsetScan::TempStorage& temp) {
    const int e = threadIdx.x;
    int first = 0, total = 0, first_tile = 0, tiles = 0;
    OffsetScan(temp).ExclusiveSum(rows, first, total);
    __syncthreads();
    OffsetScan(temp).ExclusiveSum((rows + tile_m - 1) / tile_m, first_tile, tiles);
    if (e < experts) out.offsets[e] = first, out.tile_offsets[e] = first_tile;
    if (e == 0) out.offsets[experts] = total, out.tile_offsets[experts] = tiles, *out.tile_count = tiles;
    return make_int2(first, first_tile);
}

// The tiles of one expert's rows, tiles j = first_j, first_j + step, ... written by the calling thread.
__device__ __forceinline__ void write_tiles(int expert, int first_row, int rows, int first_tile, int tile_m,
                                            const PermutationOut& out, int first_j, int step) {
    for (int j = first_j; j * tile_m < rows; j += step) {
        out.tile_expert[first_tile + j] = expert;
        out.tile_row0[first_tile + j] = first_row + j * tile_m;
        out.tile_rows[first_tile + j] = min(tile_m, rows - j * tile_m);
    }
}

constexpr int kSmallPairs = 128;

struct SmallPermutationShared {
    OffsetScan::TempStorage temp;
    int32_t id_of[kSmallPairs];
    int32_t first_row[kMaxRoutedExperts];
};

// The smallest permutations (up to kSmallPairs pairs) by one block of kScanThreads threads with no rounds:
// thread e counts and tiles expert e, thread i places pair i after the earlier pairs of its expert — the same
// prefix sums, so the same rows, slots and tiles as the chunked kernels. (The ids are read past L1: in the
// fused kernel other CTAs of the cluster wrote them.)
__device__ __forceinline__ void permute_small_block(const int32_t* ids, const float* topk_weights,
                                                    const int32_t* row_of_pair, int pairs, int32_t top_k,
                                                    int32_t experts, int32_t tile_m, const PermutationOut& out,
                                                    SmallPermutationShared& sm) {
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) sm.id_of[i] = __ldcg(ids + i);
    __syncthreads();
    const int e = threadIdx.x;
    int rows = 0;
    if (e < experts)
        for (int i = 0; i < pairs; ++i) rows += sm.id_of[i] == e;
    const int2 first = expert_offsets(rows, experts, tile_m, out, sm.temp);
    if (e < experts) {
        out.load[e] = rows;
        sm.first_row[e] = first.x;
        write_tiles(e, first.x, rows, first.y, tile_m, out, 0, 1);
    }
    __syncthreads();
    const int i = threadIdx.x;
    if (i >= pairs) return;
    const int expert = sm.id_of[i];
    if (expert < 0 || expert >= experts) return;  // a masked token's pairs (-1) have no row
    int rank = 0;
    for (int j = 0; j < i; ++j) rank += sm.id_of[j] == expert;
    place_pair(i, sm.first_row[expert] + rank, topk_weights, row_of_pair, top_k, out);
}

}  // namespace steadymoe::cuda
