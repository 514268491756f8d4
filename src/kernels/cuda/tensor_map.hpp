// Tensor maps for Hopper's bulk tensor copies: a 2-D row-major bf16 matrix read in boxes that land in
// shared memory in the 128-byte swizzle the wgmma descriptors expect. Host code; the driver's encoder
// is looked up through the runtime, so nothing links against the driver library.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace steadymoe::cuda {

// A map over `rows` rows of `k` bf16 values (row stride k, a multiple of 64) at `base`, read in boxes of
// 64 values by `box_rows` rows; rows past `rows` read as zeros. False (and the map untouched) where the
// driver has no encoder or refuses the shape; callers then copy rows another way.
bool encode_bf16_row_map(CUtensorMap& map, const void* base, int64_t rows, int64_t k, int box_rows);

}  // namespace steadymoe::cuda
