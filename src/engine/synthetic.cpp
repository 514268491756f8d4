#include "steadymoe/engine/synthetic.hpp"

#include "steadymoe/core/numeric.hpp"

#include <cmath>

namespace steadymoe::synthetic {

uint32_t lowbias32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

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

Tensor tensor(DType dtype, Shape shape, uint32_t seed, uint32_t stream, float stddev, uint64_t index_offset) {
    SMOE_CHECK(dtype == DType::F32 || dtype == DType::BF16, InvalidArgument,
               "synthetic tensors are F32 or BF16, not {}", dtype_name(dtype));
    Tensor t = Tensor::zeros(dtype, std::move(shape));
    const int64_t n = t.numel();
    if (dtype == DType::F32) {
        float* p = t.mutable_data<float>();
        for (int64_t i = 0; i < n; ++i) p[i] = value(seed, stream, index_offset + uint64_t(i), stddev);
    } else {
        uint16_t* p = t.mutable_data<uint16_t>();
        for (int64_t i = 0; i < n; ++i) p[i] = f32_to_bf16(value(seed, stream, index_offset + uint64_t(i), stddev));
    }
    return t;
}

}  // namespace steadymoe::synthetic
