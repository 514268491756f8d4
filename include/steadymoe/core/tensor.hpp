// A dense row-major tensor: dtype, shape and bytes. The bytes are either owned (heap) or borrowed
// from something kept alive by a shared handle (a memory-mapped checkpoint).
#pragma once

#include "steadymoe/core/dtype.hpp"
#include "steadymoe/core/error.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace steadymoe {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);  // throws on negative dims or overflow

class Tensor {
public:
    Tensor() = default;

    // Zero-filled, owned storage.
    static Tensor zeros(DType dtype, Shape shape);
    // Borrowed storage: `data` stays valid while `keepalive` lives.
    static Tensor borrow(DType dtype, Shape shape, const void* data, std::shared_ptr<const void> keepalive);

    DType dtype() const { return dtype_; }
    const Shape& shape() const { return shape_; }
    int64_t dim(size_t i) const { return shape_.at(i); }
    size_t rank() const { return shape_.size(); }
    int64_t numel() const { return numel_; }
    size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }
    bool defined() const { return bool(holder_); }

    const void* raw() const { return data_; }
    void* mutable_raw();  // only for owned storage
    template <typename T>
    const T* data() const {
        return static_cast<const T*>(data_);
    }
    template <typename T>
    T* mutable_data() {
        return static_cast<T*>(mutable_raw());
    }

    // The same bytes under another shape with the same element count.
    Tensor reshaped(Shape shape) const;
    // Rows [begin, end) of the first dimension, sharing storage.
    Tensor rows(int64_t begin, int64_t end) const;
    // Any float dtype (or integer) converted to float32, owned.
    Tensor to_f32() const;
    // The value at flat index i as double (for tests and checks; slow).
    double get(int64_t i) const;

private:
    DType dtype_ = DType::F32;
    Shape shape_;
    int64_t numel_ = 0;
    const void* data_ = nullptr;
    bool owned_ = false;
    std::shared_ptr<const void> holder_;
};

}  // namespace steadymoe
