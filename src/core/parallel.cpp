#include "steadymoe/core/parallel.hpp"

#include <omp.h>

namespace steadymoe {

int resolve_threads(int requested) { return requested > 0 ? requested : omp_get_num_procs(); }

}  // namespace steadymoe
