// `steadymoe bench --backend cuda --ep-ranks N`: the layer with its experts spread over N GPUs of this
// machine (one rank per GPU, a thread each, NCCL between them), phase by phase — dispatch, experts,
// combine, and the NCCL transfers within them — beside the whole layer on one GPU for the same tokens
// per rank, with every rank's output checked bit for bit against the one-GPU output.
// bench/gpu_ep_peers.py measures NCCL's all-to-all on the same GPUs in the same call.
#include "bench_workload.hpp"
#include "steadymoe/core/error.hpp"
#include "steadymoe/engine/synthetic.hpp"

#if STEADYMOE_HAVE_CUDA
#include "steadymoe/engine/cuda_ep_layer.hpp"
#include "steadymoe/engine/cuda_moe_layer.hpp"
#include "steadymoe/kernels/cuda/runtime.hpp"
#endif

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <thread>

namespace steadymoe::cli {

#if !STEADYMOE_HAVE_CUDA

int bench_cuda_ep(const BenchOptions&) {
    SMOE_THROW(Unsupported,
               "--backend cuda: this build has no CUDA backend (nvcc was not found when it was configured)");
}

#else

namespace {

using json = nlohmann::json;

// One rank's runs at one batch size.
struct RankRuns {
    std::vector<CudaEpStats> stats;
    std::vector<double> wall_us;
    MoeOutput out;
};

}  // namespace

int bench_cuda_ep(const BenchOptions& given) {
    BenchOptions o = given;
    if (!o.experts_given) o.experts = 0;
    if (!o.tokens_given) o.tokens = {1, 128, 4096};
    if (!o.json_given) o.json_path = "bench-cuda-ep.json";
    check_positive(o.tokens, "--tokens");
    SMOE_CHECK(o.repeat > 0, InvalidArgument, "--repeat must be positive, not {}", o.repeat);
    const int ranks = o.ep_ranks;
    SMOE_CHECK(cuda::device_count() >= ranks, Unsupported,
               "--ep-ranks {} on GPUs needs {} CUDA devices, found {}", ranks, ranks, cuda::device_count());
    Progress progress("bench");
    Workload w = build_workload(o, progress);
    const MoeConfig& c = w.config;
    SMOE_CHECK(c.n_routed_experts % ranks == 0, InvalidArgument,
               "--ep-ranks {}: the {} experts must divide evenly over the ranks (a contiguous placement)",
               ranks, c.n_routed_experts);
    MoeLayerOptions opts;
    opts.threads = resolve_threads(o.threads);
    opts.activation_quant = parse_activations(o.activations, c);
    progress.line("checking the layer");
    const MoeLayer layer(c, std::move(w.weights), opts);
    const ExpertPlacement placement = ExpertPlacement::contiguous(c.n_routed_experts, ranks);
    const int64_t H = c.hidden_size;
    const int64_t most = *std::max_element(o.tokens.begin(), o.tokens.end());
    const MoeInput all{synthetic::tensor(DType::BF16, {most * ranks, H}, o.seed, synthetic::kHidden, 1.0f),
                       Tensor(), Tensor()};
    auto slice = [&](int64_t per_rank, int r) { return all.rows(r * per_rank, (r + 1) * per_rank); };

    // The whole layer on GPU 0, each rank's tokens as one batch: the baseline and the expected bytes.
    progress.line("the layer on one GPU");
    cuda::set_device(0);
    std::vector<std::vector<MoeOutput> > want(o.tokens.size());
    std::vector<double> one_gpu_us(o.tokens.size()), one_wall_us(o.tokens.size());
    {
        CudaMoeLayer one(layer);
        one.set_graph_max_tokens(o.graph_max_tokens);
        for (size_t i = 0; i < o.tokens.size(); ++i) {
            std::vector<double> gpu, wall;
            const MoeInput in = slice(o.tokens[i], 0);
            for (int run = 0; run <= o.repeat; ++run) {
                const double t0 = now_seconds();
                (void)one.forward(in);  // wall time as served: a timed forward runs the layer more than once (CudaStageTimes)
                const double wall_us = (now_seconds() - t0) * 1e6;
                CudaStageTimes t;
                (void)one.forward(in, &t);
                if (run > 0) gpu.push_back(t.total_ms * 1e3), wall.push_back(wall_us);
            }
            one_gpu_us[i] = median_of(gpu), one_wall_us[i] = median_of(wall);
            for (int r = 0; r < ranks; ++r) want[i].push_back(one.forward(slice(o.tokens[i], r)));
        }
    }

    Table table({"exchange", "tokens/rank", "dispatch µs", "experts µs", "combine µs", "exchange µs",
                 "sent MB", "EP layer µs", "EP wall µs", "1 GPU µs", "1 GPU wall µs", "bitwise vs 1 GPU"});
    json jpoints = json::array();
    for (const GpuExchange exchange : {GpuExchange::Peer, GpuExchange::Nccl}) {
        // The ranks: one thread per GPU; each batch size runs a warm-up, then --repeat timed batches.
        progress.line(fmt::format("the layer on {} GPUs, {} exchange", ranks, gpu_exchange_name(exchange)));
        CudaEpOptions ep_options;
        ep_options.exchange = exchange;
        ep_options.max_tokens_per_rank = most;
        std::vector<std::vector<RankRuns> > runs(static_cast<size_t>(ranks),
                                                 std::vector<RankRuns>(o.tokens.size()));
        on_local_ranks(ranks, [&](int r, Transport& transport) {
            cuda::set_device(r);
            const CudaEpMoeLayer ep(layer, placement, transport, ep_options);
            for (size_t i = 0; i < o.tokens.size(); ++i) {
                RankRuns& mine = runs[size_t(r)][i];
                const MoeInput in = slice(o.tokens[i], r);
                for (int run = 0; run <= o.repeat; ++run) {
                    CudaEpStats s;
                    (void)transport.all_gather({});  // start together
                    const double t0 = now_seconds();
                    mine.out = ep.forward(in, &s);
                    if (run > 0) mine.stats.push_back(s), mine.wall_us.push_back((now_seconds() - t0) * 1e6);
                }
            }
        });

        for (size_t i = 0; i < o.tokens.size(); ++i) {
            // Per run the slowest rank sets each figure; medians over runs.
            std::vector<double> d, x, m, n, total, wall;
            for (int run = 0; run < o.repeat; ++run) {
                double wd = 0, wx = 0, wm = 0, wn = 0, wt = 0, ww = 0;
                for (int r = 0; r < ranks; ++r) {
                    const CudaEpStats& s = runs[size_t(r)][i].stats[size_t(run)];
                    wd = std::max(wd, s.dispatch_ms), wx = std::max(wx, s.experts_ms),
                    wm = std::max(wm, s.combine_ms);
                    wn = std::max(wn, s.exchange_ms), wt = std::max(wt, s.total_ms);
                    ww = std::max(ww, runs[size_t(r)][i].wall_us[size_t(run)]);
                }
                d.push_back(wd * 1e3), x.push_back(wx * 1e3), m.push_back(wm * 1e3), n.push_back(wn * 1e3);
                total.push_back(wt * 1e3), wall.push_back(ww);
            }
            bool bitwise = true;
            int64_t sent = 0;
            for (int r = 0; r < ranks; ++r) {
                const MoeOutput& got = runs[size_t(r)][i].out;
                const MoeOutput& ref = want[i][size_t(r)];
                bitwise = bitwise &&
                          std::memcmp(got.output.raw(), ref.output.raw(), ref.output.nbytes()) == 0 &&
                          std::memcmp(got.topk_ids.raw(), ref.topk_ids.raw(), ref.topk_ids.nbytes()) == 0;
                sent = std::max(sent, runs[size_t(r)][i].stats.back().bytes_sent);
            }
            table.add({gpu_exchange_name(exchange), std::to_string(o.tokens[i]),
                       fmt::format("{:.1f}", median_of(d)), fmt::format("{:.1f}", median_of(x)),
                       fmt::format("{:.1f}", median_of(m)), fmt::format("{:.1f}", median_of(n)),
                       fmt::format("{:.2f}", double(sent) / 1e6), fmt::format("{:.1f}", median_of(total)),
                       fmt::format("{:.1f}", median_of(wall)), fmt::format("{:.1f}", one_gpu_us[i]),
                       fmt::format("{:.1f}", one_wall_us[i]), bitwise ? "yes" : "NO"});
            jpoints.push_back({{"exchange", gpu_exchange_name(exchange)},
                               {"tokens_per_rank", o.tokens[i]},
                               {"ranks", ranks},
                               {"dispatch_us", median_of(d)},
                               {"experts_us", median_of(x)},
                               {"combine_us", median_of(m)},
                               {"exchange_us", median_of(n)},
                               {"bytes_sent_by_busiest_rank", sent},
                               {"ep_layer_us", median_of(total)},
                               {"ep_wall_us", median_of(wall)},
                               {"one_gpu_layer_us", one_gpu_us[i]},
                               {"one_gpu_wall_us", one_wall_us[i]},
                               {"bitwise_equal_to_one_gpu", bitwise}});
        }
    }
    fmt::print("workload {}: H={} I={} K={}, {} experts ({}) over {} GPUs ({}), contiguous placement\n",
               o.workload, H, c.moe_intermediate_size, c.top_k, c.n_routed_experts, w.format, ranks,
               cuda::device_name());
    fmt::print("{}", table.str());
    fmt::print("GPU event times on each rank, the slowest rank's, median of {} runs. dispatch = router, plan, rows "
               "and pairs to their ranks (nccl: headers first, then a host wait for them); experts = this rank's "
               "experts on the pairs it received; combine = results home, combine (the shared expert overlaps on a "
               "second stream); exchange = the transfers and waits within them; sent MB = rows, pairs and results "
               "one rank sent to others. peer = direct writes into the other GPU's memory, nccl = NCCL "
               "point-to-point. 1 GPU = the whole layer on GPU 0 with one rank's tokens. Host copies in and out "
               "are not in the GPU times.\n",
               o.repeat);
    const json record = {{"tool", "steadymoe bench --backend cuda --ep-ranks"},
                         {"command", command_line()},
                         {"date", utc_timestamp()},
                         {"commit", git_commit()},
                         {"device", cuda::device_name()},
                         {"workload", o.workload},
                         {"format", w.format},
                         {"points", jpoints}};
    write_file_atomic(o.json_path, record.dump(2) + "\n");
    fmt::print("wrote {}\n", o.json_path);
    for (const json& p : jpoints)
        SMOE_CHECK(p["bitwise_equal_to_one_gpu"].get<bool>(), Internal,
                   "the GPU expert-parallel output differs from one GPU at {} tokens per rank",
                   p["tokens_per_rank"].get<int64_t>());
    return kExitOk;
}

#endif

}  // namespace steadymoe::cli
