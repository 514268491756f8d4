// SMOE_CUDA_CHECK(call): a failed CUDA runtime call becomes an Error naming the call, the CUDA error
// and this file and line. Out-of-memory errors get their own kind so callers can tell them apart.
#pragma once

#include "steadymoe/core/error.hpp"

#include <cuda_runtime.h>

#define SMOE_CUDA_CHECK(call)                                                                             \
    do {                                                                                                  \
        const cudaError_t smoe_err_ = (call);                                                             \
        if (smoe_err_ != cudaSuccess) {                                                                   \
            throw ::steadymoe::Error(smoe_err_ == cudaErrorMemoryAllocation                               \
                                         ? ::steadymoe::ErrorKind::OutOfMemory                            \
                                         : ::steadymoe::ErrorKind::Internal,                              \
                                     ::fmt::format("CUDA call {} failed: {}", #call,                      \
                                                   cudaGetErrorString(smoe_err_)),                        \
                                     __FILE__, __LINE__);                                                 \
        }                                                                                                 \
    } while (0)
