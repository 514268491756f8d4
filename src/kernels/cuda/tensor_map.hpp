// Tensor maps for Hopper's bulk tensor copies: a 2-D row-major matrix of activation rows read in boxes
// that land in shared memory in the swizzle the wgmma descriptors expect. Host code; the driver's encoder
// is looked up through the runtime, so nothing links against the driver library.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace steadymoe::cuda {

// The element types of activation rows: bf16 values, or e4m3 codes.
enum class RowElement { Bf16, E4m3 };

// A map over `rows` rows of `k` elements (row stride k, a multiple of 64) at `base`, read in boxes of 64
// elements by `box_rows` rows and swizzled as the MMAs' descriptors read them: bf16 boxes (128-byte
// rows) in the 128-byte swizzle, e4m3 boxes (64-byte rows) in the 64-byte one. Rows past `rows` read as
// zeros. False (and the map untouched) where the driver has no encoder or refuses the shape; callers
// then copy rows another way.
bool encode_row_map(CUtensorMap& map, const void* base, int64_t rows, int64_t k, RowElement element, int box_rows);

// A map over block-major f32 scales ([blocks][rows] at `base`, rows a multiple of 4: ScaleLayout), read in
// boxes of `box_rows` consecutive rows of one block (a multiple of 4: 16-byte boxes), unswizzled. Rows past
// `rows` read as zeros. False (and the map untouched) as for encode_row_map.
bool encode_scale_map(CUtensorMap& map, const float* base, int64_t rows, int64_t blocks, int box_rows);

}  // namespace steadymoe::cuda
