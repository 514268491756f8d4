// What the routing kernels share (routing.cu's route_kernel, route_wide.cu's route_wide_kernel): the ranking,
// one unsigned key per selection score, larger exactly when it ranks before, so they pick the same experts;
// softmax's warp reductions and the weights' rule, so they give the same weights.
#pragma once

#include <cmath>
#include <cstdint>

namespace steadymoe::cuda {

constexpr float kNegInf = -INFINITY;

__device__ __forceinline__ bool is_nan(float v) { return v != v; }
// The CPU router's order: higher values first, NaN below every number (so a poisoned token still picks
// valid experts), equal values by lower id. As one unsigned key per value, larger exactly when it ranks
// before: numbers map to their order-preserving bits (-0 as +0, so that equal values tie and the id
// decides), NaN to kNanKey (below -inf), and kAbsent marks an expert that is not a candidate. A warp's
// best is then one max-reduction and its lowest id one min-reduction.
constexpr uint32_t kAbsent = 0, kNanKey = 1, kNegInfKey = 0x007FFFFFu;
__device__ __forceinline__ uint32_t rank_key_bits(float v) {
    if (is_nan(v)) return kNanKey;
    const uint32_t bits = (__float_as_uint(v) << 1) == 0 ? 0u : __float_as_uint(v);
    return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}
// The value of a key, NaN (and kAbsent) as -inf.
__device__ __forceinline__ float rank_value(uint32_t key) {
    if (key <= kNanKey) return kNegInf;
    return __uint_as_float(key & 0x80000000u ? key & 0x7FFFFFFFu : ~key);
}

__device__ __forceinline__ float max_skipping_nan(float a, float b) { return a < b ? b : a; }  // as std::max

// Softmax's maximum and sum over a warp's lanes, by xor shuffles: every lane ends with the same bits (each
// step adds a pair in either order, a + b == b + a).
__device__ __forceinline__ float warp_max_skipping_nan(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = max_skipping_nan(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// The weights, as the CPU router forms them: the chosen experts' scores summed in slot order (plus 1e-20
// where `eps`), then each slot's score over that sum where `normalise`, times `scale` unless it is 1.
__device__ __forceinline__ float slot_weight(float score, float sum, bool normalise, float scale) {
    float v = normalise ? score / sum : score;
    if (scale != 1.0f) v *= scale;
    return v;
}

// Slot `lane` of a token's K slots (K <= 32), its id and weight, formed by the calling warp: each lane reads
// its slot's id and score at once, the sum runs over the lanes' scores in slot order (every lane makes the
// same adds, from 0, in that order, by shuffles), then each lane divides for its own slot — where one thread
// read the K slots' ids and scores one after another, each a pair of dependent shared-memory loads, and
// divided K times. ids_of and scores_of as the warp wrote them (after a __syncwarp or a block barrier).
struct SlotOfLane {
    int32_t id;
    float weight;
};
__device__ __forceinline__ SlotOfLane slot_of_lane(const float* scores_of, const int32_t* ids_of, int K,
                                                   bool eps, bool normalise, float scale) {
    const int lane = threadIdx.x & 31;
    const int32_t id = lane < K ? ids_of[lane] : 0;
    const float score = lane < K ? scores_of[id] : 0.0f;
    float sum = 0.0f;
    for (int s = 0; s < K; ++s) sum += __shfl_sync(0xffffffffu, score, s);
    if (eps) sum += 1e-20f;
    return {id, slot_weight(score, sum, normalise, scale)};
}

}  // namespace steadymoe::cuda
