// Shared test helpers: where the goldens are, scratch directories, comparisons.
#pragma once

#include "steadymoe/core/gpu.hpp"
#include "steadymoe/core/tensor.hpp"
#include "steadymoe/engine/demo_model.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

// In a test body: skip, saying why, when no CUDA GPU is usable.
#define SMOE_SKIP_WITHOUT_GPU()                                                                  \
    do {                                                                                         \
        const ::steadymoe::GpuProbe smoe_probe_ = ::steadymoe::probe_gpus();                     \
        if (smoe_probe_.device_count == 0) GTEST_SKIP() << "no CUDA GPU: " << smoe_probe_.error; \
    } while (0)

namespace steadymoe::test {

// ../shared/golden beside the checkout, or $STEADYMOE_GOLDEN_DIR. Fails the test when absent.
std::filesystem::path golden_dir();
// A fresh, empty scratch directory for this test (under the build tree).
std::filesystem::path scratch_dir(const std::string& name);
// Writes bytes to a file (overwrites).
void write_file(const std::filesystem::path& path, const std::string& bytes);
std::string read_file(const std::filesystem::path& path);
// ||a - b|| / ||b|| over all elements, in double.
double relative_error(const Tensor& a, const Tensor& b);
// Index of the first differing byte-wise element, or -1 when bitwise equal.
int64_t first_bit_difference(const void* a, const void* b, size_t bytes);
// The demo model shrunk for tests: H 256, I 128, 16 experts, top-4, vocabulary 512.
DemoModelShape small_demo_shape();

}  // namespace steadymoe::test
