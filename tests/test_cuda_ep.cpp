// The layer with its experts spread over two GPUs (one rank per GPU, NCCL between them): every rank's
// output is bitwise what one GPU gives for the same tokens — in bf16, FP8 and FP4, under contiguous,
// strided and replicated placements, for uneven and empty batches. A rank whose input is refused stops
// every rank, naming it, and the layer stays usable. Skips, saying so, with fewer than two GPUs.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>

#include "gpu_test_util.hpp"
#include "steadymoe/engine/cuda_ep_layer.hpp"
#include "steadymoe/engine/cuda_moe_layer.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#include "test_util.hpp"

using namespace steadymoe;

namespace {

constexpr int kRanks = 2;
constexpr int64_t kExperts = 16, kTopK = 4;

#define SKIP_WITHOUT_TWO_GPUS()                                                                  \
    do {                                                                                         \
        SMOE_SKIP_WITHOUT_GPU();                                                                 \
        if (cuda::device_count() < kRanks)                                                       \
            GTEST_SKIP() << "GPU expert parallelism needs " << kRanks << " CUDA devices, found " \
                         << cuda::device_count();                                                \
    } while (0)

// 16 experts, top-4 from 2 of 4 groups: a token's experts usually sit on both ranks.
MoeLayer ep_layer(const std::string& format) {
    MoeConfig c = test::tensor_core_config(format);
    c.n_routed_experts = kExperts, c.top_k = kTopK, c.n_group = 4, c.topk_group = 2;
    return test::tensor_core_layer(format, &c);
}

ExpertPlacement placement(const std::string& name) {
    if (name == "contiguous") return ExpertPlacement::contiguous(kExperts, kRanks);
    if (name == "strided") return ExpertPlacement::strided(kExperts, kRanks);
    // Each rank holds its contiguous half and replicas of two of the other half's experts.
    return ExpertPlacement::from_table(kExperts, kRanks, {0, 1, 2,  3,  4,  5,  6,  7,  8, 9,  //
                                                          8, 9, 10, 11, 12, 13, 14, 15, 0, 1});
}

MoeInput tokens(int64_t first, int64_t count) {
    const Tensor all = synthetic::tensor(DType::BF16, {first + count, test::kH}, 5, synthetic::kHidden, 1.0f);
    return {all.rows(first, first + count), Tensor(), Tensor()};
}

// Runs `body(rank, transport)` on one thread per rank, each on its own GPU; rethrows the first failure.
void on_ranks(const std::function<void(int, Transport&)>& body) {
    LocalGroup group(kRanks, std::chrono::seconds(30));
    std::vector<std::exception_ptr> errors(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r)
        threads.emplace_back([&, r] {
            try {
                cuda::set_device(r);
                body(r, group.transport(r));
            } catch (...) {
                errors[size_t(r)] = std::current_exception();
            }
        });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
}

}  // namespace

CudaEpOptions options(GpuExchange exchange, int64_t max_tokens = 1024) {
    CudaEpOptions o;
    o.exchange = exchange;
    o.timeout = std::chrono::seconds(20);
    o.max_tokens_per_rank = max_tokens;
    return o;
}

class CudaEp : public ::testing::TestWithParam<std::tuple<std::string, std::string, GpuExchange>> {};

TEST_P(CudaEp, EveryRankGetsTheOneGpuBytes) {
    SKIP_WITHOUT_TWO_GPUS();
    const auto& [format, where, exchange] = GetParam();
    const MoeLayer layer = ep_layer(format);
    // Batches per rank, uneven and empty ones included; the tokens differ between ranks.
    const std::vector<std::array<int64_t, kRanks>> batches = {{37, 300}, {0, 5}, {1, 1}, {513, 0}};
    std::vector<std::array<MoeOutput, kRanks>> want(batches.size());
    cuda::set_device(0);
    {
        const CudaMoeLayer one(layer, CudaPath::TensorCore);
        for (size_t b = 0; b < batches.size(); ++b)
            for (int r = 0; r < kRanks; ++r)
                want[b][size_t(r)] = one.forward(tokens(1000 * r, batches[b][size_t(r)]));
    }
    on_ranks([&](int rank, Transport& t) {
        const CudaEpMoeLayer ep(layer, placement(where), t, options(exchange));
        for (size_t b = 0; b < batches.size(); ++b) {
            SCOPED_TRACE(::testing::Message() << "rank " << rank << " batch " << b);
            CudaEpStats times;
            const MoeOutput got = ep.forward(tokens(1000 * rank, batches[b][size_t(rank)]), &times);
            test::expect_same_bytes(want[b][size_t(rank)], got);
            EXPECT_GT(times.total_ms, 0.0);
        }
    });
}

INSTANTIATE_TEST_SUITE_P(FormatsAndPlacements, CudaEp,
                         ::testing::Combine(::testing::Values("bf16", "fp8", "fp4"),
                                            ::testing::Values("contiguous", "strided", "replicated"),
                                            ::testing::Values(GpuExchange::Peer, GpuExchange::Nccl)),
                         [](const auto& info) {
                             return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" +
                                    gpu_exchange_name(std::get<2>(info.param));
                         });

class CudaEpFaults : public ::testing::TestWithParam<GpuExchange> {};

TEST_P(CudaEpFaults, ARefusedInputStopsEveryRankNamingItAndTheLayerStaysUsable) {
    SKIP_WITHOUT_TWO_GPUS();
    const MoeLayer layer = ep_layer("bf16");
    cuda::set_device(0);
    MoeOutput want;
    {
        const CudaMoeLayer one(layer, CudaPath::TensorCore);
        want = one.forward(tokens(0, 64));
    }
    std::array<std::string, kRanks> said;
    on_ranks([&](int rank, Transport& t) {
        const CudaEpMoeLayer ep(layer, placement("contiguous"), t, options(GetParam(), 100));
        MoeInput in = tokens(0, 64);
        if (rank == 1) in.hidden.mutable_data<uint16_t>()[9 * test::kH + 3] = 0x7FC0;  // a NaN in token 9
        try {
            ep.forward(in);
        } catch (const Error& e) {
            said[size_t(rank)] = e.what();
        }
        // The next batch runs, bitwise right.
        test::expect_same_bytes(want, ep.forward(tokens(0, 64)));
    });
    EXPECT_NE(said[0].find("rank 1"), std::string::npos) << said[0];
    EXPECT_NE(said[1].find("token 9"), std::string::npos) << said[1];
}

TEST_P(CudaEpFaults, ABatchOverTheCapacityIsRefusedOnEveryRank) {
    SKIP_WITHOUT_TWO_GPUS();
    if (GetParam() != GpuExchange::Peer) GTEST_SKIP() << "only the peer exchange has a capacity";
    const MoeLayer layer = ep_layer("bf16");
    std::array<std::string, kRanks> said;
    on_ranks([&](int rank, Transport& t) {
        const CudaEpMoeLayer ep(layer, placement("strided"), t, options(GetParam(), 100));
        try {
            ep.forward(tokens(0, rank == 0 ? 101 : 5));
        } catch (const Error& e) {
            said[size_t(rank)] = e.what();
        }
    });
    EXPECT_NE(said[0].find("max_tokens_per_rank"), std::string::npos) << said[0];
    EXPECT_NE(said[1].find("rank 0"), std::string::npos) << said[1];
}

INSTANTIATE_TEST_SUITE_P(Exchanges, CudaEpFaults, ::testing::Values(GpuExchange::Peer, GpuExchange::Nccl),
                         [](const auto& info) { return std::string(gpu_exchange_name(info.param)); });

TEST(CudaEpStart, RanksWithDifferentPlacementsRefuseToStart) {
    SKIP_WITHOUT_TWO_GPUS();
    const MoeLayer layer = ep_layer("bf16");
    std::array<std::string, kRanks> said;
    on_ranks([&](int rank, Transport& t) {
        try {
            const CudaEpMoeLayer ep(layer, placement(rank == 0 ? "contiguous" : "strided"), t);
        } catch (const Error& e) {
            said[size_t(rank)] = e.what();
        }
    });
    for (const std::string& s : said) EXPECT_NE(s.find("placement"), std::string::npos) << s;
}

TEST(CudaEpStart, RefusesMoreRanksThanOneNodeHasGpus) {
    // Runs everywhere: the reasons a rank cannot take part are named before any GPU work.
    const MoeLayer layer = ep_layer("bf16");
    const std::string why = CudaEpMoeLayer::blocker(layer, ExpertPlacement::contiguous(kExperts, 16), 0);
    EXPECT_NE(why.find("at most"), std::string::npos) << why;
}
