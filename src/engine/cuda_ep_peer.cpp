// CudaEpMoeLayer's peer exchange: rows, pairs and results written straight into the other GPUs'
// windows, batches told apart by sequence-numbered flags, no host wait until the output is done.
#include <fmt/format.h>


#include "steadymoe/kernels/cuda/runtime.hpp"

#include "../kernels/cuda/check.hpp"
#include "cuda_ep_impl.hpp"

namespace steadymoe {

namespace {

// Waits for `stream` at most `limit`; throws Error(Communication) naming `rank` past it.
void wait_for(cudaStream_t stream, std::chrono::milliseconds limit, int rank) {
    std::string why;
    const cuda::StreamWait state = cuda::wait_until(stream, std::chrono::steady_clock::now() + limit, {}, &why);
    SMOE_CHECK(state != cuda::StreamWait::Failed, Communication,
               "rank {}: the GPU failed during the expert-parallel exchange: {}", rank, why);
    SMOE_CHECK(state == cuda::StreamWait::Done, Communication,
               "rank {}: the GPU did not finish the expert-parallel exchange within {} ms", rank, limit.count());
}

}  // namespace

MoeOutput CudaEpMoeLayer::Impl::forward_peer(EpBatchState& b, CudaEpStats* stats) {
    const MoeConfig& cfg = layer.config();
    const int64_t H = cfg.hidden_size, S = placement.slots_per_rank();
    const int64_t bound = ranks * layout.cap_pairs;  // pairs this rank may receive
    bool moved = false;
    tc::grow(pair_slot, size_t(bound) * 4, "received pairs' slots", moved);
    tc::grow(pair_weight, size_t(bound) * 4, "received pairs' weights", moved);
    tc::grow(pair_row, size_t(bound) * 4, "received pairs' rows", moved);
    tc::grow(live, 4, "received pair count", moved);
    perm.reserve(bound, tc::tile_counts(0, bound, S).pair_tiles, S, moved);
    stage.reserve(bound, H, local.intermediate, moved, 0, tc::swiglu_mid_bytes(local, layer.activation_quant(), true, b.bf16));
    tc::grow(results, size_t(bound * H) * 4, "expert results", moved);

    // Every rank runs every step, a refused one with no tokens: the flags of each step are raised by all.
    ++sequence;
    char* mine = window->local();
    const uint64_t timeout_ns = uint64_t(options.timeout.count()) * 1000000;
    int32_t* err = error.as<int32_t>();
    exchange_time[0].begin(main);
    SMOE_CUDA_CHECK(cuda::launch_ep_peer_dispatch(
        peers, layout, rank, hidden.get(), H * (b.tag ? b.tag : 2), send_token.as<const int32_t>(),
        send_pairs.as<const cuda::EpPair>(), headers.as<const int32_t>(), main));
    SMOE_CUDA_CHECK(cuda::launch_ep_peer_signal(peers, layout, rank, 0, sequence, main));
    SMOE_CUDA_CHECK(cuda::launch_ep_peer_wait(mine, layout, 0, sequence, timeout_ns, err, main));
    exchange_time[0].end(main);
    dispatch_time.end(main);

    experts_time.begin(main);
    SMOE_CUDA_CHECK(cuda::launch_ep_peer_unpack(mine, layout, int32_t(S), pair_slot.as<int32_t>(),
                                                pair_weight.as<float>(), pair_row.as<int32_t>(),
                                                live.as<int32_t>(), err, main));
    run_experts(b, bound, live.as<const int32_t>(), mine + layout.rows, results.as<float>());
    experts_time.end(main);

    combine_time.begin(main);
    exchange_time[1].begin(main);
    SMOE_CUDA_CHECK(cuda::launch_ep_peer_return(peers, layout, mine, results.as<const float>(),
                                                live.as<const int32_t>(), main));
    SMOE_CUDA_CHECK(cuda::launch_ep_peer_signal(peers, layout, rank, 1, sequence, main));
    SMOE_CUDA_CHECK(cuda::launch_ep_peer_wait(mine, layout, 1, sequence, timeout_ns, err, main));
    exchange_time[1].end(main);
    exchange_time[2].begin(main);
    exchange_time[2].end(main);
    if (!b.refused) combine(b, reinterpret_cast<const float*>(mine + layout.back));
    combine_time.end(main);
    total_time.end(main);

    // The verdicts: what every rank said in its header, and whether any wait gave up.
    const size_t header_bytes = size_t(ranks * cuda::kEpHeaderInts) * 4;
    SMOE_CUDA_CHECK(
        cudaMemcpyAsync(host_headers.get(), headers.get(), header_bytes, cudaMemcpyDeviceToHost, main));
    SMOE_CUDA_CHECK(cudaMemcpyAsync(received_header(0), mine + layout.headers, header_bytes,
                                    cudaMemcpyDeviceToHost, main));
    SMOE_CUDA_CHECK(cudaMemcpyAsync(host_error.get(), err, 8, cudaMemcpyDeviceToHost, main));
    try {
        wait_for(main, 2 * options.timeout + std::chrono::seconds(10), rank);
    } catch (...) {
        broken = true;
        throw;
    }
    if (host_error[0] != cuda::kEpOk) {
        broken = true;
        SMOE_THROW(Communication, "rank {}: {} rank {}", rank,
                   host_error[0] == cuda::kEpDispatchTimeout  ? "timed out waiting for the rows of"
                   : host_error[0] == cuda::kEpCombineTimeout ? "timed out waiting for the results from"
                                                              : "received a malformed message from",
                   host_error[1]);
    }
    check_headers(b);

    int64_t sent = 0, received = 0;
    for (int q = 0; q < ranks; ++q) {
        if (q == rank) continue;
        sent +=
            sent_header(q)[kEpRows] * H * b.tag + sent_header(q)[kEpPairs] * int64_t(sizeof(cuda::EpPair));
        sent += received_header(q)[kEpPairs] * H * 4;  // results back to q
        received += received_header(q)[kEpRows] * H * b.tag +
                    received_header(q)[kEpPairs] * int64_t(sizeof(cuda::EpPair));
        received += sent_header(q)[kEpPairs] * H * 4;
    }
    return finish(b, stats, sent, received);
}

}  // namespace steadymoe
