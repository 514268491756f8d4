// Safetensors files: a memory-mapped, fully validated reader and an atomic writer.
//
// Validation happens once, in open(): an 8-byte little-endian header length no larger than 100 MB and
// inside the file; a JSON object header; every entry with a known dtype, a shape of non-negative
// dims and data_offsets [begin, end] with end - begin == numel * dtype size; entries that, sorted by
// begin, tile the data area exactly (no holes, no overlaps, no trailing bytes); no duplicate names.
// After that every get() is a bounds-safe view into the mapping.
#pragma once

#include "steadymoe/core/tensor.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace steadymoe {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
    uint64_t begin = 0;  // byte offsets within the data area (after the header)
    uint64_t end = 0;
};

class SafetensorsFile {
public:
    // Maps and validates the file. Throws Error (Io, BadFormat) naming the file and what is wrong.
    static SafetensorsFile open(const std::filesystem::path& path);
    // Validates an in-memory image (used by the fuzzer and tests); the bytes are copied.
    static SafetensorsFile from_bytes(const void* data, size_t size, std::string origin);

    const std::string& origin() const { return origin_; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }  // in file order (by offset)
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

    bool contains(const std::string& name) const;
    const TensorInfo* find(const std::string& name) const;  // nullptr when absent
    // A view of the tensor's bytes; keeps the mapping alive. Throws NotFound naming file and tensor.
    Tensor get(const std::string& name) const;

private:
    std::string origin_;
    std::shared_ptr<const void> mapping_;  // owns the mapped (or copied) bytes
    const uint8_t* data_area_ = nullptr;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;

    static SafetensorsFile parse(std::shared_ptr<const void> holder, const uint8_t* bytes, size_t size,
                                 std::string origin);
};

// Writes tensors (in the given order) and string metadata to `path` through a temporary file in the
// same directory, then renames it into place: a reader never sees a partial file.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace steadymoe
