// parallel_for: the one way library code runs loops on several threads. Items are independent, so
// which thread runs which item never changes a result; an exception thrown by an item (say, an
// allocation failure) is carried out of the parallel region and rethrown on the calling thread: the
// lowest-numbered failing item's, so that what a caller reports (the first damaged expert, say) does not
// depend on which thread failed first.
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>

// Without OpenMP the pragma below is ignored and every loop runs on one thread, silently: a test of the rule
// above once passed so, testing nothing. Code that includes this header is compiled with OpenMP
// (OpenMP::OpenMP_CXX in CMake).
#if !defined(_OPENMP)
#error "steadymoe/core/parallel.hpp needs OpenMP: compile with it (link OpenMP::OpenMP_CXX)"
#endif

namespace steadymoe {

// The thread count to use for `requested` (0 = every hardware thread).
int resolve_threads(int requested);
// The threads library code takes for work no caller sized (a layer's upload, a large synthetic tensor): as
// many as a parallel region started here would have (OMP_NUM_THREADS where set, else every hardware thread;
// inside another parallel region that region's nesting rule decides, by default one).
int ambient_threads();

template <typename Fn>
void parallel_for(int64_t count, int threads, Fn&& fn) {
    std::exception_ptr first;
    int64_t first_item = count;  // the item `first` came from
    std::mutex guard;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < count; ++i) {
        try {
            fn(i);
        } catch (...) {
            std::lock_guard<std::mutex> lock(guard);
            if (i < first_item) first_item = i, first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

}  // namespace steadymoe
