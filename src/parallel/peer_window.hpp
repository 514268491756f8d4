// Device memory that every GPU of an expert-parallel group can write: each rank allocates a window of
// the same size, and every rank maps every other's — by peer access when the ranks are threads of one
// process, by CUDA IPC handles when they are processes. Collective over the group's host transport; if
// any rank cannot map a peer, every rank throws Error(Unsupported) naming it.
#pragma once

#include <cstddef>
#include <vector>

#include "steadymoe/parallel/transport.hpp"

namespace steadymoe {

class PeerWindow {
  public:
    // On the calling thread's current CUDA device; the window starts zeroed.
    PeerWindow(Transport& bootstrap, size_t bytes);
    ~PeerWindow();
    PeerWindow(const PeerWindow&) = delete;
    PeerWindow& operator=(const PeerWindow&) = delete;

    char* local() const { return views_[size_t(rank_)]; }
    // Rank r's window as this device addresses it (this rank's own for r == rank).
    char* of(int r) const { return views_[size_t(r)]; }

  private:
    void release();
    int rank_ = 0;
    std::vector<char*> views_;
    std::vector<bool> opened_;  // mapped from an IPC handle (closed on destruction)
};

}  // namespace steadymoe
