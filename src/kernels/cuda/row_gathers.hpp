// The gathers that put a grouped GEMM's input rows in order, one expert's after another (grouped_gemm.hpp):
// copied, converted to bf16 bits, or quantised to e4m3 per 128 values exactly as the CPU backend does. Plain
// pointers and sizes only. Every row's bytes are a function of its source row alone.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "scale_layout.hpp"

namespace steadymoe::cuda {

// A's rows for a grouped GEMM: out[r] = src[rows ? rows[r] : r] (stride `stride` values, f32 or bf16) as
// bf16 bits, optionally FP8-quantised per 128 values exactly as the CPU backend does (a NaN's code aside: the
// GPU's arithmetic gives one positive NaN where the CPU's keeps an operand's sign) (quant_mode 0 none:
// values must already be exact in bf16; 1 fp8 with scales kept in `scales` [m][k/128]; 2 fp8 with
// power-of-two scales folded in). m is an upper bound; rows at or past *live_rows (when set) are skipped.
// The same rows quantised to e4m3 codes (out [m][k] bytes) with their scales kept in `scales`
// [m][k/128] (or as `scale_layout` says) — power-of-two scales when pow2_scales (quant_mode 2's values,
// unfolded), else quant_mode 1's.
cudaError_t launch_gather_fp8(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                              const int32_t* live_rows, int64_t k, bool pow2_scales, uint8_t* out,
                              float* scales, cudaStream_t stream, ScaleLayout scale_layout = {});

// Whether launch_gather_fp8 quantises these rows by its row kernel (else by a group at a time, the same
// bytes): sources and their stride 16-byte aligned, k a multiple of 128, out 16-byte aligned, and
// STEADYMOE_QUANTISE_ROWS=group not set (it keeps the group gather everywhere, to compare).
// launch_quantise_to_pairs needs it.
bool row_quantiser_takes(const void* src, bool src_bf16, int64_t stride, int64_t k, const void* out);

// Tokens quantised once each, straight into the rows of their pairs: the rows that a permutation of the pairs
// i = t * top_k + j (launch_permute_routed: dest[row] = i for rows below *live_rows, or max_rows) gives them,
// with their scales, as launch_gather_fp8 from `src` through the permutation's rows would write them, and in
// one pass over the tokens in place of quantising them and copying codes (launch_gather_e4m3_rows). dest must
// name each pair at most once among the live rows. pair_row ([tokens * top_k] int32) is scratch and may hold
// anything (a pair's entry is believed only where it is a live row whose dest is that pair); rows past the
// live bound are left as they were. Sources as row_quantiser_takes; cudaErrorInvalidValue otherwise.
cudaError_t launch_quantise_to_pairs(const void* src, bool src_bf16, int64_t stride, int64_t tokens,
                                     int32_t top_k, const int64_t* dest, int64_t max_rows,
                                     const int32_t* live_rows, int64_t k, bool pow2_scales, int32_t* pair_row,
                                     uint8_t* out, float* scales, cudaStream_t stream, ScaleLayout scale_layout = {});

// Rows of e4m3 codes with their per-128 scales, copied as they are: out[r] = src[rows[r]] ([m][k] bytes,
// scales [m][k/128] from src_scales [.][k/128], or as `scale_layout` says); rows at or past *live_rows (when
// set) are skipped. For rows quantised once
// (launch_gather_fp8 without `rows`) that several GEMM rows read: quantising is a function of the row
// alone, so these are the bits launch_gather_fp8 would give each copy.
cudaError_t launch_gather_e4m3_rows(const uint8_t* src, const float* src_scales, const int32_t* rows,
                                    int64_t m, const int32_t* live_rows, int64_t k, uint8_t* out,
                                    float* scales, cudaStream_t stream, ScaleLayout scale_layout = {});

// Whether bf16 rows at src (stride values apart, k values each) and out are 16-byte aligned: the copy
// kernels' condition (launch_gather_bf16's copy, launch_copy_bf16_to_pairs).
bool bf16_rows_copyable(const void* src, int64_t stride, int64_t k, const void* out);

// bf16 tokens copied as they are (NaNs made quiet) straight into the rows of their pairs, each token read
// once: the bytes launch_gather_bf16 (quant_mode 0) gives through the permutation's rows, which reads a token
// once for each of its pairs. Pairs, live rows, pair_row scratch and rows past the live bound as
// launch_quantise_to_pairs; rows as bf16_rows_copyable, cudaErrorInvalidValue otherwise.
cudaError_t launch_copy_bf16_to_pairs(const uint16_t* src, int64_t stride, int64_t tokens, int32_t top_k,
                                      const int64_t* dest, int64_t max_rows, const int32_t* live_rows,
                                      int64_t k, int32_t* pair_row, uint16_t* out, cudaStream_t stream);

// A's rows as bf16 bits (the first paragraph above launch_gather_fp8). quant_mode 0 from bf16 rows that
// bf16_rows_copyable takes runs a copy kernel: the same bits, a row at a time.
cudaError_t launch_gather_bf16(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                               const int32_t* live_rows, int64_t k, int quant_mode, uint16_t* out,
                               float* scales, cudaStream_t stream);

}  // namespace steadymoe::cuda
