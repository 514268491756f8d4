#include "steadymoe/parallel/mpi_transport.hpp"

#include "steadymoe/core/error.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace steadymoe {

namespace {

// Waits for every request until the deadline; returns the peers whose requests did not complete.
std::string wait_all(std::vector<MPI_Request>& requests, const std::vector<int>& peer,
                     std::chrono::steady_clock::time_point deadline) {
    while (true) {
        int done = 0;
        MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
        if (done) return {};
        if (std::chrono::steady_clock::now() > deadline) break;
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    // Name the peers still owing a message, and withdraw what is pending so MPI can shut down cleanly.
    std::string missing;
    for (size_t i = 0; i < requests.size(); ++i) {
        int done = 0;
        if (requests[i] != MPI_REQUEST_NULL) MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);
        if (requests[i] == MPI_REQUEST_NULL || done) continue;
        if (missing.find(fmt::format(" {},", peer[i])) == std::string::npos) missing += fmt::format(" {},", peer[i]);
        MPI_Cancel(&requests[i]);
        MPI_Request_free(&requests[i]);
    }
    return missing.empty() ? missing : missing.substr(1, missing.size() - 2);
}

}  // namespace

bool MpiTransport::launched_by_mpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
        if (std::getenv(v)) return true;
    return false;
}

MpiTransport::MpiTransport(std::chrono::milliseconds timeout) : timeout_(timeout) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
        int provided = 0;
        // Serialised calls from any thread let a communication thread overlap exchanges with compute.
        SMOE_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) == MPI_SUCCESS, Communication,
                   "MPI_Init_thread failed");
        owns_mpi_ = true;
    }
    int level = 0;
    MPI_Query_thread(&level);
    serialized_ = level >= MPI_THREAD_SERIALIZED;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiTransport::~MpiTransport() {
    if (owns_mpi_) {
        int finalised = 0;
        MPI_Finalized(&finalised);
        if (!finalised) MPI_Finalize();
    }
}

std::vector<Bytes> MpiTransport::all_to_all(std::vector<Bytes> send) {
    SMOE_CHECK(int(send.size()) == size_, InvalidArgument, "all_to_all: {} messages for {} ranks", send.size(), size_);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    int* tag_upper = nullptr;
    int has_tag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_upper, &has_tag);
    const int tag_limit = has_tag && tag_upper ? *tag_upper : 32767;
    const int tag = int((2 * round_) % int64_t(tag_limit - 1));
    const int64_t this_round = round_++;

    // Sizes first, then the bytes; each peer's requests are remembered to name it on a timeout.
    std::vector<uint64_t> out_sizes(static_cast<size_t>(size_)), in_sizes(static_cast<size_t>(size_), 0);
    std::vector<MPI_Request> requests;
    std::vector<int> peer;
    for (int p = 0; p < size_; ++p) {
        out_sizes[size_t(p)] = send[size_t(p)].size();
        SMOE_CHECK(out_sizes[size_t(p)] <= uint64_t(INT_MAX), Unsupported,
                   "a message of {} bytes to rank {} exceeds what one MPI message carries", out_sizes[size_t(p)], p);
        if (p == rank_) {
            in_sizes[size_t(p)] = out_sizes[size_t(p)];
            continue;
        }
        requests.emplace_back(), peer.push_back(p);
        MPI_Irecv(&in_sizes[size_t(p)], 1, MPI_UINT64_T, p, tag, MPI_COMM_WORLD, &requests.back());
        requests.emplace_back(), peer.push_back(p);
        MPI_Isend(&out_sizes[size_t(p)], 1, MPI_UINT64_T, p, tag, MPI_COMM_WORLD, &requests.back());
    }
    std::string missing = wait_all(requests, peer, deadline);
    SMOE_CHECK(missing.empty(), Communication, "rank {}: rank(s) {} did not answer collective {} within {} ms", rank_,
               missing, this_round, timeout_.count());

    std::vector<Bytes> recv(static_cast<size_t>(size_));
    requests.clear(), peer.clear();
    for (int p = 0; p < size_; ++p) {
        if (p == rank_) {
            recv[size_t(p)] = std::move(send[size_t(p)]);
            continue;
        }
        recv[size_t(p)].resize(size_t(in_sizes[size_t(p)]));
        if (in_sizes[size_t(p)]) {
            requests.emplace_back(), peer.push_back(p);
            MPI_Irecv(recv[size_t(p)].data(), int(in_sizes[size_t(p)]), MPI_BYTE, p, tag + 1, MPI_COMM_WORLD,
                      &requests.back());
        }
        if (out_sizes[size_t(p)]) {
            requests.emplace_back(), peer.push_back(p);
            MPI_Isend(send[size_t(p)].data(), int(out_sizes[size_t(p)]), MPI_BYTE, p, tag + 1, MPI_COMM_WORLD,
                      &requests.back());
        }
    }
    missing = wait_all(requests, peer, deadline);
    SMOE_CHECK(missing.empty(), Communication, "rank {}: rank(s) {} did not deliver collective {} within {} ms", rank_,
               missing, this_round, timeout_.count());
    return recv;
}

}  // namespace steadymoe
