// The table `bench --backend cuda --trace` prints from recorded kernel spans (tools/kernel_timeline.cpp).
#include "kernel_trace.hpp"

#include <gtest/gtest.h>

namespace steadymoe::cli {
namespace {

// Times in ns; two streams with ids that are not their order of first use.
std::vector<KernelSpan> two_streams() {
    return {
        {"void steadymoe::cuda::(anonymous namespace)::route_kernel<8>(steadymoe::cuda::RouteLaunch)", 7, 12000, 15000, 1},
        {"gemm", 7, 1000, 10000, 32},
        {"shared_gemm", 3, 2000, 30000, 64},
        {"permute", 7, 14500, 16000, 1},  // started 0.5 µs before route_kernel ended: a dependent launch
        {"combine", 7, 40000, 42000, 8},
    };
}

TEST(KernelTimeline, RowsInStartOrderWithStreamsNumberedByFirstUse) {
    const auto rows = kernel_timeline(two_streams());
    ASSERT_EQ(rows.size(), 6u);  // five kernels and the summary
    const std::vector<std::vector<std::string>> want = {
        {"0", "s0", "0.0", "9.0", "-", "32", "gemm"},
        {"1", "s1", "1.0", "28.0", "-", "64", "shared_gemm"},
        {"2", "s0", "11.0", "3.0", "2.0", "1", "route_kernel<8>"},
        {"3", "s0", "13.5", "1.5", "-0.5", "1", "permute"},
        {"4", "s0", "39.0", "2.0", "24.0", "8", "combine"},
    };
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(rows[i], want[i]) << "row " << i;
}

TEST(KernelTimeline, SummaryGivesTheSpanAndTheTimeWithNoKernelRunning) {
    const auto rows = kernel_timeline(two_streams());
    // First start 1000, last end 42000: 41 µs. Nothing ran from 30000 (shared_gemm's end) to 40000.
    EXPECT_EQ(rows.back()[2], "41.0");
    EXPECT_NE(rows.back()[6].find("no kernel running for 10.0 µs"), std::string::npos) << rows.back()[6];
}

// A kernel inside a longer one on the same stream (a graph's branches reported on one stream): the next
// kernel's gap counts from the longer one's end, and kernels that touch leave no idle time.
TEST(KernelTimeline, GapsCountFromTheLatestEndOnTheStream) {
    const auto rows = kernel_timeline({{"long", 1, 0, 10000, 1}, {"inside", 1, 2000, 4000, 1}, {"next", 1, 10000, 11000, 1}});
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows[1][4], "-8.0");  // started 8 µs before "long" ended
    EXPECT_EQ(rows[2][4], "0.0");   // from "long"'s end (10 µs), not "inside"'s (4 µs)
    EXPECT_NE(rows.back()[6].find("no kernel running for 0.0 µs"), std::string::npos) << rows.back()[6];
    // A gap that rounds to nothing prints as 0.0, not -0.0.
    EXPECT_EQ(kernel_timeline({{"a", 1, 0, 1000, 1}, {"b", 1, 990, 2000, 1}})[1][4], "0.0");
}

TEST(KernelTimeline, NoSpansNoRows) { EXPECT_TRUE(kernel_timeline({}).empty()); }

TEST(KernelTimeline, ShortNamesDropNamespacesAndParametersButKeepTemplateArguments) {
    EXPECT_EQ(short_kernel_name("void steadymoe::cuda::(anonymous namespace)::decode_kernel<steadymoe::cuda::(anonymous "
                                "namespace)::DecodeShape<(steadymoe::cuda::WeightCode)2, true, 8, 6>, true>"
                                "(steadymoe::cuda::GroupedGemmLaunch, bool, bool)"),
              "decode_kernel<DecodeShape<(WeightCode)2, true, 8, 6>, true>");
    EXPECT_EQ(short_kernel_name("_Z6kernelv"), "_Z6kernelv");  // not demangled: as it came
    const std::string longest(300, 'x');
    EXPECT_EQ(short_kernel_name(longest).size(), 100u);
}

// A trace of no kernels records none, or (no GPU, no profiling library: CI) fails with an error that names
// it: never a crash.
TEST(KernelTrace, ATraceOfNoKernelsIsEmptyOrFailsCleanly) {
    KernelTrace trace;
    try {
        trace.start();
        const std::vector<KernelSpan> spans = trace.stop();
        EXPECT_TRUE(spans.empty()) << "kernels recorded where none were launched";
    } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("kernel trace"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace steadymoe::cli
