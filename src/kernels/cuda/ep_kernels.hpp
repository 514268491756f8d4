// The GPU side of expert-parallel dispatch and combine: which of this rank's (token, slot) pairs go to
// which rank, the rows to send, and on the receiving rank the pairs as rows of its local experts. Every
// position is a prefix sum over the routing (one block-wide scan, no atomics), so the bytes on the wire
// and the order results come back in are a pure function of the routing and the placement.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace steadymoe::cuda {

inline constexpr int kMaxEpRanks = 8;  // GPUs of one node

// One (token, slot) pair in a dispatch message: the row of the token within the message, the local
// expert slot on the receiving rank, the routing weight.
struct EpPair {
    int32_t row;
    int32_t slot;
    float weight;
    int32_t unused;
};

// A dispatch message's header, one per destination: [status, rows, pairs, tag, back, 0, 0, 0] — back is
// where the destination's pairs start among the sender's (where their results go home).
inline constexpr int kEpHeaderInts = 8;

struct EpPlanLaunch {
    const int32_t* topk_ids = nullptr;    // [T][K], -1 for masked tokens
    const float* topk_weights = nullptr;  // [T][K]
    int64_t tokens = 0;
    int32_t top_k = 0;
    const int32_t* replica_offsets = nullptr;  // [E + 1]: expert e's replicas are replicas[offsets[e] ..]
    const int32_t* replicas = nullptr;         // physical slots (ExpertPlacement::replicas order)
    int32_t slots_per_rank = 0;
    int32_t ranks = 0;
    int32_t header_status = 0;  // 0, or 1: this rank's batch was refused (it sends nothing)
    int32_t header_tag = 0;     // the rows' dtype
    // Out, destination-major (rank 0's message first), tokens ascending, a token's slots ascending:
    int32_t* send_token = nullptr;  // [T * min(K, ranks)] the token of each row sent
    EpPair* send_pairs = nullptr;   // [T * K]
    int64_t* home_index = nullptr;  // [T * K] the position of pair (t, k) in send_pairs, -1 when masked:
                                    // where its result is in the rows that come back
    int32_t* headers = nullptr;     // [ranks][kEpHeaderInts]
    cudaStream_t stream = nullptr;
};

cudaError_t launch_ep_plan(const EpPlanLaunch& launch);

// rows[i] = src[send_token[i]] for the rows every header counts (`bound` an upper bound), row_bytes a
// multiple of 16.
cudaError_t launch_ep_pack_rows(const void* src, int64_t row_bytes, const int32_t* send_token,
                                const int32_t* headers, int32_t ranks, int64_t bound, void* rows,
                                cudaStream_t stream);

// Where each source's rows and pairs start in the received buffers (rank order), and where they end.
struct EpSources {
    int32_t ranks = 0;
    int32_t row_base[kMaxEpRanks + 1] = {};
    int32_t pair_base[kMaxEpRanks + 1] = {};
};

// The received pairs as a permutation's input: slot[i], weight[i] and the received row row[i] of pair i.
// A pair naming a slot or row outside its message sets *error to 1 and is left out (slot -1).
cudaError_t launch_ep_unpack_pairs(const EpPair* pairs, EpSources sources, int32_t slots_per_rank,
                                   int32_t* slot, float* weight, int32_t* row, int32_t* error,
                                   cudaStream_t stream);

}  // namespace steadymoe::cuda
