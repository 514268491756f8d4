// Environment switches that let one build compare kernel variants (read by their callers once per
// process, into a static).
#pragma once

#include <cstdlib>
#include <cstring>

namespace steadymoe::cuda {

// Whether environment variable `name` is set to exactly `value`.
inline bool env_equals(const char* name, const char* value) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, value) == 0;
}

}  // namespace steadymoe::cuda
