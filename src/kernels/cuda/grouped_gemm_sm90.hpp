// The Hopper (sm_90a) grouped GEMM: the same launch, tiles and arithmetic contract as grouped_gemm.hpp,
// with warpgroup MMAs (wgmma) reading both operands from the swizzled shared stages. Each of two
// warpgroups owns 64 of a tile's 128 rows.
#pragma once

#include "grouped_gemm.hpp"

namespace steadymoe::cuda {

inline constexpr int kHopperTileRows = 128;

// True when the current GPU is a Hopper and this build carries the sm_90a kernels. The environment
// variable STEADYMOE_GEMM_KERNEL=mma forces the sm_80 kernel instead (to test it on a Hopper).
bool hopper_gemm_available();

cudaError_t launch_grouped_gemm_sm90(const GroupedGemmLaunch& launch);

// Whether `launch` runs as 64-row CTAs (few_rows, a path that has them, no STEADYMOE_HALF_TILES=0), and
// how many of them the FP8 x e4m3 kernel keeps on one SM (the bf16 ones use as much shared memory).
bool hopper_half_tiles(const GroupedGemmLaunch& launch);
int hopper_few_row_ctas_per_sm();

}  // namespace steadymoe::cuda
