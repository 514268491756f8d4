// The order of a persistent grouped-GEMM launch's items by expert (grouped_gemm_sm90_items.cuh): host and
// device code, so that the host tests check it.
#pragma once

#include "steadymoe/core/numeric.hpp"

namespace steadymoe::cuda {

// Where item u of a split lies by expert: its tile and its item of n-blocks. The expert's tiles are
// [first, first + count) and its items [first * n_items, (first + count) * n_items), as in tile order
// (where item u is n-block item u % n_items of tile u / n_items); by expert they take the n-block items in
// turn, each over all `count` tiles, so that the CTAs reading a weight block run together.
struct ItemPlace {
    int tile, item_n;
};
SMOE_HD constexpr ItemPlace item_by_expert(int u, int n_items, int first, int count) {
    const int local = u - first * n_items;
    return {first + local % count, local / count};
}

}  // namespace steadymoe::cuda
