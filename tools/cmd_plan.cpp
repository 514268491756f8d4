// `steadymoe plan`: an expert placement with replicas of hot experts from measured per-expert loads
// (parallel/eplb.hpp), written as a placement file every rank reads; prints each rank's load under the
// plan beside the contiguous placement's.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "steadymoe/core/error.hpp"
#include "steadymoe/core/files.hpp"
#include "steadymoe/parallel/eplb.hpp"

namespace steadymoe::cli {

namespace {

struct PlanOptions {
    std::string load_path;
    std::string out;
    int64_t physical = 0;
    int ranks = 1;
    int nodes = 1;
    int64_t groups = 1;
};

// A JSON list of numbers, or an object holding one under "expert_load" (a run's or bench point's).
std::vector<double> read_loads(const std::string& path) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(read_file_text(path, uint64_t(64) << 20));
        if (j.is_object()) j = j.at("expert_load");
        return j.get<std::vector<double>>();
    } catch (const nlohmann::json::exception& e) {
        SMOE_THROW(BadFormat, "--load {}: expected a JSON list of per-expert loads (or {{\"expert_load\": [...]}}): {}",
                   path, e.what());
    }
}

int plan(const PlanOptions& o) {
    EplbRequest request;
    request.load = read_loads(o.load_path);
    request.physical = o.physical == 0 ? int64_t(request.load.size()) : o.physical;
    request.ranks = o.ranks, request.nodes = o.nodes, request.groups = o.groups;
    const ExpertPlacement placement = plan_placement(request);
    write_file_atomic(o.out, placement.to_json());

    const std::vector<double> planned = rank_loads(placement, request.load);
    std::vector<double> contiguous;
    if (int64_t(request.load.size()) % o.ranks == 0)
        contiguous = rank_loads(ExpertPlacement::contiguous(int64_t(request.load.size()), o.ranks), request.load);
    double total = 0;
    for (double l : request.load) total += l;
    Table table({"rank", "experts (replicas)", "load planned", "load contiguous"});
    for (int r = 0; r < o.ranks; ++r) {
        std::string held;
        for (int64_t s = 0; s < placement.slots_per_rank(); ++s)
            held += fmt::format("{}{}", s ? " " : "", placement.logical_of(r * placement.slots_per_rank() + s));
        table.add({std::to_string(r), held, fmt::format("{:.1f}", planned[size_t(r)]),
                   contiguous.empty() ? "n/a" : fmt::format("{:.1f}", contiguous[size_t(r)])});
    }
    fmt::print("{}", table.str());
    const double mean = total / o.ranks;
    fmt::print("busiest rank / mean: {:.3f} planned{}; wrote {}\n",
               *std::max_element(planned.begin(), planned.end()) / mean,
               contiguous.empty() ? std::string()
                                  : fmt::format(", {:.3f} contiguous",
                                                *std::max_element(contiguous.begin(), contiguous.end()) / mean),
               o.out);
    return kExitOk;
}

}  // namespace

Command add_plan_command(CLI::App& parent) {
    auto o = std::make_shared<PlanOptions>();
    CLI::App* app = parent.add_subcommand(
        "plan", "Plan an expert placement with replicas of hot experts from per-expert loads");
    app->add_option("--load", o->load_path, "JSON list of per-expert loads (or {\"expert_load\": [...]})")->required();
    app->add_option("--ranks", o->ranks, "Ranks (GPUs or CPU ranks) in all")->required();
    app->add_option("--physical", o->physical, "Physical expert slots in all (0 = one per expert)")
        ->capture_default_str();
    app->add_option("--nodes", o->nodes, "Nodes; whole expert groups stay on one node")->capture_default_str();
    app->add_option("--groups", o->groups, "Expert groups (contiguous ids)")->capture_default_str();
    app->add_option("--out", o->out, "Placement file to write (JSON: phy2log, log2phy, logcnt)")->required();
    return {app, [o] { return plan(*o); }};
}

}  // namespace steadymoe::cli
