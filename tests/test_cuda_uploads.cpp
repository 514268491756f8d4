// Copies through the page-locked staging ring (pinned_uploads.hpp) land byte for byte where they were sent,
// however their sizes meet the chunks (several small copies share one; a long one wraps the ring), with the
// source overwritten as soon as each copy returns; and the plain-copy fallback does the same. Skips (and says
// so) when no GPU is visible. The layers' uploads through a ring of small chunks: the PinnedUploads ctest
// entries. And the host layouts the uploads make (weight_layouts.hpp), which write every byte of the buffers
// they reuse: no GPU needed.
#include "steadymoe/kernels/cuda/runtime.hpp"

#include "../src/kernels/cuda/env_switch.hpp"
#include "../src/kernels/cuda/pinned_uploads.hpp"
#include "../src/kernels/cuda/weight_layouts.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace steadymoe;

namespace {

struct Range {
    size_t offset, bytes;
};

// Sends each range of `expected` (random bytes) through `uploads` from a host copy that is scribbled over
// once the call returns, then reads the whole buffer back.
void check_ranges(cuda::PinnedUploads& uploads, const std::vector<Range>& ranges, size_t total, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> expected(total);
    for (auto& b : expected) b = uint8_t(rng());
    cuda::DeviceBuffer device(total, "upload test buffer");
    std::vector<uint8_t> zeros(total, 0);
    device.upload(zeros.data(), total);
    cuda::synchronize();
    std::vector<uint8_t> written(total, 0);  // what the ranges cover
    for (const Range& r : ranges) {
        std::vector<uint8_t> source(expected.begin() + int64_t(r.offset), expected.begin() + int64_t(r.offset + r.bytes));
        uploads.copy(device.as<uint8_t>() + r.offset, source.data(), r.bytes);
        for (auto& b : source) b = uint8_t(~b);  // the source is the caller's again
        for (size_t i = 0; i < r.bytes; ++i) written[r.offset + i] = 1;
    }
    uploads.finish();
    std::vector<uint8_t> back(total);
    device.download(back.data(), total);
    cuda::synchronize();
    for (size_t i = 0; i < total; ++i) {
        const uint8_t want = written[i] ? expected[i] : 0;
        ASSERT_EQ(back[i], want) << "byte " << i << " of " << total;
    }
}

// Ranges that are empty, one byte at an odd place, just under, at and just over a chunk, longer than the
// whole ring (so it wraps within one copy), and many small ones, back to back and with gaps.
std::vector<Range> ranges_for(size_t chunk, int chunks, size_t* total) {
    const size_t ring = chunk * size_t(chunks);
    std::vector<size_t> sizes = {0, 1, chunk - 1, chunk, chunk + 1, 3, 2 * ring + chunk / 2 + 7, ring, 5};
    sizes.insert(sizes.end(), 20, 97);  // small copies packed into a chunk, as an expert's scales are
    std::vector<Range> ranges;
    size_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        ranges.push_back({at, sizes[i]});
        at += sizes[i] + (i % 2 ? 0 : 13);  // every other range leaves a gap after it
    }
    *total = at;
    return ranges;
}

}  // namespace

TEST(CudaPinnedUploads, StagedCopiesLandWhereTheyWereSent) {
    SMOE_SKIP_WITHOUT_GPU();
    for (const auto& [chunk, chunks] : std::vector<std::pair<size_t, int>>{{4096, 2}, {4096, 3}, {(size_t(1) << 20) + 4096, 4}}) {
        SCOPED_TRACE("chunk " + std::to_string(chunk) + " x " + std::to_string(chunks));
        cuda::PinnedUploads uploads(chunk, chunks);
        if (!uploads.pinned()) GTEST_SKIP() << "no page-locked memory here: every copy is a plain one (tested below)";
        size_t total = 0;
        const std::vector<Range> ranges = ranges_for(chunk, chunks, &total);
        check_ranges(uploads, ranges, total, uint32_t(chunk + chunks));
        check_ranges(uploads, ranges, total, uint32_t(chunk * 3 + 1));  // the same ring again, after finish()
    }
}

TEST(CudaPinnedUploads, PlainCopiesLandWhereTheyWereSent) {
    SMOE_SKIP_WITHOUT_GPU();
    for (int chunks : {0, 1}) {  // a single chunk could not overlap, so it falls back too
        cuda::PinnedUploads uploads(4096, chunks);
        EXPECT_FALSE(uploads.pinned());
        size_t total = 0;
        const std::vector<Range> ranges = ranges_for(4096, 2, &total);
        check_ranges(uploads, ranges, total, 7u + uint32_t(chunks));
    }
}

// The ring is for large totals only (STEADYMOE_PINNED_UPLOADS=0: never; =test: always, in 4 KB chunks).
TEST(CudaPinnedUploads, TheRingIsForLargeTotals) {
    SMOE_SKIP_WITHOUT_GPU();
    if (!cuda::PinnedUploads(size_t(16) << 20, 4).pinned())
        GTEST_SKIP() << "not 64 MB of page-locked memory here: every large copy is a plain one";
    const bool never = cuda::env_equals("STEADYMOE_PINNED_UPLOADS", "0"), always = cuda::env_equals("STEADYMOE_PINNED_UPLOADS", "test");
    EXPECT_EQ(cuda::PinnedUploads::for_total(size_t(20) << 20).pinned(), always);
    EXPECT_EQ(cuda::PinnedUploads::for_total(size_t(64) << 20).pinned(), !never);
}

// Every layout into a buffer left from a larger matrix, full of 0xAB, gives the bytes of the layout into an
// empty buffer, padding rows (n is not a multiple of the 128-row tiles) included: the uploads reuse their
// buffers from expert to expert without clearing them.
TEST(CudaWeightLayouts, LayoutsWriteEveryByteOfAReusedBuffer) {
    constexpr int64_t n = 200, k = 256;
    std::mt19937 rng(5);
    std::vector<uint8_t> rows(size_t(n * k * 2)), scales(size_t(n * k / 32));
    for (auto& b : rows) b = uint8_t(rng());
    for (auto& b : scales) b = uint8_t(120 + rng() % 16);
    const auto reused = [] { return std::vector<uint8_t>(size_t(1) << 20, 0xAB); };
    for (const cuda::WeightCode code : {cuda::WeightCode::Bf16, cuda::WeightCode::Fp8, cuda::WeightCode::Fp4}) {
        std::vector<uint8_t> fresh, old = reused();
        cuda::tile_matrix(rows.data(), n, k, code, fresh);
        cuda::tile_matrix(rows.data(), n, k, code, old);
        EXPECT_EQ(old, fresh) << "tile_matrix, code " << int(code);
    }
    std::vector<uint8_t> fresh, old = reused();
    cuda::tile_fp4_scales(scales.data(), n, k, fresh);
    cuda::tile_fp4_scales(scales.data(), n, k, old);
    EXPECT_EQ(old, fresh) << "tile_fp4_scales";
    const std::vector<uint8_t> block_exps(size_t(k / 128), 120);  // (block-exact: a row's blocks' exponents)
    for (const bool exact : {false, true}) {
        const std::vector<const uint8_t*> block_exp_rows(exact ? size_t(n) : 0, block_exps.data());
        fresh.clear(), old = reused();
        cuda::fp4_e4m3_blocks(rows.data(), scales.data(), n, k, block_exp_rows, fresh);
        cuda::fp4_e4m3_blocks(rows.data(), scales.data(), n, k, block_exp_rows, old);
        EXPECT_EQ(old, fresh) << "fp4_e4m3_blocks, block-exact " << exact;
    }
    // (the last block's last row is padding: zeros)
    EXPECT_EQ(fresh.back(), 0);
}
