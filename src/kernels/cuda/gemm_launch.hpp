// The boundary between host code and the CUDA GEMM kernel: plain pointers and sizes only, so the
// .cu file needs no host library headers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace steadymoe::cuda {

struct GemmLaunch {
    const float* a = nullptr;        // [m][k] row-major
    const float* a_scale = nullptr;  // [m][ceil(k/128)] or null
    int64_t m = 0;
    int64_t k = 0;
    const void* panels = nullptr;    // [ceil(n/32)][k][32] bf16 or f32
    bool f32_panels = false;
    const float* w_scale = nullptr;  // [ceil(n/32)*32][ceil(k/128)] or null
    int64_t n = 0;
    float* c = nullptr;
    int64_t ldc = 0;
    int64_t kblock = 0;  // k per fma chain: 128 when scaled, else k
    bool scaled = false;
    cudaStream_t stream = nullptr;
};

cudaError_t launch_gemm_panels(const GemmLaunch& launch);

}  // namespace steadymoe::cuda
