// Which rank holds which expert: the physical-to-logical table of expert-parallel load balancing
// (phy2log; log2phy and logcnt are derived), contiguous, strided, or read from a file. Physical slot p
// lives on rank p / slots_per_rank. Replicas of one logical expert hold the same weights, so which
// replica serves a token never changes its bits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace steadymoe {

class ExpertPlacement {
public:
    // Rank r holds experts r*E/R .. (r+1)*E/R - 1 (E a multiple of R).
    static ExpertPlacement contiguous(int64_t experts, int ranks);
    // Rank r holds experts r, r+R, r+2R, ... (E a multiple of R).
    static ExpertPlacement strided(int64_t experts, int ranks);
    // A table of ranks * slots_per_rank logical ids; every expert must appear at least once.
    static ExpertPlacement from_table(int64_t experts, int ranks, std::vector<int32_t> phy2log);
    // {"logical_experts": E, "ranks": R, "phy2log": [[rank 0's experts], [rank 1's], ...]}; also
    // accepted with "log2phy" / "logcnt" present (they are checked against phy2log).
    static ExpertPlacement read_json(const std::filesystem::path& path);
    std::string to_json() const;  // with log2phy and logcnt, for readers that want them

    int64_t logical_experts() const { return experts_; }
    int ranks() const { return ranks_; }
    int64_t slots_per_rank() const { return slots_; }
    int32_t logical_of(int64_t physical) const { return phy2log_[size_t(physical)]; }
    int rank_of(int64_t physical) const { return int(physical / slots_); }
    const std::vector<int32_t>& replicas(int32_t expert) const { return log2phy_[size_t(expert)]; }
    // Per logical expert: whether rank `rank` holds a replica of it (what that rank must load).
    std::vector<bool> experts_of(int rank) const;
    // The physical replica serving slot `slot` of token `token`: spreads a hot expert's tokens over its
    // replicas.
    int64_t replica_for(int32_t expert, int64_t token, int64_t slot) const;
    // A digest of the table, for checking that every rank runs the same placement.
    std::string fingerprint() const;

private:
    int64_t experts_ = 0;
    int ranks_ = 0;
    int64_t slots_ = 0;
    std::vector<int32_t> phy2log_;
    std::vector<std::vector<int32_t>> log2phy_;
};

}  // namespace steadymoe
