// Launches sized for a bound on their rows (a CUDA graph's launch must be, for every batch it replays), told
// how many are live this batch by a count an earlier kernel wrote (read after begin_dependent_kernel).
#pragma once

#include <cstdint>

namespace steadymoe::cuda {

// Rows a launch for `bound` rows takes: those below *live_rows where it is given.
__device__ __forceinline__ int64_t live_count(int64_t bound, const int32_t* live_rows) {
    return live_rows ? min(bound, int64_t(*live_rows)) : bound;
}

}  // namespace steadymoe::cuda
