// The transport between CPU ranks launched by mpirun: point-to-point messages (sizes, then bytes) for
// the all-to-all, polled against a deadline, so a rank that died or stalls is named in an
// Error(Communication) instead of hanging its peers. Built when CMake finds MPI.
#pragma once

#include "steadymoe/parallel/transport.hpp"

#include <chrono>

namespace steadymoe {

class MpiTransport final : public Transport {
public:
    // Initialises MPI unless the process already has, and finalises it at destruction when it did.
    explicit MpiTransport(std::chrono::milliseconds timeout = std::chrono::seconds(60));
    ~MpiTransport() override;
    MpiTransport(const MpiTransport&) = delete;
    MpiTransport& operator=(const MpiTransport&) = delete;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::vector<Bytes> all_to_all(std::vector<Bytes> send) override;
    // When MPI granted MPI_THREAD_SERIALIZED or more (asked for at initialisation).
    bool callable_from_any_thread() const override { return serialized_; }

    // Whether this process was started by an MPI launcher (mpirun / mpiexec / srun with PMI).
    static bool launched_by_mpi();

private:
    std::chrono::milliseconds timeout_;
    int rank_ = 0;
    int size_ = 1;
    int64_t round_ = 0;
    bool owns_mpi_ = false;
    bool serialized_ = false;
};

}  // namespace steadymoe
