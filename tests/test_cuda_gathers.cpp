// The gathers that put a grouped GEMM's input rows in order (src/kernels/cuda/grouped_gemm.hpp): bf16 rows
// copied as they are, by the copy kernel where the rows are 16-byte aligned and by the per-group gather
// elsewhere, against the codec on the host; and FP8 rows quantised once and copied against quantised while
// gathered. Rows past the live bound are left as they were. Skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../src/kernels/cuda/grouped_gemm.hpp"
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#include "test_util.hpp"

using namespace steadymoe;

namespace {

constexpr uint16_t kSentinel = 0xABCD;

struct Bf16GatherCase {
    int64_t width, stride, sources, bound;
    int32_t live;         // rows gathered (<= bound); -1: no live bound, every row
    bool indexed;         // rows through an index, else row r from source r
    int64_t source_skew;  // values the sources start past a 16-byte boundary
};

// Gathers `c`'s rows of bf16 sources that hold every bf16 bit pattern (signalling and quiet NaNs, both
// infinities, subnormals), then random bits, and checks each row against the codec's widening and rounding
// (a NaN made quiet), and the rows past the live bound against the sentinel they started as.
void check_bf16_gather(const Bf16GatherCase& c) {
    std::mt19937 rng(uint32_t(c.width * 31 + c.bound));
    std::vector<uint16_t> src(size_t(c.source_skew + c.sources * c.stride));
    for (size_t i = 0; i < src.size(); ++i) src[i] = i < 65536 ? uint16_t(i * 40503u) : uint16_t(rng());
    std::vector<int32_t> rows(size_t(c.bound));
    for (int64_t r = 0; r < c.bound; ++r)
        rows[size_t(r)] = c.indexed ? int32_t(rng() % c.sources) : int32_t(r);
    std::vector<uint16_t> out(size_t(c.bound * c.width), kSentinel);
    cuda::DeviceBuffer src_buf(src.size() * 2, "sources"), rows_buf(rows.size() * 4, "rows"),
        live_buf(4, "live"), out_buf(out.size() * 2, "gathered");
    src_buf.upload(src.data(), src.size() * 2);
    rows_buf.upload(rows.data(), rows.size() * 4);
    live_buf.upload(&c.live, 4);
    out_buf.upload(out.data(), out.size() * 2);
    ASSERT_EQ(cuda::launch_gather_bf16(src_buf.as<uint16_t>() + c.source_skew, true, c.stride,
                                       c.indexed ? rows_buf.as<int32_t>() : nullptr, c.bound,
                                       c.live < 0 ? nullptr : live_buf.as<int32_t>(), c.width, 0,
                                       out_buf.as<uint16_t>(), nullptr, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out_buf.download(out.data(), out.size() * 2);
    const int64_t live = c.live < 0 ? c.bound : c.live;
    int64_t wrong = 0, overwritten = 0;
    for (int64_t r = 0; r < c.bound; ++r)
        for (int64_t j = 0; j < c.width; ++j) {
            const uint16_t got = out[size_t(r * c.width + j)];
            if (r >= live) {
                overwritten += got != kSentinel;
                continue;
            }
            const uint16_t v = src[size_t(c.source_skew + rows[size_t(r)] * c.stride + j)];
            if (got != f32_to_bf16(bf16_to_f32(v)) && wrong++ < 5)
                ADD_FAILURE() << "row " << r << " value " << j << ": source 0x" << std::hex << v << " gave 0x"
                              << got;
        }
    EXPECT_EQ(wrong, 0);
    EXPECT_EQ(overwritten, 0) << "rows past the live bound were written";
}

TEST(CudaGathers, Bf16RowsCopiedAsTheyAreWithNaNsMadeQuiet) {
    SMOE_SKIP_WITHOUT_GPU();
    // 23 groups of 128: a whole batch of 16-byte words a lane and a partial one; a stride past the width
    check_bf16_gather({2944, 3008, 40, 300, 250, true, 0});
}

TEST(CudaGathers, Bf16RowsOfOneGroupWithoutALiveBound) {
    SMOE_SKIP_WITHOUT_GPU();
    check_bf16_gather({128, 128, 600, 600, -1, false, 0});
}

TEST(CudaGathers, Bf16RowsOutnumberingTheWarps) {
    SMOE_SKIP_WITHOUT_GPU();
    // more rows than the launch's 4096 blocks of eight warps: warps take several rows each
    check_bf16_gather({256, 256, 2000, 40000, 39000, true, 0});
}

// Rows whose start or stride is not a multiple of 16 bytes (each on its own) take the group gather: had the
// copy kernel taken them, its 16-byte loads would fault.
TEST(CudaGathers, Bf16RowsOfAnUnalignedSourceTakeTheGroupGather) {
    SMOE_SKIP_WITHOUT_GPU();
    check_bf16_gather({384, 384, 60, 200, 170, true, 4});
}

TEST(CudaGathers, Bf16RowsOfAnUnalignedStrideTakeTheGroupGather) {
    SMOE_SKIP_WITHOUT_GPU();
    check_bf16_gather({384, 388, 60, 200, 170, true, 0});
}

// Quantising each source row once and copying its codes and scales to the rows that read it gives the
// bytes of quantising while gathering (the layer's routed FP8 inputs: cuda_layer_stages.cpp), for both
// scale rules, with a live-row bound below the launch's.
TEST(CudaGathers, QuantisingOnceThenCopyingCodesGivesTheGatheredBytes) {
    SMOE_SKIP_WITHOUT_GPU();
    constexpr int64_t kSources = 50, kWidth = 384, kBound = 200;
    constexpr int32_t kLive = 150;
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<uint16_t> src(size_t(kSources * kWidth));
    for (auto& v : src) v = f32_to_bf16(normal(rng) * float(1 << (rng() % 12)) / 64.0f);
    std::vector<int32_t> rows(static_cast<size_t>(kBound));
    for (auto& r : rows) r = int32_t(rng() % kSources);
    cuda::DeviceBuffer src_buf(src.size() * 2, "sources"), rows_buf(rows.size() * 4, "rows"),
        live_buf(4, "live"), once(size_t(kSources * kWidth), "codes once"),
        once_scales(size_t(kSources * kWidth / 128) * 4, "scales once"),
        direct(size_t(kBound * kWidth), "codes gathered"),
        direct_scales(size_t(kBound * kWidth / 128) * 4, "scales gathered"),
        copied(size_t(kBound * kWidth), "codes copied"),
        copied_scales(size_t(kBound * kWidth / 128) * 4, "scales copied");
    src_buf.upload(src.data(), src.size() * 2);
    rows_buf.upload(rows.data(), rows.size() * 4);
    live_buf.upload(&kLive, 4);
    for (bool pow2 : {false, true}) {
        SCOPED_TRACE(pow2 ? "power-of-two scales" : "scales kept");
        ASSERT_EQ(cuda::launch_gather_fp8(src_buf.get(), true, kWidth, rows_buf.as<int32_t>(), kBound,
                                          live_buf.as<int32_t>(), kWidth, pow2, direct.as<uint8_t>(),
                                          direct_scales.as<float>(), nullptr),
                  cudaSuccess);
        ASSERT_EQ(cuda::launch_gather_fp8(src_buf.get(), true, kWidth, nullptr, kSources, nullptr, kWidth,
                                          pow2, once.as<uint8_t>(), once_scales.as<float>(), nullptr),
                  cudaSuccess);
        ASSERT_EQ(
            cuda::launch_gather_e4m3_rows(once.as<uint8_t>(), once_scales.as<float>(), rows_buf.as<int32_t>(),
                                          kBound, live_buf.as<int32_t>(), kWidth, copied.as<uint8_t>(),
                                          copied_scales.as<float>(), nullptr),
            cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<uint8_t> a(size_t(kLive * kWidth)), b(a.size());
        std::vector<float> sa(size_t(kLive * kWidth / 128)), sb(sa.size());
        direct.download(a.data(), a.size());
        copied.download(b.data(), b.size());
        direct_scales.download(sa.data(), sa.size() * 4);
        copied_scales.download(sb.data(), sb.size() * 4);
        EXPECT_TRUE(a == b) << "codes differ";
        EXPECT_EQ(std::memcmp(sa.data(), sb.data(), sa.size() * 4), 0) << "scales differ";
    }
}

}  // namespace
