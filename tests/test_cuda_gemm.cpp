// The portable CUDA GEMM against the CPU GEMM: the same bits for every weight format, with and without
// FP8 activation block scales, for any number of rows. Skips (and says so) when no GPU is visible.
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/kernels/cpu/activation.hpp"
#include "steadymoe/kernels/cpu/gemm.hpp"
#include "steadymoe/kernels/cuda/gemm.hpp"
#include "steadymoe/model/quantize.hpp"

#include "test_util.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace steadymoe;

namespace {


std::vector<float> values(int64_t rows, int64_t cols, uint32_t seed, float std) {
    const Tensor t = synthetic::tensor(DType::F32, {rows, cols}, seed, 2, std);
    return {t.data<float>(), t.data<float>() + t.numel()};
}

WeightMatrix weight(const std::string& format, int64_t rows, int64_t cols) {
    const std::vector<float> w = values(rows, cols, uint32_t(rows * 31 + cols), 0.05f);
    if (format == "fp8") return quantize_fp8(w.data(), rows, cols, false, "w");
    if (format == "fp8-e8m0") return quantize_fp8(w.data(), rows, cols, true, "w");
    if (format == "mxfp4") return quantize_mxfp4(w.data(), rows, cols, E8M0Rounding::Up, "w");
    if (format == "nvfp4") return quantize_nvfp4(w.data(), rows, cols, "w");
    WeightMatrix m;
    m.rows = rows, m.cols = cols, m.name = "w";
    m.data = Tensor::zeros(format == "f32" ? DType::F32 : DType::BF16, {rows, cols});
    for (int64_t i = 0; i < rows * cols; ++i) {
        if (format == "f32") m.data.mutable_data<float>()[i] = w[size_t(i)];
        else m.data.mutable_data<uint16_t>()[i] = f32_to_bf16(w[size_t(i)]);
    }
    return m;
}

std::vector<float> cpu_gemm(const std::vector<float>& a, const std::vector<float>* scales, int64_t m,
                            const cpu::PackedWeight& w) {
    cpu::PackedActivations pa;
    cpu::pack_activations({a.data(), scales ? scales->data() : nullptr, m, w.cols}, pa);
    std::vector<float> c(size_t(m * w.rows));
    cpu::gemm_tiles(pa, w, 0, w.panels(), 0, pa.tile_count(), c.data(), w.rows);
    return c;
}

std::vector<float> gpu_gemm(const std::vector<float>& a, const std::vector<float>* scales, int64_t m,
                            const cuda::DevicePackedWeight& w) {
    cuda::DeviceBuffer da(a.size() * 4, "activations"), ds, dc(size_t(m * w.rows) * 4, "output");
    da.upload(a.data(), a.size() * 4);
    if (scales) {
        ds = cuda::DeviceBuffer(scales->size() * 4, "activation scales");
        ds.upload(scales->data(), scales->size() * 4);
    }
    cuda::gemm({da.as<const float>(), scales ? ds.as<const float>() : nullptr, m, w.cols}, w, dc.as<float>(), w.rows);
    std::vector<float> c(size_t(m * w.rows));
    dc.download(c.data(), c.size() * 4);
    cuda::synchronize();
    return c;
}

}  // namespace

class CudaGemm : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaGemm, BitwiseEqualToTheCpuGemm) {
    SMOE_SKIP_WITHOUT_GPU();
    const int64_t N = 96, K = 384;
    const cpu::PackedWeight packed = cpu::pack_weight(weight(GetParam(), N, K));
    const cuda::DevicePackedWeight dw = cuda::upload_weight(packed, "test weight");
    for (int64_t m : {1, 7, 8, 19, 64}) {
        const std::vector<float> a = values(m, K, 5, 1.0f);
        const std::vector<float> ref = cpu_gemm(a, nullptr, m, packed);
        const std::vector<float> got = gpu_gemm(a, nullptr, m, dw);
        EXPECT_EQ(test::first_bit_difference(ref.data(), got.data(), ref.size() * 4), -1) << "m=" << m;
    }
}

TEST_P(CudaGemm, Fp8ActivationBlocksBitwiseEqualToTheCpuGemm) {
    SMOE_SKIP_WITHOUT_GPU();
    const int64_t N = 40, K = 320, m = 13;  // a partial last 128-block
    const cpu::PackedWeight packed = cpu::pack_weight(weight(GetParam(), N, K));
    const cuda::DevicePackedWeight dw = cuda::upload_weight(packed, "test weight");
    const std::vector<float> x = values(m, K, 8, 1.0f);
    std::vector<float> q(size_t(m * K)), s(size_t(m * 3));
    for (int64_t i = 0; i < m; ++i)
        cpu::quantize_row_fp8(x.data() + i * K, K, ActivationQuant::Fp8Block, q.data() + i * K, s.data() + i * 3);
    const std::vector<float> ref = cpu_gemm(q, &s, m, packed);
    const std::vector<float> got = gpu_gemm(q, &s, m, dw);
    EXPECT_EQ(test::first_bit_difference(ref.data(), got.data(), ref.size() * 4), -1);
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaGemm,
                         ::testing::Values("bf16", "f32", "fp8", "fp8-e8m0", "mxfp4", "nvfp4"),
                         [](const auto& info) {
                             std::string s = info.param;
                             for (auto& ch : s)
                                 if (ch == '-') ch = '_';
                             return s;
                         });

TEST(CudaRuntime, AnImpossibleAllocationIsAnOutOfMemoryError) {
    SMOE_SKIP_WITHOUT_GPU();
    try {
        cuda::DeviceBuffer huge(size_t(1) << 52, "a 4 PiB test buffer");
        FAIL() << "allocation of 4 PiB succeeded";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
        EXPECT_NE(std::string(e.what()).find("a 4 PiB test buffer"), std::string::npos) << e.what();
    }
}

TEST(CudaRuntime, ReportsWhetherADeviceIsVisible) {
    std::string why;
    const bool available = cuda::device_available(&why);
    if (!available) {
        EXPECT_FALSE(why.empty());
        GTEST_SKIP() << "no CUDA GPU: " << why;
    }
    EXPECT_TRUE(why.empty());
}
