#include "nccl_comm.hpp"

#include <nccl.h>

#include <cstring>
#include <thread>

#include "steadymoe/kernels/cuda/runtime.hpp"

#include "../kernels/cuda/check.hpp"
#include "steadymoe/core/error.hpp"

namespace steadymoe {

namespace {

using Clock = std::chrono::steady_clock;

// Waits until the non-blocking communicator has finished its last call (init, group end).
ncclResult_t settle(ncclComm_t comm, Clock::time_point deadline) {
    ncclResult_t state = ncclInProgress;
    while (true) {
        if (ncclCommGetAsyncError(comm, &state) != ncclSuccess || state != ncclInProgress) return state;
        if (Clock::now() > deadline) return ncclInProgress;
        std::this_thread::yield();
    }
}

}  // namespace

NcclComm::NcclComm(Transport& bootstrap, std::chrono::milliseconds timeout)
    : rank_(bootstrap.rank()), size_(bootstrap.size()), timeout_(timeout) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank_ == 0)
        SMOE_CHECK(ncclGetUniqueId(&id) == ncclSuccess, Communication,
                   "rank 0: NCCL could not make a unique id");
    const std::vector<Bytes> ids = bootstrap.all_gather(
        Bytes(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof id));
    SMOE_CHECK(ids[0].size() == sizeof id, Communication, "rank {}: rank 0 sent a malformed NCCL id", rank_);
    std::memcpy(&id, ids[0].data(), sizeof id);

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // calls return at once; waits are ours, with a deadline
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, size_, id, rank_, &config);
    if (comm && (r == ncclSuccess || r == ncclInProgress)) r = settle(comm, Clock::now() + timeout_);
    if (r != ncclSuccess) {
        if (comm) ncclCommAbort(comm);
        SMOE_THROW(Communication, "rank {}: NCCL communicator of {} ranks not made: {}", rank_, size_,
                   r == ncclInProgress ? "timed out waiting for the other ranks" : ncclGetErrorString(r));
    }
    comm_ = comm;
}

NcclComm::~NcclComm() {
    if (!comm_ || aborted_) return;
    // Finish outstanding work within the timeout; a communicator that cannot is aborted instead.
    ncclResult_t r = ncclCommFinalize(comm_);
    if (r == ncclInProgress || r == ncclSuccess) r = settle(comm_, Clock::now() + timeout_);
    if (r == ncclSuccess)
        ncclCommDestroy(comm_);
    else
        ncclCommAbort(comm_);
}

void NcclComm::fail(const std::string& why) {
    if (!aborted_) {
        ncclCommAbort(comm_);
        aborted_ = true;
    }
    SMOE_THROW(Communication, "rank {}: {}; the NCCL communicator is aborted", rank_, why);
}

void NcclComm::exchange(const std::vector<Transfer>& transfers, cudaStream_t stream) {
    SMOE_CHECK(!aborted_, Communication, "rank {}: the NCCL communicator was aborted by an earlier failure",
               rank_);
    for (const Transfer& x : transfers) {
        SMOE_CHECK(x.peer >= 0 && x.peer < size_, Internal, "a transfer with rank {} of {}", x.peer, size_);
        if (x.peer != rank_) continue;
        SMOE_CHECK(x.send_bytes == x.recv_bytes, Internal, "rank {} sends itself {} bytes and expects {}",
                   rank_, x.send_bytes, x.recv_bytes);
        if (x.send_bytes > 0)
            SMOE_CUDA_CHECK(cudaMemcpyAsync(x.recv, x.send, x.send_bytes, cudaMemcpyDeviceToDevice, stream));
    }
    ncclResult_t r = ncclGroupStart();
    for (const Transfer& x : transfers) {
        if (x.peer == rank_ || r != ncclSuccess) continue;
        if (x.send_bytes > 0) r = ncclSend(x.send, x.send_bytes, ncclUint8, x.peer, comm_, stream);
        if (r == ncclSuccess && x.recv_bytes > 0)
            r = ncclRecv(x.recv, x.recv_bytes, ncclUint8, x.peer, comm_, stream);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess) r = end;
    if (r == ncclInProgress) r = settle(comm_, Clock::now() + timeout_);
    if (r != ncclSuccess)
        fail(r == ncclInProgress ? "NCCL did not accept an exchange in time"
                                 : std::string("NCCL exchange failed: ") + ncclGetErrorString(r));
}

void NcclComm::wait(cudaStream_t stream, const char* what) {
    std::string why;
    const cuda::StreamWait state = cuda::wait_until(
        stream, Clock::now() + timeout_,
        [&] {
            ncclResult_t async = ncclSuccess;
            ncclCommGetAsyncError(comm_, &async);
            if (async != ncclSuccess && async != ncclInProgress)
                fail(std::string("NCCL failed during ") + what + ": " + ncclGetErrorString(async));
        },
        &why);
    if (state == cuda::StreamWait::Failed) fail(std::string("the GPU failed during ") + what + ": " + why);
    if (state == cuda::StreamWait::TimedOut)
        fail(fmt::format("{} did not finish within {} ms: a peer rank stopped or stalled", what, timeout_.count()));
}

}  // namespace steadymoe
