// Probe: how fast do an H100's or H200's SMs stream weights they read once, by each way a kernel can bring
// them in? The decode kernel streams each CTA's weights by one bulk copy a stage (cp.async.bulk, issued by
// one producer lane, completing on the stage's barrier); at one token qwen3-30b-a3b's routed gate/up moved
// 2.30 TB/s that way on an H100 with its caches flushed (bench/results/2026-12-07-cuda-one-token-profile.md),
// its consumers waiting for full stages 56% of their time, and in 2026-12-01's experiments more stages in
// flight did not help. Each way here reads a buffer with nothing else in the loop (a consumer touches one
// word a stage, or the loads' values are XORed into a sink):
//   bulk:   a producer warp's first `pieces` lanes each copy 1/pieces of a stage (cp.async.bulk) into a ring
//           of `depth` stages; one consumer warp waits for each stage and hands it back;
//   ldg:    every thread loads 16 bytes at a time (ld.global.nc, no L1 allocation), `unroll` loads in flight;
// over shapes of work: the decode layer's (192 CTAs of 256 KiB, like qwen3's one-token gate/up), its bytes
// over 128 and 256 CTAs, 16 SMs alone, and long streams (every SM `ctas_per_sm` CTAs of 8 MiB each), each
// launch on memory the launch before it did not read (but for the 2.1 GiB streams of two CTAs an SM), the
// caches flushed before it by reading another 256 MiB. Reported (medians of three launches): µs by events
// and from the first CTA's start to the last one's end (the global timer, no launch in it), and TB/s by the
// latter, beside the copy bandwidth (a device-to-device copy of 1 GiB, read + written over its time) and an
// empty launch's times, measured in the same run.
// Built as build/probes/probe_weight_stream_rate (CMakeLists.txt); run it on a Hopper.
// On an H100 (bench/results/2026-12-07-cuda-one-token-profile.md, section 2) every way moved the decode
// shape's 48 MiB in 16.9-17.7 µs from the first CTA's start to the last one's end (2.8-3.0 TB/s, 0.94-0.98 of
// the copy bandwidth; about 3 µs more by events), however the bytes were cut (loads over 128 CTAs excepted),
// and long streams by bulk copies 3.2 TB/s, 1.05-1.07 of it: a copy's shape does not bound the stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "stream_kernels.cuh"

using namespace stream_probe;

namespace {

struct Way {
    const char* name;
    int stage_bytes, pieces, depth, unroll;  // bulk: the first three; ldg: unroll
};

struct Work {
    const char* name;
    int ctas;  // 0: ctas_per_sm an SM
    int ctas_per_sm;
    long long bytes_per_cta;
};

bool check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

}  // namespace

int main() {
    cudaDeviceProp prop{};
    if (!check(cudaGetDeviceProperties(&prop, 0), "device")) return 1;
    const int sms = prop.multiProcessorCount;
    const long long buffer_bytes = 3LL << 30, flush_bytes = 256LL << 20;
    char *buffer = nullptr, *flush = nullptr, *copy_to = nullptr;
    unsigned* sink = nullptr;
    long long* span = nullptr;
    if (!check(cudaMalloc(&buffer, buffer_bytes), "buffer") ||
        !check(cudaMalloc(&flush, flush_bytes), "flush") || !check(cudaMalloc(&copy_to, 1LL << 30), "copy") ||
        !check(cudaMalloc(&sink, 4096 * sizeof(unsigned)), "sink") ||
        !check(cudaMalloc(&span, 2 * 4096 * sizeof(long long)), "spans"))
        return 1;
    cudaMemset(buffer, 0x11, buffer_bytes);  // no word is the sink's key
    cudaMemset(flush, 0x11, flush_bytes);
    // Each launch reads memory the launch just before it did not (FreshRegions; not the 2.1 GiB streams): a
    // reused buffer kept lines in L2 past a flush (bench/results/2026-12-07-cuda-one-token-profile.md, call
    // 7).
    FreshRegions regions{buffer, buffer_bytes};
    auto fresh = [&](long long bytes) { return regions.take(bytes); };
    // The caches flushed by reading another buffer, so that L2 holds clean lines (a memset left it dirty, and
    // the timed reads then paid for the write-backs)
    auto flush_caches = [&] {
        ldg_stream<8>
            <<<2 * sms, 256>>>(reinterpret_cast<const uint4*>(flush), flush_bytes / 16 / (2 * sms), sink);
    };
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    struct Time {
        float event_ms, span_ms;  // by events around the launch; the CTAs' first start to last end
    };
    // Medians of three launches, each on fresh memory with the caches flushed before it.
    auto timed = [&](int ctas, long long bytes, auto launch) {
        std::vector<float> ev, sp;
        for (int r = 0; r < 3; ++r) {
            const char* src = fresh(bytes);
            flush_caches();
            cudaEventRecord(e0);
            launch(src);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float t = 0;
            cudaEventElapsedTime(&t, e0, e1);
            ev.push_back(t);
            std::vector<long long> marks(size_t(2 * ctas));
            cudaMemcpy(marks.data(), span, marks.size() * sizeof(long long), cudaMemcpyDeviceToHost);
            long long first = marks[0], last = marks[1];
            for (int c = 0; c < ctas; ++c)
                first = std::min(first, marks[2 * c]), last = std::max(last, marks[2 * c + 1]);
            sp.push_back(float(last - first) * 1e-6f);
        }
        std::sort(ev.begin(), ev.end()), std::sort(sp.begin(), sp.end());
        return Time{ev[1], sp[1]};
    };
    std::vector<float> copies;
    for (int r = 0; r < 3; ++r) {
        flush_caches();
        cudaEventRecord(e0);
        cudaMemcpyAsync(copy_to, fresh(1LL << 30), 1LL << 30, cudaMemcpyDeviceToDevice);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        copies.push_back(t);
    }
    std::sort(copies.begin(), copies.end());
    const double copy_tbs = 2.0 * double(1LL << 30) / (copies[1] * 1e-3) / 1e12;
    const Time empty =
        timed(192, 0, [&](const char*) { ldg_stream<4><<<192, 256>>>(nullptr, 0, sink, span); });
    std::printf(
        "%s, %d SMs; copy bandwidth %.0f GB/s (read + written); an empty launch of 192 CTAs %.1f µs by "
        "events, %.1f µs from its first CTA's start to its last one's end\n\n",
        prop.name, sms, copy_tbs * 1e3, empty.event_ms * 1e3, empty.span_ms * 1e3);
    std::printf(
        "| work | way | stage KiB | pieces | depth | unroll | CTAs | KiB a CTA | µs (events) | µs (CTAs) "
        "| TB/s (CTAs) | of copy bandwidth |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    const Way ways[] = {
        {"bulk", 16384, 1, 5, 0},  {"bulk", 16384, 1, 10, 0}, {"bulk", 8192, 1, 8, 0},
        {"bulk", 32768, 1, 3, 0},  {"bulk", 16384, 4, 5, 0},  {"bulk", 16384, 16, 5, 0},
        {"bulk", 65536, 16, 3, 0}, {"ldg", 0, 0, 0, 4},       {"ldg", 0, 0, 0, 8},
    };
    const Work works[] = {
        {"decode (192 x 256 KiB)", 192, 0, 256LL << 10},
        {"decode's bytes, 128 x 384 KiB", 128, 0, 384LL << 10},
        {"decode's bytes, 256 x 192 KiB", 256, 0, 192LL << 10},
        {"16 SMs, 4 MiB each", 16, 0, 4LL << 20},
        {"long, 1 an SM", 0, 1, 8LL << 20},
        {"long, 2 an SM", 0, 2, 8LL << 20},
    };
    for (const Work& w : works) {
        const int ctas = w.ctas > 0 ? w.ctas : sms * w.ctas_per_sm;
        const long long bytes = ctas * w.bytes_per_cta;
        if (bytes > buffer_bytes || ctas > 4096) continue;
        for (const Way& way : ways) {
            const bool bulk = way.name[0] == 'b';
            const int per_sm = w.ctas > 0 ? 2 : w.ctas_per_sm;  // decode: at most two CTAs an SM, as Bf16Deep
            const int smem = kRingOffset + way.depth * way.stage_bytes;
            if (bulk && (smem > int(prop.sharedMemPerMultiprocessor / per_sm) - 1024 ||
                         w.bytes_per_cta % way.stage_bytes))
                continue;
            Time t{};
            if (bulk) {
                if (!check(
                        cudaFuncSetAttribute(bulk_stream, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                        "attribute"))
                    continue;
                t = timed(ctas, bytes, [&](const char* src) {
                    bulk_stream<<<ctas, 64, smem>>>(src, w.bytes_per_cta, way.stage_bytes, way.pieces,
                                                    way.depth, L2Use{}, sink, span);
                });
            } else {
                const long long vectors = w.bytes_per_cta / 16;
                t = timed(ctas, bytes, [&](const char* src) {
                    const auto* from = reinterpret_cast<const uint4*>(src);
                    if (way.unroll == 4)
                        ldg_stream<4><<<ctas, 256>>>(from, vectors, sink, span);
                    else
                        ldg_stream<8><<<ctas, 256>>>(from, vectors, sink, span);
                });
            }
            if (!check(cudaGetLastError(), way.name)) return 1;
            const double tbs = double(bytes) / (t.span_ms * 1e-3) / 1e12;
            std::printf("| %s | %s | ", w.name, way.name);
            if (bulk)
                std::printf("%d | %d | %d | - | ", way.stage_bytes / 1024, way.pieces, way.depth);
            else
                std::printf("- | - | - | %d | ", way.unroll);
            std::printf("%d | %lld | %.1f | %.1f | %.2f | %.2f |\n", ctas, w.bytes_per_cta / 1024,
                        t.event_ms * 1e3, t.span_ms * 1e3, tbs, tbs / copy_tbs);
        }
    }
    return check(cudaDeviceSynchronize(), "run") ? 0 : 1;
}
