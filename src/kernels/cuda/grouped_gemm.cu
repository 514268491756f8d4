// The tensor-core grouped expert GEMM for any sm_80+ GPU: mma.sync m16n8k16 bf16 -> f32 over the
// shared stages of grouped_gemm_stage.cuh (cp.async pipeline, ldmatrix). Hopper takes
// grouped_gemm_sm90.cu instead; which one runs depends only on the GPU.
#include <algorithm>
#include <cstdint>

#include "dependent_launch.cuh"
#include "env_switch.hpp"
#include "grouped_gemm_sm90.hpp"
#include "grouped_gemm_stage.cuh"

namespace steadymoe::cuda {

namespace {

using namespace stage;

constexpr int kRows = 64;  // rows of A per tile
constexpr int kStages = 4;
constexpr int kWarpsM = 2;  // 4 warps: 2 along M (32 rows each) x 2 along N (64 features each)
constexpr int kWarpsN = 2;
constexpr int kThreads = kWarpsM * kWarpsN * 32;

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <WeightCode kCode, bool kScaled>
__global__ void __launch_bounds__(kThreads, 2) grouped_gemm_kernel(const GroupedGemmLaunch g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // mma.sync bf16 and cp.async need sm_80
#else
    const Tile t = tile_of_block(g);
    if (t.rows == 0) return;
    extern __shared__ __align__(128) char smem_raw[];
    char* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
    constexpr int kStageBytes = stage_bytes(kCode, kRows);
    char* widened = smem + kStages * kStageBytes;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp % kWarpsM, wn = warp / kWarpsM;
    const bool live[2] = {wm * 32 < t.rows, wm * 32 + 16 < t.rows};  // warp-uniform: skip padding rows

    float acc[2][8][4];
    float total[2][8][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[mi][ni][r] = total[mi][ni][r] = 0.0f;

    const StageLoader<kCode, kScaled, kRows, kThreads> loader(g, t);
    loader.zero_padding_rows(smem, kStageBytes, kStages, t.rows);
    const int ktiles = t.ktiles;
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < ktiles) loader.load(smem + s * kStageBytes, (t.kt0 + s) * kBK);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<kStages - 2>();
        __syncthreads();
        const char* stage = smem + (kt % kStages) * kStageBytes;
        const char* b_tile = stage + kRows * kRowBytes;
        if constexpr (kCode != WeightCode::Bf16) {
            widen_stage<kCode, kThreads>(b_tile, widened, (t.kt0 + kt) * kBK);
            __syncthreads();
            b_tile = widened;
        }
#pragma unroll
        for (int ks = 0; ks < kBK / 16; ++ks) {
            uint32_t af[2][4], bf[8][2];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                if (live[mi])
                    ldmatrix_x4(af[mi],
                                stage + swizzle(wm * 32 + mi * 16 + (lane & 15), ks * 2 + (lane >> 4)));
#pragma unroll
            for (int nj = 0; nj < 4; ++nj) {
                uint32_t r[4];
                ldmatrix_x4(r, b_tile + swizzle(wn * 64 + nj * 16 + (lane & 7) + ((lane >> 4) << 3),
                                                ks * 2 + ((lane >> 3) & 1)));
                bf[2 * nj][0] = r[0];
                bf[2 * nj][1] = r[1];
                bf[2 * nj + 1][0] = r[2];
                bf[2 * nj + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                if (live[mi])
#pragma unroll
                    for (int ni = 0; ni < 8; ++ni) mma_bf16(acc[mi][ni], af[mi], bf[ni]);
        }
        if constexpr (kScaled) {
            if (kt & 1) {  // the end of a 128-wide block: fold its partial sums with their scales
                const float* row_scale = stage_scales<kCode, kRows>(stage);
                const float* fragment_scale = row_scale + kRows;
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    float sa[2];
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        sa[h] = g.a_scale ? row_scale[wm * 32 + mi * 16 + (lane >> 2) + h * 8] : 1.0f;
#pragma unroll
                    for (int ni = 0; ni < 8; ++ni) {
                        const float sw = kCode == WeightCode::Fp8 ? fragment_scale[wn * 8 + ni] : 1.0f;
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            total[mi][ni][r] =
                                __fmaf_rn(acc[mi][ni][r], __fmul_rn(sa[r >> 1], sw), total[mi][ni][r]);
                            acc[mi][ni][r] = 0.0f;
                        }
                    }
                }
            }
        }
        const int next = kt + kStages - 1;
        if (next < ktiles) loader.load(smem + (next % kStages) * kStageBytes, (t.kt0 + next) * kBK);
        cp_async_commit();
    }
    cp_async_wait<0>();

    // Epilogue. Fragment layout: element r of acc[mi][ni] is row (lane/4 + 8*(r/2)), feature
    // (ni*8 + 2*(lane%4) + r%2) of the warp's 32 x 64 block.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 8; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (g.epilogue == GemmEpilogue::SwiGlu && (ni & 1)) continue;
                const float* v = kScaled ? total[mi][ni] : acc[mi][ni];
                const float* up = kScaled ? total[mi][(ni + 1) & 7] : acc[mi][(ni + 1) & 7];
                epilogue_pair(g, t, wm * 32 + mi * 16 + (lane >> 2) + h * 8,
                              wn * 64 + ni * 8 + (lane & 3) * 2, make_float2(v[2 * h], v[2 * h + 1]),
                              make_float2(up[2 * h], up[2 * h + 1]));
            }
#endif
}

template <WeightCode kCode, bool kScaled>
cudaError_t launch_typed(const GroupedGemmLaunch& g) {
    constexpr int kSmem = smem_bytes(kCode, kRows, kStages);
    const cudaError_t err = allow_shared_memory<grouped_gemm_kernel<kCode, kScaled>>(kSmem);
    if (err != cudaSuccess) return err;
    const dim3 grid = tile_grid(g);
    grouped_gemm_kernel<kCode, kScaled><<<grid, kThreads, kSmem, g.stream>>>(g);
    return cudaGetLastError();
}

// One warp per (row, 128-value group): the CPU's quantize_row_fp8, with the group maximum taken by
// a warp reduction (max is exact in any order; NaN never becomes the maximum, as on the CPU); 4 values
// per lane. kFp8Out writes the e4m3 codes and keeps the scale (power of two in mode 2); otherwise the
// values go out as bf16 (mode 2 with its scale folded in).
template <bool kFp8Out>
__device__ void gather_group(const void* src, bool src_bf16, int64_t stride, const int32_t* rows,
                             int64_t item, int64_t k, int mode, void* out, float* scales) {
    const int64_t groups = k / 128;
    const int lane = threadIdx.x & 31;
    const int64_t r = item / groups, group = item % groups, c0 = group * 128 + lane * 4;
    const int64_t row = (rows ? int64_t(rows[r]) : r) * stride + c0;
    // One vector load and store per lane (k and the stride are multiples of 128, c0 of 4).
    float v[4];
    if (src_bf16) {
        const uint2 b = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(src) + row);
        v[0] = bf16_to_f32(uint16_t(b.x)), v[1] = bf16_to_f32(uint16_t(b.x >> 16));
        v[2] = bf16_to_f32(uint16_t(b.y)), v[3] = bf16_to_f32(uint16_t(b.y >> 16));
    } else {
        const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(src) + row);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    }
    uint2* dst = reinterpret_cast<uint2*>(static_cast<uint16_t*>(out) + r * k + c0);
    auto store_bf16 = [&](const uint16_t (&b)[4]) {
        *dst = make_uint2(uint32_t(b[0]) | uint32_t(b[1]) << 16, uint32_t(b[2]) | uint32_t(b[3]) << 16);
    };
    if (!kFp8Out && mode == 0) {
        const uint16_t b[4] = {f32_to_bf16(v[0]), f32_to_bf16(v[1]), f32_to_bf16(v[2]), f32_to_bf16(v[3])};
        store_bf16(b);
        return;
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float a = abs_f32(v[j]);
        amax = amax < a ? a : amax;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, amax, offset);
        amax = amax < o ? o : amax;
    }
    amax = amax < 1e-4f ? 1e-4f : amax;
    float s = amax / kE4M3Max;
    if (mode == 2) s = e8m0_to_f32(e8m0_from_f32_ceil(s));
    if constexpr (kFp8Out) {
        const uint32_t codes = f32x4_to_e4m3x4(v[0] / s, v[1] / s, v[2] / s, v[3] / s);
        *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(out) + r * k + c0) = codes;
        if (lane == 0) scales[r * groups + group] = s;
    } else {
        const bool keep = mode == 1;
        const uint32_t codes = f32x4_to_e4m3x4(v[0] / s, v[1] / s, v[2] / s, v[3] / s);
        uint16_t b[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float q = e4m3_to_f32(uint8_t(codes >> (8 * j)));
            b[j] = f32_to_bf16(keep ? q : q * s);
        }
        store_bf16(b);
        if (scales && lane == 0) scales[r * groups + group] = keep ? s : 1.0f;
    }
}

// Warps stride over the live rows' groups: the grid is sized by the bound `m`, capped, so a launch for a
// large bound with few live rows (an expert-parallel rank's receive capacity) costs little.
template <bool kFp8Out>
__global__ void gather_kernel(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                              const int32_t* live_rows, int64_t k, int mode, void* out, float* scales) {
    begin_dependent_kernel();
    const int64_t live = live_rows ? min(m, int64_t(*live_rows)) : m;
    const int64_t items = live * (k / 128), warps = int64_t(gridDim.x) * blockDim.x / 32;
    for (int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < items; item += warps)
        gather_group<kFp8Out>(src, src_bf16, stride, rows, item, k, mode, out, scales);
}

// 16 bytes of codes per thread, and a row's scales by the threads of its first k/128 chunks. (A warp per
// row with eight loads a lane in flight, copy_rows_kernel below, took half the time at 16384 tokens
// of deepseek-v3, 495 µs against 1019, yet the layer 1.6% more over seven runs: its routed gate/up GEMM
// then started beside the shared expert's GEMMs on the side stream;
// bench/results/2026-12-04-cuda-row-copies-early-weights.md.)
__global__ void gather_e4m3_rows_kernel(const uint8_t* src, const float* src_scales, const int32_t* rows, int64_t m,
                                        const int32_t* live_rows, int64_t k, uint8_t* out, float* scales) {
    begin_dependent_kernel();
    const int64_t live = live_rows ? min(m, int64_t(*live_rows)) : m;
    const int64_t chunks = k / 16, items = live * chunks, stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; item < items; item += stride) {
        const int64_t r = item / chunks, c = item % chunks, from = rows[r];
        reinterpret_cast<uint4*>(out + r * k)[c] = reinterpret_cast<const uint4*>(src + from * k)[c];
        if (c < k / 128) scales[r * (k / 128) + c] = src_scales[from * (k / 128) + c];
    }
}

// Both bf16 halves of each word with a NaN made quiet, as the codec's f32_to_bf16 leaves a NaN that
// bf16_to_f32 widened: the gather's conversions for a bf16 source kept as bf16 (quant_mode 0).
__device__ __forceinline__ uint4 quiet_bf16_nans(uint4 v) {
    const auto quiet = [](uint32_t w) {
        return w | (__vcmpgtu2(w & 0x7FFF7FFFu, 0x7F807F80u) & 0x00400040u);  // a half above infinity's bits
    };
    return make_uint4(quiet(v.x), quiet(v.y), quiet(v.z), quiet(v.w));
}

// Rows copied as they are, out[r] = src[rows ? rows[r] : r] (row_bytes a row; the source's rows src_stride
// bytes apart; all 16-byte aligned), with each row's row_scales scales where there are any; bf16 rows with
// their NaNs made quiet (kQuietBf16: gather_group's bits for bf16 rows kept as bf16, quant_mode 0). A warp
// per row, each lane with up to kBatch 16-byte loads in flight: gather_group's one 8-byte load a lane left
// too few bytes in flight to fill the memory pipes (qwen3's 16384 tokens: 316 µs, now 238, the layer
// 1.9-2.3% less; bench/results/2026-12-04-cuda-row-copies-early-weights.md). Every load of a batch is
// issued, a word past the row's end reading its last word again and not stored: guarded loads compile to a
// branch around each, one in flight at a time.
template <bool kQuietBf16>
__global__ void copy_rows_kernel(const uint8_t* src, int64_t src_stride, const int32_t* rows, int64_t m,
                                 const int32_t* live_rows, int64_t row_bytes, uint8_t* out,
                                 const float* src_scales, int64_t row_scales, float* scales) {
    constexpr int kBatch = 8;
    begin_dependent_kernel();
    const int64_t live = live_rows ? min(m, int64_t(*live_rows)) : m;
    const int64_t words = row_bytes / 16, warps = int64_t(gridDim.x) * blockDim.x / 32;
    const int lane = threadIdx.x & 31;
    for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < live; r += warps) {
        const int64_t from = rows ? int64_t(rows[r]) : r;
        const uint4* row = reinterpret_cast<const uint4*>(src + from * src_stride);
        uint4* to = reinterpret_cast<uint4*>(out + r * row_bytes);
        for (int64_t w0 = lane; w0 < words; w0 += 32 * kBatch) {
            uint4 v[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; ++j) v[j] = row[min(w0 + 32 * j, words - 1)];
#pragma unroll
            for (int j = 0; j < kBatch; ++j)
                if (w0 + 32 * j < words) to[w0 + 32 * j] = kQuietBf16 ? quiet_bf16_nans(v[j]) : v[j];
        }
        for (int64_t j = lane; j < row_scales; j += 32)
            scales[r * row_scales + j] = src_scales[from * row_scales + j];
    }
}

// Blocks of 256 threads for a grid-stride gather of `threads` items, at most 4096 (8 warps each: enough to
// keep every SM's memory pipes busy).
unsigned gather_blocks(int64_t threads) { return unsigned(std::min<int64_t>((threads + 255) / 256, 4096)); }

template <bool kFp8Out>
cudaError_t launch_gather(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                          const int32_t* live_rows, int64_t k, int quant_mode, void* out, float* scales,
                          cudaStream_t stream) {
    const int64_t threads = m * (k / 128) * 32;
    if (threads == 0) return cudaGetLastError();
    return launch_dependent(gather_kernel<kFp8Out>, gather_blocks(threads), 256, 0, stream, src, src_bf16, stride, rows, m,
                            live_rows, k, quant_mode, out, scales);
}

}  // namespace

int grouped_gemm_tile_rows() { return hopper_gemm_available() ? kHopperTileRows : kRows; }

int grouped_gemm_decode_tile_rows(WeightCode code, bool a_fp8, int64_t rows, int64_t experts) {
    const int rows_per_tile = hopper_gemm_available() ? hopper_decode_tile_rows(code, a_fp8, rows, experts) : 0;
    return rows_per_tile > 0 ? rows_per_tile : grouped_gemm_tile_rows();
}

int grouped_gemm_few_row_ctas_per_sm() {
    return hopper_gemm_available() && hopper_few_row_kernels() ? hopper_few_row_ctas_per_sm() : 0;
}

int grouped_gemm_decode_ctas_per_sm(WeightCode code) {
    return hopper_gemm_available() && hopper_decode_takes(code) ? hopper_decode_ctas_per_sm(code) : 0;
}

FewCtaShape grouped_gemm_few_cta_shape(WeightCode code, bool a_fp8) {
    // (hopper_few_cta_shape names none for the pairs that have none of their own)
    const bool decode = a_fp8 ? grouped_gemm_takes_fp8_activations(code) && hopper_few_row_kernels()
                              : hopper_gemm_available() && hopper_decode_takes(code);
    return decode ? hopper_few_cta_shape(code, a_fp8) : FewCtaShape{};
}

uint64_t grouped_gemm_paired_launches() { return hopper_paired_launches(); }

bool grouped_gemm_takes_fp8_activations(WeightCode code) {
    static const bool enabled = !env_equals("STEADYMOE_FP8_TENSOR_CORES", "0");
    return code != WeightCode::Bf16 && enabled && hopper_gemm_available();
}

int grouped_gemm_fp4_e4m3_ctas_per_sm(int tokens) {
    return grouped_gemm_takes_fp8_activations(WeightCode::Fp4) ? hopper_fp4_e4m3_ctas_per_sm(tokens) : 0;
}

cudaError_t launch_grouped_gemm(const GroupedGemmLaunch& g) {
    if (g.max_tiles == 0 || g.n == 0) return cudaSuccess;
    // Tiles no taller than the GPU's; an identity launch's are identity_tile_rows tall.
    if (g.tile_m < 0 || g.tile_m > grouped_gemm_tile_rows() || (g.identity_rows > 0 && g.tile_m != 0 && g.tile_m != g.identity_tile_rows))
        return cudaErrorInvalidValue;
    if (g.identity_rows > 0 && (g.identity_tile_rows != grouped_gemm_tile_rows() ||
                                (g.identity_rows + g.identity_tile_rows - 1) / g.identity_tile_rows > g.max_tiles))
        return cudaErrorInvalidValue;
    const bool split_ok = g.k_splits == 1 || (g.k_splits > 1 && g.k % (int64_t(g.k_splits) * 128) == 0 &&
                                              g.epilogue == GemmEpilogue::Store && g.k_splits <= 65535);
    if (!split_ok) return cudaErrorInvalidValue;
    if (g.code == WeightCode::Fp4 && (g.a_fp8 != nullptr) != g.fp4_e4m3_order) return cudaErrorInvalidValue;  // the codes' order
    if (g.out_bf16 && (g.epilogue == GemmEpilogue::Store || !g.round_bf16)) return cudaErrorInvalidValue;
    if (g.a_index && !grouped_gemm_reads_indexed_rows(g)) return cudaErrorInvalidValue;
    if (hopper_gemm_available()) return launch_grouped_gemm_sm90(g);
    if (g.a_fp8) return cudaErrorInvalidValue;  // e4m3 activations are for the Hopper kernel only
    switch (g.code) {
        case WeightCode::Bf16:
            return g.scaled ? launch_typed<WeightCode::Bf16, true>(g)
                            : launch_typed<WeightCode::Bf16, false>(g);
        case WeightCode::Fp8:
            return launch_typed<WeightCode::Fp8, true>(g);
        case WeightCode::Fp4:
            return g.scaled ? launch_typed<WeightCode::Fp4, true>(g)
                            : launch_typed<WeightCode::Fp4, false>(g);
    }
    return cudaErrorInvalidValue;
}

bool grouped_gemm_reads_indexed_rows(const GroupedGemmLaunch& g) {
    static const bool enabled = !env_equals("STEADYMOE_INDEXED_ROWS", "0");
    return enabled && hopper_gemm_available() && hopper_decode(g);
}

bool grouped_gemm_prefers_rows_in_order(const GroupedGemmLaunch& g) {
    return hopper_gemm_available() && hopper_decode(g) && hopper_decode_prefers_rows_in_order(g);
}

cudaError_t launch_gather_bf16(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                               const int32_t* live_rows, int64_t k, int quant_mode, uint16_t* out,
                               float* scales, cudaStream_t stream) {
    const bool aligned = (reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(out)) % 16 == 0 &&
                         stride % 8 == 0 && k % 8 == 0;  // (elements: 16 bytes)
    if (quant_mode == 0 && src_bf16 && aligned) {
        if (m == 0) return cudaGetLastError();
        return launch_dependent(copy_rows_kernel<true>, gather_blocks(m * 32), 256, 0, stream,
                                static_cast<const uint8_t*>(src), stride * 2, rows, m, live_rows, k * 2,
                                reinterpret_cast<uint8_t*>(out), nullptr, int64_t(0), nullptr);
    }
    return launch_gather<false>(src, src_bf16, stride, rows, m, live_rows, k, quant_mode, out, scales, stream);
}

cudaError_t launch_gather_e4m3_rows(const uint8_t* src, const float* src_scales, const int32_t* rows, int64_t m,
                                   const int32_t* live_rows, int64_t k, uint8_t* out, float* scales, cudaStream_t stream) {
    // STEADYMOE_E4M3_ROW_COPY=warp: copy_rows_kernel (a warp per row), to compare (the same bytes).
    static const bool warp_per_row = env_equals("STEADYMOE_E4M3_ROW_COPY", "warp");
    if (warp_per_row && k % 16 == 0) {
        if (m == 0) return cudaGetLastError();
        return launch_dependent(copy_rows_kernel<false>, gather_blocks(m * 32), 256, 0, stream, src, k, rows,
                                m, live_rows, k, out, src_scales, k / 128, scales);
    }
    const int64_t threads = m * (k / 16);
    if (threads == 0) return cudaGetLastError();
    return launch_dependent(gather_e4m3_rows_kernel, gather_blocks(threads), 256, 0, stream, src, src_scales, rows, m,
                            live_rows, k, out, scales);
}

cudaError_t launch_gather_fp8(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                              const int32_t* live_rows, int64_t k, bool pow2_scales, uint8_t* out, float* scales,
                              cudaStream_t stream) {
    return launch_gather<true>(src, src_bf16, stride, rows, m, live_rows, k, pow2_scales ? 2 : 1, out, scales,
                               stream);
}

}  // namespace steadymoe::cuda
