#include "gpu_test_util.hpp"

#include "steadymoe/engine/synthetic.hpp"

#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace steadymoe::test {

void expect_same_routing_bits(const MoeOutput& a, const MoeOutput& b) {
    EXPECT_EQ(test::first_bit_difference(a.topk_ids.raw(), b.topk_ids.raw(), a.topk_ids.nbytes()), -1);
    EXPECT_EQ(test::first_bit_difference(a.topk_weights.raw(), b.topk_weights.raw(), a.topk_weights.nbytes()), -1);
    EXPECT_EQ(a.expert_load, b.expert_load);
}

// Probe tokens alone vs first, middle and last of a batch of `size` filler tokens: identical bytes.
void expect_batch_invariant_on_gpu(const CudaMoeLayer& gpu, const MoeInput& probe, int64_t size) {
    const int64_t n = probe.hidden.dim(0), H = gpu.layer().config().hidden_size;
    const size_t row = size_t(H) * dtype_size(probe.hidden.dtype());
    std::vector<MoeOutput> alone;
    for (int64_t i = 0; i < n; ++i) {
        MoeInput one;
        one.hidden = probe.hidden.rows(i, i + 1);
        if (probe.token_ids.defined()) one.token_ids = probe.token_ids.rows(i, i + 1);
        alone.push_back(gpu.forward(one));
    }
    for (int64_t at : {int64_t(0), (size - n) / 2, size - n}) {
        MoeInput batch;
        batch.hidden = synthetic::tensor(probe.hidden.dtype(), {size, H}, 11, synthetic::kFillerHidden, 1.0f);
        batch.token_ids = Tensor::zeros(DType::I32, {size});
        for (int64_t i = 0; i < size; ++i) batch.token_ids.mutable_data<int32_t>()[i] = int32_t((i * 37) % 512);
        for (int64_t i = 0; i < n; ++i) {
            std::memcpy(static_cast<char*>(batch.hidden.mutable_raw()) + size_t(at + i) * row,
                        static_cast<const char*>(probe.hidden.raw()) + size_t(i) * row, row);
            if (probe.token_ids.defined())
                batch.token_ids.mutable_data<int32_t>()[at + i] = int32_t(probe.token_ids.get(i));
        }
        const MoeOutput out = gpu.forward(batch);
        for (int64_t i = 0; i < n; ++i)
            EXPECT_EQ(test::first_bit_difference(alone[size_t(i)].output.raw(),
                                                 static_cast<const char*>(out.output.raw()) + size_t(at + i) * row, row),
                      -1)
                << "probe " << i << " at row " << at + i << " of " << size;
    }
}


}  // namespace steadymoe::test
