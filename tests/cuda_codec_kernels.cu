// Device side of test_cuda_codecs: runs the shared codecs of core/numeric.hpp on the GPU over inputs
// chosen by the host test.
#include "steadymoe/core/numeric.hpp"

#include "cuda_codec_kernels.hpp"

#include "../src/kernels/cuda/grouped_gemm_stage.cuh"
#include "../src/kernels/cuda/stage_math.cuh"

namespace steadymoe::test {

namespace {

__global__ void codec_kernel(const uint32_t* in, uint32_t* out, int64_t n, int which) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const uint32_t v = in[i];
    const float f = f32_from_bits(v);
    switch (which) {
        case kDecodeE4M3: out[i] = f32_bits(e4m3_to_f32(uint8_t(v))); break;
        case kEncodeE4M3: out[i] = f32_to_e4m3(f); break;
        case kDecodeE2M1: out[i] = f32_bits(e2m1_to_f32(uint8_t(v))); break;
        case kEncodeE2M1: out[i] = f32_to_e2m1(f); break;
        case kDecodeE8M0: out[i] = f32_bits(e8m0_to_f32(uint8_t(v))); break;
        case kCeilE8M0: out[i] = e8m0_from_f32_ceil(f); break;
        case kEncodeBf16: out[i] = f32_to_bf16(f); break;
        case kEncodeF16: out[i] = f32_to_f16(f); break;
        case kDecodeF16: out[i] = f32_bits(f16_to_f32(uint16_t(v))); break;
    }
}

__global__ void widen_kernel(const uint32_t* codes, const uint32_t* scales, uint32_t* out, int64_t n, Widening how) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (how == kE2m1ToBf16) {
        // The exponent in byte i % 4 of its word, as the kernels find it among a row's four.
        const uint32_t byte = uint32_t(i & 3);
        const uint4 v = cuda::stage::e2m1x8_to_bf16x8(codes[i], cuda::stage::bf16_pair_scale(scales[i] << (8 * byte), byte));
        out[4 * i] = v.x, out[4 * i + 1] = v.y, out[4 * i + 2] = v.z, out[4 * i + 3] = v.w;
    } else {
        const uint2 v = how == kE2m1ToE4m3          ? cuda::e2m1x8_to_e4m3x8(codes[i])
                        : how == kE2m1ToE4m3ByTable ? cuda::e2m1x8_to_e4m3x8_by_table(codes[i], cuda::e4m3_table(scales[i]))
                                                    : cuda::stage::e4m3x4_to_bf16x4(codes[i]);
        out[2 * i] = v.x, out[2 * i + 1] = v.y;
    }
}

// Thread i takes the patterns 4i .. 4i + 3 (rotated through the four positions, so every value meets
// every byte of the word, or both halves of a bf16 pair).
__global__ void packed_check_kernel(PackedConversion which, unsigned long long* bad, uint32_t* first) {
    const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
    for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t(1) << 30); i += stride) {
        uint32_t bits[4];
        float f[4];
        for (int j = 0; j < 4; ++j) bits[j] = uint32_t(4 * i + ((j + i) & 3)), f[j] = f32_from_bits(bits[j]);
        uint32_t got[4], want[4];
        if (which == PackedConversion::E4m3x4) {
            const uint32_t codes = cuda::f32x4_to_e4m3x4(f[0], f[1], f[2], f[3]);
            for (int j = 0; j < 4; ++j) got[j] = uint8_t(codes >> (8 * j)), want[j] = f32_to_e4m3(f[j]);
        } else {
            const uint32_t pairs[2] = {cuda::f32x2_to_bf16x2(f[0], f[1]), cuda::f32x2_to_bf16x2(f[2], f[3])};
            for (int j = 0; j < 4; ++j) got[j] = uint16_t(pairs[j / 2] >> (16 * (j % 2))), want[j] = f32_to_bf16(f[j]);
            // one value at a time too, as the epilogues round activations
            for (int j = 0; j < 4; ++j)
                if (f32_bits(cuda::round_act(f[j], true)) != f32_bits(round_to_bf16(f[j]))) got[j] = ~want[j];
        }
        for (int j = 0; j < 4; ++j)
            if (got[j] != want[j]) {
                atomicAdd(bad, 1ull);
                atomicMin(first, bits[j]);
            }
    }
}

}  // namespace

int64_t count_packed_mismatches(PackedConversion which, uint32_t* first_bits) {
    unsigned long long* bad = nullptr;
    uint32_t* first = nullptr;
    if (cudaMalloc(&bad, sizeof(*bad)) != cudaSuccess || cudaMalloc(&first, 4) != cudaSuccess) return -1;
    bool ok = cudaMemset(bad, 0, sizeof(*bad)) == cudaSuccess && cudaMemset(first, 0xFF, 4) == cudaSuccess;
    if (ok) packed_check_kernel<<<4096, 256>>>(which, bad, first);
    unsigned long long host_bad = 0;
    ok = ok && cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
         cudaMemcpy(&host_bad, bad, sizeof(host_bad), cudaMemcpyDeviceToHost) == cudaSuccess &&
                    cudaMemcpy(first_bits, first, 4, cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(bad);
    cudaFree(first);
    return ok ? int64_t(host_bad) : -1;
}

int run_widen_on_device(const uint32_t* codes, const uint32_t* scales, uint32_t* out, int64_t n, Widening how) {
    const size_t out_words = size_t(n) * (how == kE2m1ToBf16 ? 4 : 2);
    uint32_t *dcodes = nullptr, *dscales = nullptr, *dout = nullptr;
    if (cudaMalloc(&dcodes, size_t(n) * 4) != cudaSuccess || cudaMalloc(&dscales, size_t(n) * 4) != cudaSuccess ||
        cudaMalloc(&dout, out_words * 4) != cudaSuccess)
        return 1;
    cudaMemcpy(dcodes, codes, size_t(n) * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dscales, scales, size_t(n) * 4, cudaMemcpyHostToDevice);
    widen_kernel<<<unsigned((n + 255) / 256), 256>>>(dcodes, dscales, dout, n, how);
    const cudaError_t err = cudaMemcpy(out, dout, out_words * 4, cudaMemcpyDeviceToHost);
    cudaFree(dcodes);
    cudaFree(dscales);
    cudaFree(dout);
    return err == cudaSuccess ? 0 : 2;
}

int run_codec_on_device(const uint32_t* in, uint32_t* out, int64_t n, int which) {
    uint32_t *din = nullptr, *dout = nullptr;
    if (cudaMalloc(&din, size_t(n) * 4) != cudaSuccess || cudaMalloc(&dout, size_t(n) * 4) != cudaSuccess) return 1;
    cudaMemcpy(din, in, size_t(n) * 4, cudaMemcpyHostToDevice);
    codec_kernel<<<unsigned((n + 255) / 256), 256>>>(din, dout, n, which);
    const cudaError_t err = cudaMemcpy(out, dout, size_t(n) * 4, cudaMemcpyDeviceToHost);
    cudaFree(din);
    cudaFree(dout);
    return err == cudaSuccess ? 0 : 2;
}

}  // namespace steadymoe::test
