// The tensor-core grouped expert GEMM for any sm_80+ GPU: mma.sync m16n8k16 bf16 -> f32 over the
// shared stages of grouped_gemm_stage.cuh (cp.async pipeline, ldmatrix). Hopper takes
// grouped_gemm_sm90.cu instead; which one runs depends only on the GPU.
#include <algorithm>
#include <cstdint>

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

}  // namespace

int grouped_gemm_tile_rows() { return hopper_gemm_available() ? kHopperTileRows : kRows; }

int grouped_gemm_tall_tile_rows(WeightCode code, bool a_fp8, bool fp4_block_exact) {
    static const bool off = env_equals("STEADYMOE_TALL_TILES", "0");
    const bool tiled = code == WeightCode::Fp8 || (code == WeightCode::Fp4 && fp4_block_exact && grouped_gemm_fp4_exact_tiled());
    return !off && tiled && a_fp8 && grouped_gemm_takes_fp8_activations(code) ? kHopperTallTileRows : 0;
}

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
uint64_t grouped_gemm_quad_launches() { return hopper_quad_launches(); }
uint64_t grouped_gemm_parked_scatter_launches() { return hopper_parked_scatters(); }
uint64_t grouped_gemm_scale_map_launches() { return hopper_scale_map_launches(); }
uint64_t grouped_gemm_tall_launches() { return hopper_tall_launches(); }
uint64_t grouped_gemm_parked_swiglu_launches() { return hopper_parked_swiglus(); }
uint64_t grouped_gemm_weight_pair_launches() { return hopper_weight_pair_launches(); }

bool grouped_gemm_takes_fp8_activations(WeightCode code) {
    static const bool enabled = !env_equals("STEADYMOE_FP8_TENSOR_CORES", "0");
    return code != WeightCode::Bf16 && enabled && hopper_gemm_available();
}

int grouped_gemm_fp4_e4m3_ctas_per_sm(int tokens) {
    return grouped_gemm_takes_fp8_activations(WeightCode::Fp4) ? hopper_fp4_e4m3_ctas_per_sm(tokens) : 0;
}

bool grouped_gemm_fp4_exact_tiled() { return grouped_gemm_takes_fp8_activations(WeightCode::Fp4) && hopper_fp4_exact_tiled(); }

namespace {

// The sm_80 kernel's launch.
cudaError_t launch_portable(const GroupedGemmLaunch& g) {
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

}  // namespace

cudaError_t launch_grouped_gemm(const GroupedGemmLaunch& g) {
    if (g.max_tiles == 0 || g.n == 0) return cudaSuccess;
    // Tiles no taller than the GPU's, or tall ones where the launch may take them; an identity launch's are
    // identity_tile_rows tall.
    const bool tall_allowed = g.tile_m == grouped_gemm_tall_tile_rows(g.code, g.a_fp8 != nullptr, g.fp4_block_exact) && g.a_scale &&
                              !g.few_rows && g.k_splits == 1 && g.identity_rows == 0;
    if (g.tile_m < 0 || (g.tile_m > grouped_gemm_tile_rows() && !tall_allowed) ||
        (g.identity_rows > 0 && g.tile_m != 0 && g.tile_m != g.identity_tile_rows))
        return cudaErrorInvalidValue;
    if (g.identity_rows > 0 && (g.identity_tile_rows != grouped_gemm_tile_rows() ||
                                (g.identity_rows + g.identity_tile_rows - 1) / g.identity_tile_rows > g.max_tiles))
        return cudaErrorInvalidValue;
    const bool split_ok = g.k_splits == 1 || (g.k_splits > 1 && g.k % (int64_t(g.k_splits) * 128) == 0 &&
                                              g.epilogue == GemmEpilogue::Store && g.k_splits <= 65535);
    if (!split_ok) return cudaErrorInvalidValue;
    if (g.code == WeightCode::Fp4 && (g.a_fp8 != nullptr) != g.fp4_e4m3_order) return cudaErrorInvalidValue;  // the codes' order
    if (g.fp4_block_exact && !g.fp4_e4m3_order) return cudaErrorInvalidValue;  // (only e4m3 order has that layout)
    if (g.out_bf16 && (g.epilogue == GemmEpilogue::Store || !g.round_bf16)) return cudaErrorInvalidValue;
    if (g.a_index && !grouped_gemm_reads_indexed_rows(g)) return cudaErrorInvalidValue;
    const int64_t block_major_rows = g.a_scale_layout.block_major_rows;
    if (block_major_rows != 0 && (block_major_rows < 0 || block_major_rows % 4 != 0 || !grouped_gemm_reads_block_major_scales(g)))
        return cudaErrorInvalidValue;
    return hopper_gemm_available() ? launch_grouped_gemm_sm90(g) : launch_portable(g);
}

bool grouped_gemm_reads_indexed_rows(const GroupedGemmLaunch& g) {
    static const bool enabled = !env_equals("STEADYMOE_INDEXED_ROWS", "0");
    return enabled && hopper_gemm_available() && hopper_decode(g);
}

bool grouped_gemm_reads_block_major_scales(const GroupedGemmLaunch& g) {
    return hopper_gemm_available() && hopper_block_major_scales(g);
}

bool grouped_gemm_prefers_rows_in_order(const GroupedGemmLaunch& g) {
    return hopper_gemm_available() && hopper_decode(g) && hopper_decode_prefers_rows_in_order(g);
}

}  // namespace steadymoe::cuda
