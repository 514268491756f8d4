#include "steadymoe/core/tensor.hpp"

#include "steadymoe/core/numeric.hpp"

#include <fmt/format.h>

#include <cstring>
#include <new>

namespace steadymoe {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t shape_numel(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        SMOE_CHECK(d >= 0, InvalidArgument, "negative dimension in shape {}", shape_str(shape));
        SMOE_CHECK(d == 0 || n <= INT64_MAX / d, InvalidArgument, "shape {} overflows 64 bits",
                   shape_str(shape));
        n *= d;
    }
    return n;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
    Tensor t;
    t.dtype_ = dtype;
    t.numel_ = shape_numel(shape);
    t.shape_ = std::move(shape);
    const size_t bytes = t.nbytes();
    // 64-byte alignment keeps vector loads aligned and rows of a cache line apart.
    void* p = ::operator new(bytes ? bytes : 1, std::align_val_t(64), std::nothrow);
    SMOE_CHECK(p != nullptr, OutOfMemory, "cannot allocate {} bytes for a {} tensor of shape {}", bytes,
               dtype_name(dtype), shape_str(t.shape_));
    std::memset(p, 0, bytes);
    t.holder_ = std::shared_ptr<const void>(p, [](const void* q) {
        ::operator delete(const_cast<void*>(q), std::align_val_t(64));
    });
    t.data_ = p;
    t.owned_ = true;
    return t;
}

Tensor Tensor::borrow(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> keepalive) {
    Tensor t;
    t.dtype_ = dtype;
    t.numel_ = shape_numel(shape);
    t.shape_ = std::move(shape);
    t.data_ = data;
    t.holder_ = keepalive ? std::move(keepalive) : std::shared_ptr<const void>(data, [](const void*) {});
    return t;
}

void* Tensor::mutable_raw() {
    SMOE_CHECK(owned_, Internal, "attempt to write a borrowed (read-only) tensor");
    return const_cast<void*>(data_);
}

Tensor Tensor::reshaped(Shape shape) const {
    SMOE_CHECK(shape_numel(shape) == numel_, InvalidArgument, "cannot view shape {} as {}", shape_str(shape_),
               shape_str(shape));
    Tensor t = *this;
    t.shape_ = std::move(shape);
    return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
    SMOE_CHECK(!shape_.empty() && 0 <= begin && begin <= end && end <= shape_[0], InvalidArgument,
               "rows [{}, {}) out of range for shape {}", begin, end, shape_str(shape_));
    Tensor t = *this;
    const int64_t row_elems = shape_[0] ? numel_ / shape_[0] : 0;
    t.shape_[0] = end - begin;
    t.numel_ = row_elems * (end - begin);
    t.data_ = static_cast<const char*>(data_) + size_t(begin * row_elems) * dtype_size(dtype_);
    return t;
}

double Tensor::get(int64_t i) const {
    SMOE_CHECK(0 <= i && i < numel_, InvalidArgument, "index {} out of range for {} elements", i, numel_);
    const char* p = static_cast<const char*>(data_) + size_t(i) * dtype_size(dtype_);
    switch (dtype_) {
        case DType::F64: { double v; std::memcpy(&v, p, 8); return v; }
        case DType::F32: { float v; std::memcpy(&v, p, 4); return v; }
        case DType::F16: { uint16_t v; std::memcpy(&v, p, 2); return f16_to_f32(v); }
        case DType::BF16: { uint16_t v; std::memcpy(&v, p, 2); return bf16_to_f32(v); }
        case DType::F8_E4M3: return e4m3_to_f32(uint8_t(*p));
        case DType::F8_E8M0: return e8m0_to_f32(uint8_t(*p));
        case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
        case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
        case DType::I16: { int16_t v; std::memcpy(&v, p, 2); return v; }
        case DType::I8: return int8_t(*p);
        case DType::U64: { uint64_t v; std::memcpy(&v, p, 8); return double(v); }
        case DType::U32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
        case DType::U16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
        case DType::U8:
        case DType::BOOL: return uint8_t(*p);
        case DType::F8_E5M2: {
            // e5m2 is the top byte of an IEEE half.
            return f16_to_f32(uint16_t(uint16_t(uint8_t(*p)) << 8));
        }
    }
    return 0;
}

Tensor Tensor::to_f32() const {
    Tensor out = zeros(DType::F32, shape_);
    float* o = out.mutable_data<float>();
    if (dtype_ == DType::F32) {
        std::memcpy(o, data_, nbytes());
    } else if (dtype_ == DType::BF16) {
        const uint16_t* s = data<uint16_t>();
        for (int64_t i = 0; i < numel_; ++i) o[i] = bf16_to_f32(s[i]);
    } else {
        for (int64_t i = 0; i < numel_; ++i) o[i] = float(get(i));
    }
    return out;
}

}  // namespace steadymoe
