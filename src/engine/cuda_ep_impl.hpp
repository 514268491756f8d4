// The state of one rank of CudaEpMoeLayer and the steps both of its exchanges share (the routing and
// dispatch plan before the exchange, the experts between, the combine after); cuda_ep_layer.cpp holds
// the NCCL exchange, cuda_ep_peer.cpp the direct peer-memory one.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>

#include "../kernels/cuda/ep_kernels.hpp"
#include "../kernels/cuda/ep_peer_kernels.hpp"
#include "../parallel/nccl_comm.hpp"
#include "../parallel/peer_window.hpp"
#include "cuda_layer_stages.hpp"
#include "steadymoe/engine/cuda_ep_layer.hpp"

namespace steadymoe {

// Page-locked host memory, so that copies from the GPU into it are asynchronous and every wait on them
// is a bounded one.
class PinnedInts {
  public:
    explicit PinnedInts(size_t n);
    ~PinnedInts();
    PinnedInts(const PinnedInts&) = delete;
    PinnedInts& operator=(const PinnedInts&) = delete;
    int32_t& operator[](size_t i) { return p_[i]; }
    int32_t* get() { return p_; }
    size_t bytes() const { return n_ * sizeof(int32_t); }

  private:
    int32_t* p_ = nullptr;
    size_t n_;
};

enum EpHeaderField { kEpStatus = 0, kEpRows = 1, kEpPairs = 2, kEpDtype = 3, kEpBack = 4 };

// One forward on its way: what the host knows about the batch.
struct EpBatchState {
    BatchPlan plan;
    std::exception_ptr refused;  // this rank's input cannot run: it takes part with no tokens
    bool bf16 = false;
    int64_t tokens = 0;
    int32_t tag = 0;  // bytes per value of the rows sent
    tc::TileCounts tiles;
};

struct CudaEpMoeLayer::Impl {
    const MoeLayer& layer;
    ExpertPlacement placement;
    CudaEpOptions options;
    int rank, ranks;
    int device;  // the CUDA device this rank runs on (current when it was made)
    tc::RouterStage router;
    cuda::DeviceExpertGroup local;  // this rank's slots, in slot order
    std::optional<cuda::DeviceExpertGroup> shared;
    tc::DeviceBuffer replica_offsets, replicas;
    std::unique_ptr<NcclComm> comm;      // GpuExchange::Nccl
    std::unique_ptr<PeerWindow> window;  // GpuExchange::Peer
    cuda::EpWindowLayout layout;
    cuda::EpPeers peers;
    uint64_t sequence = 0;  // peer exchange: batches so far (the flags' values)

    cudaStream_t main = nullptr, side = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    // Per batch, grown to the largest so far.
    tc::DeviceBuffer hidden, active, token_ids, send_token, send_pairs, home_index, headers, send_rows;
    tc::DeviceBuffer recv_rows, recv_pairs, pair_slot, pair_weight, pair_row, live, error, results, back,
        shared_out, out;
    tc::RouterStage::Buffers route;
    tc::PermBuffers perm, shared_perm;
    tc::StageBuffers stage, shared_stage;
    PinnedInts host_headers;  // [2][ranks][kEpHeaderInts]: sent, then received
    PinnedInts host_error{2};
    tc::EventTimer total_time, dispatch_time, experts_time, combine_time;
    tc::EventTimer exchange_time[3];
    mutable std::mutex busy;
    std::atomic<bool> broken{false};

    Impl(const MoeLayer& l, ExpertPlacement p, Transport& bootstrap, const CudaEpOptions& o);
    ~Impl();

    int32_t* sent_header(int d) { return host_headers.get() + d * cuda::kEpHeaderInts; }
    int32_t* received_header(int s) { return host_headers.get() + (ranks + s) * cuda::kEpHeaderInts; }

    MoeOutput forward(const MoeInput& input, CudaEpStats* stats);
    MoeOutput forward_nccl(EpBatchState& b, CudaEpStats* stats);
    MoeOutput forward_peer(EpBatchState& b, CudaEpStats* stats);

    // Checks the batch (a refused one runs with no tokens), uploads it, starts the shared expert on the
    // side stream and enqueues the router and the dispatch plan (headers in `headers`) on the main one.
    EpBatchState prepare(const MoeInput& input);
    // Throws, on every rank alike, when a rank refused its batch or the ranks' dtypes differ.
    void check_headers(const EpBatchState& b);
    // This rank's experts over `bound` received pairs (*live of them when set), reading rows of `rows`,
    // results to row i of `results`.
    void run_experts(const EpBatchState& b, int64_t bound, const int32_t* live_pairs, const void* rows,
                     float* results);
    // Joins the shared expert, combines from `back` in canonical order.
    void combine(const EpBatchState& b, const float* back);
    // Downloads the output after the stream is done; fills the stats.
    MoeOutput finish(EpBatchState& b, CudaEpStats* stats, int64_t bytes_sent, int64_t bytes_received);
};

}  // namespace steadymoe
