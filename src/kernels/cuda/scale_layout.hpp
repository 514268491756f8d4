// Where the per-128 scales of e4m3 (or scaled bf16) activation rows lie: row-major [rows][k/128], as every
// kernel reads them, or block-major [k/128][rows], which the Hopper tiled kernel copies a stage's 128 rows of
// by one tensor copy (grouped_gemm_reads_block_major_scales) where row-major asks a 4-byte copy per row.
#pragma once

#include <steadymoe/core/numeric.hpp>  // SMOE_HD

#include <cstdint>

namespace steadymoe::cuda {

struct ScaleLayout {
    // 0: row-major. Else block-major over this many rows (a multiple of 4, so that each block's column starts
    // 16-byte aligned, and at least every row written or read).
    int64_t block_major_rows = 0;

    // Where row `row`'s scale of 128-wide block `block` lies, of `blocks` blocks a row.
    SMOE_HD int64_t at(int64_t row, int64_t block, int64_t blocks) const {
        return block_major_rows > 0 ? block * block_major_rows + row : row * blocks + block;
    }
};

}  // namespace steadymoe::cuda
