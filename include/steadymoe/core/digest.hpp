// FNV-1a, 64-bit: a cheap digest for checking that ranks hold the same tables and weights (not a
// security hash).
#pragma once

#include <cstddef>
#include <cstdint>

namespace steadymoe {

inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;

inline uint64_t fnv1a(uint64_t h, const void* bytes, size_t n) {
    const auto* b = static_cast<const uint8_t*>(bytes);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

}  // namespace steadymoe
