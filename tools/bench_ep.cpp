// `steadymoe bench --ep-ranks N`: the expert-parallel layer on N CPU ranks in this process (threads
// exchanging through shared memory), phase by phase — routing and dispatch, the experts, the combine —
// beside the one-rank layer on the same tokens, with every rank's output checked bit for bit against it.
#include "bench_workload.hpp"

#include "steadymoe/core/error.hpp"
#include "steadymoe/engine/ep_layer.hpp"
#include "steadymoe/engine/synthetic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <thread>

namespace steadymoe::cli {

namespace {

using json = nlohmann::json;

// Seconds each phase took on one rank in one run.
struct PhaseTimes {
    double dispatch = 0, experts = 0, combine = 0, total = 0;
};

}  // namespace

int bench_ep(const BenchOptions& options) {
    BenchOptions o = options;
    if (!o.tokens_given) o.tokens = {1, 16, 128, 512};
    if (!o.json_given) o.json_path = "bench-ep.json";
    const int ranks = o.ep_ranks;
    SMOE_CHECK(ranks >= 1, InvalidArgument, "--ep-ranks must be positive, not {}", ranks);
    SMOE_CHECK(o.repeat > 0, InvalidArgument, "--repeat must be positive, not {}", o.repeat);
    Progress progress("bench");
    Workload w = build_workload(o, progress);
    const MoeConfig& c = w.config;
    SMOE_CHECK(c.n_routed_experts % ranks == 0, InvalidArgument,
               "--ep-ranks {}: the {} experts must divide evenly over the ranks (a contiguous placement)", ranks,
               c.n_routed_experts);
    const int threads = resolve_threads(o.threads);
    MoeLayerOptions opts;
    opts.threads = std::max(1, threads / ranks);  // the ranks share the machine's cores
    opts.activation_quant = parse_activations(o.activations, c);
    progress.line("packing the layer");
    const MoeLayer layer(c, std::move(w.weights), opts);
    layer.packed();  // (else each expert would be decoded in the first timed batch that reaches it)
    const MoeLayer one_rank = layer.with_threads(threads);
    const ExpertPlacement placement = ExpertPlacement::contiguous(c.n_routed_experts, ranks);
    const int64_t H = c.hidden_size;

    SMOE_CHECK(o.ranks_per_node == 0 || ranks % o.ranks_per_node == 0, InvalidArgument,
               "--ranks-per-node {}: nodes of {} ranks do not divide the {} ranks", o.ranks_per_node, o.ranks_per_node,
               ranks);
    const int per_node = o.ranks_per_node > 0 ? o.ranks_per_node : ranks;
    Table table({"tokens/rank", "ranks", "nodes", "rows to other nodes", "one level: rows to other nodes", "dispatch µs",
                 "experts µs", "combine µs", "EP layer µs", "one rank µs", "bitwise vs one rank"});
    json jpoints = json::array();
    int64_t wire_row = 0;  // bytes of a token row in the exchanges
    for (int64_t per_rank : o.tokens) {
        progress.line(fmt::format("{} tokens per rank on {} ranks", per_rank, ranks));
        const int64_t T = per_rank * ranks;
        const MoeInput in{synthetic::tensor(DType::BF16, {T, H}, o.seed, synthetic::kHidden, 1.0f), Tensor(), Tensor()};
        const double one_s = median_seconds(o.repeat, [&] { (void)one_rank.forward(in); });
        const MoeOutput want = one_rank.forward(in);

        std::vector<std::vector<PhaseTimes>> times(static_cast<size_t>(ranks));
        std::vector<MoeOutput> outs(static_cast<size_t>(ranks));
        std::vector<EpStats> stats(static_cast<size_t>(ranks));
        const int runs = o.repeat + 1;  // the first is a warm-up
        on_local_ranks(ranks, [&](int r, Transport& transport) {
            EpMoeLayer ep(layer, placement, transport);
            ep.set_ranks_per_node(per_node);
            const MoeInput mine = in.rows(r * per_rank, (r + 1) * per_rank);
            for (int run = 0; run < runs; ++run) {
                PhaseTimes t;
                const double t0 = now_seconds();
                EpBatch batch = ep.begin_dispatch(mine);
                ep.finish_dispatch(batch);
                const double t1 = now_seconds();
                ep.begin_combine(batch);
                const double t2 = now_seconds();
                outs[size_t(r)] = ep.finish_combine(batch, &stats[size_t(r)]);
                const double t3 = now_seconds();
                t = {t1 - t0, t2 - t1, t3 - t2, t3 - t0};
                if (run > 0) times[size_t(r)].push_back(t);
            }
        });

        // Per run the slowest rank sets each phase's time; medians over runs.
        std::vector<double> dispatch, experts, combine, total;
        for (int run = 0; run < o.repeat; ++run) {
            PhaseTimes worst;
            for (int r = 0; r < ranks; ++r) {
                const PhaseTimes& t = times[size_t(r)][size_t(run)];
                worst = {std::max(worst.dispatch, t.dispatch), std::max(worst.experts, t.experts),
                         std::max(worst.combine, t.combine), std::max(worst.total, t.total)};
            }
            dispatch.push_back(worst.dispatch), experts.push_back(worst.experts), combine.push_back(worst.combine);
            total.push_back(worst.total);
        }
        // Token rows that crossed to another node, and what one level sends across the same boundaries
        // (a row per destination rank).
        int64_t crossed = 0, one_level = 0;
        for (int r = 0; r < ranks; ++r) {
            for (size_t n = 0; n < stats[size_t(r)].rows_to_nodes.size(); ++n)
                if (int(n) != r / per_node) crossed += stats[size_t(r)].rows_to_nodes[n];
            for (int d = 0; d < ranks; ++d)
                if (d / per_node != r / per_node) one_level += stats[size_t(r)].tokens_sent[size_t(d)];
        }
        wire_row = stats.front().row_bytes;
        bool bitwise = true;
        const size_t row = size_t(H) * 2;
        for (int r = 0; r < ranks; ++r)
            bitwise = bitwise && std::memcmp(outs[size_t(r)].output.raw(),
                                             want.output.rows(r * per_rank, (r + 1) * per_rank).raw(),
                                             row * size_t(per_rank)) == 0;
        const double d = median_of(dispatch) * 1e6, x = median_of(experts) * 1e6, m = median_of(combine) * 1e6,
                     all = median_of(total) * 1e6;
        table.add({std::to_string(per_rank), std::to_string(ranks), std::to_string(ranks / per_node), std::to_string(crossed),
                   std::to_string(one_level), fmt::format("{:.1f}", d), fmt::format("{:.1f}", x),
                   fmt::format("{:.1f}", m), fmt::format("{:.1f}", all), fmt::format("{:.1f}", one_s * 1e6),
                   bitwise ? "yes" : "NO"});
        jpoints.push_back({{"tokens_per_rank", per_rank}, {"ranks", ranks}, {"ranks_per_node", per_node},
                           {"rows_to_other_nodes", crossed}, {"one_level_rows_to_other_nodes", one_level},
                           {"dispatch_us", d}, {"experts_us", x},
                           {"combine_us", m}, {"ep_layer_us", all}, {"one_rank_us", one_s * 1e6}, {"row_bytes", wire_row},
                           {"bitwise_equal_to_one_rank", bitwise}});
        SMOE_CHECK(bitwise, Internal, "the expert-parallel output differs from one rank at {} tokens per rank", per_rank);
    }
    fmt::print("workload {}: H={} I={} K={}, {} experts over {} in-process CPU ranks ({} threads each), {} experts\n",
               o.workload, H, c.moe_intermediate_size, c.top_k, c.n_routed_experts, ranks, opts.threads, w.format);
    fmt::print("  token rows travel as {} bytes ({}; bf16 would be {})\n", wire_row,
               wire_row < H * 2 ? "FP8 codes and per-128 scales: the experts quantise their inputs" : "the input's bf16", H * 2);
    fmt::print("{}", table.str());
    fmt::print("dispatch = routing, packing and the row exchange; experts = this rank's experts on the rows it got; "
               "combine = results home, shared expert, combine. Each the slowest rank's, median of --repeat runs. "
               "one rank = the whole batch on one rank with all {} threads.\n",
               threads);
    const json record = {{"tool", "steadymoe bench --ep-ranks"}, {"command", command_line()}, {"date", utc_timestamp()},
                         {"commit", git_commit()},           {"workload", o.workload},    {"points", jpoints}};
    write_file_atomic(o.json_path, record.dump(2) + "\n");
    fmt::print("wrote {}\n", o.json_path);
    return kExitOk;
}

}  // namespace steadymoe::cli
