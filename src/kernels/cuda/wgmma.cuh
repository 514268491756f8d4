// Hopper warpgroup MMA (wgmma) helpers shared by the sm_90a kernels: shared-memory operand descriptors,
// the MMA shapes the grouped GEMMs use, and the fences and waits around them.
#pragma once

#include <cstdint>

namespace steadymoe::cuda::wgmma {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma exists for sm_90a device code only
// A K-major operand tile with 8-row swizzle atoms of kAtomBytes: 128-byte rows in the 128-byte swizzle
// (bf16 stages: 1024-byte atoms, mode 1) or 64-byte rows in the 64-byte swizzle (e4m3: 512, mode 2).
// A tile `bytes` further on has the descriptor + bytes / 16 (the start address field holds every
// shared-memory address / 16 without carrying past it).
template <int kAtomBytes>
__device__ __forceinline__ uint64_t smem_descriptor(uint32_t address) {
    static_assert(kAtomBytes == 1024 || kAtomBytes == 512);
    return uint64_t((address & 0x3FFFF) >> 4)             // start address
           | (uint64_t(1) << 16)                           // leading byte offset (unused for swizzled K-major)
           | (uint64_t(kAtomBytes >> 4) << 32)             // stride byte offset: one 8-row atom
           | (uint64_t(kAtomBytes == 1024 ? 1 : 2) << 62);  // swizzle mode
}
template <int kAtomBytes>
__device__ __forceinline__ uint64_t smem_descriptor(const void* tile) {
    return smem_descriptor<kAtomBytes>(static_cast<uint32_t>(__cvta_generic_to_shared(tile)));
}

// The 64 f32 accumulators of an m64n128 wgmma: their placeholders in the instruction and their operands.
#define SMOE_WGMMA_ACC_REGS \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
// (d[o] .. d[o + 63]: the operands of 64 accumulators from o on)
#define SMOE_WGMMA_ACC_OPERANDS_AT(d, o) \
    "+f"(d[o + 0]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7]), \
    "+f"(d[o + 8]), "+f"(d[o + 9]), "+f"(d[o + 10]), "+f"(d[o + 11]), "+f"(d[o + 12]), "+f"(d[o + 13]), "+f"(d[o + 14]), "+f"(d[o + 15]), \
    "+f"(d[o + 16]), "+f"(d[o + 17]), "+f"(d[o + 18]), "+f"(d[o + 19]), "+f"(d[o + 20]), "+f"(d[o + 21]), "+f"(d[o + 22]), "+f"(d[o + 23]), \
    "+f"(d[o + 24]), "+f"(d[o + 25]), "+f"(d[o + 26]), "+f"(d[o + 27]), "+f"(d[o + 28]), "+f"(d[o + 29]), "+f"(d[o + 30]), "+f"(d[o + 31]), \
    "+f"(d[o + 32]), "+f"(d[o + 33]), "+f"(d[o + 34]), "+f"(d[o + 35]), "+f"(d[o + 36]), "+f"(d[o + 37]), "+f"(d[o + 38]), "+f"(d[o + 39]), \
    "+f"(d[o + 40]), "+f"(d[o + 41]), "+f"(d[o + 42]), "+f"(d[o + 43]), "+f"(d[o + 44]), "+f"(d[o + 45]), "+f"(d[o + 46]), "+f"(d[o + 47]), \
    "+f"(d[o + 48]), "+f"(d[o + 49]), "+f"(d[o + 50]), "+f"(d[o + 51]), "+f"(d[o + 52]), "+f"(d[o + 53]), "+f"(d[o + 54]), "+f"(d[o + 55]), \
    "+f"(d[o + 56]), "+f"(d[o + 57]), "+f"(d[o + 58]), "+f"(d[o + 59]), "+f"(d[o + 60]), "+f"(d[o + 61]), "+f"(d[o + 62]), "+f"(d[o + 63])
#define SMOE_WGMMA_ACC_OPERANDS(d) SMOE_WGMMA_ACC_OPERANDS_AT(d, 0)
// The 16 f32 accumulators of an m64n32 wgmma: their placeholders and their operands.
#define SMOE_WGMMA_ACC16_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
#define SMOE_WGMMA_ACC16_OPERANDS(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
// The 32 f32 accumulators of an m64n64 wgmma (the decode kernel's 64-token CTAs): their placeholders and
// their operands.
#define SMOE_WGMMA_ACC32_REGS \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define SMOE_WGMMA_ACC32_OPERANDS(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// D (64 x 128, f32) = A (64 x 32) . B (128 x 32)^T (+ D where `accumulate`), both e4m3 K-major in shared
// memory. Starting a block's sum with accumulate = false spares the fold zeroing 64 registers per block
// (the sum is the same: a product sum of -0 becomes +0 either way once folded into a total that starts +0).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        SMOE_WGMMA_ACC_REGS
        "%64, %65, p, 1, 1;\n"
        "}\n"
        : SMOE_WGMMA_ACC_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// D (64 x 128, f32) += A (64 x 16) . B (128 x 16)^T, both bf16 K-major in shared memory.
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        SMOE_WGMMA_ACC_REGS
        "%64, %65, 1, 1, 1, 0, 0;\n"
        "}\n"
        : SMOE_WGMMA_ACC_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b));
}

// D (64 x 256, f32) += A (64 x 16) . B (256 x 16)^T, both bf16 K-major in shared memory: one instruction reads
// A once for 256 features (wide tiles). Its 128 accumulators are two m64n128 sets side by side: element i < 64
// is feature 8 * (i / 4) + 2q + i % 2 as there, element 64 + i the same feature + 128.
#define SMOE_WGMMA_ACC_REGS_256 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
#define SMOE_WGMMA_ACC_OPERANDS_256(d) SMOE_WGMMA_ACC_OPERANDS_AT(d, 0), SMOE_WGMMA_ACC_OPERANDS_AT(d, 64)
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        SMOE_WGMMA_ACC_REGS_256
        "%128, %129, 1, 1, 1, 0, 0;\n"
        "}\n"
        : SMOE_WGMMA_ACC_OPERANDS_256(d)
        : "l"(desc_a), "l"(desc_b));
}

// D (64 x 32, f32) += A (64 x 16) . B (32 x 16)^T: A bf16 from registers (four per thread, as mma.sync's
// m16n8k16 A fragment for each warp's 16 rows), B bf16 K-major in shared memory. The weights-as-A form of
// the decode kernels: N counts tokens, so few-token batches multiply no padding rows of 64.
__device__ __forceinline__ void wgmma_m64n32k16_rs(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        SMOE_WGMMA_ACC16_REGS
        "{%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"
        "}\n"
        : SMOE_WGMMA_ACC16_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
}

// The weights-as-A forms with both operands in shared memory (the decode kernel's bf16 and FP8 weights):
// D (64 x 16, f32) += A (64 x 16) . B (16 x 16)^T, bf16 K-major;
__device__ __forceinline__ void wgmma_m64n16k16(float (&d)[8], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, 1, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(desc_a), "l"(desc_b));
}
// D (64 x 32, f32) += A (64 x 16) . B (32 x 16)^T, bf16 K-major (the decode kernel's 32-token bf16 CTAs).
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        SMOE_WGMMA_ACC16_REGS
        "%16, %17, 1, 1, 1, 0, 0;\n"
        "}\n"
        : SMOE_WGMMA_ACC16_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b));
}
// D (64 x 64, f32) += A (64 x 16) . B (64 x 16)^T, bf16 K-major (the decode kernel's 64-token bf16 CTAs).
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        SMOE_WGMMA_ACC32_REGS
        "%32, %33, 1, 1, 1, 0, 0;\n"
        "}\n"
        : SMOE_WGMMA_ACC32_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b));
}
// D (64 x 64, f32) = A (64 x 32) . B (64 x 32)^T (+ D where `accumulate`), e4m3 K-major (the decode kernel's
// 64-token FP8 CTAs).
__device__ __forceinline__ void wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                     bool accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        SMOE_WGMMA_ACC32_REGS
        "%32, %33, p, 1, 1;\n"
        "}\n"
        : SMOE_WGMMA_ACC32_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}
// D (64 x 32, f32) = A (64 x 32) . B (32 x 32)^T (+ D where `accumulate`), e4m3 K-major.
__device__ __forceinline__ void wgmma_m64n32k32_e4m3(float (&d)[16], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
        SMOE_WGMMA_ACC16_REGS
        "%16, %17, p, 1, 1;\n"
        "}\n"
        : SMOE_WGMMA_ACC16_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// D (64 x 8, f32) = A (64 x 32) . B (8 x 32)^T (+ D where `accumulate`), e4m3 K-major.
__device__ __forceinline__ void wgmma_m64n8k32_e4m3(float (&d)[4], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3}, %4, %5, p, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
}

// The weights-as-A forms of FP4 weights meeting e4m3 tokens: A e4m3 from registers (four per thread:
// (row, k 4q..4q+3), (row + 8, k 4q..), (row, k 16 + 4q..), (row + 8, k 16 + 4q..) of each warp's 16 rows,
// q = lane % 4), B e4m3 K-major in shared memory; D = A . B^T, written anew (kScaleD 0: D's values going in
// are not read, so it need not be set), or D += A . B^T (kScaleD 1).
// D (64 x 8, f32).
template <int kScaleD = 0>
__device__ __forceinline__ void wgmma_m64n8k32_e4m3_rs(float (&d)[4], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, %8, %9, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kScaleD));
}
// D (64 x 16, f32).
template <int kScaleD = 0>
__device__ __forceinline__ void wgmma_m64n16k32_e4m3_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, %13, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kScaleD));
}
// D (64 x 32, f32).
template <int kScaleD = 0>
__device__ __forceinline__ void wgmma_m64n32k32_e4m3_rs(float (&d)[16], const uint32_t (&a)[4],
                                                        uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
        SMOE_WGMMA_ACC16_REGS
        "{%16, %17, %18, %19}, %20, %21, 1, 1;\n"
        "}\n"
        : SMOE_WGMMA_ACC16_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kScaleD));
}
// D (64 x 64, f32).
template <int kScaleD = 0>
__device__ __forceinline__ void wgmma_m64n64k32_e4m3_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
        SMOE_WGMMA_ACC32_REGS
        "{%32, %33, %34, %35}, %36, %37, 1, 1;\n"
        "}\n"
        : SMOE_WGMMA_ACC32_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kScaleD));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Shared-memory writes by ordinary stores and cp.async become visible to the wgmma (async) proxy.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving accumulator accesses across the asynchronous MMAs.
template <int kN>
__device__ __forceinline__ void fence_operands(float (&d)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#endif

}  // namespace steadymoe::cuda::wgmma
