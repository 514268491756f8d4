// `steadymoe inspect --model DIR`: what a checkpoint holds (config, shards, dtypes, each layer's MoE
// tensors and formats) and whether every MoE layer loads and validates, weights checked for NaN/Inf.
// Exit 2 when the directory cannot be opened at all, 1 when some layer fails to validate.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "steadymoe/core/error.hpp"
#include "steadymoe/model/checkpoint.hpp"
#include "steadymoe/model/safetensors.hpp"
#include "steadymoe/model/weights.hpp"

namespace steadymoe::cli {

namespace {

using nlohmann::json;

struct InspectOptions {
    std::string model;
    bool json = false;
};

// Router and bias are plain tensors (not WeightMatrix), so their finiteness is checked here.
void check_finite_tensor(const Tensor& t, const std::string& name) {
    if (!t.defined() || !dtype_is_float(t.dtype())) return;
    const Tensor f = t.to_f32();
    const float* p = f.data<float>();
    for (int64_t i = 0; i < f.numel(); ++i)
        SMOE_CHECK(std::isfinite(p[i]), BadFormat, "{}: non-finite value at element {}", name, i);
}

std::string shape_of(const Tensor& t) {
    return t.defined() ? fmt::format("{} {}", dtype_name(t.dtype()), shape_str(t.shape())) : "none";
}

// Loads layer L and checks every weight; fills `info` with what was found, throws on the first fault.
void inspect_layer(const Checkpoint& ckpt, int64_t layer, json& info) {
    const MoeLayerWeights w = load_moe_layer(ckpt, layer);
    const ExpertWeights& e0 = w.experts.at(0);
    info["experts"] = w.experts.size();
    info["expert_format"] = expert_format_name(e0.gate.format);
    info["expert_storage"] = {{"gate", describe_weight(e0.gate)},
                              {"up", describe_weight(e0.up)},
                              {"down", describe_weight(e0.down)}};
    info["router"] = shape_of(w.router);
    info["selection_bias"] = shape_of(w.selection_bias);
    info["tid2eid"] = shape_of(w.tid2eid);
    info["shared"] = w.has_shared ? describe_weight(w.shared.gate) +
                                        fmt::format(" [{}, {}]", w.shared.gate.rows, w.shared.gate.cols)
                                  : "none";
    info["shared_gate"] = shape_of(w.shared_gate);
    info["stored_bytes"] = w.stored_bytes();
    check_finite_tensor(w.router, fmt::format("layer {} router", layer));
    check_finite_tensor(w.selection_bias, fmt::format("layer {} selection bias", layer));
    check_finite_tensor(w.shared_gate, fmt::format("layer {} shared expert gate", layer));
    for (const ExpertWeights& e : w.experts) {
        for (const WeightMatrix* m : {&e.gate, &e.up, &e.down}) m->check_finite();
    }
    if (w.has_shared) {
        for (const WeightMatrix* m : {&w.shared.gate, &w.shared.up, &w.shared.down}) m->check_finite();
    }
}

void print_text(const json& r) {
    std::string config = r["describe"].get<std::string>();
    while (!config.empty() && config.back() == '\n') config.pop_back();
    fmt::print("model: {}\n{}\n", r["model"].get<std::string>(), config);
    fmt::print("\nfiles: {} shard(s), {} tensors, {}\n", r["shards"].size(), r["tensors"].get<int64_t>(),
               human_bytes(r["bytes"].get<double>()));
    for (const json& s : r["shards"])
        fmt::print("  {}: {} tensors, {}\n", s["file"].get<std::string>(), s["tensors"].get<int64_t>(),
                   human_bytes(s["bytes"].get<double>()));
    std::string dtypes;
    for (const auto& [d, n] : r["dtypes"].items())
        dtypes += fmt::format("{}{} x{}", dtypes.empty() ? "" : ", ", d, n.get<int64_t>());
    fmt::print("  dtypes: {}\n", dtypes);
    for (const json& l : r["layers"]) {
        const int64_t L = l["layer"].get<int64_t>();
        if (!l["moe"].get<bool>()) {
            fmt::print("\nlayer {}: dense (no MoE block)\n", L);
            continue;
        }
        fmt::print("\nlayer {}: MoE, {}\n", L, l["hash"].get<bool>() ? "hash-routed" : "score-routed");
        if (l.contains("experts")) {
            const json& st = l["expert_storage"];
            const std::string storage =
                st["gate"] == st["up"] && st["up"] == st["down"]
                    ? st["gate"].get<std::string>()
                    : fmt::format("gate {}; up {}; down {}", st["gate"].get<std::string>(),
                                  st["up"].get<std::string>(), st["down"].get<std::string>());
            fmt::print("  experts:   {} x gate/up/down, {}\n", l["experts"].get<int64_t>(), storage);
            fmt::print("  router:    {}; selection bias: {}; tid2eid: {}\n", l["router"].get<std::string>(),
                       l["selection_bias"].get<std::string>(), l["tid2eid"].get<std::string>());
            fmt::print("  shared:    {}; shared gate: {}\n", l["shared"].get<std::string>(),
                       l["shared_gate"].get<std::string>());
            fmt::print("  stored:    {}\n", human_bytes(l["stored_bytes"].get<double>()));
        }
        if (l["validates"].get<bool>())
            fmt::print("  validates: yes\n");
        else
            fmt::print("  validates: NO: {}\n", l["error"].get<std::string>());
    }
    fmt::print("\n{}\n", r["validates"].get<bool>() ? "every MoE layer validates"
                                                    : "some MoE layers do NOT validate (see above)");
}

int inspect(const InspectOptions& o) {
    SMOE_CHECK(!o.model.empty(), InvalidArgument, "--model DIR is required");
    Progress progress("inspect");
    const Checkpoint ckpt = Checkpoint::open(o.model);  // a directory that does not open at all: exit 2
    const MoeConfig& cfg = ckpt.config();

    json r;
    r["model"] = o.model;
    r["describe"] = cfg.describe();
    r["config"] = {{"model_type", cfg.model_type},
                   {"family", model_family_name(cfg.family)},
                   {"num_hidden_layers", cfg.num_hidden_layers},
                   {"hidden_size", cfg.hidden_size},
                   {"moe_intermediate_size", cfg.moe_intermediate_size},
                   {"n_routed_experts", cfg.n_routed_experts},
                   {"top_k", cfg.top_k},
                   {"n_shared_experts", cfg.n_shared_experts},
                   {"score_func", score_func_name(cfg.score_func)},
                   {"num_hash_layers", cfg.num_hash_layers},
                   {"expert_format", expert_format_name(cfg.expert_format)}};
    r["shards"] = json::array();
    std::map<std::string, int64_t> dtypes;
    int64_t tensors = 0;
    uint64_t bytes = 0;
    for (const std::string& file : ckpt.shard_files()) {
        const SafetensorsFile shard = SafetensorsFile::open(std::filesystem::path(o.model) / file);
        uint64_t shard_bytes = 0;
        for (const TensorInfo& t : shard.tensors()) {
            shard_bytes += t.end - t.begin;
            ++dtypes[std::string(dtype_name(t.dtype))];
        }
        r["shards"].push_back({{"file", file}, {"tensors", shard.tensors().size()}, {"bytes", shard_bytes}});
        tensors += int64_t(shard.tensors().size());
        bytes += shard_bytes;
    }
    r["tensors"] = tensors;
    r["bytes"] = bytes;
    r["dtypes"] = dtypes;

    bool all_ok = true;
    std::string first_error;
    r["layers"] = json::array();
    for (int64_t L = 0; L < cfg.num_hidden_layers; ++L) {
        json l = {{"layer", L}, {"moe", cfg.is_moe_layer(L)}};
        if (cfg.is_moe_layer(L)) {
            l["hash"] = cfg.is_hash_layer(L);
            progress.line(fmt::format("checking layer {}", L));
            try {
                inspect_layer(ckpt, L, l);
                l["validates"] = true;
            } catch (const Error& e) {
                l["validates"] = false;
                l["error"] = e.what();
                if (all_ok)
                    first_error = fmt::format("layer {} of '{}' does not validate: {}", L, o.model, e.what());
                all_ok = false;
            }
        }
        r["layers"].push_back(std::move(l));
    }
    r["validates"] = all_ok;
    if (o.json)
        fmt::print("{}\n", r.dump(2));
    else
        print_text(r);
    // One line on stderr as well, so a script sees why without parsing the report.
    if (!all_ok) fmt::print(stderr, "steadymoe: error: {}\n", first_error);
    return all_ok ? kExitOk : kExitCheckFailed;
}

}  // namespace

Command add_inspect_command(CLI::App& parent) {
    auto o = std::make_shared<InspectOptions>();
    CLI::App* app =
        parent.add_subcommand("inspect", "Show what a checkpoint holds and check every MoE layer loads");
    app->add_option("--model", o->model, "Model directory (config.json + safetensors)")->required();
    app->add_flag("--json", o->json, "Print the report as JSON on stdout");
    return {app, [o] { return inspect(*o); }};
}

}  // namespace steadymoe::cli
