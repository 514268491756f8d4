#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace steadymoe::test {

std::filesystem::path golden_dir() {
    const char* env = std::getenv("STEADYMOE_GOLDEN_DIR");
    std::filesystem::path dir = env && *env ? std::filesystem::path(env) : std::filesystem::path(STEADYMOE_DEFAULT_GOLDEN);
    if (!std::filesystem::exists(dir / "deepseek-v3-tiny" / "io.safetensors")) {
        ADD_FAILURE() << "golden directory not found at " << dir
                      << " (set STEADYMOE_GOLDEN_DIR to ../shared/golden)";
    }
    return dir;
}

std::filesystem::path scratch_dir(const std::string& name) {
    std::filesystem::path dir = std::filesystem::path(STEADYMOE_TEST_TMP) / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_file(const std::filesystem::path& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

double relative_error(const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.numel(), b.numel());
    double num = 0, den = 0;
    for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
        const double d = a.get(i) - b.get(i);
        num += d * d;
        den += b.get(i) * b.get(i);
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

int64_t first_bit_difference(const void* a, const void* b, size_t bytes) {
    const auto* pa = static_cast<const unsigned char*>(a);
    const auto* pb = static_cast<const unsigned char*>(b);
    for (size_t i = 0; i < bytes; ++i) {
        if (pa[i] != pb[i]) return int64_t(i);
    }
    return -1;
}

DemoModelShape small_demo_shape() {
    DemoModelShape s;
    s.hidden = 256;
    s.intermediate = 128;
    s.experts = 16;
    s.top_k = 4;
    s.vocab = 512;
    return s;
}

}  // namespace steadymoe::test
