#include "steadymoe/engine/synthetic.hpp"

#include "steadymoe/core/numeric.hpp"
#include "steadymoe/core/parallel.hpp"

#include <algorithm>
#include <cmath>

namespace steadymoe::synthetic {

namespace {

inline uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// What every element of one stream shares: its key, and the factor that gives four uniform 16-bit draws
// (summed: a near-normal integer) unit variance times the stream's standard deviation.
struct Draw {
    uint32_t key;
    float factor;
};

Draw draw_of(uint32_t seed, uint32_t stream, float stddev) {
    return {mix(seed * 0x9E3779B1u + stream * 0x85EBCA77u + 0x165667B1u),
            float(double(stddev) / std::sqrt((65536.0 * 65536.0 - 1.0) / 3.0))};
}

// Elements first .. first + n - 1, which lie in one run of 2^31 indices, so that their counters 2i and 2i + 1
// share a high word: then each element is straight-line 32-bit arithmetic, which the compiler runs several
// lanes at a time (about ten times as fast as value() an element, the same bits: tests/test_synthetic.cpp).
template <class Store>
void fill_run(const Draw& d, uint64_t first, int64_t n, Store store) {
    const uint32_t high = uint32_t((2 * first) >> 32), low = uint32_t(2 * first);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
        const uint32_t c = low + 2 * uint32_t(j);  // (even: c + 1 carries nothing into the high word)
        const uint32_t h0 = mix(mix(c ^ d.key) ^ high), h1 = mix(mix((c + 1) ^ d.key) ^ high);
        const uint32_t sum = (h0 & 0xFFFFu) + (h0 >> 16) + (h1 & 0xFFFFu) + (h1 >> 16);
        store(j, float(int32_t(sum) - 131070) * d.factor);
    }
}

// Elements offset .. offset + n - 1 into store(i, value), in runs that keep to fill_run's rule.
template <class Store>
void fill(const Draw& d, uint64_t offset, int64_t n, Store store) {
    for (int64_t i = 0; i < n;) {
        const uint64_t first = offset + uint64_t(i), run_end = ((first >> 31) + 1) << 31;
        const int64_t count = int64_t(std::min<uint64_t>(uint64_t(n - i), run_end - first));
        fill_run(d, first, count, [&](int64_t j, float v) { store(i + j, v); });
        i += count;
    }
}

}  // namespace

uint32_t lowbias32(uint32_t x) { return mix(x); }

// The generator as synthetic.hpp writes it out, an element at a time: the reference the tests hold fill_run
// to.
float value(uint32_t seed, uint32_t stream, uint64_t index, float stddev) {
    const uint32_t key = lowbias32(seed * 0x9E3779B1u + stream * 0x85EBCA77u + 0x165667B1u);
    uint32_t n = 0;
    for (uint64_t lane = 0; lane < 2; ++lane) {
        const uint64_t c = 2 * index + lane;
        const uint32_t h = lowbias32(lowbias32(uint32_t(c) ^ key) ^ uint32_t(c >> 32));
        n += (h & 0xFFFFu) + (h >> 16);
    }
    // Four uniform 16-bit draws sum to a near-normal integer; this factor gives it unit variance x std.
    const float factor = float(double(stddev) / std::sqrt((65536.0 * 65536.0 - 1.0) / 3.0));
    return float(int32_t(n) - 131070) * factor;
}

void fill_bf16_as_f32(float* out, int64_t n, uint32_t seed, uint32_t stream, float stddev, uint64_t index_offset) {
    fill(draw_of(seed, stream, stddev), index_offset, n, [out](int64_t i, float v) { out[i] = round_to_bf16(v); });
}

Tensor tensor(DType dtype, Shape shape, uint32_t seed, uint32_t stream, float stddev, uint64_t index_offset) {
    SMOE_CHECK(dtype == DType::F32 || dtype == DType::BF16, InvalidArgument,
               "synthetic tensors are F32 or BF16, not {}", dtype_name(dtype));
    Tensor t = Tensor::zeros(dtype, std::move(shape));
    const int64_t n = t.numel();
    const Draw d = draw_of(seed, stream, stddev);
    // Large tensors (a batch's hidden states) in chunks on the threads a parallel region here would have
    // (ambient_threads: inside another parallel loop, such as the experts of a layer being built, one).
    const int64_t chunk = int64_t(1) << 20, chunks = (n + chunk - 1) / chunk;
    void* data = t.mutable_raw();
    parallel_for(chunks, chunks > 1 ? ambient_threads() : 1, [&](int64_t c) {
        const int64_t begin = c * chunk, count = std::min(n, begin + chunk) - begin;
        const uint64_t offset = index_offset + uint64_t(begin);
        if (dtype == DType::F32) {
            float* p = static_cast<float*>(data) + begin;
            fill(d, offset, count, [p](int64_t i, float v) { p[i] = v; });
        } else {
            uint16_t* p = static_cast<uint16_t*>(data) + begin;
            fill(d, offset, count, [p](int64_t i, float v) { p[i] = f32_to_bf16(v); });
        }
    });
    return t;
}

}  // namespace steadymoe::synthetic
