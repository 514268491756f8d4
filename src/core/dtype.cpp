#include "steadymoe/core/dtype.hpp"

namespace steadymoe {

std::string_view dtype_name(DType dtype) {
    switch (dtype) {
        case DType::F64: return "F64";
        case DType::F32: return "F32";
        case DType::F16: return "F16";
        case DType::BF16: return "BF16";
        case DType::F8_E4M3: return "F8_E4M3";
        case DType::F8_E5M2: return "F8_E5M2";
        case DType::F8_E8M0: return "F8_E8M0";
        case DType::I64: return "I64";
        case DType::I32: return "I32";
        case DType::I16: return "I16";
        case DType::I8: return "I8";
        case DType::U64: return "U64";
        case DType::U32: return "U32";
        case DType::U16: return "U16";
        case DType::U8: return "U8";
        case DType::BOOL: return "BOOL";
    }
    return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (DType d : kAllDTypes) {
        if (dtype_name(d) == name) return d;
    }
    return std::nullopt;
}

size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::F64:
        case DType::I64:
        case DType::U64: return 8;
        case DType::F32:
        case DType::I32:
        case DType::U32: return 4;
        case DType::F16:
        case DType::BF16:
        case DType::I16:
        case DType::U16: return 2;
        default: return 1;
    }
}

bool dtype_is_float(DType dtype) {
    switch (dtype) {
        case DType::F64:
        case DType::F32:
        case DType::F16:
        case DType::BF16:
        case DType::F8_E4M3:
        case DType::F8_E5M2:
        case DType::F8_E8M0: return true;
        default: return false;
    }
}

}  // namespace steadymoe
