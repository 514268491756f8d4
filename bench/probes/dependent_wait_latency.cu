// Probe: how soon does a dependent launch's CTA see what the kernel before it wrote? The layer's decode kernels
// wait for the kernel before with griddepcontrol.wait, which returns once that whole grid has ended and its
// writes are visible. The other way: the kernel before adds to a counter (a release at GPU scope) once its
// writes are done, and the next kernel's CTAs poll it (acquire loads) and call griddepcontrol.wait only at
// their end (so that stream order still holds for the kernels after them).
// A pair: `hand_on` (P CTAs) lets the next kernel start at once, spins 20 µs (so that the next kernel's CTAs are
// resident and waiting), writes a word a CTA, notes the global timer and adds to the counter; `take` (C CTAs)
// notes the timer at its entry and once it sees the words (by the wait, or by the counter), and checks them.
// Reported per way: from the last hand_on CTA's timer (after its writes and fence) to the take CTAs' sight of
// them, µs, median over the CTAs and the latest, medians over the pairs; and "plain": the same kernels with no
// dependent launch (take starts after hand_on has ended).
// Built as build/probes/probe_dependent_wait_latency (CMakeLists.txt); run it on a Hopper.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void hand_on(unsigned* words, unsigned* counter, unsigned step, long long spin_ns, unsigned long long* done) {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < static_cast<unsigned long long>(spin_ns)) {
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        words[blockIdx.x] = step;
        __threadfence();
        done[blockIdx.x] = global_ns();
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
    }
}

__device__ __forceinline__ unsigned acquire_load(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// by_counter: poll the counter until it reaches `expected`; else griddepcontrol.wait first.
__global__ void take(const unsigned* words, const unsigned* counter, unsigned expected, unsigned step, int producers,
                     bool by_counter, unsigned long long* entry, unsigned long long* seen, unsigned* wrong) {
    const unsigned long long t_entry = global_ns();
    if (by_counter) {
        if (threadIdx.x == 0)
            while (acquire_load(counter) < expected) {
            }
        __syncthreads();
    } else {
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
    }
    if (threadIdx.x == 0) {
        const unsigned w = words[blockIdx.x % producers];
        seen[blockIdx.x] = global_ns();
        entry[blockIdx.x] = t_entry;
        if (w != step) atomicAdd(wrong, 1u);
    }
    if (by_counter) asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

bool check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main() {
    constexpr int kMaxCtas = 1024, kPairs = 21;
    constexpr long long kSpinNs = 20000;
    unsigned *words = nullptr, *counter = nullptr, *wrong = nullptr;
    unsigned long long *done = nullptr, *entry = nullptr, *seen = nullptr;
    if (!check(cudaMalloc(&words, kMaxCtas * 4), "words") || !check(cudaMalloc(&counter, 4), "counter") ||
        !check(cudaMalloc(&wrong, 4), "wrong") || !check(cudaMalloc(&done, kMaxCtas * 8), "done") ||
        !check(cudaMalloc(&entry, kMaxCtas * 8), "entry") || !check(cudaMalloc(&seen, kMaxCtas * 8), "seen"))
        return 1;
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    cudaMemset(counter, 0, 4), cudaMemset(wrong, 0, 4);
    unsigned total = 0, step = 0;  // the counter's value after the pairs so far; the pairs so far
    std::printf("| hand_on CTAs | take CTAs | way | take CTAs entered before the last write | sight after the last write, µs: median CTA | latest CTA |\n");
    std::printf("|---|---|---|---|---|---|\n");
    struct Way {
        const char* name;
        bool dependent, by_counter;
    };
    const Way ways[] = {{"plain launch, wait", false, false}, {"dependent launch, wait", true, false}, {"dependent launch, counter", true, true}};
    for (int producers : {1, 132}) {
        for (int takers : {1, 384}) {
            for (const Way& way : ways) {
                std::vector<double> med, last, early;
                for (int pair = 0; pair < kPairs; ++pair) {
                    ++step;
                    total += unsigned(producers);
                    hand_on<<<producers, 128, 0, stream>>>(words, counter, step, kSpinNs, done);
                    cudaLaunchConfig_t config{};
                    config.gridDim = dim3(takers), config.blockDim = dim3(160), config.stream = stream;
                    cudaLaunchAttribute attribute{};
                    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
                    attribute.val.programmaticStreamSerializationAllowed = way.dependent ? 1 : 0;
                    config.attrs = &attribute, config.numAttrs = 1;
                    if (!check(cudaLaunchKernelEx(&config, take, static_cast<const unsigned*>(words),
                                                  static_cast<const unsigned*>(counter), total, step, producers,
                                                  way.by_counter, entry, seen, wrong),
                               "take") ||
                        !check(cudaStreamSynchronize(stream), "pair"))
                        return 1;
                    std::vector<unsigned long long> d(producers), en(takers), se(takers);
                    cudaMemcpy(d.data(), done, producers * 8, cudaMemcpyDeviceToHost);
                    cudaMemcpy(en.data(), entry, takers * 8, cudaMemcpyDeviceToHost);
                    cudaMemcpy(se.data(), seen, takers * 8, cudaMemcpyDeviceToHost);
                    if (pair == 0) continue;  // warm-up
                    const unsigned long long last_write = *std::max_element(d.begin(), d.end());
                    std::vector<double> after(takers);
                    int before = 0;
                    for (int c = 0; c < takers; ++c) {
                        after[c] = (double(se[c]) - double(last_write)) / 1000.0;
                        before += en[c] < last_write;
                    }
                    med.push_back(median(after));
                    last.push_back(*std::max_element(after.begin(), after.end()));
                    early.push_back(double(before) / takers);
                }
                std::printf("| %d | %d | %s | %.2f | %.2f | %.2f |\n", producers, takers, way.name, median(early), median(med),
                            median(last));
            }
        }
    }
    unsigned bad = 0;
    cudaMemcpy(&bad, wrong, 4, cudaMemcpyDeviceToHost);
    std::printf("take CTAs that read a stale word: %u\n", bad);
    return bad == 0 ? 0 : 2;
}
