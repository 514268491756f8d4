// Probe: can a decode GEMM's weight stream pull the next GEMM's weights into L2 for it? In a one-token layer
// the gate/up's weight stream moves 2.3 TB/s on average (qwen3-30b-a3b's 50 MB on an H100, where a long
// stream moves 3.2: bench/results/2026-12-07-cuda-one-token-profile.md), and the down GEMM's weights, which
// come next, are known once the routing is. Two bulk streams run back to back on one stream, the caches
// flushed before the pair, each pair reading memory no pair before it read (stream_kernels.cuh): A, shaped
// as a gate/up's, then B, as its down GEMM's. A's CTAs may mark their copies first to go in L2 (evict_first,
// read once) and may ask L2 to fetch their share of B (cp.async.bulk.prefetch.L2, kept past lines marked
// first to go), at once or after half their stages. Reported per way: A's and B's µs by events (medians of
// five pairs) and the pair's, against A then B as they are; and B alone with B already in L2 (run twice,
// the second timed), the bound for B.
// Built as build/probes/probe_next_weights_prefetch (CMakeLists.txt); run it on a Hopper.
// On an H100 (same file, section 3) it could not: A took 7 µs longer for B's 24 MiB, about what those bytes
// take at DRAM's pace, and B gained 2 of them; A then B took 14.7-16.5% longer than as they are.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "stream_kernels.cuh"

using namespace stream_probe;

namespace {

struct Stream {
    int ctas;
    long long bytes_per_cta;
    int stage_bytes, depth;
};

struct Layer {
    const char* name;
    Stream a, b;
};

struct Way {
    const char* name;
    bool evict_first, prefetch;
    int prefetch_after_half;  // 0: at once; 1: after half A's stages
};

bool check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

int smem_of(const Stream& s) { return kRingOffset + s.depth * s.stage_bytes; }

}  // namespace

int main() {
    cudaDeviceProp prop{};
    if (!check(cudaGetDeviceProperties(&prop, 0), "device")) return 1;
    // Every pair reads A and B where no earlier pair did (until the pool wraps, 4 GiB of reads later): what
    // an earlier pair left in L2 must not serve B (reads of a 256 MiB buffer between pairs did not evict all
    // of it)
    const long long pool_bytes = 4LL << 30, flush_bytes = 256LL << 20;
    char *pool = nullptr, *flush = nullptr;
    unsigned* sink = nullptr;
    if (!check(cudaMalloc(&pool, pool_bytes), "pool") || !check(cudaMalloc(&flush, flush_bytes), "flush") ||
        !check(cudaMalloc(&sink, 4096 * sizeof(unsigned)), "sink"))
        return 1;
    cudaMemset(pool, 0x11, pool_bytes), cudaMemset(flush, 0x11, flush_bytes);
    FreshRegions regions{pool, pool_bytes};
    auto fresh = [&](long long bytes) { return regions.take(bytes); };
    if (!check(cudaFuncSetAttribute(bulk_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
               "attribute"))
        return 1;
    const int sms = prop.multiProcessorCount;
    auto flush_caches = [&] {  // by reads: L2 left holding clean lines
        ldg_stream<8>
            <<<2 * sms, 256>>>(reinterpret_cast<const uint4*>(flush), flush_bytes / 16 / (2 * sms), sink);
    };
    auto run = [&](const Stream& s, const char* src, L2Use l2) {
        bulk_stream<<<s.ctas, 64, smem_of(s)>>>(src, s.bytes_per_cta, s.stage_bytes, 1, s.depth, l2, sink);
    };
    cudaEvent_t e[3];
    for (auto& ev : e) cudaEventCreate(&ev);
    auto ms_between = [&](int i, int j) {
        float t = 0;
        cudaEventElapsedTime(&t, e[i], e[j]);
        return t;
    };
    auto median = [](std::vector<float> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    const Layer layers[] = {
        // qwen3-30b-a3b at one token: gate/up 192 CTAs of 256 KiB, down 256 of 96 KiB, bf16 stages of 16 KiB
        {"gate/up 192 x 256 KiB, down 256 x 96 KiB",
         {192, 256LL << 10, 16384, 5},
         {256, 96LL << 10, 16384, 5}},
        // deepseek-v4-flash's routed FP4 experts at one token: 384 CTAs of 128 KiB, then of 64 KiB, stages of
        // 8 KiB
        {"gate/up 384 x 128 KiB, down 384 x 64 KiB", {384, 128LL << 10, 8192, 4}, {384, 64LL << 10, 8192, 4}},
    };
    const Way ways[] = {
        {"as they are", false, false, 0},
        {"A's copies first to go", true, false, 0},
        {"A prefetches B", false, true, 0},
        {"A's copies first to go, A prefetches B", true, true, 0},
        {"A's copies first to go, A prefetches B after half its stages", true, true, 1},
    };
    std::printf("%s, %d SMs\n\n", prop.name, sms);
    std::printf(
        "| A, then B | way | A µs | B µs | A + B µs | against as they are |\n|---|---|---|---|---|---|\n");
    for (const Layer& layer : layers) {
        const long long b_total = layer.b.ctas * layer.b.bytes_per_cta;
        float base = 0;
        for (const Way& way : ways) {
            std::vector<float> a_ms, b_ms, pair_ms;
            for (int r = 0; r < 5; ++r) {
                flush_caches();
                const char* a_region = fresh(layer.a.ctas * layer.a.bytes_per_cta);
                const char* b_region = fresh(b_total);
                L2Use l2;
                l2.evict_first = way.evict_first;
                if (way.prefetch) {
                    l2.prefetch = b_region, l2.prefetch_bytes = b_total / layer.a.ctas;
                    l2.prefetch_after =
                        way.prefetch_after_half ? int(layer.a.bytes_per_cta / layer.a.stage_bytes / 2) : 0;
                }
                cudaEventRecord(e[0]);
                run(layer.a, a_region, l2);
                cudaEventRecord(e[1]);
                run(layer.b, b_region, L2Use{});
                cudaEventRecord(e[2]);
                if (!check(cudaEventSynchronize(e[2]), way.name)) return 1;
                a_ms.push_back(ms_between(0, 1)), b_ms.push_back(ms_between(1, 2)),
                    pair_ms.push_back(ms_between(0, 2));
            }
            const float pair = median(pair_ms);
            if (base == 0) base = pair;
            std::printf("| %s | %s | %.1f | %.1f | %.1f | %+.1f%% |\n", layer.name, way.name,
                        median(a_ms) * 1e3, median(b_ms) * 1e3, pair * 1e3, (pair / base - 1) * 100);
        }
        std::vector<float> warm;
        const char* b_region = fresh(b_total);
        for (int r = 0; r < 5; ++r) {
            run(layer.b, b_region, L2Use{});
            cudaEventRecord(e[0]);
            run(layer.b, b_region, L2Use{});
            cudaEventRecord(e[1]);
            if (!check(cudaEventSynchronize(e[1]), "warm B")) return 1;
            warm.push_back(ms_between(0, 1));
        }
        std::printf("| %s | B alone, already in L2 | - | %.1f | - | - |\n", layer.name, median(warm) * 1e3);
    }
    return check(cudaDeviceSynchronize(), "run") ? 0 : 1;
}
