// parallel_for: the one way library code runs loops on several threads. Items are independent, so
// which thread runs which item never changes a result; an exception thrown by any item (say, an
// allocation failure) is carried out of the parallel region and rethrown on the calling thread.
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>

namespace steadymoe {

// The thread count to use for `requested` (0 = every hardware thread).
int resolve_threads(int requested);

template <typename Fn>
void parallel_for(int64_t count, int threads, Fn&& fn) {
    std::exception_ptr first;
    std::mutex guard;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < count; ++i) {
        try {
            fn(i);
        } catch (...) {
            std::lock_guard<std::mutex> lock(guard);
            if (!first) first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

}  // namespace steadymoe
