// The permutation of (token, expert) pairs to expert rows on the GPU against a host counting sort:
// per-expert loads and first rows, the tile lists, and each row's input row, contribution row and
// weight, exactly. Batches of up to 128 pairs take the one-block kernel, up to 1024 the one-block form of
// the chunked kernels, larger ones three launches over chunks of 1024 pairs; both sides of each line and
// batches of many chunks are checked, with masked
// tokens' pairs (id -1) and ids past the experts, a live-pair bound below the pair count (zero too), and
// pairs that name their input rows (expert parallelism), in tiles of the GPU's height and of decode batches'
// (32 and 8 rows), each tile list as long as the layer's bound allows. Skips, saying so, without a GPU. The
// bound itself (tc::tile_bound) is checked on the host against every way rows can fall on experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "../src/engine/cuda_layer_stages.hpp"
#include "../src/kernels/cuda/grouped_gemm.hpp"
#include "../src/kernels/cuda/routing.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#include "test_util.hpp"

using namespace steadymoe;

namespace {

struct Case {
    int64_t pairs;  // the bound the launch is given
    int32_t live;   // pairs actually present (<= pairs), or -1: all of them
    int32_t experts, top_k;
    bool with_rows;  // pairs name their input rows (row_of_pair)
};

struct Permutation {
    std::vector<int32_t> load, offsets, tile_expert, tile_row0, tile_rows, rows;
    std::vector<int64_t> dest;
    std::vector<float> weight;
    int32_t tile_count = 0;
};

// Rows in expert order, each expert's pairs in pair order; tiles of tile_m rows per expert.
Permutation host_permutation(const std::vector<int32_t>& ids, const std::vector<float>& weights,
                             const std::vector<int32_t>& row_of_pair, int64_t live, int32_t experts,
                             int32_t top_k, int32_t tile_m) {
    Permutation p;
    p.load.assign(size_t(experts), 0);
    for (int64_t i = 0; i < live; ++i)
        if (ids[size_t(i)] >= 0 && ids[size_t(i)] < experts) ++p.load[size_t(ids[size_t(i)])];
    int32_t first = 0;
    for (int32_t e = 0; e < experts; ++e) {
        p.offsets.push_back(first);
        for (int64_t i = 0; i < live; ++i) {
            if (ids[size_t(i)] != e) continue;
            p.rows.push_back(row_of_pair.empty() ? int32_t(i / top_k) : row_of_pair[size_t(i)]);
            p.dest.push_back(i);
            p.weight.push_back(weights[size_t(i)]);
        }
        for (int32_t r = 0; r < p.load[size_t(e)]; r += tile_m) {
            p.tile_expert.push_back(e);
            p.tile_row0.push_back(first + r);
            p.tile_rows.push_back(std::min(tile_m, p.load[size_t(e)] - r));
        }
        first += p.load[size_t(e)];
    }
    p.offsets.push_back(first);
    p.tile_count = int32_t(p.tile_expert.size());
    return p;
}

template <typename T>
std::vector<T> download(const cuda::DeviceBuffer& b, size_t n, size_t offset = 0) {
    std::vector<T> v(n);
    if (n > 0) {
        std::vector<T> all(offset + n);
        b.download(all.data(), all.size() * sizeof(T));
        std::copy(all.begin() + long(offset), all.end(), v.begin());
    }
    return v;
}

void check(const Case& c, uint32_t seed, int32_t tile_m) {
    SCOPED_TRACE("pairs " + std::to_string(c.pairs) + ", live " + std::to_string(c.live) + ", experts " +
                 std::to_string(c.experts) + (c.with_rows ? ", named rows" : "") + ", tiles of " + std::to_string(tile_m));
    std::mt19937 rng(seed);
    const int64_t live = c.live < 0 ? c.pairs : c.live;
    std::vector<int32_t> ids(size_t(c.pairs)), row_of_pair;
    std::vector<float> weights(size_t(c.pairs));
    // A few hot experts, some masked pairs (-1) and ids past the experts (no row either), the rest spread:
    // loads from 0 to beyond one tile.
    for (auto& id : ids) {
        const uint32_t r = rng() % 20;
        id = r == 0 ? -1 : r == 1 ? c.experts : r < 8 ? int32_t(rng() % 3) : int32_t(rng() % uint32_t(c.experts));
    }
    for (auto& w : weights) w = float(rng() % 1000) / 7.0f;
    if (c.with_rows)
        for (int64_t i = 0; i < c.pairs; ++i) row_of_pair.push_back(int32_t(rng() % 100000));
    const Permutation want = host_permutation(ids, weights, row_of_pair, live, c.experts, c.top_k, tile_m);

    const int64_t max_tiles = tc::tile_bound(c.pairs, c.experts, tile_m);  // what the layer gives
    ASSERT_LE(want.tile_count, max_tiles);
    cuda::DeviceBuffer ids_buf(ids.size() * 4, "ids"), weights_buf(weights.size() * 4, "weights"),
        rows_of_pair_buf(std::max<size_t>(4, row_of_pair.size() * 4), "rows of pairs"), live_buf(4, "live"),
        rows(size_t(c.pairs) * 4, "rows"), dest(size_t(c.pairs) * 8, "dest"),
        weight(size_t(c.pairs) * 4, "weight"), tiles(size_t(3 * max_tiles + 1) * 4, "tiles"),
        load(size_t(c.experts) * 4, "load"), offsets(size_t(2 * (c.experts + 1)) * 4, "offsets"),
        chunk_counts(size_t(std::max<int64_t>(1, cuda::permutation_chunks(c.pairs) * c.experts)) * 4, "chunk counts");
    // Every output starts as 0xFF bytes (-1), so whatever the launch leaves unwritten is defined and shows.
    for (const cuda::DeviceBuffer* b : {&rows, &dest, &weight, &tiles, &load, &offsets, &chunk_counts})
        ASSERT_EQ(cudaMemset(b->get(), 0xFF, b->bytes()), cudaSuccess);
    ids_buf.upload(ids.data(), ids.size() * 4);
    weights_buf.upload(weights.data(), weights.size() * 4);
    if (c.with_rows) rows_of_pair_buf.upload(row_of_pair.data(), row_of_pair.size() * 4);
    const int32_t live32 = int32_t(live);
    live_buf.upload(&live32, 4);
    int32_t* t = tiles.as<int32_t>();
    int32_t* o = offsets.as<int32_t>();
    const cuda::PermutationOut out{
        rows.as<int32_t>(), dest.as<int64_t>(), weight.as<float>(), t, t + max_tiles,
        t + 2 * max_tiles,  t + 3 * max_tiles,  load.as<int32_t>(), o, o + c.experts + 1, chunk_counts.as<int32_t>()};
    ASSERT_EQ(cuda::launch_permute_routed(ids_buf.as<int32_t>(), weights_buf.as<float>(), c.pairs, c.top_k,
                                          c.experts, tile_m, out, nullptr,
                                          c.with_rows ? rows_of_pair_buf.as<int32_t>() : nullptr,
                                          c.live < 0 ? nullptr : live_buf.as<int32_t>()),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    const size_t n_rows = want.rows.size(), n_tiles = size_t(want.tile_count);
    EXPECT_EQ(download<int32_t>(load, size_t(c.experts)), want.load);
    EXPECT_EQ(download<int32_t>(offsets, size_t(c.experts + 1)), want.offsets);
    EXPECT_EQ(download<int32_t>(tiles, 1, size_t(3 * max_tiles))[0], want.tile_count);
    EXPECT_EQ(download<int32_t>(tiles, n_tiles), want.tile_expert);
    EXPECT_EQ(download<int32_t>(tiles, n_tiles, size_t(max_tiles)), want.tile_row0);
    EXPECT_EQ(download<int32_t>(tiles, n_tiles, size_t(2 * max_tiles)), want.tile_rows);
    EXPECT_EQ(download<int32_t>(rows, n_rows), want.rows);
    EXPECT_EQ(download<int64_t>(dest, n_rows), want.dest);
    EXPECT_EQ(download<float>(weight, n_rows), want.weight);
}

}  // namespace

TEST(CudaPermutation, MatchesAHostCountingSortOnBothSidesOfTheOneBlockLimit) {
    SMOE_SKIP_WITHOUT_GPU();
    uint32_t seed = 1;
    for (const Case& c :
         {Case{1, -1, 8, 1, false}, Case{8, -1, 256, 8, false}, Case{96, -1, 8, 2, false},
          Case{128, -1, 512, 8, false}, Case{128, 77, 256, 8, false}, Case{100, -1, 16, 1, true},
          Case{129, -1, 256, 8, false}, Case{1000, 613, 256, 8, false}, Case{4096, -1, 8, 2, false},
          Case{3000, -1, 64, 1, true}, Case{131072, -1, 256, 8, false}, Case{50000, 20000, 512, 8, false},
          Case{4097, 1025, 128, 1, true}, Case{3000, 0, 64, 8, false}, Case{1024, -1, 512, 8, false},
          Case{1024, 700, 128, 8, true}, Case{1025, -1, 128, 8, false}, Case{513, -1, 8, 1, false}})
        for (int32_t tile_m : {cuda::grouped_gemm_tile_rows(), 32, cuda::kMinTileRows}) check(c, seed++, tile_m);
}

// The layer's bound on a batch's tiles is the most tiles its rows can fill: against the maximum over every
// way `rows` rows can fall on the experts (each expert's rows in tiles of their own), found by dynamic
// programming. Too low, the permutation would write past its tile list; it runs on the host.
TEST(TileBound, IsTheMostTilesRowsCanFillOverExperts) {
    for (int32_t tile_m : {8, 16, 32, 128})
        for (int64_t experts : {1, 2, 3, 7}) {
            // most[r]: the most tiles r rows fill over the experts so far
            std::vector<int64_t> most(201, 0);
            for (int64_t r = 1; r <= 200; ++r) most[size_t(r)] = (r + tile_m - 1) / tile_m;  // one expert
            for (int64_t e = 1; e < experts; ++e) {
                std::vector<int64_t> next(most.size(), 0);
                for (size_t r = 0; r < most.size(); ++r)
                    for (size_t k = 0; k <= r; ++k) next[r] = std::max(next[r], int64_t((k + size_t(tile_m) - 1) / size_t(tile_m)) + most[r - k]);
                most = next;
            }
            for (int64_t rows = 0; rows <= 200; ++rows)
                ASSERT_EQ(tc::tile_bound(rows, experts, tile_m), most[size_t(rows)])
                    << rows << " rows over " << experts << " experts, tiles of " << tile_m;
        }
    EXPECT_EQ(tc::tile_bound(1536, 256, 8), 256 + (1536 - 256) / 8);  // deepseek-v4 at 256 tokens: 256 experts hit, 1280 rows more
    EXPECT_EQ(tc::tile_bound(6, 256, 8), 6);                           // one token: six experts, a row each
}

// The layer's row tiles outside decode batches: tall ones for FP8 weights meeting e4m3 activations from just past
// a decode batch, for block-exact FP4 ones only where the experts average more rows than a 128-row tile holds
// (their two converting warps were slower where an expert's rows fit one such tile: group_tiles); 128-row tiles
// for per-32 FP4 weights. Without tall tiles (no Hopper GPU, or STEADYMOE_TALL_TILES=0), 128-row tiles
// throughout. Host logic, asked of the GPU's kernels.
TEST(GroupTiles, BlockExactFp4TakesTallTilesOnlyWhereExpertsAverageMoreThanATile) {
    SMOE_SKIP_WITHOUT_GPU();
    constexpr int64_t kExperts = 256;
    const auto group_of = [](cuda::WeightCode code, bool block_exact) {
        cuda::DeviceExpertGroup group;
        for (cuda::DeviceMatrixSet* w : {&group.gate_up, &group.down}) {
            w->code = code, w->quantized = true;
            w->fp4_e4m3_order = code == cuda::WeightCode::Fp4, w->fp4_block_exact = block_exact;
        }
        return group;
    };
    const cuda::DeviceExpertGroup fp8 = group_of(cuda::WeightCode::Fp8, false),
                                  exact = group_of(cuda::WeightCode::Fp4, true),
                                  per_32 = group_of(cuda::WeightCode::Fp4, false);
    const int32_t tile = cuda::grouped_gemm_tile_rows();
    const int32_t tall = cuda::grouped_gemm_tall_tile_rows(cuda::WeightCode::Fp8, true);
    const int32_t exact_tall = cuda::grouped_gemm_tall_tile_rows(cuda::WeightCode::Fp4, true, true);
    std::printf("row tiles: %d, tall %d (FP8), %d (block-exact FP4)\n", tile, tall, exact_tall);
    const auto tile_m = [&](const cuda::DeviceExpertGroup& g, int64_t rows) {
        return tc::group_tiles(g, rows, kExperts, ActivationQuant::Fp8Pow2, true).tile_m;
    };
    const int64_t first_past_decode = 32 * kExperts + 1, a_tile_each = int64_t(tile) * kExperts;
    EXPECT_EQ(tile_m(fp8, first_past_decode), tall > 0 ? tall : tile);
    EXPECT_EQ(tile_m(exact, first_past_decode), tile);
    EXPECT_EQ(tile_m(exact, a_tile_each), tile) << "an average expert's rows fill one 128-row tile";
    EXPECT_EQ(tile_m(exact, a_tile_each + 1), exact_tall > 0 ? exact_tall : tile);
    EXPECT_EQ(tile_m(exact, 16384 * 6), exact_tall > 0 ? exact_tall : tile) << "deepseek-v4-flash at 16384 tokens";
    EXPECT_EQ(tile_m(per_32, 16384 * 6), tile) << "per-32 FP4 weights take no tall tiles";
}
