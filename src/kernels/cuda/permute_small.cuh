// The permutation's block-wide steps (routing.cu): every expert's first row and tiles by prefix sums, a pair
// placed in its row, the whole permutation of a small batch in one block, and that of one token's selected
// pairs without scans — shared by routing.cu's permutation kernels and the kernels that route a decode step's
// tokens and permute them in one launch (routing.cu, route_wide.cu; the scan-free form route_wide.cu's only
// with STEADYMOE_WIDE_SCAN_FREE_PERMUTE=1).
#pragma once

#include "live_rows.cuh"
#include "routing.hpp"

#include <cub/block/block_scan.cuh>

#include <cstdint>

namespace steadymoe::cuda::permute {

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

// Pair i into its expert's row `slot`: the row it reads, where its output goes, its routing weight.
__device__ __forceinline__ void place_pair(int64_t i, int slot, const float* topk_weights, const int32_t* row_of_pair,
                                           int32_t top_k, const PermutationOut& out) {
    out.rows[slot] = row_of_pair ? row_of_pair[i] : int32_t(i / top_k);
    out.dest[slot] = i;
    out.weight[slot] = topk_weights[i];
}

// The smallest permutations (up to kSmallPairs pairs) in one block of kScanThreads threads with no rounds:
// thread e counts and tiles expert e, thread i places pair i after the earlier pairs of its expert — the same
// prefix sums, so the same rows, slots and tiles as the one-chunk and chunked kernels (routing.cu). The ids
// and weights may lie in global or shared memory; a kernel that wrote them itself passes a block barrier
// first.
constexpr int kSmallPairs = 128;
struct SmallPermutation {
    OffsetScan::TempStorage temp;
    int32_t id_of[kSmallPairs];
    int32_t first_row[kMaxRoutedExperts];
};
__device__ __forceinline__ void permute_small_block(const int32_t* ids, const float* topk_weights, const int32_t* row_of_pair,
                                                    int64_t pairs_bound, const int32_t* live, int32_t top_k, int32_t experts,
                                                    int32_t tile_m, const PermutationOut& out, SmallPermutation& s) {
    const int pairs = int(live_count(pairs_bound, live));
    for (int i = threadIdx.x; i < pairs; i += blockDim.x) s.id_of[i] = ids[i];
    __syncthreads();
    const int e = threadIdx.x;
    int rows = 0;
    if (e < experts)
        for (int i = 0; i < pairs; ++i) rows += s.id_of[i] == e;
    const int2 first = expert_offsets(rows, experts, tile_m, out, s.temp);
    if (e < experts) {
        out.load[e] = rows;
        s.first_row[e] = first.x;
        write_tiles(e, first.x, rows, first.y, tile_m, out, 0, 1);
    }
    __syncthreads();
    const int i = threadIdx.x;
    if (i >= pairs) return;
    const int expert = s.id_of[i];
    if (expert < 0 || expert >= experts) return;  // a masked token's pairs (-1) have no row
    int rank = 0;
    for (int j = 0; j < i; ++j) rank += s.id_of[j] == expert;
    place_pair(i, s.first_row[expert] + rank, topk_weights, row_of_pair, top_k, out);
}

// One token's pairs: top_k distinct experts (a selection's of top_k <= experts; not a hash table's, which may
// repeat one, nor a selection past the experts, which repeats expert 0), or
// none where the token is masked (ids -1): the rows, slots and tiles permute_small_block gives them, by thread e
// of a block of at least `experts` threads, with no barrier. Each chosen expert has one row and one tile, so
// expert e's first row and first tile are the chosen experts below e: permute_small_block's prefix sums. The
// permutation took about 1.8 µs of a one-token routing kernel's 5.1, its scans, tiles and barrier 1.0 (H100,
// bench/results/2026-12-07-cuda-one-token-stamps.md); without them qwen3's routing kernel took 0.9-1.0 µs
// less (bench/results/2026-12-07-cuda-one-token-permute.md). The ids and weights as permute_small_block takes
// them, after a block barrier where the block wrote them.
__device__ __forceinline__ void permute_one_token(const int32_t* ids, const float* topk_weights, int32_t top_k,
                                                  int32_t experts, int32_t tile_m, const PermutationOut& out) {
    const int e = threadIdx.x;
    int below = 0, slot = -1, chosen = 0;
    for (int s = 0; s < top_k; ++s) {
        const int id = ids[s];
        const bool valid = id >= 0 && id < experts;
        below += valid && id < e;
        chosen += valid;
        if (id == e) slot = s;
    }
    if (e == 0) out.offsets[experts] = chosen, out.tile_offsets[experts] = chosen, *out.tile_count = chosen;
    if (e >= experts) return;
    out.offsets[e] = below, out.tile_offsets[e] = below, out.load[e] = slot >= 0;
    if (slot < 0) return;
    write_tiles(e, below, 1, below, tile_m, out, 0, 1);
    place_pair(slot, below, topk_weights, nullptr, top_k, out);
}

}  // namespace steadymoe::cuda::permute
