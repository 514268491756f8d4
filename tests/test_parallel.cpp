// parallel_for: every item runs once, and where several items throw, the caller gets the lowest-numbered
// item's exception even when a later item threw first (so that the error a caller reports, the first damaged
// expert say, does not depend on thread timing).
#include "steadymoe/core/parallel.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace steadymoe;

TEST(ParallelFor, RunsEveryItemOnce) {
    std::vector<std::atomic<int>> runs(1000);
    parallel_for(int64_t(runs.size()), 4, [&](int64_t i) { runs[size_t(i)].fetch_add(1); });
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << "item " << i;
    EXPECT_NO_THROW(parallel_for(0, 4, [](int64_t) { throw std::runtime_error("no items, no calls"); }));
}

TEST(ParallelFor, TheLowestFailingItemsExceptionWinsWhenALaterOneThrowsFirst) {
    std::atomic<bool> later_threw{false};
    int later_first = 0;  // rounds in which item 1 threw before item 0
    for (int round = 0; round < 20; ++round) {
        later_threw = false;
        bool waited_for_it = false;
        try {
            parallel_for(2, 2, [&](int64_t i) {
                if (i == 1) {
                    later_threw = true;
                    throw std::runtime_error("item 1");
                }
                // Item 0 throws only after item 1 has (or, where they run one after the other, after a limit).
                const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(1);
                while (!later_threw && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
                waited_for_it = later_threw;
                throw std::runtime_error("item 0");
            });
            ADD_FAILURE() << "no exception";
        } catch (const std::runtime_error& e) {
            EXPECT_EQ(std::string(e.what()), "item 0") << "round " << round;
        }
        later_first += waited_for_it;
    }
    EXPECT_GT(later_first, 0) << "the two items never ran at once, so the rule was not tested";
}

TEST(ParallelFor, ThreadCounts) {
    EXPECT_GT(resolve_threads(0), 0);
    EXPECT_EQ(resolve_threads(3), 3);
    EXPECT_GT(ambient_threads(), 0);
}
