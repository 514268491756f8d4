#include "ep_test_util.hpp"

#include "steadymoe/engine/synthetic.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <string>
#include <thread>

namespace steadymoe::ep_test {

// Runs fn(rank) on `ranks` threads; rethrows the first failure.
void on_ranks(int ranks, const std::function<void(int)>& fn) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                fn(r);
            } catch (...) {
                errors[size_t(r)] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

ExpertPlacement replicated(int64_t experts, int ranks, int64_t extra) {
    std::vector<int32_t> table;
    for (int64_t e = 0; e < experts; ++e) table.push_back(int32_t((e * 7 + 3) % experts));
    for (int64_t e = 0; e < extra; ++e) table.push_back(int32_t(e));
    while (table.size() % size_t(ranks) != 0) table.push_back(int32_t(table.size() % size_t(experts)));
    return ExpertPlacement::from_table(experts, ranks, table);
}

std::vector<EpStats> expect_same_as_one_rank(const MoeLayer& layer, const MoeInput& in, const ExpertPlacement& placement,
                                             int64_t chunk_tokens, int ranks_per_node) {
    const int ranks = placement.ranks();
    const int64_t T = in.hidden.dim(0), H = layer.config().hidden_size;
    const MoeOutput want = layer.forward(in);
    std::vector<int64_t> bounds = {0};
    for (int r = 1; r < ranks; ++r) bounds.push_back(std::min(T, bounds.back() + (r == 1 ? 0 : T / ranks + r)));
    bounds.push_back(T);
    LocalGroup group(ranks, std::chrono::seconds(60));
    std::vector<MoeOutput> outs(static_cast<size_t>(ranks));
    std::vector<EpStats> stats(static_cast<size_t>(ranks));
    on_ranks(ranks, [&](int r) {
        EpMoeLayer ep(layer, placement, group.transport(r));
        ep.set_chunk_tokens(chunk_tokens + r % 2);  // ranks may choose different chunk sizes
        if (ranks_per_node > 0) ep.set_ranks_per_node(ranks_per_node);
        outs[size_t(r)] = ep.forward(in.rows(bounds[size_t(r)], bounds[size_t(r) + 1]), &stats[size_t(r)]);
    });
    const size_t row = size_t(H) * dtype_size(in.hidden.dtype());
    for (int r = 0; r < ranks; ++r) {
        const int64_t b = bounds[size_t(r)], n = bounds[size_t(r) + 1] - b;
        EXPECT_EQ(outs[size_t(r)].output.dim(0), n);
        if (n == 0 || outs[size_t(r)].output.dim(0) != n) continue;
        EXPECT_EQ(test::first_bit_difference(outs[size_t(r)].output.raw(), want.output.rows(b, b + n).raw(), row * size_t(n)),
                  -1)
            << "rank " << r << " of " << ranks << ", " << placement.fingerprint();
        EXPECT_EQ(test::first_bit_difference(outs[size_t(r)].topk_ids.raw(), want.topk_ids.rows(b, b + n).raw(),
                                             outs[size_t(r)].topk_ids.nbytes()),
                  -1);
        EXPECT_EQ(stats[size_t(r)].global_expert_load, want.expert_load) << "rank " << r;
    }
    return stats;
}

MoeInput demo_input(const DemoModelShape& s, int64_t T, DType dtype) {
    MoeInput in;
    in.hidden = synthetic::tensor(dtype, {T, s.hidden}, 9, synthetic::kHidden, 1.0f);
    in.token_ids = demo_token_ids(s, T, 4);
    in.mask = Tensor::zeros(DType::U8, {T});
    for (int64_t t = 0; t < T; ++t) in.mask.mutable_data<uint8_t>()[t] = t % 5 != 2;
    return in;
}

void expect_a_bad_input_stops_every_rank(int ranks, int ranks_per_node, int64_t chunk_tokens) {
    const DemoModelShape s = test::small_demo_shape();
    const MoeLayer layer(demo_config(s), demo_layer_weights(s, 1), {.threads = 1});
    const MoeInput good = demo_input(s, 12, DType::F32);
    MoeInput bad = demo_input(s, 12, DType::F32);
    bad.hidden = bad.hidden.to_f32();
    bad.hidden.mutable_data<float>()[9 * s.hidden + 3] = std::nanf("");
    const int bad_rank = ranks - 1;
    const MoeOutput want = layer.forward(good);
    LocalGroup group(ranks, std::chrono::seconds(30));
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<MoeOutput> after(static_cast<size_t>(ranks));
    on_ranks(ranks, [&](int r) {
        EpMoeLayer ep(layer, ExpertPlacement::contiguous(s.experts, ranks), group.transport(r));
        ep.set_chunk_tokens(chunk_tokens);
        if (ranks_per_node > 0) ep.set_ranks_per_node(ranks_per_node);
        try {
            (void)ep.forward(r == bad_rank ? bad : good);
        } catch (const Error& e) {
            errors[size_t(r)] = e.what();
        }
        after[size_t(r)] = ep.forward(good);
    });
    for (int r = 0; r < ranks; ++r) {
        const std::string& e = errors[size_t(r)];
        if (r != bad_rank)
            EXPECT_NE(e.find("rank " + std::to_string(bad_rank) + " could not take part"), std::string::npos) << e;
        EXPECT_NE(e.find("token 9"), std::string::npos) << e;
        EXPECT_EQ(test::first_bit_difference(after[size_t(r)].output.raw(), want.output.raw(), want.output.nbytes()), -1);
    }
}

}  // namespace steadymoe::ep_test
