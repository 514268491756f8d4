#include "run_ep.hpp"

#include "steadymoe/core/error.hpp"
#include "steadymoe/engine/ep_layer.hpp"
#include "steadymoe/parallel/tcp_transport.hpp"

#include <cstring>

#if STEADYMOE_HAVE_MPI
#include "steadymoe/parallel/mpi_transport.hpp"
#endif

namespace steadymoe::cli {

namespace {

ExpertPlacement placement_of(const std::string& spec, int64_t experts, int ranks) {
    if (spec == "contiguous") return ExpertPlacement::contiguous(experts, ranks);
    if (spec == "strided") return ExpertPlacement::strided(experts, ranks);
    ExpertPlacement p = ExpertPlacement::read_json(spec);
    SMOE_CHECK(p.ranks() == ranks && p.logical_experts() == experts, InvalidArgument,
               "--placement {}: a placement of {} experts on {} ranks, but the run has {} experts on {} ranks", spec,
               p.logical_experts(), p.ranks(), experts, ranks);
    return p;
}

void append(Bytes& b, const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.raw());
    b.insert(b.end(), p, p + t.nbytes());
}

}  // namespace

// The launcher's transport: MPI under mpirun / mpiexec / srun, TCP under a torchrun-style launch
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), none otherwise.
std::shared_ptr<Transport> launch_transport(std::chrono::milliseconds timeout) {
#if STEADYMOE_HAVE_MPI
    if (MpiTransport::launched_by_mpi()) return std::make_shared<MpiTransport>(timeout);
#endif
    if (const std::optional<TcpEndpoint> e = TcpEndpoint::from_environment()) return std::make_shared<TcpTransport>(*e, timeout);
    return nullptr;
}

std::optional<std::vector<bool>> begin_expert_parallel(const MoeConfig& config, EpRun& run) {
    std::shared_ptr<Transport> transport = launch_transport(std::chrono::milliseconds(int64_t(run.timeout_s * 1000)));
    if (!transport) return std::nullopt;
    run.ranks = transport->size();
    run.root = transport->rank() == 0;
    if (transport->size() == 1) return std::nullopt;
    SMOE_CHECK(run.ranks_per_node == 0 || transport->size() % run.ranks_per_node == 0, InvalidArgument,
               "--ranks-per-node {}: nodes of {} ranks do not divide the {} ranks", run.ranks_per_node,
               run.ranks_per_node, transport->size());
    run.table = placement_of(run.placement, config.n_routed_experts, transport->size());
    std::vector<bool> held = run.table->experts_of(transport->rank());
    run.transport = std::move(transport);
    return held;
}

std::optional<MoeOutput> run_expert_parallel(const MoeLayer& layer, const MoeInput& in, EpRun& run) {
    if (!run.transport) return std::nullopt;
    Transport& transport = *run.transport;
    const MoeConfig& cfg = layer.config();
    const int64_t T = in.hidden.dim(0), H = cfg.hidden_size, K = cfg.top_k, R = transport.size();
    const int64_t per = (T + R - 1) / R, begin = std::min(T, per * transport.rank()), end = std::min(T, begin + per);
    EpMoeLayer ep(layer, *run.table, transport);
    if (run.ranks_per_node > 0) ep.set_ranks_per_node(int(run.ranks_per_node));
    const MoeOutput mine = ep.forward(in.rows(begin, end));

    // Every rank's rows to rank 0, which lays them out in token order.
    std::vector<Bytes> send(static_cast<size_t>(R));
    append(send[0], mine.output), append(send[0], mine.topk_ids), append(send[0], mine.topk_weights);
    const std::vector<Bytes> got = transport.all_to_all(std::move(send));
    if (!run.root) return MoeOutput{};
    MoeOutput all;
    all.output = Tensor::zeros(in.hidden.dtype(), {T, H});
    all.topk_ids = Tensor::zeros(DType::I32, {T, K});
    all.topk_weights = Tensor::zeros(DType::F32, {T, K});
    const size_t out_row = size_t(H) * dtype_size(in.hidden.dtype()), k_row = size_t(K) * 4;
    for (int64_t r = 0; r < R; ++r) {
        const int64_t b = std::min(T, per * r), n = std::min(T, b + per) - b;
        const Bytes& m = got[size_t(r)];
        SMOE_CHECK(m.size() == size_t(n) * (out_row + 2 * k_row), Communication,
                   "rank {} returned {} bytes for its {} tokens", r, m.size(), n);
        std::memcpy(static_cast<uint8_t*>(all.output.mutable_raw()) + size_t(b) * out_row, m.data(), size_t(n) * out_row);
        std::memcpy(static_cast<uint8_t*>(all.topk_ids.mutable_raw()) + size_t(b) * k_row, m.data() + size_t(n) * out_row,
                    size_t(n) * k_row);
        std::memcpy(static_cast<uint8_t*>(all.topk_weights.mutable_raw()) + size_t(b) * k_row,
                    m.data() + size_t(n) * (out_row + k_row), size_t(n) * k_row);
    }
    return all;
}

}  // namespace steadymoe::cli
