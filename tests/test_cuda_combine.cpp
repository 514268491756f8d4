// The combine on the GPU against the same sums on the host, bit for bit: each token's K contributions in
// slot order, then its shared expert's, in fp32, rounded once to the output dtype; masked tokens give
// zeros. Contributions in f32 and in bf16 bits, outputs in both dtypes, widths that take the vector
// kernel (multiples of 8) and one that does not, slots read through an index (expert parallelism), and more
// slots than the kernel loads at once (8); with every row initialised, decode batches load a token's rows
// beside its mask (rows_initialised), larger ones after it.
// Skips, saying so, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../src/kernels/cuda/layer_kernels.hpp"
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#include "test_util.hpp"

using namespace steadymoe;

namespace {

struct Case {
    int64_t t, k, h;
    bool bf16_contributions, bf16_out, shared;
    bool indexed;  // slots through an index: f32 contributions only (launch_combine_indexed's)
};

std::string name(const Case& c) {
    return "t " + std::to_string(c.t) + " k " + std::to_string(c.k) + " h " + std::to_string(c.h) +
           (c.bf16_contributions ? ", bf16 contributions" : ", f32 contributions") + (c.bf16_out ? ", bf16 out" : ", f32 out") +
           (c.shared ? ", shared" : "") + (c.indexed ? ", indexed" : "");
}

void check(const Case& c, uint32_t seed, bool rows_initialised = false) {
    SCOPED_TRACE(name(c) + (rows_initialised ? ", rows initialised" : ""));
    ASSERT_FALSE(c.indexed && c.bf16_contributions) << "the indexed combine takes f32 contributions";
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    const int64_t rows = c.t * c.k + c.t;  // the slots, then the shared expert's rows
    std::vector<float> values(size_t(rows * c.h));
    for (auto& v : values) v = c.bf16_contributions ? round_to_bf16(normal(rng)) : normal(rng);
    std::vector<uint8_t> active(size_t(c.t));
    for (auto& a : active) a = rng() % 5 != 0;
    // Indexed: slot s of token t sits at row index[t*K + s] of a shuffled copy.
    std::vector<int64_t> index(size_t(c.t * c.k));
    for (int64_t i = 0; i < c.t * c.k; ++i) index[size_t(i)] = i;
    std::shuffle(index.begin(), index.end(), rng);

    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
    const size_t element = c.bf16_contributions ? 2 : 4;
    std::vector<char> stored(values.size() * element);
    if (c.indexed) {  // routed rows in the index's order, the shared rows after them
        for (int64_t i = 0; i < c.t * c.k; ++i)
            for (int64_t n = 0; n < c.h; ++n) {
                const size_t from = size_t(i * c.h + n), to = size_t(index[size_t(i)] * c.h + n);
                std::memcpy(stored.data() + to * element, c.bf16_contributions ? static_cast<const void*>(&bits[from]) : &values[from], element);
            }
        const size_t shared_from = size_t(c.t * c.k * c.h);
        std::memcpy(stored.data() + shared_from * element,
                    c.bf16_contributions ? static_cast<const void*>(&bits[shared_from]) : &values[shared_from],
                    size_t(c.t * c.h) * element);
    } else {
        std::memcpy(stored.data(), c.bf16_contributions ? static_cast<const void*>(bits.data()) : values.data(), stored.size());
    }

    cuda::DeviceBuffer d_values(stored.size(), "contributions"), d_active(active.size(), "mask"),
        d_index(index.size() * 8, "index"), d_out(size_t(c.t * c.h) * (c.bf16_out ? 2 : 4), "out");
    d_values.upload(stored.data(), stored.size());
    d_active.upload(active.data(), active.size());
    d_index.upload(index.data(), index.size() * 8);
    if (c.indexed) {
        const float* routed = d_values.as<const float>();
        const float* shared = c.shared ? routed + c.t * c.k * c.h : nullptr;
        ASSERT_EQ(cuda::launch_combine_indexed(routed, d_index.as<const int64_t>(), shared, c.t, c.k, c.h,
                                               d_active.as<const uint8_t>(), c.bf16_out, d_out.get(), nullptr),
                  cudaSuccess);
    } else {
        ASSERT_EQ(cuda::launch_combine(d_values.get(), c.bf16_contributions, c.t, c.k, c.h, d_active.as<const uint8_t>(),
                                       c.shared, c.bf16_out, d_out.get(), nullptr, rows_initialised),
                  cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    std::vector<uint32_t> want(size_t(c.t * c.h)), got(want.size());
    for (int64_t tok = 0; tok < c.t; ++tok)
        for (int64_t n = 0; n < c.h; ++n) {
            float acc = 0.0f;
            if (active[size_t(tok)]) {
                for (int64_t s = 0; s < c.k; ++s) acc += values[size_t((tok * c.k + s) * c.h + n)];
                if (c.shared) acc += values[size_t((c.t * c.k + tok) * c.h + n)];
            }
            want[size_t(tok * c.h + n)] = c.bf16_out ? (active[size_t(tok)] ? f32_to_bf16(acc) : 0u) : f32_bits(acc);
        }
    if (c.bf16_out) {
        std::vector<uint16_t> out(want.size());
        d_out.download(out.data(), out.size() * 2);
        for (size_t i = 0; i < out.size(); ++i) got[i] = out[i];
    } else {
        std::vector<float> out(want.size());
        d_out.download(out.data(), out.size() * 4);
        for (size_t i = 0; i < out.size(); ++i) got[i] = f32_bits(out[i]);
    }
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
        if (want[i] != got[i] && ++bad <= 3) ADD_FAILURE() << "element " << i << ": host 0x" << std::hex << want[i] << " device 0x" << got[i];
    EXPECT_EQ(bad, 0);
}

}  // namespace

TEST(CudaCombine, SumsEachTokensSlotsThenItsSharedExpertLikeTheHost) {
    SMOE_SKIP_WITHOUT_GPU();
    uint32_t seed = 1;
    for (const Case& c : {Case{37, 8, 64, true, true, true, false}, Case{37, 8, 64, false, false, true, false},
                          Case{37, 8, 64, false, true, false, false}, Case{5, 3, 12, true, true, true, false},
                          Case{5, 3, 12, false, false, false, false}, Case{19, 4, 2048, true, false, true, false},
                          Case{23, 6, 128, false, true, true, true}, Case{7, 2, 12, false, false, true, true},
                          // more slots than a chunk of eight: a second, partial chunk, or two whole ones
                          Case{11, 10, 64, true, true, true, false}, Case{9, 13, 24, false, false, true, true},
                          Case{6, 9, 12, true, false, false, false}, Case{7, 11, 12, false, true, true, true},
                          Case{5, 16, 64, false, true, true, true}, Case{4, 16, 12, false, false, false, false},
                          // one slot: seven of the chunk's loads read it again
                          Case{13, 1, 64, true, true, true, false}, Case{13, 1, 12, false, false, false, true},
                          // past the batches that load rows beside the mask
                          Case{70, 8, 64, true, true, true, false}})
        for (bool rows_initialised : {false, true})
            if (!rows_initialised || !c.indexed) check(c, seed++, rows_initialised);
}
