#include "steadymoe/parallel/placement.hpp"

#include "steadymoe/core/digest.hpp"
#include "steadymoe/core/error.hpp"
#include "steadymoe/core/files.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace steadymoe {

ExpertPlacement ExpertPlacement::contiguous(int64_t experts, int ranks) {
    SMOE_CHECK(ranks > 0 && experts > 0 && experts % ranks == 0, InvalidArgument,
               "a contiguous placement needs the {} experts to divide evenly over {} ranks", experts, ranks);
    std::vector<int32_t> table(static_cast<size_t>(experts));
    for (int64_t p = 0; p < experts; ++p) table[size_t(p)] = int32_t(p);
    return from_table(experts, ranks, std::move(table));
}

ExpertPlacement ExpertPlacement::strided(int64_t experts, int ranks) {
    SMOE_CHECK(ranks > 0 && experts > 0 && experts % ranks == 0, InvalidArgument,
               "a strided placement needs the {} experts to divide evenly over {} ranks", experts, ranks);
    const int64_t per = experts / ranks;
    std::vector<int32_t> table(static_cast<size_t>(experts));
    for (int r = 0; r < ranks; ++r)
        for (int64_t s = 0; s < per; ++s) table[size_t(r * per + s)] = int32_t(s * ranks + r);
    return from_table(experts, ranks, std::move(table));
}

ExpertPlacement ExpertPlacement::from_table(int64_t experts, int ranks, std::vector<int32_t> phy2log) {
    SMOE_CHECK(ranks > 0, InvalidArgument, "a placement needs at least one rank, not {}", ranks);
    SMOE_CHECK(!phy2log.empty() && phy2log.size() % size_t(ranks) == 0, InvalidArgument,
               "placement: {} physical experts do not divide evenly over {} ranks", phy2log.size(), ranks);
    ExpertPlacement p;
    p.experts_ = experts;
    p.ranks_ = ranks;
    p.slots_ = int64_t(phy2log.size()) / ranks;
    p.log2phy_.assign(size_t(experts), {});
    for (size_t i = 0; i < phy2log.size(); ++i) {
        const int32_t e = phy2log[i];
        SMOE_CHECK(e >= 0 && e < experts, InvalidArgument,
                   "placement: physical expert {} (rank {}, slot {}) names expert {}, outside [0, {})", i,
                   int64_t(i) / p.slots_, int64_t(i) % p.slots_, e, experts);
        p.log2phy_[size_t(e)].push_back(int32_t(i));
    }
    for (int64_t e = 0; e < experts; ++e)
        SMOE_CHECK(!p.log2phy_[size_t(e)].empty(), InvalidArgument, "placement: expert {} is on no rank", e);
    p.phy2log_ = std::move(phy2log);
    return p;
}

ExpertPlacement ExpertPlacement::read_json(const std::filesystem::path& path) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(read_file_text(path, uint64_t(64) << 20));
    } catch (const nlohmann::json::exception& e) {
        SMOE_THROW(BadFormat, "{}: not valid JSON: {}", path.string(), e.what());
    }
    try {
        const int64_t experts = j.at("logical_experts").get<int64_t>();
        const auto& rows = j.at("phy2log");
        SMOE_CHECK(rows.is_array() && !rows.empty(), BadFormat, "{}: phy2log must be a non-empty list of ranks",
                   path.string());
        std::vector<int32_t> table;
        size_t width = rows.at(0).size();
        for (size_t r = 0; r < rows.size(); ++r) {
            SMOE_CHECK(rows[r].size() == width, BadFormat, "{}: rank {} holds {} experts, rank 0 holds {}",
                       path.string(), r, rows[r].size(), width);
            for (const auto& e : rows[r]) table.push_back(e.get<int32_t>());
        }
        if (j.contains("ranks"))
            SMOE_CHECK(j.at("ranks").get<size_t>() == rows.size(), BadFormat, "{}: ranks is {} but phy2log has {}",
                       path.string(), j.at("ranks").get<int64_t>(), rows.size());
        ExpertPlacement p = from_table(experts, int(rows.size()), std::move(table));
        if (j.contains("logcnt"))
            for (int64_t e = 0; e < experts; ++e)
                SMOE_CHECK(j.at("logcnt").at(size_t(e)).get<size_t>() == p.replicas(int32_t(e)).size(), BadFormat,
                           "{}: logcnt[{}] disagrees with phy2log", path.string(), e);
        return p;
    } catch (const nlohmann::json::exception& e) {
        SMOE_THROW(BadFormat, "{}: {}", path.string(), e.what());
    }
}

std::string ExpertPlacement::to_json() const {
    nlohmann::json rows = nlohmann::json::array(), log2phy = nlohmann::json::array(), logcnt = nlohmann::json::array();
    for (int r = 0; r < ranks_; ++r)
        rows.push_back(std::vector<int32_t>(phy2log_.begin() + r * slots_, phy2log_.begin() + (r + 1) * slots_));
    for (const auto& replicas : log2phy_) {
        log2phy.push_back(replicas);
        logcnt.push_back(replicas.size());
    }
    return nlohmann::json{{"logical_experts", experts_}, {"ranks", ranks_}, {"phy2log", rows},
                          {"log2phy", log2phy}, {"logcnt", logcnt}}
               .dump(1) + "\n";
}

std::vector<bool> ExpertPlacement::experts_of(int rank) const {
    std::vector<bool> held(static_cast<size_t>(experts_), false);
    for (int64_t s = 0; s < slots_; ++s) held[size_t(phy2log_[size_t(rank * slots_ + s)])] = true;
    return held;
}

int64_t ExpertPlacement::replica_for(int32_t expert, int64_t token, int64_t slot) const {
    const std::vector<int32_t>& r = log2phy_[size_t(expert)];
    return r[size_t((token + slot) % int64_t(r.size()))];
}

std::string ExpertPlacement::fingerprint() const {
    uint64_t h = fnv1a(kFnvOffset, &experts_, sizeof experts_);
    h = fnv1a(h, &ranks_, sizeof ranks_);
    h = fnv1a(h, phy2log_.data(), phy2log_.size() * sizeof(int32_t));
    return fmt::format("{} experts on {} ranks x {} slots, table {:016x}", experts_, ranks_, slots_, h);
}

}  // namespace steadymoe
