// The synthetic generator: whole tensors (filled many elements at a time, on several threads) and buffers of
// widened bf16 values hold exactly the values the element-at-a-time formula gives, at every offset, across
// the 2^31-index runs the fast fill works in; and that formula gives the values an independent transcription
// of it computed.
#include "steadymoe/core/numeric.hpp"
#include "steadymoe/engine/synthetic.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace steadymoe {
namespace {

uint32_t bits_of(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
}

TEST(Synthetic, ValuesAreTheFormulasOwn) {
    // (seed, stream, index, std) -> fp32 bits, computed outside this code base from the formula in
    // synthetic.hpp (Python integers and struct-packed floats).
    struct Case {
        uint32_t seed, stream;
        uint64_t index;
        float stddev;
        uint32_t bits;
    };
    const Case cases[] = {
        {0, 0, 0, 1.0f, 0xbebb27fdu},
        {0, 2, 12345, 0.02f, 0xbc99c348u},
        {7, 3, (uint64_t(1) << 31) - 1, 0.02f, 0x3bb7b7f8u},
        {7, 3, uint64_t(1) << 31, 0.02f, 0xbd50ae8bu},
        {1, 6, (uint64_t(1) << 40) + 3, 0.02f, 0x3a878402u},
    };
    for (const Case& c : cases)
        EXPECT_EQ(bits_of(synthetic::value(c.seed, c.stream, c.index, c.stddev)), c.bits)
            << "seed " << c.seed << " stream " << c.stream << " index " << c.index;
}

TEST(Synthetic, TensorsHoldTheFormulasValuesAtEveryOffset) {
    const uint64_t run = uint64_t(1) << 31;
    // Offsets inside the first run, straddling the first and second run boundaries, and far out; sizes of
    // one chunk or less and of several (1 << 20 elements a chunk), and odd sizes for the vector loops' tails.
    const struct {
        uint64_t offset;
        int64_t count;
    } spans[] = {{0, 1}, {0, 1000}, {12345, 4097}, {run - 1500, 3001}, {2 * run - 7, 19}, {run - (1 << 20), 3 << 20},
                 {(uint64_t(1) << 40) - 2000, 4003}, {(uint64_t(1) << 62) + 5, 77}};
    for (const auto& span : spans) {
        for (const DType dtype : {DType::F32, DType::BF16}) {
            const Tensor t = synthetic::tensor(dtype, {span.count}, 3, synthetic::kGateUp, 0.02f, span.offset);
            int64_t wrong = 0, first_wrong = -1;
            for (int64_t i = 0; i < span.count; ++i) {
                const float v = synthetic::value(3, synthetic::kGateUp, span.offset + uint64_t(i), 0.02f);
                const bool same = dtype == DType::F32 ? bits_of(t.data<float>()[i]) == bits_of(v)
                                                      : t.data<uint16_t>()[i] == f32_to_bf16(v);
                if (!same && wrong++ == 0) first_wrong = i;
            }
            EXPECT_EQ(wrong, 0) << dtype_name(dtype) << " at offset " << span.offset << ": " << wrong << " of "
                                << span.count << " elements differ, the first at " << first_wrong;
        }
        std::vector<float> widened(size_t(span.count));
        synthetic::fill_bf16_as_f32(widened.data(), span.count, 3, synthetic::kDown, 0.02f, span.offset);
        int64_t wrong = 0;
        for (int64_t i = 0; i < span.count; ++i)
            wrong += bits_of(widened[size_t(i)]) !=
                     bits_of(round_to_bf16(synthetic::value(3, synthetic::kDown, span.offset + uint64_t(i), 0.02f)));
        EXPECT_EQ(wrong, 0) << "bf16 values widened, at offset " << span.offset;
    }
}

TEST(Synthetic, RefusesOtherDtypes) {
    EXPECT_THROW(synthetic::tensor(DType::F16, {4}, 0, 0, 1.0f), Error);
}

}  // namespace
}  // namespace steadymoe
