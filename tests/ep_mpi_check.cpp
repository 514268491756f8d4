// Run under an MPI launcher (`mpirun -np N ep_mpi_check [GOLDEN_DIR]`): every rank takes its slice of
// one batch, runs the expert-parallel layer over MpiTransport with contiguous, strided and replicated
// placements — as one node, and for an even N above 2 also as simulated nodes of two ranks (two-level
// exchanges) — and compares its rows with the one-rank layer bit for bit. Rank 0 prints one line per
// case; the exit status is 0 only when every rank matched everywhere.
// `ep_mpi_check --stall R`: rank R stops answering in the middle of a layer; every other rank must fail
// within the (2 s) timeout with an error naming rank R (exit 0 when they all do).
#include "steadymoe/core/error.hpp"
#include "steadymoe/engine/demo_model.hpp"
#include "steadymoe/engine/ep_layer.hpp"
#include "steadymoe/engine/synthetic.hpp"
#include "steadymoe/model/checkpoint.hpp"
#include "steadymoe/parallel/mpi_transport.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <string>
#include <vector>

using namespace steadymoe;

namespace {

ExpertPlacement replicated(int64_t experts, int ranks) {
    std::vector<int32_t> table;
    for (int64_t e = 0; e < experts; ++e) table.push_back(int32_t((e * 5 + 1) % experts));
    while (table.size() % size_t(ranks) != 0 || table.size() < size_t(experts + 2))
        table.push_back(int32_t(table.size() % size_t(experts)));
    return ExpertPlacement::from_table(experts, ranks, table);
}

// This rank's rows against the one-rank layer (the ranks grouped as simulated nodes of
// `ranks_per_node` when set); returns whether every byte matched.
bool check(Transport& t, const MoeLayer& layer, const MoeInput& in, const ExpertPlacement& placement,
           int ranks_per_node) {
    const int64_t T = in.hidden.dim(0), per = (T + t.size() - 1) / t.size();
    const int64_t begin = std::min(T, per * t.rank()), end = std::min(T, begin + per);
    const MoeOutput want = layer.forward(in.rows(begin, end));
    EpMoeLayer ep(layer, placement, t);
    if (ranks_per_node > 0) ep.set_ranks_per_node(ranks_per_node);
    const MoeOutput got = ep.forward(in.rows(begin, end));
    return got.output.nbytes() == want.output.nbytes() &&
           std::memcmp(got.output.raw(), want.output.raw(), got.output.nbytes()) == 0;
}

}  // namespace

// Rank `stalled` goes silent after the start-up agreement; the others must name it within the timeout.
int stall_check(int stalled) {
    MpiTransport transport(std::chrono::seconds(2));
    const DemoModelShape shape{.hidden = 256, .intermediate = 128, .experts = 16, .top_k = 4, .vocab = 512};
    const MoeLayer layer(demo_config(shape), demo_layer_weights(shape, 1));
    MoeInput in;
    in.hidden = synthetic::tensor(DType::BF16, {8, shape.hidden}, 2, synthetic::kHidden, 1.0f);
    std::vector<int32_t> table;
    for (int i = 0; i < 16 * transport.size(); ++i) table.push_back(int32_t(i % 16));
    const EpMoeLayer ep(layer, ExpertPlacement::from_table(16, transport.size(), table), transport);
    if (transport.rank() == stalled) {
        std::this_thread::sleep_for(std::chrono::seconds(5));  // well past the others' timeout
        return 0;
    }
    const auto t0 = std::chrono::steady_clock::now();
    try {
        ep.forward(in);
    } catch (const Error& e) {
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const bool named = e.kind() == ErrorKind::Communication &&
                           std::string(e.what()).find("rank(s) " + std::to_string(stalled) + " ") != std::string::npos;
        std::printf("rank %d after %.1f s: %s\n", transport.rank(), waited, e.what());
        return named && waited < 4.0 ? 0 : 1;
    }
    std::printf("rank %d: the layer completed without rank %d\n", transport.rank(), stalled);
    return 1;
}

int main(int argc, char** argv) {
    if (argc > 2 && std::string(argv[1]) == "--stall") return stall_check(std::atoi(argv[2]));
    try {
        MpiTransport transport(std::chrono::seconds(120));
        const int ranks = transport.size();
        const DemoModelShape shape{.hidden = 256, .intermediate = 128, .experts = 16, .top_k = 4, .vocab = 512};
        struct Case {
            std::string name;
            MoeLayer layer;
            MoeInput input;
        };
        std::vector<Case> cases;
        for (int L : {0, 1}) {
            MoeInput in;
            in.hidden = synthetic::tensor(DType::BF16, {41, shape.hidden}, 2, synthetic::kHidden, 1.0f);
            in.token_ids = demo_token_ids(shape, 41, 3);
            cases.push_back({"demo layer " + std::to_string(L), MoeLayer(demo_config(shape), demo_layer_weights(shape, L)), in});
        }
        if (argc > 1) {
            const std::filesystem::path dir = std::filesystem::path(argv[1]) / "deepseek-v3-tiny";
            MoeInput in;
            in.hidden = SafetensorsFile::open(dir / "io.safetensors").get("input");
            cases.push_back({"deepseek-v3-tiny layer 1", MoeLayer::from_checkpoint(Checkpoint::open(dir), 1), in});
        }
        bool all = true;
        for (const Case& c : cases) {
            const int64_t E = c.layer.config().n_routed_experts;
            std::vector<std::pair<std::string, ExpertPlacement>> placements;
            if (E % ranks == 0) {
                placements.emplace_back("contiguous", ExpertPlacement::contiguous(E, ranks));
                placements.emplace_back("strided", ExpertPlacement::strided(E, ranks));
            }
            placements.emplace_back("replicated", replicated(E, ranks));
            // One node, and (with an even rank count above 2) simulated nodes of two ranks.
            std::vector<int> node_sizes = {0};
            if (ranks > 2 && ranks % 2 == 0) node_sizes.push_back(2);
            for (int per_node : node_sizes)
                for (const auto& [name, placement] : placements) {
                    const bool mine = check(transport, c.layer, c.input, placement, per_node);
                    const std::vector<Bytes> votes = transport.all_gather(Bytes{uint8_t(mine)});
                    bool everyone = true;
                    for (const Bytes& v : votes) everyone = everyone && v.at(0) == 1;
                    all = all && everyone;
                    const std::string nodes = per_node ? " in nodes of " + std::to_string(per_node) : "";
                    if (transport.rank() == 0)
                        std::printf("%s, %s placement on %d MPI ranks%s: %s\n", c.name.c_str(), name.c_str(), ranks,
                                    nodes.c_str(), everyone ? "bitwise equal to one rank" : "DIFFERENT");
                }
        }
        return all ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ep_mpi_check: %s\n", e.what());
        return 2;
    }
}
