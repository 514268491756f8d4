#include "peer_window.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "steadymoe/kernels/cuda/runtime.hpp"

#include "../kernels/cuda/check.hpp"
#include "steadymoe/core/error.hpp"

namespace steadymoe {

namespace {

// What a rank tells the others about its window.
struct WindowCard {
    int32_t pid;
    int32_t device;
    uint64_t pointer;
    cudaIpcMemHandle_t handle;
};

}  // namespace

PeerWindow::PeerWindow(Transport& bootstrap, size_t bytes) : rank_(bootstrap.rank()) {
    const int ranks = bootstrap.size();
    WindowCard mine{};
    mine.pid = int32_t(getpid());
    mine.device = int32_t(cuda::current_device());
    char* local = nullptr;
    const cudaError_t alloc = cudaMalloc(&local, bytes);
    if (alloc != cudaSuccess) {
        cudaGetLastError();
        SMOE_THROW(OutOfMemory, "rank {}: cannot allocate the {}-byte expert-parallel exchange window: {}",
                   rank_, bytes, cudaGetErrorString(alloc));
    }
    SMOE_CUDA_CHECK(cudaMemset(local, 0, bytes));
    SMOE_CUDA_CHECK(cudaDeviceSynchronize());
    mine.pointer = reinterpret_cast<uint64_t>(local);
    SMOE_CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, local));
    const auto* p = reinterpret_cast<const uint8_t*>(&mine);
    const std::vector<Bytes> cards = bootstrap.all_gather(Bytes(p, p + sizeof mine));

    views_.assign(size_t(ranks), nullptr);
    opened_.assign(size_t(ranks), false);
    views_[size_t(rank_)] = local;
    std::string problem;
    for (int r = 0; r < ranks && problem.empty(); ++r) {
        if (r == rank_) continue;
        WindowCard card;
        if (cards[size_t(r)].size() != sizeof card) {
            problem = fmt::format("rank {} sent a malformed window description", r);
            break;
        }
        std::memcpy(&card, cards[size_t(r)].data(), sizeof card);
        int can = 0;
        cudaDeviceCanAccessPeer(&can, mine.device, card.device);
        if (card.pid == mine.pid && card.device == mine.device) {
            problem = fmt::format("ranks {} and {} share CUDA device {}", rank_, r, card.device);
        } else if (!can) {
            problem = fmt::format("CUDA device {} cannot access device {} (rank {}) as a peer", mine.device,
                                  card.device, r);
        } else if (card.pid == mine.pid) {
            const cudaError_t e = cudaDeviceEnablePeerAccess(card.device, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
                problem =
                    fmt::format("peer access to device {} failed: {}", card.device, cudaGetErrorString(e));
            cudaGetLastError();
            views_[size_t(r)] = reinterpret_cast<char*>(card.pointer);
        } else {
            void* mapped = nullptr;
            const cudaError_t e = cudaIpcOpenMemHandle(&mapped, card.handle, cudaIpcMemLazyEnablePeerAccess);
            if (e != cudaSuccess) {
                cudaGetLastError();
                problem = fmt::format("opening rank {}'s window failed: {}", r, cudaGetErrorString(e));
            } else {
                views_[size_t(r)] = static_cast<char*>(mapped);
                opened_[size_t(r)] = true;
            }
        }
    }
    // Every rank says whether it mapped every peer, so that all refuse together.
    const std::vector<Bytes> verdicts = bootstrap.all_gather(Bytes(problem.begin(), problem.end()));
    for (int r = 0; r < ranks; ++r) {
        if (verdicts[size_t(r)].empty()) continue;
        release();
        SMOE_THROW(Unsupported, "rank {} cannot write the other GPUs' memory directly: {}", r,
                   std::string(verdicts[size_t(r)].begin(), verdicts[size_t(r)].end()));
    }
}

PeerWindow::~PeerWindow() { release(); }

void PeerWindow::release() {
    for (size_t r = 0; r < views_.size(); ++r) {
        if (opened_[r]) cudaIpcCloseMemHandle(views_[r]);
        opened_[r] = false;
    }
    if (!views_.empty() && views_[size_t(rank_)]) cudaFree(views_[size_t(rank_)]);
    views_.clear();
}

}  // namespace steadymoe
