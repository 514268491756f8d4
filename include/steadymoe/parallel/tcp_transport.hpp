// The transport between CPU ranks launched torchrun-style: each process finds its place in the
// environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; LOCAL_RANK is accepted and not needed) and
// the ranks connect over TCP. Rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank opens a
// listener of its own on a free port and registers with rank 0, which answers with everyone's address;
// then each pair of ranks above 0 connects once (the higher rank dials). The all-to-all sends and
// receives every peer's bytes at once with poll() against a deadline: a rank that stops (its connection
// closes) or stalls is named in an Error(Communication), never waited for forever.
#pragma once

#include "steadymoe/parallel/transport.hpp"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace steadymoe {

struct TcpEndpoint {
    int rank = 0;
    int size = 1;
    std::string master_addr = "127.0.0.1";
    int master_port = 0;

    // From RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; nullopt when RANK and WORLD_SIZE are not both
    // set. Malformed or inconsistent values throw InvalidArgument naming the variable.
    static std::optional<TcpEndpoint> from_environment();
};

class TcpTransport final : public Transport {
public:
    // Connects to every other rank; throws Error(Communication) naming the ranks that did not arrive
    // within `timeout`, or when the master address cannot be used.
    TcpTransport(const TcpEndpoint& endpoint, std::chrono::milliseconds timeout = std::chrono::seconds(60));
    ~TcpTransport() override;
    TcpTransport(const TcpTransport&) = delete;
    TcpTransport& operator=(const TcpTransport&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::vector<Bytes> all_to_all(std::vector<Bytes> send) override;

private:
    // "2, 5": the ranks from `first` on that have no connection yet.
    std::string unconnected_from(int first) const;

    int rank_ = 0;
    int size_ = 1;
    std::chrono::milliseconds timeout_;
    std::vector<int> peers_;  // socket per rank (-1 for this rank)
    uint64_t round_ = 0;
};

}  // namespace steadymoe
