#include "steadymoe/engine/cuda_ep_layer.hpp"

#include "steadymoe/engine/ep_layer.hpp"
#include "steadymoe/kernels/cpu/experts.hpp"

#include "../kernels/cuda/check.hpp"
#include "../kernels/cuda/ep_kernels.hpp"
#include "../kernels/cuda/layer_kernels.hpp"
#include "../parallel/nccl_comm.hpp"
#include "break_on_throw.hpp"
#include "cuda_layer_stages.hpp"
#include "cuda_tensor_core_path.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

namespace steadymoe {

using tc::DeviceBuffer;
using tc::EventTimer;
using tc::grow;

namespace {

// Page-locked host memory, so that copies from the GPU into it are asynchronous and every wait on
// them goes through the communicator's bounded wait.
class PinnedInts {
public:
    explicit PinnedInts(size_t n) : n_(n) { SMOE_CUDA_CHECK(cudaMallocHost(&p_, n * sizeof(int32_t))); }
    ~PinnedInts() { cudaFreeHost(p_); }
    PinnedInts(const PinnedInts&) = delete;
    PinnedInts& operator=(const PinnedInts&) = delete;
    int32_t& operator[](size_t i) { return p_[i]; }
    int32_t* get() { return p_; }
    size_t bytes() const { return n_ * sizeof(int32_t); }

private:
    int32_t* p_ = nullptr;
    size_t n_;
};

std::vector<const ExpertWeights*> slot_experts(const MoeLayer& layer, const ExpertPlacement& placement, int rank) {
    std::vector<const ExpertWeights*> out;
    for (int64_t j = 0; j < placement.slots_per_rank(); ++j)
        out.push_back(&layer.weights().experts[size_t(placement.logical_of(rank * placement.slots_per_rank() + j))]);
    return out;
}

int current_device() {
    int d = 0;
    SMOE_CUDA_CHECK(cudaGetDevice(&d));
    return d;
}

constexpr int kH = cuda::kEpHeaderInts;
enum HeaderField { kStatus = 0, kRows = 1, kPairs = 2, kDtype = 3 };

}  // namespace

struct CudaEpMoeLayer::Impl {
    const MoeLayer& layer;
    ExpertPlacement placement;
    int rank, ranks;
    int device;  // the CUDA device this rank runs on (current when it was made)
    tc::RouterStage router;
    cuda::DeviceExpertGroup local;  // this rank's slots, in slot order
    std::optional<cuda::DeviceExpertGroup> shared;
    DeviceBuffer replica_offsets, replicas;
    std::unique_ptr<NcclComm> comm;

    cudaStream_t main = nullptr, side = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    // Per batch, grown to the largest so far.
    DeviceBuffer hidden, active, token_ids, send_token, send_pairs, home_index, headers, send_rows;
    DeviceBuffer recv_rows, recv_pairs, pair_slot, pair_weight, pair_row, error, results, back, shared_out, out;
    tc::RouterStage::Buffers route;
    tc::PermBuffers perm, shared_perm;
    tc::StageBuffers stage, shared_stage;
    PinnedInts host_headers;  // [2][ranks][kH]: sent, then received
    PinnedInts host_error{1};
    EventTimer total_time, dispatch_time, experts_time, combine_time;
    EventTimer exchange_time[3];
    mutable std::mutex busy;
    std::atomic<bool> broken{false};

    Impl(const MoeLayer& l, ExpertPlacement p, Transport& bootstrap, std::chrono::milliseconds timeout)
        : layer(l), placement(std::move(p)), rank(bootstrap.rank()), ranks(bootstrap.size()), device(current_device()),
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
        local = cuda::upload_expert_group(slot_experts(l, placement, rank), fmt::format("rank {}'s experts", rank));
        if (l.weights().has_shared) shared = cuda::upload_expert_group({&l.weights().shared}, "shared expert");
        SMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
        SMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
        SMOE_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
        SMOE_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
        cuda::synchronize();
        comm = std::make_unique<NcclComm>(bootstrap, timeout);
    }
    ~Impl() {
        cudaSetDevice(device);
        comm.reset();
        cudaEventDestroy(fork);
        cudaEventDestroy(join);
        cudaStreamDestroy(main);
        cudaStreamDestroy(side);
    }

    int32_t* sent_header(int d) { return host_headers.get() + d * kH; }
    int32_t* received_header(int s) { return host_headers.get() + (ranks + s) * kH; }

    // The header exchange: every rank's status, row and pair counts for every other.
    void exchange_headers() {
        std::vector<NcclComm::Transfer> x;
        int32_t* h = headers.as<int32_t>();
        for (int p = 0; p < ranks; ++p) x.push_back({p, h + p * kH, kH * 4, h + (ranks + p) * kH, kH * 4});
        exchange_time[0].begin(main);
        comm->exchange(x, main);
        exchange_time[0].end(main);
        SMOE_CUDA_CHECK(cudaMemcpyAsync(host_headers.get(), h, host_headers.bytes(), cudaMemcpyDeviceToHost, main));
        comm->wait(main, "the dispatch headers");
    }

    MoeOutput forward(const MoeInput& input, CudaEpStats* stats);
};

MoeOutput CudaEpMoeLayer::Impl::forward(const MoeInput& input, CudaEpStats* stats) {
    const MoeConfig& cfg = layer.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k, S = placement.slots_per_rank();
    const ActivationQuant aq = layer.activation_quant();
    bool moved = false;  // buffers are not captured anywhere: moving is harmless
    grow(headers, size_t(2 * ranks * kH) * 4, "dispatch headers", moved);

    // This rank's checks. A batch that cannot run still takes part in the header exchange, saying so,
    // so that every rank stops there together, naming it.
    BatchPlan plan;
    bool bf16 = false;
    try {
        plan = layer.begin_batch(input, false);
        bf16 = plan.act_dtype == cpu::ActDType::BF16;
        SMOE_CHECK(TensorCorePath::accepts(layer, bf16, local, shared ? &*shared : nullptr), Unsupported,
                   "the tensor-core path needs bf16 hidden states for bf16 experts (got f32)");
    } catch (...) {
        const std::exception_ptr why = std::current_exception();
        for (int d = 0; d < ranks; ++d) std::fill_n(sent_header(d), kH, 0), sent_header(d)[kStatus] = 1;
        SMOE_CUDA_CHECK(cudaMemcpyAsync(headers.get(), host_headers.get(), size_t(ranks * kH) * 4,
                                        cudaMemcpyHostToDevice, main));
        exchange_headers();
        std::rethrow_exception(why);
    }
    const int64_t T = plan.tokens, pairs = T * K;
    const bool hash = layer.is_hash_layer();
    const tc::TileCounts tiles = tc::tile_counts(T, pairs, E);
    const int64_t row_bytes = H * (bf16 ? 2 : 4);
    const int64_t rows_bound = T * std::min<int64_t>(K, ranks);
    grow(hidden, input.hidden.nbytes(), "hidden states", moved);
    grow(active, size_t(T), "mask", moved);
    if (hash) grow(token_ids, size_t(T) * 8, "token ids", moved);
    router.reserve(route, T, tiles, bf16, moved);
    grow(send_token, size_t(rows_bound) * 4, "dispatch rows' tokens", moved);
    grow(send_pairs, size_t(pairs) * sizeof(cuda::EpPair), "dispatch pairs", moved);
    grow(home_index, size_t(pairs) * 8, "result positions", moved);
    grow(send_rows, size_t(rows_bound * row_bytes), "dispatch rows", moved);
    if (shared) {
        shared_perm.reserve(T, tiles.token_tiles, 1, moved);
        shared_stage.reserve(T, H, shared->intermediate, moved);
        grow(shared_out, size_t(T * H) * 4, "shared expert outputs", moved);
    }
    grow(out, plan.out.output.nbytes(), "output", moved);
    grow(error, 4, "message check", moved);

    total_time.begin(main);
    dispatch_time.begin(main);
    hidden.upload(input.hidden.raw(), input.hidden.nbytes(), main);
    active.upload(plan.active.data(), size_t(T), main);
    if (hash) token_ids.upload(plan.token_ids.data(), size_t(T) * 8, main);
    // The shared expert on the side stream, beside the whole exchange.
    SMOE_CUDA_CHECK(cudaEventRecord(fork, main));
    SMOE_CUDA_CHECK(cudaStreamWaitEvent(side, fork));
    if (shared && T > 0) {
        const cuda::PermutationOut view = shared_perm.view(tiles.token_tiles, 1);
        SMOE_CUDA_CHECK(cuda::launch_permute_shared(active.as<const uint8_t>(), T, 0, tiles.tile_m, view, side));
        tc::run_group({&*shared, &view, T, tiles.token_tiles, view.load, &shared_stage, 0.0f, false}, hidden.get(),
                      bf16, H, aq, shared_out.as<float>(), side, false);
    }
    SMOE_CUDA_CHECK(cudaEventRecord(join, side));
    if (T > 0)
        router.enqueue(route, hidden.get(), active.as<const uint8_t>(), hash ? token_ids.as<const int64_t>() : nullptr,
                       T, tiles, bf16, main);
    cuda::EpPlanLaunch p;
    p.topk_ids = route.topk_ids.as<const int32_t>();
    p.topk_weights = route.topk_weights.as<const float>();
    p.tokens = T;
    p.top_k = int32_t(K);
    p.replica_offsets = replica_offsets.as<const int32_t>();
    p.replicas = replicas.as<const int32_t>();
    p.slots_per_rank = int32_t(S);
    p.ranks = ranks;
    p.header_tag = bf16 ? 2 : 4;  // bytes per value of the rows
    p.send_token = send_token.as<int32_t>();
    p.send_pairs = send_pairs.as<cuda::EpPair>();
    p.home_index = home_index.as<int64_t>();
    p.headers = headers.as<int32_t>();
    p.stream = main;
    SMOE_CUDA_CHECK(cuda::launch_ep_plan(p));
    SMOE_CUDA_CHECK(cuda::launch_ep_pack_rows(hidden.get(), row_bytes, send_token.as<const int32_t>(),
                                              headers.as<const int32_t>(), ranks, rows_bound, send_rows.get(), main));
    exchange_headers();
    for (int s = 0; s < ranks; ++s) {
        const int32_t* h = received_header(s);
        SMOE_CHECK(h[kStatus] == 0, Communication,
                   "rank {} could not take part in the batch (its input was refused: that rank's error says why)", s);
        SMOE_CHECK(h[kDtype] == p.header_tag, Communication,
                   "rank {} sent {} hidden states, rank {} {}: every rank of a batch must use one dtype", s,
                   h[kDtype] == 2 ? "bf16" : "f32", rank, bf16 ? "bf16" : "f32");
    }

    // From here on a failure may leave the ranks out of step.
    BreakOnThrow guard(broken);
    cuda::EpSources src;
    src.ranks = ranks;
    int64_t mine_rows[cuda::kMaxEpRanks + 1] = {}, mine_pairs[cuda::kMaxEpRanks + 1] = {};
    for (int s = 0; s < ranks; ++s) {
        const int32_t* h = received_header(s);
        const int64_t rows = src.row_base[s] + int64_t(h[kRows]), total = src.pair_base[s] + int64_t(h[kPairs]);
        SMOE_CHECK(h[kRows] >= 0 && h[kPairs] >= h[kRows] && total < (int64_t(1) << 31), Communication,
                   "rank {} sent a malformed header ({} rows, {} pairs)", s, h[kRows], h[kPairs]);
        src.row_base[s + 1] = int32_t(rows), src.pair_base[s + 1] = int32_t(total);
        mine_rows[s + 1] = mine_rows[s] + sent_header(s)[kRows];
        mine_pairs[s + 1] = mine_pairs[s] + sent_header(s)[kPairs];
    }
    const int64_t P = src.pair_base[ranks], rows_in = src.row_base[ranks];
    const tc::TileCounts received_tiles = tc::tile_counts(0, P, S);
    grow(recv_rows, size_t(rows_in * row_bytes), "received rows", moved);
    grow(recv_pairs, size_t(P) * sizeof(cuda::EpPair), "received pairs", moved);
    grow(pair_slot, size_t(P) * 4, "received pairs' slots", moved);
    grow(pair_weight, size_t(P) * 4, "received pairs' weights", moved);
    grow(pair_row, size_t(P) * 4, "received pairs' rows", moved);
    perm.reserve(P, received_tiles.pair_tiles, S, moved);
    stage.reserve(P, H, local.intermediate, moved);
    grow(results, size_t(P * H) * 4, "expert results", moved);
    grow(back, size_t(mine_pairs[ranks] * H) * 4, "returned results", moved);

    std::vector<NcclComm::Transfer> x, transfers;  // this exchange; all of the batch's (for stats)
    auto* rows_out = static_cast<uint8_t*>(send_rows.get());
    auto* rows_in_p = static_cast<uint8_t*>(recv_rows.get());
    for (int q = 0; q < ranks; ++q) {
        x.push_back({q, rows_out + mine_rows[q] * row_bytes, size_t(sent_header(q)[kRows] * row_bytes),
                     rows_in_p + int64_t(src.row_base[q]) * row_bytes, size_t(received_header(q)[kRows] * row_bytes)});
        x.push_back({q, send_pairs.as<cuda::EpPair>() + mine_pairs[q], sent_header(q)[kPairs] * sizeof(cuda::EpPair),
                     recv_pairs.as<cuda::EpPair>() + src.pair_base[q],
                     received_header(q)[kPairs] * sizeof(cuda::EpPair)});
    }
    transfers = x;
    exchange_time[1].begin(main);
    comm->exchange(x, main);
    exchange_time[1].end(main);
    dispatch_time.end(main);

    // This rank's experts on every pair it received, results in the order the pairs came.
    experts_time.begin(main);
    SMOE_CUDA_CHECK(cudaMemsetAsync(error.get(), 0, 4, main));
    if (P > 0) {
        SMOE_CUDA_CHECK(cuda::launch_ep_unpack_pairs(recv_pairs.as<const cuda::EpPair>(), src, int32_t(S),
                                                     pair_slot.as<int32_t>(), pair_weight.as<float>(),
                                                     pair_row.as<int32_t>(), error.as<int32_t>(), main));
        const cuda::PermutationOut view = perm.view(received_tiles.pair_tiles, S);
        SMOE_CUDA_CHECK(cuda::launch_permute_routed(pair_slot.as<const int32_t>(), pair_weight.as<const float>(), P, 1,
                                                    int32_t(S), received_tiles.tile_m, view, main,
                                                    pair_row.as<const int32_t>()));
        tc::run_group({&local, &view, P, received_tiles.pair_tiles, view.offsets + S, &stage, float(cfg.swiglu_limit),
                       cfg.weight_placement == WeightPlacement::BeforeDown},
                      recv_rows.get(), bf16, H, aq, results.as<float>(), main, false);
    }
    experts_time.end(main);

    // Results home, then the combine in canonical slot order.
    combine_time.begin(main);
    x.clear();
    const size_t result_row = size_t(H) * 4;
    for (int q = 0; q < ranks; ++q)
        x.push_back({q, results.as<float>() + int64_t(src.pair_base[q]) * H, received_header(q)[kPairs] * result_row,
                     back.as<float>() + mine_pairs[q] * H, sent_header(q)[kPairs] * result_row});
    transfers.insert(transfers.end(), x.begin(), x.end());
    exchange_time[2].begin(main);
    comm->exchange(x, main);
    exchange_time[2].end(main);
    SMOE_CUDA_CHECK(cudaStreamWaitEvent(main, join));
    SMOE_CUDA_CHECK(cuda::launch_combine_indexed(back.as<const float>(), home_index.as<const int64_t>(),
                                                 shared ? shared_out.as<const float>() : nullptr, T, K, H,
                                                 active.as<const uint8_t>(), bf16, out.get(), main));
    combine_time.end(main);
    total_time.end(main);
    SMOE_CUDA_CHECK(cudaMemcpyAsync(host_error.get(), error.get(), 4, cudaMemcpyDeviceToHost, main));
    comm->wait(main, "the expert results");
    SMOE_CHECK(host_error[0] == 0, Communication, "rank {}: a rank sent pairs naming slots or rows outside its message",
               rank);

    out.download(plan.out.output.mutable_raw(), plan.out.output.nbytes(), main);
    route.topk_ids.download(plan.out.topk_ids.mutable_raw(), size_t(pairs) * 4, main);
    route.topk_weights.download(plan.out.topk_weights.mutable_raw(), size_t(pairs) * 4, main);
    cuda::synchronize(main);
    const int32_t* ids = plan.out.topk_ids.data<int32_t>();
    for (int64_t i = 0; i < pairs; ++i)
        if (ids[i] >= 0 && ids[i] < E) ++plan.out.expert_load[size_t(ids[i])];
    if (stats) {
        *stats = {dispatch_time.ms(), experts_time.ms(), combine_time.ms(), total_time.ms(),
                  exchange_time[0].ms() + exchange_time[1].ms() + exchange_time[2].ms(), 0, 0};
        for (const NcclComm::Transfer& t : transfers)
            if (t.peer != rank) stats->bytes_sent += int64_t(t.send_bytes), stats->bytes_received += int64_t(t.recv_bytes);
    }
    return std::move(plan.out);
}

CudaEpMoeLayer::CudaEpMoeLayer(const MoeLayer& layer, ExpertPlacement placement, Transport& bootstrap,
                               std::chrono::milliseconds timeout) {
    const int me = bootstrap.rank();
    // Every rank says whether it can run, so that all refuse together, naming the rank.
    std::string problem;
    if (placement.ranks() != bootstrap.size() || placement.logical_experts() != layer.config().n_routed_experts)
        problem = fmt::format("a placement of {} experts on {} ranks for {} experts on {} ranks",
                              placement.logical_experts(), placement.ranks(), layer.config().n_routed_experts,
                              bootstrap.size());
    else
        problem = blocker(layer, placement, me);
    const std::string mine = EpMoeLayer::fingerprint(layer, placement);
    const std::string said = mine + "\n" + problem;
    const std::vector<Bytes> all = bootstrap.all_gather(Bytes(said.begin(), said.end()));
    for (int r = 0; r < bootstrap.size(); ++r) {
        const std::string theirs(all[size_t(r)].begin(), all[size_t(r)].end());
        const size_t cut = theirs.find('\n');
        SMOE_CHECK(cut != std::string::npos && cut + 1 == theirs.size(), Unsupported,
                   "rank {} cannot run the layer expert-parallel on GPUs: {}", r,
                   cut == std::string::npos ? theirs : theirs.substr(cut + 1));
        SMOE_CHECK(theirs.substr(0, cut) == mine, Communication, "rank {} runs {} but rank {} runs {}", me, mine, r,
                   theirs.substr(0, cut));
    }
    impl_ = std::make_unique<Impl>(layer, std::move(placement), bootstrap, timeout);
}

CudaEpMoeLayer::~CudaEpMoeLayer() = default;

const ExpertPlacement& CudaEpMoeLayer::placement() const { return impl_->placement; }

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
    return TensorCorePath::blocker(layer, &mine);
}

MoeOutput CudaEpMoeLayer::forward(const MoeInput& input, CudaEpStats* stats) const {
    const std::lock_guard<std::mutex> lock(impl_->busy);
    SMOE_CHECK(!impl_->broken, Communication,
               "rank {}: an earlier batch failed after its rows began to move, so the ranks may be out of step; "
               "make a new CudaEpMoeLayer on every rank",
               impl_->rank);
    SMOE_CUDA_CHECK(cudaSetDevice(impl_->device));  // the caller's thread may have another current device
    return impl_->forward(input, stats);
}

}  // namespace steadymoe
