// The tensor-core grouped expert GEMM (sm_80+: mma.sync m16n8k16 bf16 -> f32, cp.async pipeline,
// ldmatrix from XOR-swizzled shared memory). FP8 and FP4 weights stream from global memory in their
// stored width and are widened to bf16 in shared memory, one stage at a time, exactly.
#include "grouped_gemm.hpp"
#include "stage_math.cuh"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace steadymoe::cuda {

namespace {

constexpr int kBK = 64;        // k per pipeline stage (two stages make one 128-wide scale block)
constexpr int kStages = 4;
constexpr int kWarpsM = 2;     // 4 warps: 2 along M (32 rows each) x 2 along N (64 features each)
constexpr int kWarpsN = 2;
constexpr int kThreads = kWarpsM * kWarpsN * 32;
constexpr int kRowBytes = kBK * 2;           // one bf16 row of a stage: 128 bytes, 8 chunks of 16
constexpr int kATileBytes = kTileM * kRowBytes;
constexpr int kBTileBytes = kTileN * kRowBytes;

__host__ __device__ constexpr int raw_b_bytes(WeightCode code) {
    return code == WeightCode::Bf16 ? kBTileBytes : code == WeightCode::Fp8 ? kTileN * kBK : kTileN * kBK / 2 + kTileN * 4;
}
// Per stage, after the tiles: the 128-block scales of the tile's rows and of its 8-feature fragments.
constexpr int kRowScaleBytes = kTileM * 4;
constexpr int kFragmentScaleBytes = kTileN / 8 * 4;
constexpr int kScaleBytes = 512;
static_assert(kRowScaleBytes + kFragmentScaleBytes <= kScaleBytes);
__host__ __device__ constexpr int stage_bytes(WeightCode code) { return kATileBytes + raw_b_bytes(code) + kScaleBytes; }
__host__ __device__ constexpr int smem_bytes(WeightCode code) {
    return kStages * stage_bytes(code) + (code == WeightCode::Bf16 ? 0 : kBTileBytes);
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled 128-byte-row tile: ldmatrix's eight
// row addresses then fall in eight different bank groups.
__device__ __forceinline__ int swizzle(int row, int chunk) { return row * kRowBytes + ((chunk ^ (row & 7)) << 4); }

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async with zero fill: when !valid nothing is read and the destination becomes zeros.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

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

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    return uint32_t(f32_to_bf16(lo)) | (uint32_t(f32_to_bf16(hi)) << 16);
}

// Two e4m3 codes (low byte first) as two bf16 values: e4m3 -> f16 is exact, f16 -> f32 -> bf16 too.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint16_t codes) {
    const __half2 h(__nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3));
    const float2 f = __half22float2(h);
    return pack_bf16x2(f.x, f.y);
}

// An e2m1 code (sign, 2 exponent bits, 1 mantissa bit) as a float, without a lookup table.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
    const uint32_t e = (code >> 1) & 3, m = code & 1;
    const float v = e ? __uint_as_float(((e + 126) << 23) | (m << 22)) : (m ? 0.5f : 0.0f);
    return code & 8 ? -v : v;
}

struct Tile {
    int expert, row0, rows, n0;
};

// Byte offset of the 128-block scale of output feature n (FP8 weights) in an expert's scale block.
__device__ __forceinline__ int64_t weight_scale_offset(const GroupedGemmLaunch& g, int64_t n, int kb) {
    int64_t block = n / 128;
    if (g.fp8_half_blocks > 0) {  // interleaved gate/up rows: undo the interleave
        const int64_t frag = n / 8, original = (frag >> 1) * 8;
        block = (frag & 1) * g.fp8_half_blocks + original / 128;
    }
    return (block * (g.k / 128) + kb) * 4;
}

template <WeightCode kCode, bool kScaled>
__device__ __forceinline__ void load_stage(const GroupedGemmLaunch& g, const Tile& t, char* stage, int k0) {
    const int tid = threadIdx.x;
    char* a_tile = stage;
    char* b_raw = stage + kATileBytes;
    if constexpr (kScaled) {  // this stage's 128-block scales, so the fold never waits on global memory
        char* scales = stage + kATileBytes + raw_b_bytes(kCode);
        const int kb = k0 / 128;
        if (tid < kTileM) {
            const bool valid = tid < t.rows;
            if (g.a_scale)
                cp_async4(scales + tid * 4, g.a_scale + (valid ? int64_t(t.row0 + tid) * (g.k / 128) + kb : 0), valid);
        } else if (tid < kTileM + kTileN / 8) {
            const int64_t n = t.n0 + (tid - kTileM) * 8;
            const bool valid = kCode == WeightCode::Fp8 && n < g.n;
            const char* s = static_cast<const char*>(g.w_scale) + int64_t(t.expert) * g.scale_expert_bytes;
            cp_async4(scales + kRowScaleBytes + (tid - kTileM) * 4, valid ? s + weight_scale_offset(g, n, kb) : s, valid);
        }
    }
#pragma unroll
    for (int i = 0; i < kATileBytes / 16 / kThreads; ++i) {
        const int idx = tid + i * kThreads, row = idx >> 3, chunk = idx & 7;
        const bool valid = row < t.rows;
        const uint16_t* src = g.a + int64_t(t.row0 + (valid ? row : 0)) * g.k + k0 + chunk * 8;
        cp_async16(a_tile + swizzle(row, chunk), src, valid);
    }
    const char* w = static_cast<const char*>(g.w) + int64_t(t.expert) * g.w_expert_bytes;
    if constexpr (kCode == WeightCode::Bf16) {
#pragma unroll
        for (int i = 0; i < kBTileBytes / 16 / kThreads; ++i) {
            const int idx = tid + i * kThreads, row = idx >> 3, chunk = idx & 7;
            const int64_t n = t.n0 + row;
            const bool valid = n < g.n;
            cp_async16(b_raw + swizzle(row, chunk), w + ((valid ? n : 0) * g.k + k0 + chunk * 8) * 2, valid);
        }
    } else if constexpr (kCode == WeightCode::Fp8) {
#pragma unroll
        for (int i = 0; i < kTileN * kBK / 16 / kThreads; ++i) {
            const int idx = tid + i * kThreads, row = idx >> 2, chunk = idx & 3;
            const int64_t n = t.n0 + row;
            const bool valid = n < g.n;
            cp_async16(b_raw + row * kBK + chunk * 16, w + (valid ? n : 0) * g.k + k0 + chunk * 16, valid);
        }
    } else {
#pragma unroll
        for (int i = 0; i < kTileN * kBK / 2 / 16 / kThreads; ++i) {
            const int idx = tid + i * kThreads, row = idx >> 1, chunk = idx & 1;
            const int64_t n = t.n0 + row;
            const bool valid = n < g.n;
            cp_async16(b_raw + row * (kBK / 2) + chunk * 16, w + (valid ? n : 0) * (g.k / 2) + k0 / 2 + chunk * 16, valid);
        }
        // The four e8m0 scales of this row's 128-wide k block (4-byte aligned: k is a multiple of 128).
        const char* s = static_cast<const char*>(g.w_scale) + int64_t(t.expert) * g.scale_expert_bytes;
        char* s_tile = b_raw + kTileN * kBK / 2;
        for (int row = tid; row < kTileN; row += kThreads) {
            const int64_t n = t.n0 + row;
            const bool valid = n < g.n;
            cp_async4(s_tile + row * 4, s + (valid ? n : 0) * (g.k / 32) + (k0 / 128) * 4, valid);
        }
    }
}

// Widens one stage's FP8 / FP4 weight tile to bf16 in the swizzled layout ldmatrix reads.
template <WeightCode kCode>
__device__ __forceinline__ void widen_stage(const char* b_raw, char* b_bf16, int k0) {
    for (int idx = threadIdx.x; idx < kTileN * 8; idx += kThreads) {
        const int row = idx >> 3, chunk = idx & 7;  // 8 values: k = chunk*8 .. chunk*8+7
        uint4 out;
        if constexpr (kCode == WeightCode::Fp8) {
            const uint2 codes = *reinterpret_cast<const uint2*>(b_raw + row * kBK + chunk * 8);
            out.x = e4m3x2_to_bf16x2(uint16_t(codes.x));
            out.y = e4m3x2_to_bf16x2(uint16_t(codes.x >> 16));
            out.z = e4m3x2_to_bf16x2(uint16_t(codes.y));
            out.w = e4m3x2_to_bf16x2(uint16_t(codes.y >> 16));
        } else {
            const uint32_t codes = *reinterpret_cast<const uint32_t*>(b_raw + row * (kBK / 2) + chunk * 4);
            const uint8_t e = reinterpret_cast<const uint8_t*>(b_raw + kTileN * kBK / 2)[row * 4 + ((k0 & 127) + chunk * 8) / 32];
            const float scale = __uint_as_float(uint32_t(e) << 23);  // 2^(e-127); e in [2, 252] (checked at upload)
            uint32_t v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
                v[j] = pack_bf16x2(__fmul_rn(e2m1_value(codes >> (8 * j)), scale),
                                   __fmul_rn(e2m1_value(codes >> (8 * j + 4)), scale));
            out = make_uint4(v[0], v[1], v[2], v[3]);
        }
        *reinterpret_cast<uint4*>(b_bf16 + swizzle(row, chunk)) = out;
    }
}

template <WeightCode kCode, bool kScaled>
__global__ void __launch_bounds__(kThreads, 2) grouped_gemm_kernel(const GroupedGemmLaunch g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // mma.sync bf16 and cp.async need sm_80
#else
    if (int(blockIdx.x) >= *g.tile_count) return;
    const Tile t{g.tile_expert[blockIdx.x], g.tile_row0[blockIdx.x], g.tile_rows[blockIdx.x], int(blockIdx.y) * kTileN};
    extern __shared__ __align__(128) char smem[];
    constexpr int kStageBytes = stage_bytes(kCode);
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

    const int ktiles = int(g.k / kBK);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < ktiles) load_stage<kCode, kScaled>(g, t, smem + s * kStageBytes, s * kBK);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<kStages - 2>();
        __syncthreads();
        const char* stage = smem + (kt % kStages) * kStageBytes;
        const char* b_tile = stage + kATileBytes;
        if constexpr (kCode != WeightCode::Bf16) {
            widen_stage<kCode>(stage + kATileBytes, widened, kt * kBK);
            __syncthreads();
            b_tile = widened;
        }
#pragma unroll
        for (int ks = 0; ks < kBK / 16; ++ks) {
            uint32_t af[2][4], bf[8][2];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                if (live[mi]) ldmatrix_x4(af[mi], stage + swizzle(wm * 32 + mi * 16 + (lane & 15), ks * 2 + (lane >> 4)));
#pragma unroll
            for (int nj = 0; nj < 4; ++nj) {
                uint32_t r[4];
                ldmatrix_x4(r, b_tile + swizzle(wn * 64 + nj * 16 + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)));
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
                const float* row_scale = reinterpret_cast<const float*>(stage + kATileBytes + raw_b_bytes(kCode));
                const float* fragment_scale = row_scale + kTileM;
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
                            total[mi][ni][r] = __fmaf_rn(acc[mi][ni][r], __fmul_rn(sa[r >> 1], sw), total[mi][ni][r]);
                            acc[mi][ni][r] = 0.0f;
                        }
                    }
                }
            }
        }
        const int next = kt + kStages - 1;
        if (next < ktiles) load_stage<kCode, kScaled>(g, t, smem + (next % kStages) * kStageBytes, next * kBK);
        cp_async_commit();
    }
    cp_async_wait<0>();

    // Epilogue. Fragment layout: element r of acc[mi][ni] is row (lane/4 + 8*(r/2)), feature
    // (ni*8 + 2*(lane%4) + r%2) of the warp's 32 x 64 block.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = wm * 32 + mi * 16 + (lane >> 2) + h * 8;
            if (row >= t.rows) continue;
            const int64_t grow = t.row0 + row;
            const float weight = g.row_weight ? g.row_weight[grow] : 1.0f;
#pragma unroll
            for (int ni = 0; ni < 8; ++ni) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float v = kScaled ? total[mi][ni][h * 2 + e] : acc[mi][ni][h * 2 + e];
                    const int64_t n = t.n0 + wn * 64 + ni * 8 + (lane & 3) * 2 + e;
                    if (g.epilogue == GemmEpilogue::Store) {
                        if (n < g.n) g.out[grow * g.ldo + n] = v;
                    } else if (g.epilogue == GemmEpilogue::Scatter) {
                        if (n < g.n)
                            g.out[g.row_dest[grow] * g.ldo + n] = round_act(g.weight_before_down ? v : weight * v, g.round_bf16);
                    } else if ((ni & 1) == 0) {  // SwiGlu: fragment ni is gate, ni + 1 the matching up
                        const float up = kScaled ? total[mi][ni + 1][h * 2 + e] : acc[mi][ni + 1][h * 2 + e];
                        const int64_t j = ((t.n0 + wn * 64) / 16 + ni / 2) * 8 + (lane & 3) * 2 + e;
                        if (j < g.n / 2)
                            g.out[grow * g.ldo + j] =
                                swiglu_stage(v, up, g.swiglu_limit, g.weight_before_down, weight, g.round_bf16);
                    }
                }
            }
        }
    }
#endif
}

template <WeightCode kCode, bool kScaled>
cudaError_t launch_typed(const GroupedGemmLaunch& g) {
    constexpr int kSmem = smem_bytes(kCode);
    const cudaError_t err =
        cudaFuncSetAttribute(grouped_gemm_kernel<kCode, kScaled>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
    const dim3 grid(unsigned(g.max_tiles), unsigned((g.n + kTileN - 1) / kTileN));
    grouped_gemm_kernel<kCode, kScaled><<<grid, kThreads, kSmem, g.stream>>>(g);
    return cudaGetLastError();
}

// One warp per (row, 128-value group): the CPU's quantize_row_fp8, with the group maximum taken by
// a warp reduction (max is exact in any order; NaN never becomes the maximum, as on the CPU).
__global__ void gather_bf16_kernel(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                                   const int32_t* live_rows, int64_t k, int mode, uint16_t* out, float* scales) {
    const int64_t groups = k / 128;
    const int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (item >= m * groups) return;
    const int64_t r = item / groups, group = item % groups, c0 = group * 128 + lane * 4;
    if (live_rows && r >= *live_rows) return;
    const int64_t row = (rows ? int64_t(rows[r]) : r) * stride + c0;
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
        v[j] = src_bf16 ? bf16_to_f32(static_cast<const uint16_t*>(src)[row + j]) : static_cast<const float*>(src)[row + j];
    uint16_t* dst = out + r * k + c0;
    if (mode == 0) {
#pragma unroll
        for (int j = 0; j < 4; ++j) dst[j] = f32_to_bf16(v[j]);
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
    const bool keep = mode == 1;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float q = e4m3_to_f32(f32_to_e4m3(v[j] / s));
        dst[j] = f32_to_bf16(keep ? q : q * s);
    }
    if (scales && lane == 0) scales[r * groups + group] = keep ? s : 1.0f;
}

}  // namespace

cudaError_t launch_grouped_gemm(const GroupedGemmLaunch& g) {
    if (g.max_tiles == 0 || g.n == 0) return cudaSuccess;
    switch (g.code) {
    case WeightCode::Bf16: return g.scaled ? launch_typed<WeightCode::Bf16, true>(g) : launch_typed<WeightCode::Bf16, false>(g);
    case WeightCode::Fp8: return launch_typed<WeightCode::Fp8, true>(g);
    case WeightCode::Fp4: return g.scaled ? launch_typed<WeightCode::Fp4, true>(g) : launch_typed<WeightCode::Fp4, false>(g);
    }
    return cudaErrorInvalidValue;
}

cudaError_t launch_gather_bf16(const void* src, bool src_bf16, int64_t stride, const int32_t* rows, int64_t m,
                               const int32_t* live_rows, int64_t k, int quant_mode, uint16_t* out, float* scales,
                               cudaStream_t stream) {
    const int64_t threads = m * (k / 128) * 32;
    if (threads > 0)
        gather_bf16_kernel<<<unsigned((threads + 255) / 256), 256, 0, stream>>>(src, src_bf16, stride, rows, m, live_rows,
                                                                              k, quant_mode, out, scales);
    return cudaGetLastError();
}

}  // namespace steadymoe::cuda
