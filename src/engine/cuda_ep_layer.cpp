#include "steadymoe/engine/cuda_ep_layer.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "../kernels/cuda/check.hpp"
#include "../kernels/cuda/layer_kernels.hpp"
#include "../kernels/cuda/quant_mode.hpp"
#include "break_on_throw.hpp"
#include "cuda_ep_impl.hpp"
#include "cuda_tensor_core_path.hpp"
#include "steadymoe/engine/ep_layer.hpp"
#include "steadymoe/kernels/cpu/experts.hpp"

namespace steadymoe {

using tc::DeviceBuffer;
using tc::grow;

namespace {

constexpr int kH = cuda::kEpHeaderInts;

std::vector<const ExpertWeights*> slot_experts(const MoeLayer& layer, const ExpertPlacement& placement,
                                               int rank) {
    std::vector<const ExpertWeights*> out;
    for (int64_t j = 0; j < placement.slots_per_rank(); ++j)
        out.push_back(
            &layer.weights().experts[size_t(placement.logical_of(rank * placement.slots_per_rank() + j))]);
    return out;
}

}  // namespace

PinnedInts::PinnedInts(size_t n) : n_(n) { SMOE_CUDA_CHECK(cudaMallocHost(&p_, n * sizeof(int32_t))); }
PinnedInts::~PinnedInts() { cudaFreeHost(p_); }

const char* gpu_exchange_name(GpuExchange e) { return e == GpuExchange::Peer ? "peer" : "nccl"; }

CudaEpMoeLayer::Impl::Impl(const MoeLayer& l, ExpertPlacement p, Transport& bootstrap, const CudaEpOptions& o)
    : layer(l),
      placement(std::move(p)),
      options(o),
      rank(bootstrap.rank()),
      ranks(bootstrap.size()),
      device(cuda::current_device()),
      router(l),
      host_headers(size_t(2 * bootstrap.size() * kH)) {
    std::vector<int32_t> offsets{0}, table;
    for (int32_t e = 0; e < int32_t(placement.logical_experts()); ++e) {
        for (int32_t phys : placement.replicas(e)) table.push_back(phys);
        offsets.push_back(int32_t(table.size()));
    }
    replica_offsets = DeviceBuffer(offsets.size() * 4, "replica offsets");
    replica_offsets.upload(offsets.data(), offsets.size() * 4);
    replicas = DeviceBuffer(table.size() * 4, "replica table");
    replicas.upload(table.data(), table.size() * 4);
    // FP8 products on the FP8 tensor cores, as GroupRun's default and one GPU's: the same bits.
    const bool fp4_e4m3 = cuda::fp4_takes_e4m3(l.activation_quant(), true);
    local = cuda::upload_expert_group(slot_experts(l, placement, rank), fmt::format("rank {}'s experts", rank), fp4_e4m3);
    if (l.weights().has_shared) shared = cuda::upload_expert_group({&l.weights().shared}, "shared expert", fp4_e4m3);
    SMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
    SMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    SMOE_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    SMOE_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    cuda::synchronize();
    if (options.exchange == GpuExchange::Nccl) {
        comm = std::make_unique<NcclComm>(bootstrap, options.timeout);
    } else {
        layout = cuda::EpWindowLayout::make(ranks, options.max_tokens_per_rank, l.config().top_k,
                                            l.config().hidden_size);
        window = std::make_unique<PeerWindow>(bootstrap, size_t(layout.total));
        for (int r = 0; r < ranks; ++r) peers.base[r] = window->of(r);
    }
}

CudaEpMoeLayer::Impl::~Impl() {
    cudaSetDevice(device);
    cudaStreamSynchronize(main);  // a peer's late writes may still land in the window (bounded by the waits)
    comm.reset();
    window.reset();
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cudaStreamDestroy(main);
    cudaStreamDestroy(side);
}

EpBatchState CudaEpMoeLayer::Impl::prepare(const MoeInput& input) {
    const MoeConfig& cfg = layer.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k;
    EpBatchState b;
    try {
        b.plan = layer.begin_batch(input, false);
        b.bf16 = b.plan.act_dtype == cpu::ActDType::BF16;
        SMOE_CHECK(TensorCorePath::accepts(layer, b.bf16, local, shared ? &*shared : nullptr), Unsupported,
                   "the tensor-core path needs bf16 hidden states for bf16 experts (got f32)");
        SMOE_CHECK(options.exchange != GpuExchange::Peer || b.plan.tokens <= options.max_tokens_per_rank,
                   InvalidArgument,
                   "rank {}: a batch of {} tokens is more than max_tokens_per_rank ({}); split it", rank,
                   b.plan.tokens, options.max_tokens_per_rank);
        b.tokens = b.plan.tokens;
        b.tag = b.bf16 ? 2 : 4;
    } catch (...) {
        b.refused = std::current_exception();
        b.tokens = 0;
    }
    const int64_t T = b.tokens, pairs = T * K;
    const bool hash = layer.is_hash_layer();
    b.tiles = tc::tile_counts(T, pairs, E);
    bool moved = false;  // nothing is captured: a moved buffer is harmless
    grow(headers, size_t(2 * ranks * kH) * 4, "dispatch headers", moved);
    grow(error, 8, "exchange errors", moved);
    if (!b.refused) {
        grow(hidden, input.hidden.nbytes(), "hidden states", moved);
        grow(active, size_t(T), "mask", moved);
        if (hash) grow(token_ids, size_t(T) * 8, "token ids", moved);
        router.reserve(route, T, b.tiles, b.bf16, moved);
        grow(send_token, size_t(T * std::min<int64_t>(K, ranks)) * 4, "dispatch rows' tokens", moved);
        grow(send_pairs, size_t(pairs) * sizeof(cuda::EpPair), "dispatch pairs", moved);
        grow(home_index, size_t(pairs) * 8, "result positions", moved);
        if (shared) {
            shared_perm.reserve(T, b.tiles.token_tiles, 1, moved);
            shared_stage.reserve(T, H, shared->intermediate, moved, 0,
                                 tc::swiglu_mid_bytes(*shared, layer.activation_quant(), true, b.bf16));
            grow(shared_out, size_t(T * H) * 4, "shared expert outputs", moved);
        }
        grow(out, b.plan.out.output.nbytes(), "output", moved);
    }

    SMOE_CUDA_CHECK(cudaMemsetAsync(error.get(), 0, 8, main));
    if (T > 0) {
        hidden.upload(input.hidden.raw(), input.hidden.nbytes(), main);
        active.upload(b.plan.active.data(), size_t(T), main);
        if (hash) token_ids.upload(b.plan.token_ids.data(), size_t(T) * 8, main);
    }
    // Timed from the router on, as CudaMoeLayer times itself: the host's copies in and out are not counted.
    total_time.begin(main);
    dispatch_time.begin(main);
    // The shared expert on the side stream, beside the whole exchange.
    SMOE_CUDA_CHECK(cudaEventRecord(fork, main));
    SMOE_CUDA_CHECK(cudaStreamWaitEvent(side, fork));
    if (shared && T > 0) {
        const cuda::PermutationOut view = shared_perm.view(b.tiles.token_tiles, 1);
        SMOE_CUDA_CHECK(
            cuda::launch_permute_shared(active.as<const uint8_t>(), T, 0, b.tiles.tile_m, view, side));
        tc::run_group({&*shared, &view, T, b.tiles.token_tiles, view.load, &shared_stage, 0.0f, false},
                      hidden.get(), b.bf16, H, layer.activation_quant(), {shared_out.as<float>(), false}, side, false);
    }
    SMOE_CUDA_CHECK(cudaEventRecord(join, side));
    if (T > 0)
        router.enqueue(route, hidden.get(), active.as<const uint8_t>(),
                       hash ? token_ids.as<const int64_t>() : nullptr, T, b.tiles, b.bf16, main);
    cuda::EpPlanLaunch p;
    p.topk_ids = route.topk_ids.as<const int32_t>();
    p.topk_weights = route.topk_weights.as<const float>();
    p.tokens = T;
    p.top_k = int32_t(K);
    p.replica_offsets = replica_offsets.as<const int32_t>();
    p.replicas = replicas.as<const int32_t>();
    p.slots_per_rank = int32_t(placement.slots_per_rank());
    p.ranks = ranks;
    p.header_status = b.refused ? 1 : 0;
    p.header_tag = b.tag;
    p.send_token = send_token.as<int32_t>();
    p.send_pairs = send_pairs.as<cuda::EpPair>();
    p.home_index = home_index.as<int64_t>();
    p.headers = headers.as<int32_t>();
    p.stream = main;
    SMOE_CUDA_CHECK(cuda::launch_ep_plan(p));
    return b;
}

void CudaEpMoeLayer::Impl::check_headers(const EpBatchState& b) {
    if (b.refused) std::rethrow_exception(b.refused);
    for (int s = 0; s < ranks; ++s) {
        const int32_t* h = received_header(s);
        SMOE_CHECK(
            h[kEpStatus] == 0, Communication,
            "rank {} could not take part in the batch (its input was refused: that rank's error says why)",
            s);
        SMOE_CHECK(h[kEpDtype] == b.tag, Communication,
                   "rank {} sent {} hidden states, rank {} {}: every rank of a batch must use one dtype", s,
                   h[kEpDtype] == 2 ? "bf16" : "f32", rank, b.bf16 ? "bf16" : "f32");
    }
}

void CudaEpMoeLayer::Impl::run_experts(const EpBatchState& b, int64_t bound, const int32_t* live_pairs,
                                       const void* rows, float* results) {
    const MoeConfig& cfg = layer.config();
    const int64_t S = placement.slots_per_rank();
    const tc::TileCounts tiles = tc::tile_counts(0, bound, S);
    const cuda::PermutationOut view = perm.view(tiles.pair_tiles, S);
    SMOE_CUDA_CHECK(cuda::launch_permute_routed(pair_slot.as<const int32_t>(), pair_weight.as<const float>(),
                                                bound, 1, int32_t(S), tiles.tile_m, view, main,
                                                pair_row.as<const int32_t>(), live_pairs));
    tc::run_group({&local, &view, bound, tiles.pair_tiles, view.offsets + S, &stage, float(cfg.swiglu_limit),
                   cfg.weight_placement == WeightPlacement::BeforeDown},
                  rows, b.bf16, cfg.hidden_size, layer.activation_quant(), {results, false}, main, false);
}

void CudaEpMoeLayer::Impl::combine(const EpBatchState& b, const float* back_rows) {
    const MoeConfig& cfg = layer.config();
    SMOE_CUDA_CHECK(cudaStreamWaitEvent(main, join));
    SMOE_CUDA_CHECK(cuda::launch_combine_indexed(
        back_rows, home_index.as<const int64_t>(), shared ? shared_out.as<const float>() : nullptr, b.tokens,
        cfg.top_k, cfg.hidden_size, active.as<const uint8_t>(), b.bf16, out.get(), main));
}

MoeOutput CudaEpMoeLayer::Impl::finish(EpBatchState& b, CudaEpStats* stats, int64_t bytes_sent,
                                       int64_t bytes_received) {
    const int64_t E = layer.config().n_routed_experts, pairs = b.tokens * layer.config().top_k;
    MoeOutput& o = b.plan.out;
    out.download(o.output.mutable_raw(), o.output.nbytes(), main);
    route.topk_ids.download(o.topk_ids.mutable_raw(), size_t(pairs) * 4, main);
    route.topk_weights.download(o.topk_weights.mutable_raw(), size_t(pairs) * 4, main);
    cuda::synchronize(main);
    const int32_t* ids = o.topk_ids.data<int32_t>();
    for (int64_t i = 0; i < pairs; ++i)
        if (ids[i] >= 0 && ids[i] < E) ++o.expert_load[size_t(ids[i])];
    if (stats)
        *stats = {dispatch_time.ms(),
                  experts_time.ms(),
                  combine_time.ms(),
                  total_time.ms(),
                  exchange_time[0].ms() + exchange_time[1].ms() + exchange_time[2].ms(),
                  bytes_sent,
                  bytes_received};
    return std::move(o);
}

MoeOutput CudaEpMoeLayer::Impl::forward(const MoeInput& input, CudaEpStats* stats) {
    EpBatchState b = prepare(input);
    return options.exchange == GpuExchange::Nccl ? forward_nccl(b, stats) : forward_peer(b, stats);
}

MoeOutput CudaEpMoeLayer::Impl::forward_nccl(EpBatchState& b, CudaEpStats* stats) {
    const MoeConfig& cfg = layer.config();
    const int64_t H = cfg.hidden_size, K = cfg.top_k, S = placement.slots_per_rank();
    const int64_t row_bytes = H * b.tag, rows_bound = b.tokens * std::min<int64_t>(K, ranks);
    bool moved = false;
    grow(send_rows, size_t(rows_bound * row_bytes), "dispatch rows", moved);
    SMOE_CUDA_CHECK(cuda::launch_ep_pack_rows(hidden.get(), row_bytes, send_token.as<const int32_t>(),
                                              headers.as<const int32_t>(), ranks, rows_bound, send_rows.get(),
                                              main));
    // The headers (every rank's status, row and pair counts for every other), then the host waits for
    // them: NCCL's receive sizes must be known here.
    std::vector<NcclComm::Transfer> x, transfers;  // this exchange; all of the batch's (for stats)
    int32_t* h = headers.as<int32_t>();
    for (int q = 0; q < ranks; ++q) x.push_back({q, h + q * kH, kH * 4, h + (ranks + q) * kH, kH * 4});
    exchange_time[0].begin(main);
    comm->exchange(x, main);
    exchange_time[0].end(main);
    SMOE_CUDA_CHECK(
        cudaMemcpyAsync(host_headers.get(), h, host_headers.bytes(), cudaMemcpyDeviceToHost, main));
    comm->wait(main, "the dispatch headers");
    check_headers(b);

    // From here on a failure may leave the ranks out of step.
    BreakOnThrow guard(broken);
    cuda::EpSources src;
    src.ranks = ranks;
    int64_t mine_rows[cuda::kMaxEpRanks + 1] = {}, mine_pairs[cuda::kMaxEpRanks + 1] = {};
    for (int s = 0; s < ranks; ++s) {
        const int32_t* r = received_header(s);
        const int64_t rows = src.row_base[s] + int64_t(r[kEpRows]),
                      total = src.pair_base[s] + int64_t(r[kEpPairs]);
        SMOE_CHECK(r[kEpRows] >= 0 && r[kEpPairs] >= r[kEpRows] && total < (int64_t(1) << 31), Communication,
                   "rank {} sent a malformed header ({} rows, {} pairs)", s, r[kEpRows], r[kEpPairs]);
        src.row_base[s + 1] = int32_t(rows), src.pair_base[s + 1] = int32_t(total);
        mine_rows[s + 1] = mine_rows[s] + sent_header(s)[kEpRows];
        mine_pairs[s + 1] = mine_pairs[s] + sent_header(s)[kEpPairs];
    }
    const int64_t P = src.pair_base[ranks], rows_in = src.row_base[ranks];
    grow(recv_rows, size_t(rows_in * row_bytes), "received rows", moved);
    grow(recv_pairs, size_t(P) * sizeof(cuda::EpPair), "received pairs", moved);
    grow(pair_slot, size_t(P) * 4, "received pairs' slots", moved);
    grow(pair_weight, size_t(P) * 4, "received pairs' weights", moved);
    grow(pair_row, size_t(P) * 4, "received pairs' rows", moved);
    perm.reserve(P, tc::tile_counts(0, P, S).pair_tiles, S, moved);
    stage.reserve(P, H, local.intermediate, moved, 0, tc::swiglu_mid_bytes(local, layer.activation_quant(), true, b.bf16));
    grow(results, size_t(P * H) * 4, "expert results", moved);
    grow(back, size_t(mine_pairs[ranks] * H) * 4, "returned results", moved);

    x.clear();
    auto* rows_out = static_cast<uint8_t*>(send_rows.get());
    auto* rows_at = static_cast<uint8_t*>(recv_rows.get());
    for (int q = 0; q < ranks; ++q) {
        x.push_back({q, rows_out + mine_rows[q] * row_bytes, size_t(sent_header(q)[kEpRows] * row_bytes),
                     rows_at + int64_t(src.row_base[q]) * row_bytes,
                     size_t(received_header(q)[kEpRows] * row_bytes)});
        x.push_back({q, send_pairs.as<cuda::EpPair>() + mine_pairs[q],
                     sent_header(q)[kEpPairs] * sizeof(cuda::EpPair),
                     recv_pairs.as<cuda::EpPair>() + src.pair_base[q],
                     received_header(q)[kEpPairs] * sizeof(cuda::EpPair)});
    }
    transfers = x;
    exchange_time[1].begin(main);
    comm->exchange(x, main);
    exchange_time[1].end(main);
    dispatch_time.end(main);

    // This rank's experts on every pair it received, results in the order the pairs came.
    experts_time.begin(main);
    if (P > 0) {
        SMOE_CUDA_CHECK(cuda::launch_ep_unpack_pairs(recv_pairs.as<const cuda::EpPair>(), src, int32_t(S),
                                                     pair_slot.as<int32_t>(), pair_weight.as<float>(),
                                                     pair_row.as<int32_t>(), error.as<int32_t>(), main));
        run_experts(b, P, nullptr, recv_rows.get(), results.as<float>());
    }
    experts_time.end(main);

    // Results home, then the combine in canonical slot order.
    combine_time.begin(main);
    x.clear();
    const size_t result_row = size_t(H) * 4;
    for (int q = 0; q < ranks; ++q)
        x.push_back({q, results.as<float>() + int64_t(src.pair_base[q]) * H,
                     received_header(q)[kEpPairs] * result_row, back.as<float>() + mine_pairs[q] * H,
                     sent_header(q)[kEpPairs] * result_row});
    transfers.insert(transfers.end(), x.begin(), x.end());
    exchange_time[2].begin(main);
    comm->exchange(x, main);
    exchange_time[2].end(main);
    combine(b, back.as<const float>());
    combine_time.end(main);
    total_time.end(main);
    SMOE_CUDA_CHECK(cudaMemcpyAsync(host_error.get(), error.get(), 8, cudaMemcpyDeviceToHost, main));
    comm->wait(main, "the expert results");
    SMOE_CHECK(host_error[0] == 0, Communication,
               "rank {}: a rank sent pairs naming slots or rows outside its message", rank);
    int64_t sent = 0, received = 0;
    for (const NcclComm::Transfer& t : transfers)
        if (t.peer != rank) sent += int64_t(t.send_bytes), received += int64_t(t.recv_bytes);
    return finish(b, stats, sent, received);
}

CudaEpMoeLayer::CudaEpMoeLayer(const MoeLayer& layer, ExpertPlacement placement, Transport& bootstrap,
                               CudaEpOptions options) {
    const int me = bootstrap.rank();
    // Every rank says whether it can run, so that all refuse together, naming the rank.
    std::string problem;
    if (placement.ranks() != bootstrap.size() ||
        placement.logical_experts() != layer.config().n_routed_experts)
        problem = fmt::format("a placement of {} experts on {} ranks for {} experts on {} ranks",
                              placement.logical_experts(), placement.ranks(), layer.config().n_routed_experts,
                              bootstrap.size());
    else if (options.max_tokens_per_rank < 1)
        problem = fmt::format("max_tokens_per_rank {} is not positive", options.max_tokens_per_rank);
    else
        problem = blocker(layer, placement, me);
    // (Whether FP4 experts take the block-exact arithmetic is every rank's to agree on too: a token's bits
    // must not depend on which rank holds its expert.)
    const std::string mine = fmt::format("{}; exchange {}, at most {} tokens per rank{}", EpMoeLayer::fingerprint(layer, placement),
                                         gpu_exchange_name(options.exchange), options.max_tokens_per_rank,
                                         cuda::fp4_block_exact_requested() ? "; FP4 block-exact" : "");
    const std::string said = mine + "\n" + problem;
    const std::vector<Bytes> all = bootstrap.all_gather(Bytes(said.begin(), said.end()));
    for (int r = 0; r < bootstrap.size(); ++r) {
        const std::string theirs(all[size_t(r)].begin(), all[size_t(r)].end());
        const size_t cut = theirs.find('\n');
        SMOE_CHECK(cut != std::string::npos && cut + 1 == theirs.size(), Unsupported,
                   "rank {} cannot run the layer expert-parallel on GPUs: {}", r,
                   cut == std::string::npos ? theirs : theirs.substr(cut + 1));
        SMOE_CHECK(theirs.substr(0, cut) == mine, Communication, "rank {} runs {} but rank {} runs {}", me,
                   mine, r, theirs.substr(0, cut));
    }
    impl_ = std::make_unique<Impl>(layer, std::move(placement), bootstrap, options);
}

CudaEpMoeLayer::~CudaEpMoeLayer() = default;

const ExpertPlacement& CudaEpMoeLayer::placement() const { return impl_->placement; }
const CudaEpOptions& CudaEpMoeLayer::options() const { return impl_->options; }

std::string CudaEpMoeLayer::blocker(const MoeLayer& layer, const ExpertPlacement& placement, int rank) {
    if (placement.ranks() > cuda::kMaxEpRanks)
        return fmt::format("{} ranks: GPU expert parallelism spans at most {} GPUs", placement.ranks(),
                           cuda::kMaxEpRanks);
    std::string why;
    if (!cuda::device_available(&why)) return why;
    const std::vector<const ExpertWeights*> mine = slot_experts(layer, placement, rank);
    for (size_t j = 0; j < mine.size(); ++j)
        if (!mine[j]->held())
            return fmt::format("rank {} did not load expert {}, which its slot {} holds", rank,
                               placement.logical_of(rank * placement.slots_per_rank() + int64_t(j)), j);
    if (std::string why = TensorCorePath::blocker(layer, &mine); !why.empty()) return why;
    // Block-exact FP4 asked for: refused here, where every rank hears of it, rather than at upload.
    if (cuda::fp4_block_exact_requested() && cuda::fp4_takes_e4m3(layer.activation_quant(), true)) {
        std::vector<const ExpertWeights*> all = mine;
        if (layer.weights().has_shared) all.push_back(&layer.weights().shared);
        return cuda::fp4_block_exact_blocker(all);
    }
    return {};
}

MoeOutput CudaEpMoeLayer::forward(const MoeInput& input, CudaEpStats* stats) const {
    const std::lock_guard<std::mutex> lock(impl_->busy);
    SMOE_CHECK(
        !impl_->broken, Communication,
        "rank {}: an earlier batch failed after its rows began to move, so the ranks may be out of step; "
        "make a new CudaEpMoeLayer on every rank",
        impl_->rank);
    SMOE_CUDA_CHECK(cudaSetDevice(impl_->device));  // the caller's thread may have another current device
    return impl_->forward(input, stats);
}

}  // namespace steadymoe
