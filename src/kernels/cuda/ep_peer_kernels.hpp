// Expert-parallel exchanges by direct writes into the other GPUs' memory (peer access over NVLink),
// with no host in the loop: each rank has a window of device memory every rank can write, laid out
// alike on all of them. Dispatch writes a rank's rows, pairs and header into each destination's slot
// for it, then raises a flag there; the destination waits for every flag of this batch, runs its
// experts, writes each result row into its home's window and raises the combine flag. Flags carry the
// batch's sequence number; waits give up after a timeout, recording which rank they waited for.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ep_kernels.hpp"

namespace steadymoe::cuda {

// Byte offsets within every rank's window.
struct EpWindowLayout {
    int32_t ranks = 0;
    int64_t cap_rows = 0;      // rows one source may send (tokens per rank)
    int64_t cap_pairs = 0;     // pairs one source may send
    int64_t row_bytes = 0;     // the widest row (f32 hidden states); a batch's rows sit at its own row size
    int64_t result_bytes = 0;  // one result row (f32)
    int64_t flags = 0;         // uint64 [2][kMaxEpRanks]: dispatch, combine; by source
    int64_t headers = 0;       // int32 [kMaxEpRanks][kEpHeaderInts], by source
    int64_t pairs = 0;         // EpPair [ranks][cap_pairs], by source
    int64_t rows = 0;          // [ranks][cap_rows][row_bytes], by source
    int64_t back = 0;          // [cap_pairs][result_bytes]: results of this rank's own pairs
    int64_t total = 0;

    static EpWindowLayout make(int32_t ranks, int64_t cap_tokens, int64_t top_k, int64_t hidden);
};

// Every rank's window as this device sees it.
struct EpPeers {
    char* base[kMaxEpRanks] = {};
};

// Error codes a wait or a check leaves in error[0] (error[1]: the rank concerned).
enum EpPeerError : int32_t { kEpOk = 0, kEpDispatchTimeout = 1, kEpCombineTimeout = 2, kEpMalformed = 3 };

// Dispatch: rows (from `hidden` by send_token), pairs and headers (from the plan) into each
// destination's window, then a system-wide fence.
cudaError_t launch_ep_peer_dispatch(const EpPeers& peers, const EpWindowLayout& w, int32_t me,
                                    const void* hidden, int64_t row_bytes, const int32_t* send_token,
                                    const EpPair* send_pairs, const int32_t* headers, cudaStream_t stream);

// Raises flag `which` (0 dispatch, 1 combine) for `me` to `seq` in every rank's window.
cudaError_t launch_ep_peer_signal(const EpPeers& peers, const EpWindowLayout& w, int32_t me, int32_t which,
                                  uint64_t seq, cudaStream_t stream);

// Waits until every source's flag `which` in this rank's window reaches `seq`, or `timeout_ns` passes.
cudaError_t launch_ep_peer_wait(const char* window, const EpWindowLayout& w, int32_t which, uint64_t seq,
                                uint64_t timeout_ns, int32_t* error, cudaStream_t stream);

// The received pairs, source after source, as a permutation's input (launch_ep_unpack_pairs's
// outputs, with rows indexed into the window's row area) and their count in *live.
cudaError_t launch_ep_peer_unpack(const char* window, const EpWindowLayout& w, int32_t slots, int32_t* slot,
                                  float* weight, int32_t* row, int32_t* live, int32_t* error,
                                  cudaStream_t stream);

// Result row i (of the *live received pairs) into its home rank's window, then a system-wide fence.
cudaError_t launch_ep_peer_return(const EpPeers& peers, const EpWindowLayout& w, const char* window,
                                  const float* results, const int32_t* live, cudaStream_t stream);

}  // namespace steadymoe::cuda
