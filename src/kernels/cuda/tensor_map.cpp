#include "tensor_map.hpp"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <mutex>

namespace steadymoe::cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
    static std::once_flag once;
    std::call_once(once, [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult found{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) != cudaSuccess)
            cudaGetLastError();  // this lookup's error only: none other was pending before a successful call
        else if (found == cudaDriverEntryPointSuccess)
            fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    });
    return fn;
}

// A 2-D map (unit steps, no interleave, zeros out of bounds) into `map`, left untouched where the driver
// refuses it.
bool encode_2d(CUtensorMap& map, PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMapDataType type, const void* base,
               const cuuint64_t (&dims)[2], const cuuint64_t (&strides)[1], const cuuint32_t (&box)[2],
               CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion) {
    const cuuint32_t steps[2] = {1, 1};
    CUtensorMap encoded;
    if (encode(&encoded, type, 2, const_cast<void*>(base), dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
               promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
        return false;
    map = encoded;
    return true;
}

}  // namespace

bool encode_row_map(CUtensorMap& map, const void* base, int64_t rows, int64_t k, RowElement element, int box_rows) {
    const auto encode = encoder();
    if (encode == nullptr || base == nullptr || rows <= 0 || k <= 0 || k % 64 != 0 || box_rows <= 0 || box_rows > 256 ||
        (reinterpret_cast<uintptr_t>(base) & 15) != 0 || rows >= (int64_t(1) << 31))
        return false;
    const bool bf16 = element == RowElement::Bf16;
    const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};
    const cuuint64_t strides[1] = {cuuint64_t(k) * (bf16 ? 2 : 1)};
    const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};  // one swizzle span per row: 128 or 64 bytes
    return encode_2d(map, encode, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, base, dims, strides,
                     box, bf16 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
}

bool encode_scale_map(CUtensorMap& map, const float* base, int64_t rows, int64_t blocks, int box_rows) {
    const auto encode = encoder();
    if (encode == nullptr || base == nullptr || rows <= 0 || rows % 4 != 0 || blocks <= 0 || box_rows <= 0 ||
        box_rows % 4 != 0 || box_rows > 256 || (reinterpret_cast<uintptr_t>(base) & 15) != 0 || rows >= (int64_t(1) << 31) ||
        blocks >= (int64_t(1) << 31))
        return false;
    const cuuint64_t dims[2] = {cuuint64_t(rows), cuuint64_t(blocks)};
    const cuuint64_t strides[1] = {cuuint64_t(rows) * 4};
    const cuuint32_t box[2] = {cuuint32_t(box_rows), 1};
    return encode_2d(map, encode, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
}

}  // namespace steadymoe::cuda
