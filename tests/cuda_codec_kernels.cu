// Device side of test_cuda_codecs: runs the shared codecs of core/numeric.hpp on the GPU over inputs
// chosen by the host test.
#include "steadymoe/core/numeric.hpp"

#include "cuda_codec_kernels.hpp"

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

}  // namespace

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
