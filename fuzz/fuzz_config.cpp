// libFuzzer target: arbitrary bytes as config.json text. Rejection must be a steadymoe::Error; an
// accepted config must describe itself and answer per-layer questions without failing in other ways.
#include <cstddef>
#include <cstdint>
#include <string>

#include "steadymoe/core/error.hpp"
#include "steadymoe/model/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const std::string text(reinterpret_cast<const char*>(data), size);
        const steadymoe::MoeConfig config = steadymoe::MoeConfig::from_json_text(text, "fuzz.json");
        config.validate();
        volatile size_t sink = config.describe().size();
        for (int64_t layer = 0; layer < 4; ++layer) {
            sink = sink + config.is_moe_layer(layer) + config.is_hash_layer(layer);
        }
        sink = sink + size_t(config.native_activation_quant());
        (void)sink;
    } catch (const steadymoe::Error&) {
        // A clean rejection.
    }
    return 0;
}
