// The portable CUDA GEMM (any sm_80+ GPU): C = A . W^T over the same exact bf16 (or f32) weight
// panels as the CPU backend, with the same per-element arithmetic — one fma chain over k in ascending
// order, per 128-wide block when a scale applies, folded as c = fma(p, s_a * s_w, c). Its output is
// therefore bitwise equal to the CPU GEMM's, and a row's bits never depend on how many rows there are.
// It is the correct path; the Hopper tensor-core path is separate.
#pragma once

#include "steadymoe/kernels/cpu/gemm.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"

#include <cstdint>

namespace steadymoe::cuda {

// A PackedWeight in device memory.
struct DevicePackedWeight {
    int64_t rows = 0;
    int64_t cols = 0;
    bool f32_panels = false;
    bool quantized = false;
    DeviceBuffer panels;       // [panels][K][32] bf16 or f32
    DeviceBuffer block_scale;  // [panels*32][ceil(K/128)] f32, or empty

    int64_t panel_count() const { return (rows + cpu::kPanelWidth - 1) / cpu::kPanelWidth; }
    int64_t k_blocks() const { return (cols + 127) / 128; }
};

DevicePackedWeight upload_weight(const cpu::PackedWeight& w, const std::string& what, Stream stream = nullptr);

// Device pointers: `values` [rows][cols] row-major; `block_scale` [rows][ceil(cols/128)] or null.
struct DeviceActivations {
    const float* values = nullptr;
    const float* block_scale = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
};

// c (device, row stride ldc) = a . w^T for all rows of a and all N outputs. Asynchronous on `stream`.
void gemm(const DeviceActivations& a, const DevicePackedWeight& w, float* c, int64_t ldc, Stream stream = nullptr);

}  // namespace steadymoe::cuda
