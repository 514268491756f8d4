// Probe: does compute-sanitizer's racecheck report the parked epilogues' hand-off — consumer warps storing an
// item's values into a shared block (STS), each warp's lane 0 arriving on a `parked` mbarrier after
// __syncwarp, epilogue warps waiting on it and loading the values (LDS), then arriving on `drained`, which
// the consumers wait on before storing the next item's — as a race? (racecheck reported STS / LDS hazards in
// the grouped GEMM's parked scatter and parked SwiGLU kernels, whose outputs match per-tile CTAs bit for bit:
// bench/results/2026-12-05-cuda-uploads-and-removals.md.) And the same hand-off through named barriers:
// `named`, bar.arrive by the side that hands over and bar.sync by the side that waits, both ways;
// `named-drained-sync`, the epilogue warps waiting at `drained` (bar.sync) where they arrived, as the kernels
// now do; `named-all-sync`, every side waiting at both barriers; `syncthreads`, __syncthreads() at both
// points (the probe's whole CTA meets there; the kernels' producer warp could not). Built as
// build/probes/probe_racecheck_parked_handoff (CMakeLists.txt); on a Hopper, in build/probes:
//   compute-sanitizer --tool racecheck --racecheck-report all ./probe_racecheck_parked_handoff mbarrier
// (and the same with the other forms). On an H100 (bench/results/2026-12-05-cuda-named-handoff.md)
// the first three forms read every value right; racecheck reported 15378 hazards through mbarriers (the first shown:
// the epilogue warps' loads after the consumers' stores), 7682 through `named` and 4098 through
// `named-drained-sync` (the first shown: the next item's stores after the loads, an order both bar.syncs
// set). On another H100 (bench/results/2026-12-05-cuda-route-and-permute.md): 15378, 7682 and 3841, and none
// through `named-all-sync` or `syncthreads`: here racecheck reported nothing only where every side waited at
// both barriers.
// The kernels' consumers waiting at `parked` too cut racecheck's reports on them by 95%, not to none.
// Each run also checks every value the epilogue warps read, so a hand-off that did race might show as wrong
// values.
#include <cstdio>
#include <cstdint>
#include <cstring>
#include "../../src/kernels/cuda/async_barrier.cuh"
using namespace steadymoe::cuda;

constexpr int kConsumerWarps = 4, kEpilogueWarps = 2, kItems = 16;
constexpr int kHandOff = 32 * (kConsumerWarps + kEpilogueWarps);  // threads meeting at a named barrier

__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(kHandOff) : "memory"); }
__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(kHandOff) : "memory"); }

enum class HandOff { Mbarriers, Named, NamedDrainedSync, NamedAllSync, SyncThreads };

// The hand-off's two meeting points in the named forms: `waits` says whether this side waits there.
template <HandOff kHow>
__device__ __forceinline__ void meet(int id, bool waits) {
    if constexpr (kHow == HandOff::SyncThreads) __syncthreads();
    else if (waits || kHow == HandOff::NamedAllSync) named_sync(id);
    else named_arrive(id);
}

template <HandOff kHow>
__global__ void probe(int* wrong) {
    constexpr bool kNamed = kHow != HandOff::Mbarriers;
#if defined(__CUDA_ARCH__)
    __shared__ int block[kConsumerWarps * 32];
    __shared__ __align__(8) uint64_t parked, drained;
    constexpr int kParked = 1, kDrained = 2;  // (named barrier ids; 0 is __syncthreads')
    if (threadIdx.x == 0) {
        barrier::init(&parked, kConsumerWarps), barrier::init(&drained, kEpilogueWarps);
        barrier::fence_init();
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    if (warp < kConsumerWarps) {  // consumers: park item w once the epilogue warps are done with item w - 1
        for (int w = 0; w < kItems; ++w) {
            if (w > 0) {
                if constexpr (kNamed) meet<kHow>(kDrained, true);
                else barrier::wait(&drained, uint32_t((w - 1) & 1));
            }
            block[threadIdx.x] = w * 1000 + int(threadIdx.x);
            if constexpr (kNamed) {
                meet<kHow>(kParked, false);
            } else {
                __syncwarp();
                if (lane == 0) barrier::arrive(&parked);
            }
        }
        return;
    }
    const int e = warp - kConsumerWarps;  // an epilogue warp: its share of every parked item
    int bad = 0;
    for (int w = 0; w < kItems; ++w) {
        if constexpr (kNamed) meet<kHow>(kParked, true);
        else barrier::wait(&parked, uint32_t(w & 1));
        for (int i = e * 32 + lane; i < kConsumerWarps * 32; i += kEpilogueWarps * 32) bad += block[i] != w * 1000 + i;
        if constexpr (kNamed) {
            // (the consumers wait before items 1.. only)
            if (w + 1 < kItems) meet<kHow>(kDrained, kHow == HandOff::NamedDrainedSync);
        } else {
            __syncwarp();
            if (lane == 0) barrier::arrive(&drained);
        }
    }
    atomicAdd(wrong, bad);
#endif
}

int main(int argc, char** argv) {
    const char* how = argc > 1 ? argv[1] : "mbarrier";
    int* wrong;
    cudaMalloc(&wrong, 4);
    cudaMemset(wrong, 0, 4);
    if (std::strcmp(how, "named") == 0) probe<HandOff::Named><<<1, kHandOff>>>(wrong);
    else if (std::strcmp(how, "named-drained-sync") == 0)
        probe<HandOff::NamedDrainedSync><<<1, kHandOff>>>(wrong);
    else if (std::strcmp(how, "named-all-sync") == 0) probe<HandOff::NamedAllSync><<<1, kHandOff>>>(wrong);
    else if (std::strcmp(how, "syncthreads") == 0) probe<HandOff::SyncThreads><<<1, kHandOff>>>(wrong);
    else if (std::strcmp(how, "mbarrier") == 0) probe<HandOff::Mbarriers><<<1, kHandOff>>>(wrong);
    else return std::fprintf(stderr, "usage: probe mbarrier|named|named-drained-sync|named-all-sync|syncthreads\n"),
                2;
    const cudaError_t e = cudaDeviceSynchronize();
    int host = -1;
    cudaMemcpy(&host, wrong, 4, cudaMemcpyDeviceToHost);
    std::printf("probe (%s): %s, %d values read wrong\n", how, cudaGetErrorString(e), host);
    return e == cudaSuccess && host == 0 ? 0 : 1;
}
