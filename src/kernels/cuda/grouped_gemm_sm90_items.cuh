// The items of a persistent launch of the Hopper grouped GEMM (grouped_gemm_sm90.cu): which tile and n-block
// item w is, in tile order or by expert. sm_90a device code.
#pragma once

#include "grouped_gemm_items.hpp"
#include "grouped_gemm_stage.cuh"

namespace steadymoe::cuda::sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using stage::Tile;

// A persistent launch's items: tiles x n_items x k splits of them, n_items n-block items per tile (paired
// CTAs: pairs of n-blocks, the CTA of rank r taking n-block 2j + r of pair j; wide CTAs: 256 features, two
// n-blocks of 128, an item). Item w is item u = w % (tiles * n_items) of split w / (tiles * n_items): in tile
// order n-block item u % n_items of tile u / n_items; by expert (where the launch says where each expert's
// tiles start), item_by_expert's place among its expert's items.
struct PersistentItems {
    const GroupedGemmLaunch& g;
    int tiles, n_items, pair_rank, blocks_per_item;
    bool by_expert;

    // The tiles lie below the tile count read at the launch's start (`tiles`): the list's entries are loaded
    // at once, with no load of the count before them (listed_tile). By expert, the expert of tile u / n_items
    // and its first tile and tile count come first.
    __device__ __forceinline__ Tile at(int w) const {
        const int split = w / (tiles * n_items), u = w % (tiles * n_items);
        ItemPlace place{u / n_items, u % n_items};
        if (by_expert) {
            const int expert = g.tile_expert[place.tile], first = g.expert_first_tile[expert];
            place = item_by_expert(u, n_items, first, g.expert_first_tile[expert + 1] - first);
        }
        return stage::listed_tile(g, place.tile, blocks_per_item * (pair_rank >= 0 ? 2 * place.item_n + pair_rank : place.item_n),
                                  split);
    }
};
#endif

}  // namespace steadymoe::cuda::sm90
