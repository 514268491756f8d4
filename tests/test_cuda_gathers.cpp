// The gathers that put a grouped GEMM's input rows in order (src/kernels/cuda/row_gathers.hpp): bf16 rows
// copied as they are, by the copy kernel where the rows are 16-byte aligned and by the per-group gather
// elsewhere, against the codec on the host; rows quantised to e4m3, by the row kernel where the rows are
// aligned, against the per-group gather and the CPU's quantiser; and FP8 rows quantised once and copied
// against quantised while gathered; bf16 tokens and tokens quantised straight into their pairs' rows
// against the gathers through the permutation's rows. Rows past the live bound are left as they were.
// Skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../src/kernels/cuda/row_gathers.hpp"
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/kernels/cpu/activation.hpp"
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

struct QuantiseCase {
    int64_t width, sources, bound;
    int32_t live;  // rows gathered (<= bound); -1: no live bound, every row
    bool indexed;  // rows through an index, else row r from source r
    bool bf16;     // bf16 sources, else f32
};

// One source group of 128 values, of kind `kind`: ordinary values over a wide range of magnitudes (0, 5),
// all zeros (the scale's floor), values below the floor (subnormal codes), magnitudes near the format's
// largest, random bits (NaNs, infinities, subnormals), a NaN among ordinary values, an infinity among them.
float group_value(int kind, int j, std::mt19937& rng, bool bf16) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    switch (kind) {
        case 1:
            return 0.0f;
        case 2:
            return normal(rng) * 3e-5f;
        case 3:
            return normal(rng) * 3e37f;
        case 4: {
            const uint32_t bits = uint32_t(rng());
            return f32_from_bits(bf16 ? bits << 16 : bits);
        }
        case 6:
            return j == 17 ? f32_from_bits(0x7FC00000u | (uint32_t(rng()) & 0x803F0000u)) : normal(rng);
        case 7:
            return j == 90 ? (rng() % 2 ? INFINITY : -INFINITY) : normal(rng);
        default:
            return normal(rng) * std::ldexp(1.0f, int(rng() % 41) - 20);
    }
}

// Whether e4m3 codes a and b are the same, NaN codes (sign | 0x7F) alike whatever their signs: a NaN out of
// the GPU's arithmetic is one canonical NaN, where the CPU's keeps an operand's sign.
bool same_code(uint8_t a, uint8_t b) { return a == b || ((a & 0x7F) == 0x7F && (b & 0x7F) == 0x7F); }

// Quantises `c`'s rows to e4m3 codes for both scale rules: from sources 16-byte aligned (the row kernel) and,
// for bf16 sources, from the same values 8 bytes off a 16-byte boundary (the per-group gather). Both give the
// CPU's quantize_row_fp8_codes bytes for every kind of group (NaN codes alike whatever their signs) and the
// same bytes as each other, and leave rows past the live bound as they were.
void check_quantised_gather(const QuantiseCase& c) {
    const int64_t stride = c.width + 128, groups = c.width / 128, value_bytes = c.bf16 ? 2 : 4;
    std::mt19937 rng(uint32_t(c.width * 7 + c.bound));
    std::vector<float> values(size_t(c.sources * stride), 0.0f);
    for (int64_t r = 0; r < c.sources; ++r)
        for (int64_t g = 0; g < groups; ++g) {
            // rows of ordinary groups only, then rows with every kind of group in turn
            const int kind = r % 3 == 0 ? 0 : int((r * groups + g) % 8);
            for (int j = 0; j < 128; ++j) {
                float v = group_value(kind, j, rng, c.bf16);
                if (c.bf16) v = bf16_to_f32(f32_to_bf16(v));
                values[size_t(r * stride + g * 128 + j)] = v;
            }
        }
    // The sources' bytes at a 16-byte boundary, then again 8 bytes past the next one.
    const int runs = c.bf16 ? 2 : 1;
    const size_t bytes = values.size() * size_t(value_bytes), skewed = (bytes + 15) / 16 * 16 + 8;
    std::vector<uint8_t> src(skewed + bytes);
    for (size_t i = 0; i < values.size(); ++i)
        for (size_t copy : {size_t(0), skewed}) {
            uint8_t* to = src.data() + copy + i * size_t(value_bytes);
            if (c.bf16) {
                const uint16_t b = f32_to_bf16(values[i]);
                std::memcpy(to, &b, 2);
            } else {
                std::memcpy(to, &values[i], 4);
            }
        }
    std::vector<int32_t> rows(size_t(c.bound));
    for (int64_t r = 0; r < c.bound; ++r)
        rows[size_t(r)] = c.indexed ? int32_t(rng() % c.sources) : int32_t(r);  // (row r from source r)
    const int64_t live = c.live < 0 ? c.bound : c.live;
    cuda::DeviceBuffer src_buf(src.size(), "sources"), rows_buf(rows.size() * 4, "rows"), live_buf(4, "live"),
        codes_buf(size_t(runs * c.bound * c.width), "codes"),
        scales_buf(size_t(runs * c.bound * groups) * 4, "scales");
    src_buf.upload(src.data(), src.size());
    rows_buf.upload(rows.data(), rows.size() * 4);
    live_buf.upload(&c.live, 4);
    std::vector<uint8_t> cpu_codes(size_t(c.width));
    std::vector<float> cpu_scales(static_cast<size_t>(groups));
    for (bool pow2 : {false, true}) {
        SCOPED_TRACE(pow2 ? "power-of-two scales" : "scales kept");
        std::vector<uint8_t> codes(size_t(runs * c.bound * c.width), 0xA5);
        std::vector<float> scales(size_t(runs * c.bound * groups), -1.0f);
        codes_buf.upload(codes.data(), codes.size());
        scales_buf.upload(scales.data(), scales.size() * 4);
        for (int run = 0; run < runs; ++run)  // 0: aligned sources, 1: skewed
            ASSERT_EQ(cuda::launch_gather_fp8(src_buf.as<uint8_t>() + (run ? skewed : 0), c.bf16, stride,
                                              c.indexed ? rows_buf.as<int32_t>() : nullptr, c.bound,
                                              c.live < 0 ? nullptr : live_buf.as<int32_t>(), c.width, pow2,
                                              codes_buf.as<uint8_t>() + run * c.bound * c.width,
                                              scales_buf.as<float>() + run * c.bound * groups, nullptr),
                      cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        codes_buf.download(codes.data(), codes.size());
        scales_buf.download(scales.data(), scales.size() * 4);
        int64_t off_cpu = 0, differ = 0, overwritten = 0;
        for (int64_t r = 0; r < c.bound; ++r) {
            const int64_t source = c.indexed ? rows[size_t(r)] : r;
            if (r < live)
                cpu::quantize_row_fp8_codes(values.data() + source * stride, c.width,
                                            pow2 ? ActivationQuant::Fp8Pow2 : ActivationQuant::Fp8Block,
                                            cpu_codes.data(), cpu_scales.data());
            for (int run = 0; run < runs; ++run) {
                const uint8_t* got = codes.data() + (run * c.bound + r) * c.width;
                const float* got_scales = scales.data() + (run * c.bound + r) * groups;
                if (r >= live) {
                    for (int64_t j = 0; j < c.width; ++j) overwritten += got[j] != 0xA5;
                    for (int64_t g = 0; g < groups; ++g) overwritten += got_scales[g] != -1.0f;
                    continue;
                }
                bool same = std::memcmp(got_scales, cpu_scales.data(), size_t(groups) * 4) == 0;
                for (int64_t j = 0; j < c.width; ++j) same = same && same_code(got[j], cpu_codes[size_t(j)]);
                if (!same && off_cpu++ < 5)
                    ADD_FAILURE() << (run ? "group gather" : "row kernel") << ": row " << r << " (source "
                                  << source << ") differs from the CPU's";
            }
            if (runs == 2 && r < live)
                differ += std::memcmp(codes.data() + r * c.width, codes.data() + (c.bound + r) * c.width,
                                      size_t(c.width)) != 0;
        }
        EXPECT_EQ(off_cpu, 0);
        EXPECT_EQ(differ, 0) << "rows where the row kernel's bytes and the group gather's differ";
        EXPECT_EQ(overwritten, 0) << "rows past the live bound were written";
    }
}

// Batches of 512 rows or more take four 16-byte words a lane (chunks of 128 words), fewer one (32 words).
TEST(CudaGathers, Bf16RowsQuantisedByTheRowKernelAsByGroupAndOnTheCpu) {
    SMOE_SKIP_WITHOUT_GPU();
    // 56 groups (deepseek-v3's hidden size): seven whole chunks of four words a lane
    check_quantised_gather({7168, 40, 600, 560, true, true});
    // 23 groups: a partial chunk
    check_quantised_gather({2944, 40, 700, 650, true, true});
    // few rows: a word a lane; one row, as at one token
    check_quantised_gather({7168, 40, 300, 260, true, true});
    check_quantised_gather({7168, 4, 1, -1, false, true});
}

TEST(CudaGathers, F32RowsQuantisedByTheRowKernelAsOnTheCpu) {
    SMOE_SKIP_WITHOUT_GPU();
    // 16 groups (deepseek-v3's SwiGLU outputs), every row, no live bound; 23 groups of few rows, a partial
    // chunk
    check_quantised_gather({2048, 600, 600, -1, false, false});
    check_quantised_gather({2048, 600, 600, 500, false, false});  // a live bound without a row index
    check_quantised_gather({2944, 50, 300, 280, true, false});
}

TEST(CudaGathers, RowsOfOneGroupQuantisedOutnumberingTheWarps) {
    SMOE_SKIP_WITHOUT_GPU();
    // a partial chunk a row, more rows than the launch's 4096 blocks of eight warps
    check_quantised_gather({128, 300, 40000, 39000, true, true});
    check_quantised_gather({384, 300, 34000, 33000, true, false});
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

// A permutation of `tokens` * top_k pairs as launch_permute_routed leaves one: every pair but one in
// `dropped` (none for 0) has a row (dest[row] = pair, rows[row] = its token), in a shuffled order; rows past
// the live bound hold stale destinations. With it, a pair-row scratch holding stale rows where the pair-row
// pass leaves them, the dropped pairs' entries: in turn a row past the live bound whose stale destination is
// the pair, a live row of another pair, a row far below 0 and one far past every row. A kernel that took the
// first would write a row past the bound; the second, a live row twice; the last two, it would read their
// destinations out of every allocation and fail the launch.
struct StalePermutation {
    int32_t live = 0;
    std::vector<int32_t> rows, stale;
    std::vector<int64_t> dest;
};
StalePermutation stale_permutation(int64_t tokens, int32_t top_k, int dropped, std::mt19937& rng) {
    const int64_t pairs = tokens * top_k;
    std::vector<int64_t> present;
    for (int64_t i = 0; i < pairs; ++i)
        if (dropped == 0 || i % dropped != 3) present.push_back(i);
    std::shuffle(present.begin(), present.end(), rng);
    StalePermutation p;
    p.live = int32_t(present.size());
    p.rows.resize(size_t(pairs)), p.stale.resize(size_t(pairs)), p.dest.resize(size_t(pairs));
    for (int64_t row = 0; row < pairs; ++row) {
        p.dest[size_t(row)] = row < p.live ? present[size_t(row)] : int64_t(rng() % pairs);
        p.rows[size_t(row)] = int32_t(p.dest[size_t(row)] / top_k);
        p.stale[size_t(row)] = int32_t(rng() % (pairs + 10)) - 5;
    }
    int64_t past = p.live;  // the next row past the live bound to give a stale destination
    for (int64_t i = 3, n = 0; dropped > 0 && i < pairs; i += dropped, ++n) {
        switch (n % 4) {
            case 0:
                if (past == pairs) break;
                p.dest[size_t(past)] = i;
                p.rows[size_t(past)] = int32_t(i / top_k);
                p.stale[size_t(i)] = int32_t(past++);
                break;
            case 1:
                p.stale[size_t(i)] = int32_t(n % std::max(p.live, 1));
                break;  // (a pair with a row: its dest)
            case 2:
                p.stale[size_t(i)] = std::numeric_limits<int32_t>::min() + int32_t(n);
                break;
            default:
                p.stale[size_t(i)] = std::numeric_limits<int32_t>::max() - int32_t(n);
                break;
        }
    }
    return p;
}

// Tokens quantised straight into their pairs' rows (stale_permutation's) give the bytes of quantising through
// the permutation's rows, and leave rows past the live bound as they were.
void check_quantised_to_pairs(int64_t tokens, int32_t top_k, int64_t width, bool bf16, int dropped) {
    const int64_t pairs = tokens * top_k, groups = width / 128, value_bytes = bf16 ? 2 : 4;
    std::mt19937 rng(uint32_t(tokens * 13 + width));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint8_t> src(size_t(tokens * width * value_bytes));
    for (int64_t i = 0; i < tokens * width; ++i) {
        const float v = normal(rng) * std::ldexp(1.0f, int(rng() % 21) - 10);
        if (bf16) {
            const uint16_t b = f32_to_bf16(v);
            std::memcpy(src.data() + i * 2, &b, 2);
        } else {
            std::memcpy(src.data() + i * 4, &v, 4);
        }
    }
    const StalePermutation perm = stale_permutation(tokens, top_k, dropped, rng);
    const int32_t live = perm.live;
    const std::vector<int32_t>& rows = perm.rows;
    const std::vector<int32_t>& stale = perm.stale;
    const std::vector<int64_t>& dest = perm.dest;
    cuda::DeviceBuffer src_buf(src.size(), "sources"), rows_buf(size_t(pairs) * 4, "rows"),
        dest_buf(size_t(pairs) * 8, "destinations"), live_buf(4, "live"),
        pair_buf(size_t(pairs) * 4, "pair rows"), codes_buf(size_t(2 * pairs * width), "codes"),
        scales_buf(size_t(2 * pairs * groups) * 4, "scales");
    src_buf.upload(src.data(), src.size());
    rows_buf.upload(rows.data(), rows.size() * 4);
    dest_buf.upload(dest.data(), dest.size() * 8);
    live_buf.upload(&live, 4);
    for (bool pow2 : {false, true}) {
        SCOPED_TRACE(pow2 ? "power-of-two scales" : "scales kept");
        std::vector<uint8_t> codes(size_t(2 * pairs * width), 0xA5);
        std::vector<float> scales(size_t(2 * pairs * groups), -1.0f);
        codes_buf.upload(codes.data(), codes.size());
        scales_buf.upload(scales.data(), scales.size() * 4);
        pair_buf.upload(stale.data(), stale.size() * 4);
        ASSERT_EQ(cuda::launch_gather_fp8(src_buf.get(), bf16, width, rows_buf.as<int32_t>(), pairs,
                                          live_buf.as<int32_t>(), width, pow2, codes_buf.as<uint8_t>(),
                                          scales_buf.as<float>(), nullptr),
                  cudaSuccess);
        ASSERT_EQ(
            cuda::launch_quantise_to_pairs(src_buf.get(), bf16, width, tokens, top_k, dest_buf.as<int64_t>(),
                                           pairs, live_buf.as<int32_t>(), width, pow2, pair_buf.as<int32_t>(),
                                           codes_buf.as<uint8_t>() + pairs * width,
                                           scales_buf.as<float>() + pairs * groups, nullptr),
            cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        codes_buf.download(codes.data(), codes.size());
        scales_buf.download(scales.data(), scales.size() * 4);
        EXPECT_EQ(std::memcmp(codes.data(), codes.data() + pairs * width, size_t(live * width)), 0)
            << "codes differ";
        EXPECT_EQ(std::memcmp(scales.data(), scales.data() + pairs * groups, size_t(live * groups) * 4), 0)
            << "scales differ";
        int64_t overwritten = 0;
        for (int64_t i = live * width; i < pairs * width; ++i)
            overwritten += codes[size_t(pairs * width + i)] != 0xA5;
        for (int64_t i = live * groups; i < pairs * groups; ++i)
            overwritten += scales[size_t(pairs * groups + i)] != -1.0f;
        EXPECT_EQ(overwritten, 0) << "rows past the live bound were written";
    }
}

// bf16 values given as bf16 and as f32 sources (the layer's SwiGLU outputs between its GEMMs: bf16 unless
// STEADYMOE_SWIGLU_MID=f32) give the same bytes, NaN codes' signs too: e4m3 codes and scales (both scale
// rules; the row kernel for few rows and for many, and the group gather where a bf16 row's stride is not
// 16-byte aligned, against the row kernel on the f32 rows) and bf16 values quantised through e4m3 (quant
// modes 1 and 2), for every kind of group.
TEST(CudaGathers, Bf16AndF32SourcesOfTheSameValuesGiveTheSameBytes) {
    SMOE_SKIP_WITHOUT_GPU();
    constexpr int64_t kWidth = 2048, kGroups = kWidth / 128;
    for (const auto& [rows, pad] : {std::pair<int64_t, int64_t>{40, 0}, {700, 0}, {40, 4}}) {
        SCOPED_TRACE(std::to_string(rows) + " rows, stride " + std::to_string(kWidth + pad));
        const int64_t stride = kWidth + pad;
        std::mt19937 rng(uint32_t(rows + pad));
        std::vector<uint16_t> bf16(size_t(rows * stride), 0);
        std::vector<float> f32(bf16.size(), 0.0f);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < kWidth; ++j) {
                const uint16_t b = f32_to_bf16(group_value(int((r * kGroups + j / 128) % 8), int(j % 128), rng, true));
                bf16[size_t(r * stride + j)] = b, f32[size_t(r * stride + j)] = bf16_to_f32(b);
            }
        cuda::DeviceBuffer bf16_buf(bf16.size() * 2, "bf16 sources"), f32_buf(f32.size() * 4, "f32 sources"),
            codes_buf(size_t(2 * rows * kWidth) * 2, "outputs"), scales_buf(size_t(2 * rows * kGroups) * 4, "scales");
        bf16_buf.upload(bf16.data(), bf16.size() * 2);
        f32_buf.upload(f32.data(), f32.size() * 4);
        // forms 0, 1: e4m3 codes, scales kept or powers of two; 2, 3: bf16 values in quant modes 1, 2
        for (int form = 0; form < 4; ++form) {
            SCOPED_TRACE("form " + std::to_string(form));
            const size_t out_bytes = size_t(rows * kWidth) * (form < 2 ? 1 : 2), scale_bytes = size_t(rows * kGroups) * 4;
            ASSERT_EQ(cudaMemset(codes_buf.get(), 0xA5, 2 * out_bytes), cudaSuccess);
            ASSERT_EQ(cudaMemset(scales_buf.get(), 0xA5, 2 * scale_bytes), cudaSuccess);
            for (int run = 0; run < 2; ++run) {  // 0: bf16 sources, 1: f32
                const void* src = run == 0 ? bf16_buf.get() : f32_buf.get();
                uint8_t* out = codes_buf.as<uint8_t>() + run * out_bytes;
                float* scales = scales_buf.as<float>() + run * rows * kGroups;
                const cudaError_t err =
                    form < 2 ? cuda::launch_gather_fp8(src, run == 0, stride, nullptr, rows, nullptr, kWidth, form == 1, out, scales, nullptr)
                             : cuda::launch_gather_bf16(src, run == 0, stride, nullptr, rows, nullptr, kWidth, form - 1,
                                                        reinterpret_cast<uint16_t*>(out), scales, nullptr);
                ASSERT_EQ(err, cudaSuccess);
            }
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            std::vector<uint8_t> out(2 * out_bytes), scales(2 * scale_bytes);
            codes_buf.download(out.data(), out.size());
            scales_buf.download(scales.data(), scales.size());
            EXPECT_EQ(std::memcmp(out.data(), out.data() + out_bytes, out_bytes), 0) << "outputs differ";
            EXPECT_EQ(std::memcmp(scales.data(), scales.data() + scale_bytes, scale_bytes), 0) << "scales differ";
            EXPECT_GT(std::count_if(out.begin(), out.begin() + std::ptrdiff_t(out_bytes), [](uint8_t b) { return b != 0xA5; }),
                      std::ptrdiff_t(out_bytes / 2))
                << "outputs not written";
        }
    }
}

// Runs a writer of e4m3 rows with their scales (`write(codes, scales, layout)`) twice, with row-major
// and with block-major scales over `scale_rows` rows (a multiple of 4, more than `bound`): the same codes,
// and the block-major scales the row-major ones transposed, for the `live` rows; the scales of rows past the
// live bound are left as they were.
template <typename Write>
void check_block_major_scales(int64_t bound, int64_t live, int64_t width, int64_t scale_rows, const Write& write) {
    const int64_t groups = width / 128;
    cuda::DeviceBuffer codes_rm(size_t(bound * width), "codes, row-major scales"),
        codes_bm(size_t(bound * width), "codes, block-major scales"),
        scales_rm(size_t(bound * groups) * 4, "row-major scales"), scales_bm(size_t(scale_rows * groups) * 4, "block-major scales");
    const std::vector<float> unset(size_t(scale_rows * groups), -1.0f);
    scales_rm.upload(unset.data(), size_t(bound * groups) * 4);
    scales_bm.upload(unset.data(), unset.size() * 4);
    write(codes_rm.as<uint8_t>(), scales_rm.as<float>(), cuda::ScaleLayout{});
    write(codes_bm.as<uint8_t>(), scales_bm.as<float>(), cuda::ScaleLayout{scale_rows});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> a(size_t(live * width)), b(a.size());
    std::vector<float> rm(size_t(bound * groups)), bm(unset.size());
    codes_rm.download(a.data(), a.size());
    codes_bm.download(b.data(), b.size());
    scales_rm.download(rm.data(), rm.size() * 4);
    scales_bm.download(bm.data(), bm.size() * 4);
    EXPECT_TRUE(a == b) << "codes differ";
    int64_t wrong = 0, overwritten = 0;
    for (int64_t r = 0; r < scale_rows; ++r)
        for (int64_t g = 0; g < groups; ++g) {
            const float got = bm[size_t(g * scale_rows + r)];
            if (r < live)
                wrong += std::memcmp(&got, &rm[size_t(r * groups + g)], 4) != 0 || got == -1.0f;
            else
                overwritten += got != -1.0f;
        }
    EXPECT_EQ(wrong, 0) << "block-major scales that are not the row-major ones";
    EXPECT_EQ(overwritten, 0) << "scales of rows past the live bound were written";
}

// Every writer of e4m3 rows for the grouped GEMM writes the same scales block-major as row-major
// (cuda::ScaleLayout): the row kernel (one word a lane and four), the per-group gather (a stride that is not
// 16-byte aligned), codes quantised once and copied, and tokens quantised into their pairs' rows.
TEST(CudaGathers, BlockMajorScalesAreTheRowMajorOnesTransposed) {
    SMOE_SKIP_WITHOUT_GPU();
    for (const auto& [sources, width, stride] : {std::tuple<int64_t, int64_t, int64_t>{50, 384, 384}, {700, 2048, 2048}, {50, 384, 388}}) {
        SCOPED_TRACE(std::to_string(sources) + " sources of " + std::to_string(width) + " values, stride " + std::to_string(stride));
        const int64_t bound = 3 * sources, live = 2 * sources + 1, scale_rows = (bound + 3) / 4 * 4 + 4;
        const int32_t live32 = int32_t(live);
        std::mt19937 rng(uint32_t(width + stride));
        std::normal_distribution<float> normal(0.0f, 2.0f);
        std::vector<uint16_t> src(size_t(sources * stride));
        for (auto& v : src) v = f32_to_bf16(normal(rng) * std::ldexp(1.0f, int(rng() % 16) - 8));
        std::vector<int32_t> rows(static_cast<size_t>(bound));
        for (auto& r : rows) r = int32_t(rng() % sources);
        cuda::DeviceBuffer src_buf(src.size() * 2, "sources"), rows_buf(rows.size() * 4, "rows"), live_buf(4, "live"),
            once(size_t(sources * width), "codes once"), once_scales(size_t(sources * width / 128) * 4, "scales once");
        src_buf.upload(src.data(), src.size() * 2);
        rows_buf.upload(rows.data(), rows.size() * 4);
        live_buf.upload(&live32, 4);
        check_block_major_scales(bound, live, width, scale_rows, [&](uint8_t* codes, float* scales, cuda::ScaleLayout layout) {
            ASSERT_EQ(cuda::launch_gather_fp8(src_buf.get(), true, stride, rows_buf.as<int32_t>(), bound, live_buf.as<int32_t>(),
                                              width, false, codes, scales, nullptr, layout),
                      cudaSuccess);
        });
        if (stride != width) continue;  // (the others need aligned rows)
        ASSERT_EQ(cuda::launch_gather_fp8(src_buf.get(), true, width, nullptr, sources, nullptr, width, true, once.as<uint8_t>(),
                                          once_scales.as<float>(), nullptr),
                  cudaSuccess);
        check_block_major_scales(bound, live, width, scale_rows, [&](uint8_t* codes, float* scales, cuda::ScaleLayout layout) {
            ASSERT_EQ(cuda::launch_gather_e4m3_rows(once.as<uint8_t>(), once_scales.as<float>(), rows_buf.as<int32_t>(), bound,
                                                    live_buf.as<int32_t>(), width, codes, scales, nullptr, layout),
                      cudaSuccess);
        });
        // Every source a token of three pairs, each pair in a row of its own (all of them live).
        constexpr int32_t kTopK = 3;
        std::vector<int64_t> dest(static_cast<size_t>(bound));
        for (int64_t i = 0; i < bound; ++i) dest[size_t(i)] = i;
        std::shuffle(dest.begin(), dest.end(), rng);
        const int32_t all = int32_t(bound);
        cuda::DeviceBuffer dest_buf(dest.size() * 8, "destinations"), all_buf(4, "live pairs"), pair_buf(dest.size() * 4, "pair rows");
        dest_buf.upload(dest.data(), dest.size() * 8);
        all_buf.upload(&all, 4);
        check_block_major_scales(bound, bound, width, scale_rows, [&](uint8_t* codes, float* scales, cuda::ScaleLayout layout) {
            ASSERT_EQ(cuda::launch_quantise_to_pairs(src_buf.get(), true, width, sources, kTopK, dest_buf.as<int64_t>(), bound,
                                                     all_buf.as<int32_t>(), width, false, pair_buf.as<int32_t>(), codes, scales,
                                                     nullptr, layout),
                      cudaSuccess);
        });
    }
}

// bf16 tokens (`stride` values apart) copied straight into their pairs' rows (stale_permutation's) give the
// bytes of the gather through the permutation's rows (NaNs made quiet: the sources hold every bf16 bit
// pattern, then random bits), and leave rows past the live bound as they were.
void check_copied_to_pairs(int64_t tokens, int32_t top_k, int64_t width, int64_t stride, int dropped) {
    const int64_t pairs = tokens * top_k;
    std::mt19937 rng(uint32_t(tokens * 7 + width));
    std::vector<uint16_t> src(size_t(tokens * stride));
    for (size_t i = 0; i < src.size(); ++i) src[i] = i < 65536 ? uint16_t(i * 40503u) : uint16_t(rng());
    const StalePermutation perm = stale_permutation(tokens, top_k, dropped, rng);
    cuda::DeviceBuffer src_buf(src.size() * 2, "sources"), rows_buf(size_t(pairs) * 4, "rows"),
        dest_buf(size_t(pairs) * 8, "destinations"), live_buf(4, "live"),
        pair_buf(size_t(pairs) * 4, "pair rows"), out_buf(size_t(2 * pairs * width) * 2, "copies");
    src_buf.upload(src.data(), src.size() * 2);
    rows_buf.upload(perm.rows.data(), perm.rows.size() * 4);
    dest_buf.upload(perm.dest.data(), perm.dest.size() * 8);
    live_buf.upload(&perm.live, 4);
    pair_buf.upload(perm.stale.data(), perm.stale.size() * 4);
    std::vector<uint16_t> out(size_t(2 * pairs * width), kSentinel);
    out_buf.upload(out.data(), out.size() * 2);
    ASSERT_EQ(
        cuda::launch_gather_bf16(src_buf.as<uint16_t>(), true, stride, rows_buf.as<int32_t>(), pairs,
                                 live_buf.as<int32_t>(), width, 0, out_buf.as<uint16_t>(), nullptr, nullptr),
        cudaSuccess);
    ASSERT_EQ(
        cuda::launch_copy_bf16_to_pairs(src_buf.as<uint16_t>(), stride, tokens, top_k, dest_buf.as<int64_t>(),
                                        pairs, live_buf.as<int32_t>(), width, pair_buf.as<int32_t>(),
                                        out_buf.as<uint16_t>() + pairs * width, nullptr),
        cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out_buf.download(out.data(), out.size() * 2);
    const uint16_t* copied = out.data() + pairs * width;
    EXPECT_EQ(std::memcmp(out.data(), copied, size_t(perm.live * width) * 2), 0) << "rows differ";
    int64_t overwritten = 0;
    for (int64_t i = perm.live * width; i < pairs * width; ++i) overwritten += copied[i] != kSentinel;
    EXPECT_EQ(overwritten, 0) << "rows past the live bound were written";
}

TEST(CudaGathers, Bf16TokensCopiedIntoTheirPairsRowsGiveTheGatheredBytes) {
    SMOE_SKIP_WITHOUT_GPU();
    check_copied_to_pairs(600, 8, 2048, 2048, 7);  // eight words a lane (512 tokens or more)
    check_copied_to_pairs(520, 6, 7168, 7176, 5);  // rows of several chunks, the last part filled; a stride
    check_copied_to_pairs(3, 8, 2048, 2048, 4);    // a word a lane
    check_copied_to_pairs(40, 6, 4104, 4104, 0);   // no pair dropped; rows not whole 128-value groups
    // Rows that the copy kernel cannot take are refused, not copied some other way.
    cuda::DeviceBuffer buf(4096, "rows");
    EXPECT_EQ(cuda::launch_copy_bf16_to_pairs(buf.as<uint16_t>() + 1, 8, 1, 2, nullptr, 2, nullptr, 8,
                                              nullptr, buf.as<uint16_t>() + 64, nullptr),
              cudaErrorInvalidValue);
}

TEST(CudaGathers, TokensQuantisedIntoTheirPairsRowsGiveTheGatheredBytes) {
    SMOE_SKIP_WITHOUT_GPU();
    check_quantised_to_pairs(600, 8, 7168, true, 7);  // four words a lane (512 tokens or more)
    check_quantised_to_pairs(600, 6, 2048, false, 5);
    check_quantised_to_pairs(3, 8, 7168, true, 4);   // a word a lane
    check_quantised_to_pairs(40, 6, 4096, true, 0);  // no pair dropped
}

}  // namespace
