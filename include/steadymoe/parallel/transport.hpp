// How ranks exchange bytes: one collective, a variable-size all-to-all, behind an interface that the
// in-process group (tests, one-node CPU runs) and MPI / NCCL transports implement. Every wait is
// bounded: a rank that fails or does not arrive in time makes the others' call throw
// Error(Communication) naming it, never hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace steadymoe {

using Bytes = std::vector<uint8_t>;

class Transport {
public:
    virtual ~Transport() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // Collective: every rank calls it with send[d] for each rank d and gets back recv[s], what rank s
    // sent it.
    virtual std::vector<Bytes> all_to_all(std::vector<Bytes> send) = 0;
    // Collective: everyone's `mine`, indexed by rank.
    std::vector<Bytes> all_gather(const Bytes& mine);
    // Whether collectives may be called from a thread other than the one that made the transport, one
    // thread at a time (CollectiveQueue runs them on its own thread when they may).
    virtual bool callable_from_any_thread() const { return true; }
};

// N ranks in one process (one thread each), exchanging through shared memory.
class LocalGroup {
public:
    explicit LocalGroup(int size, std::chrono::milliseconds timeout = std::chrono::seconds(60));
    ~LocalGroup();
    Transport& transport(int rank);
    // Marks `rank` as failed: the other ranks' next (or current) collective throws, naming it.
    void fail(int rank);

private:
    struct State;
    class Member;
    std::shared_ptr<State> state_;
    std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace steadymoe
