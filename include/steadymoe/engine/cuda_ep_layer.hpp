// The MoE layer with its routed experts spread over GPUs, one rank per GPU (expert parallelism), on
// the CUDA tensor-core path. Each rank routes its own tokens on its GPU, sends each token once to every
// rank holding one of its experts (NCCL point-to-point; what goes where and in which order is a prefix
// sum over the routing), runs the (token, expert) pairs it received through its experts' grouped GEMMs,
// and sends the results home, where the shared expert (computed meanwhile on a second stream) and the
// slots are combined in canonical order. Every pair's arithmetic is the one-GPU layer's, so a token's
// output bytes are what CudaMoeLayer gives for it (with its default Fp8Products::TensorCores, or
// TensorCoresBlockExact where every rank runs with STEADYMOE_FP4_BLOCK_EXACT=1), on any number of GPUs and
// under any placement.
#pragma once

#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/parallel/placement.hpp"
#include "steadymoe/parallel/transport.hpp"

#include <chrono>
#include <memory>
#include <string>

namespace steadymoe {

// One rank's forward: GPU times in milliseconds (CUDA events on its main stream) and the bytes it
// exchanged with other ranks.
struct CudaEpStats {
    double dispatch_ms = 0;  // router, plan, headers, rows arriving (the host's copies in and out not counted)
    double experts_ms = 0;   // this rank's experts on the pairs it received
    double combine_ms = 0;   // results home, combine
    double total_ms = 0;
    double exchange_ms = 0;  // of which in NCCL transfers (headers, rows, results)
    int64_t bytes_sent = 0;  // to other ranks: rows and pairs out, results back
    int64_t bytes_received = 0;
};

// How the GPUs exchange rows and results.
enum class GpuExchange {
    // Direct writes into the other GPUs' memory over NVLink (peer access, or CUDA IPC between processes),
    // signalled by flags in that memory: no host in the loop, one GPU of a node per rank.
    Peer,
    // NCCL point-to-point: the receive sizes travel first, and the host waits for them.
    Nccl,
};

struct CudaEpOptions {
    GpuExchange exchange = GpuExchange::Peer;
    // Every wait (on the host, and on the GPU for the peer exchange) gives up after this, naming the rank.
    std::chrono::milliseconds timeout = std::chrono::seconds(60);
    // Peer exchange: the most tokens one rank may pass to forward(); each rank's exchange window holds
    // this many rows from every rank (and f32 results for this many tokens x top-k).
    int64_t max_tokens_per_rank = 4096;
};

const char* gpu_exchange_name(GpuExchange e);

class CudaEpMoeLayer {
public:
    // Collective over `bootstrap` (MPI, TCP or an in-process group: it carries the start-up agreement,
    // NCCL's id or the peer windows' handles). Runs on the calling thread's current CUDA device
    // (forward() switches to it), which must differ between ranks. Checks like EpMoeLayer that every
    // rank runs the same config, shared weights, placement and options. `layer` may hold only this
    // rank's experts.
    CudaEpMoeLayer(const MoeLayer& layer, ExpertPlacement placement, Transport& bootstrap, CudaEpOptions options = {});
    ~CudaEpMoeLayer();

    // Collective: every rank calls it with its own tokens (any count, zero included), bf16 hidden states
    // (or f32 where the experts quantise their inputs to FP8). Returns this rank's output: bitwise what
    // CudaMoeLayer gives for the same tokens on one GPU. A rank whose input cannot run (a NaN, a bad
    // mask, more tokens than max_tokens_per_rank) still takes part in the exchanges, saying so: every
    // rank then throws naming it, and the layer stays usable. A failure after that (a rank that stops, a malformed message) aborts the
    // communicator and leaves the layer refusing further batches.
    MoeOutput forward(const MoeInput& input, CudaEpStats* stats = nullptr) const;

    const ExpertPlacement& placement() const;
    const CudaEpOptions& options() const;
    // Why `layer` cannot run expert-parallel on GPUs with `placement` on rank `rank` ("" when it can).
    static std::string blocker(const MoeLayer& layer, const ExpertPlacement& placement, int rank);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace steadymoe
