#include <algorithm>

#include "device_clock.cuh"
#include "ep_peer_kernels.hpp"

namespace steadymoe::cuda {

EpWindowLayout EpWindowLayout::make(int32_t ranks, int64_t cap_tokens, int64_t top_k, int64_t hidden) {
    auto align = [](int64_t v) { return (v + 255) / 256 * 256; };
    EpWindowLayout w;
    w.ranks = ranks;
    w.cap_rows = cap_tokens;
    w.cap_pairs = cap_tokens * top_k;
    w.row_bytes = hidden * 4;
    w.result_bytes = hidden * 4;
    w.flags = 0;
    w.headers = align(2 * kMaxEpRanks * 8);
    w.pairs = w.headers + align(kMaxEpRanks * kEpHeaderInts * 4);
    w.rows = w.pairs + align(ranks * w.cap_pairs * int64_t(sizeof(EpPair)));
    w.back = w.rows + align(ranks * w.cap_rows * w.row_bytes);
    w.total = w.back + align(w.cap_pairs * w.result_bytes);
    return w;
}

namespace {

constexpr int kThreads = 256;
constexpr unsigned kCopyBlocks = 528;  // four blocks per SM of an H200: the copies are bandwidth-bound

// Where source/destination d's rows and pairs start, from headers [d][kEpHeaderInts].
struct Bases {
    int32_t rows[kMaxEpRanks + 1];
    int32_t pairs[kMaxEpRanks + 1];
};

__device__ Bases bases_of(const int32_t* headers, int32_t ranks) {
    Bases b;
    b.rows[0] = b.pairs[0] = 0;
    for (int d = 0; d < ranks; ++d) {
        b.rows[d + 1] = b.rows[d] + headers[d * kEpHeaderInts + 1];
        b.pairs[d + 1] = b.pairs[d] + headers[d * kEpHeaderInts + 2];
    }
    return b;
}

__device__ int owner(const int32_t* base, int32_t ranks, int64_t i) {
    int d = 0;
    while (d + 1 < ranks && i >= base[d + 1]) ++d;
    return d;
}

__global__ void dispatch_kernel(EpPeers peers, EpWindowLayout w, int32_t me, const uint4* hidden,
                                int64_t row_vectors, const int32_t* send_token, const EpPair* send_pairs,
                                const int32_t* headers) {
    const Bases b = bases_of(headers, w.ranks);
    const int64_t stride = int64_t(gridDim.x) * blockDim.x,
                  first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31;
    // A warp per row: 16-byte copies along it, coalesced on both sides.
    for (int64_t g = first / 32; g < b.rows[w.ranks]; g += stride / 32) {
        const int d = owner(b.rows, w.ranks, g);
        const int64_t r = g - b.rows[d];
        auto* dst =
            reinterpret_cast<uint4*>(peers.base[d] + w.rows + (me * w.cap_rows + r) * row_vectors * 16);
        const uint4* src = hidden + int64_t(send_token[g]) * row_vectors;
        for (int64_t c = lane; c < row_vectors; c += 32) dst[c] = src[c];
    }
    for (int64_t i = first; i < b.pairs[w.ranks]; i += stride) {
        const int d = owner(b.pairs, w.ranks, i);
        auto* dst = reinterpret_cast<EpPair*>(peers.base[d] + w.pairs) + me * w.cap_pairs + (i - b.pairs[d]);
        *dst = send_pairs[i];
    }
    if (first < int64_t(w.ranks) * kEpHeaderInts) {
        const int d = int(first / kEpHeaderInts), f = int(first % kEpHeaderInts);
        reinterpret_cast<int32_t*>(peers.base[d] + w.headers)[me * kEpHeaderInts + f] = headers[first];
    }
    __threadfence_system();
}

__global__ void signal_kernel(EpPeers peers, EpWindowLayout w, int32_t me, int32_t which, uint64_t seq) {
    const int d = threadIdx.x;
    if (d >= w.ranks) return;
    __threadfence_system();
    volatile uint64_t* flag =
        reinterpret_cast<volatile uint64_t*>(peers.base[d] + w.flags) + which * kMaxEpRanks + me;
    *flag = seq;
    __threadfence_system();
}

__global__ void wait_kernel(const char* window, EpWindowLayout w, int32_t which, uint64_t seq,
                            uint64_t timeout_ns, int32_t* error) {
    const int s = threadIdx.x;
    if (s >= w.ranks) return;
    const volatile uint64_t* flag =
        reinterpret_cast<const volatile uint64_t*>(window + w.flags) + which * kMaxEpRanks + s;
    const uint64_t start = global_ns();
    while (*flag < seq) {
        if (global_ns() - start > timeout_ns) {
            error[0] = which == 0 ? kEpDispatchTimeout : kEpCombineTimeout;
            error[1] = s;
            return;
        }
        __nanosleep(64);
    }
    __threadfence_system();
}

__global__ void unpack_kernel(const char* window, EpWindowLayout w, int32_t slots, int32_t* slot,
                              float* weight, int32_t* row, int32_t* live, int32_t* error) {
    const auto* headers = reinterpret_cast<const int32_t*>(window + w.headers);
    Bases b;
    b.pairs[0] = 0;
    bool sane = true;
    for (int s = 0; s < w.ranks; ++s) {
        const int32_t rows = headers[s * kEpHeaderInts + 1], pairs = headers[s * kEpHeaderInts + 2];
        sane = sane && rows >= 0 && rows <= w.cap_rows && pairs >= 0 && pairs <= w.cap_pairs;
        b.pairs[s + 1] = b.pairs[s] + (sane ? pairs : 0);
    }
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i == 0) {
        *live = b.pairs[w.ranks];
        if (!sane) error[0] = kEpMalformed;
    }
    if (!sane || i >= b.pairs[w.ranks]) return;
    const int s = owner(b.pairs, w.ranks, i);
    const int64_t j = i - b.pairs[s];
    const EpPair p = reinterpret_cast<const EpPair*>(window + w.pairs)[s * w.cap_pairs + j];
    const bool ok = p.slot >= 0 && p.slot < slots && p.row >= 0 && p.row < headers[s * kEpHeaderInts + 1];
    if (!ok) error[0] = kEpMalformed, error[1] = s;
    slot[i] = ok ? p.slot : -1;
    weight[i] = p.weight;
    row[i] = ok ? int32_t(s * w.cap_rows + p.row) : 0;
}

__global__ void return_kernel(EpPeers peers, EpWindowLayout w, const char* window, const uint4* results,
                              const int32_t* live) {
    const auto* headers = reinterpret_cast<const int32_t*>(window + w.headers);
    Bases b;
    b.pairs[0] = 0;
    for (int s = 0; s < w.ranks; ++s) b.pairs[s + 1] = b.pairs[s] + headers[s * kEpHeaderInts + 2];
    const int64_t vectors = w.result_bytes / 16, warps = int64_t(gridDim.x) * blockDim.x / 32;
    const int lane = threadIdx.x & 31;
    for (int64_t pair = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; pair < *live; pair += warps) {
        const int s = owner(b.pairs, w.ranks, pair);
        const int64_t at = headers[s * kEpHeaderInts + 4] + (pair - b.pairs[s]);
        auto* dst = reinterpret_cast<uint4*>(peers.base[s] + w.back + at * w.result_bytes);
        const uint4* src = results + pair * vectors;
        for (int64_t c = lane; c < vectors; c += 32) dst[c] = src[c];
    }
    __threadfence_system();
}

}  // namespace

cudaError_t launch_ep_peer_dispatch(const EpPeers& peers, const EpWindowLayout& w, int32_t me,
                                    const void* hidden, int64_t row_bytes, const int32_t* send_token,
                                    const EpPair* send_pairs, const int32_t* headers, cudaStream_t stream) {
    if (row_bytes % 16 != 0 || row_bytes > w.row_bytes) return cudaErrorInvalidValue;
    dispatch_kernel<<<kCopyBlocks, kThreads, 0, stream>>>(peers, w, me, static_cast<const uint4*>(hidden),
                                                          row_bytes / 16, send_token, send_pairs, headers);
    return cudaGetLastError();
}

cudaError_t launch_ep_peer_signal(const EpPeers& peers, const EpWindowLayout& w, int32_t me, int32_t which,
                                  uint64_t seq, cudaStream_t stream) {
    signal_kernel<<<1, kMaxEpRanks, 0, stream>>>(peers, w, me, which, seq);
    return cudaGetLastError();
}

cudaError_t launch_ep_peer_wait(const char* window, const EpWindowLayout& w, int32_t which, uint64_t seq,
                                uint64_t timeout_ns, int32_t* error, cudaStream_t stream) {
    wait_kernel<<<1, kMaxEpRanks, 0, stream>>>(window, w, which, seq, timeout_ns, error);
    return cudaGetLastError();
}

cudaError_t launch_ep_peer_unpack(const char* window, const EpWindowLayout& w, int32_t slots, int32_t* slot,
                                  float* weight, int32_t* row, int32_t* live, int32_t* error,
                                  cudaStream_t stream) {
    const int64_t bound = int64_t(w.ranks) * w.cap_pairs;
    unpack_kernel<<<unsigned((bound + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        window, w, slots, slot, weight, row, live, error);
    return cudaGetLastError();
}

cudaError_t launch_ep_peer_return(const EpPeers& peers, const EpWindowLayout& w, const char* window,
                                  const float* results, const int32_t* live, cudaStream_t stream) {
    if (w.result_bytes % 16 != 0) return cudaErrorInvalidValue;
    return_kernel<<<kCopyBlocks, kThreads, 0, stream>>>(peers, w, window,
                                                        reinterpret_cast<const uint4*>(results), live);
    return cudaGetLastError();
}

}  // namespace steadymoe::cuda
