#include "steadymoe/core/parallel.hpp"

#include <omp.h>

namespace steadymoe {

int resolve_threads(int requested) { return requested > 0 ? requested : omp_get_num_procs(); }

int ambient_threads() { return omp_get_active_level() >= omp_get_max_active_levels() ? 1 : omp_get_max_threads(); }

}  // namespace steadymoe
