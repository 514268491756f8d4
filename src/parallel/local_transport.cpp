#include "steadymoe/core/error.hpp"
#include "steadymoe/parallel/transport.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <mutex>
#include <string>

namespace steadymoe {

std::vector<Bytes> Transport::all_gather(const Bytes& mine) {
    return all_to_all(std::vector<Bytes>(size_t(size()), mine));
}

// Round n of the all-to-all uses mailbox n % 2: a rank can only reach round n + 2 after every rank has
// arrived at round n + 1, that is after every rank has read its round-n mail.
struct LocalGroup::State {
    int size = 0;
    std::chrono::milliseconds timeout{};
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<int64_t> round;                 // per rank: collectives entered
    std::vector<bool> failed;
    std::vector<std::vector<Bytes>> mail[2];    // [from][to]
};

class LocalGroup::Member final : public Transport {
public:
    Member(std::shared_ptr<State> state, int rank) : state_(std::move(state)), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return state_->size; }

    std::vector<Bytes> all_to_all(std::vector<Bytes> send) override {
        State& s = *state_;
        SMOE_CHECK(int(send.size()) == s.size, InvalidArgument, "all_to_all: {} messages for {} ranks", send.size(),
                   s.size);
        std::unique_lock<std::mutex> lock(s.mutex);
        const int64_t my_round = s.round[size_t(rank_)]++;
        std::vector<std::vector<Bytes>>& mail = s.mail[my_round & 1];
        for (int d = 0; d < s.size; ++d) mail[size_t(rank_)][size_t(d)] = std::move(send[size_t(d)]);
        s.changed.notify_all();
        const auto everyone_here = [&] {  // a rank that fails after arriving has still delivered its mail
            for (int r = 0; r < s.size; ++r)
                if (s.round[size_t(r)] <= my_round) return false;
            return true;
        };
        const auto someone_failed = [&] {
            for (int r = 0; r < s.size; ++r)
                if (s.failed[size_t(r)]) return true;
            return false;
        };
        s.changed.wait_for(lock, s.timeout, [&] { return everyone_here() || someone_failed(); });
        if (!everyone_here()) {
            for (int r = 0; r < s.size; ++r)
                SMOE_CHECK(!s.failed[size_t(r)], Communication, "rank {}: rank {} failed during collective {}", rank_,
                           r, my_round);
            std::string missing;
            for (int r = 0; r < s.size; ++r)
                if (s.round[size_t(r)] <= my_round) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
            SMOE_THROW(Communication, "rank {}: rank(s) {} did not reach collective {} within {} ms", rank_, missing,
                       my_round, s.timeout.count());
        }
        std::vector<Bytes> recv(size_t(s.size));
        for (int from = 0; from < s.size; ++from) recv[size_t(from)] = std::move(mail[size_t(from)][size_t(rank_)]);
        return recv;
    }

private:
    std::shared_ptr<State> state_;
    int rank_;
};

LocalGroup::LocalGroup(int size, std::chrono::milliseconds timeout) : state_(std::make_shared<State>()) {
    SMOE_CHECK(size > 0, InvalidArgument, "a group needs at least one rank, not {}", size);
    state_->size = size;
    state_->timeout = timeout;
    state_->round.assign(size_t(size), 0);
    state_->failed.assign(size_t(size), false);
    for (auto& mail : state_->mail) mail.assign(size_t(size), std::vector<Bytes>(size_t(size)));
    for (int r = 0; r < size; ++r) members_.push_back(std::make_unique<Member>(state_, r));
}

LocalGroup::~LocalGroup() = default;

Transport& LocalGroup::transport(int rank) {
    SMOE_CHECK(rank >= 0 && rank < state_->size, InvalidArgument, "rank {} outside a group of {}", rank, state_->size);
    return *members_[size_t(rank)];
}

void LocalGroup::fail(int rank) {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->failed[size_t(rank)] = true;
    state_->changed.notify_all();
}

}  // namespace steadymoe
