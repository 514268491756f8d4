// Element types as checkpoints name them. Sizes are in bytes per stored element.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace steadymoe {

enum class DType : uint8_t {
    F64,
    F32,
    F16,
    BF16,
    F8_E4M3,  // e4m3fn: no infinities, 0x7F/0xFF are NaN, max 448
    F8_E5M2,
    F8_E8M0,  // unsigned power-of-two scale 2^(e-127); 0xFF is NaN
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    BOOL,
};

inline constexpr DType kAllDTypes[] = {DType::F64,     DType::F32,     DType::F16,     DType::BF16,
                                       DType::F8_E4M3, DType::F8_E5M2, DType::F8_E8M0, DType::I64,
                                       DType::I32,     DType::I16,     DType::I8,      DType::U64,
                                       DType::U32,     DType::U16,     DType::U8,      DType::BOOL};

// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);
size_t dtype_size(DType dtype);
bool dtype_is_float(DType dtype);

}  // namespace steadymoe
