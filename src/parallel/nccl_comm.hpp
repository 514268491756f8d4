// An NCCL communicator for the GPUs of an expert-parallel group: made over the group's host transport
// (rank 0's unique id travels through it), one group of point-to-point sends and receives per exchange,
// and every wait bounded. The communicator is non-blocking, so a peer that stops or stalls shows as an
// unfinished stream past the deadline (or an asynchronous NCCL error): the communicator is then aborted
// and the wait throws Error(Communication) — never a hang.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <vector>

#include "steadymoe/parallel/transport.hpp"

struct ncclComm;

namespace steadymoe {

class NcclComm {
  public:
    // Collective over `bootstrap`; one rank per CUDA device, the calling thread's current device.
    NcclComm(Transport& bootstrap, std::chrono::milliseconds timeout);
    ~NcclComm();
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;

    int rank() const { return rank_; }
    int size() const { return size_; }

    // One transfer with a peer: `send_bytes` from `send` to it, `recv_bytes` from it into `recv`.
    struct Transfer {
        int peer = 0;
        const void* send = nullptr;
        size_t send_bytes = 0;
        void* recv = nullptr;
        size_t recv_bytes = 0;
    };
    // Enqueues the transfers on `stream` as one group (a transfer with this rank itself is a device
    // copy). Sizes must match what the peers expect; every rank lists its peers in the same order.
    void exchange(const std::vector<Transfer>& transfers, cudaStream_t stream);
    // Waits for `stream`, at most the timeout; throws Error(Communication) naming `what` and aborts the
    // communicator when a peer failed or did not take part in time.
    void wait(cudaStream_t stream, const char* what);

  private:
    [[noreturn]] void fail(const std::string& why);
    ncclComm* comm_ = nullptr;
    int rank_ = 0;
    int size_ = 1;
    std::chrono::milliseconds timeout_;
    bool aborted_ = false;
};

}  // namespace steadymoe
