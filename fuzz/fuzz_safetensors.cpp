// libFuzzer target: arbitrary bytes as a safetensors image. Rejection must be a steadymoe::Error;
// anything accepted must be readable end to end. Any other exception, a crash or a sanitizer report
// is a finding.
#include <cstddef>
#include <cstdint>

#include "steadymoe/model/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const steadymoe::SafetensorsFile file = steadymoe::SafetensorsFile::from_bytes(data, size, "fuzz");
        // Validation promised every view is in bounds: touch the first and last byte of each, so the
        // address sanitizer sees any view that reaches outside the copied image.
        uint8_t sink = 0;
        for (const steadymoe::TensorInfo& info : file.tensors()) {
            const steadymoe::Tensor t = file.get(info.name);
            if (t.nbytes() == 0) continue;
            const auto* p = static_cast<const volatile uint8_t*>(t.raw());
            sink ^= p[0] ^ p[t.nbytes() - 1];
        }
        for (const auto& [key, value] : file.metadata()) sink ^= uint8_t(key.size() + value.size());
        static volatile uint8_t keep;
        keep = sink;
    } catch (const steadymoe::Error&) {
        // A clean rejection.
    }
    return 0;
}
