// A transport's collectives run on a communication thread, one at a time in the order they were
// started, so the caller computes while bytes move (the expert-parallel layer's phases and its chunked
// pipeline use it). Every rank must start the same collectives in the same order, and must not call
// the transport directly while started ones are unfinished. A transport whose calls must stay on one
// thread (MPI below MPI_THREAD_SERIALIZED) runs each collective at once, inside the start call.
#pragma once

#include "steadymoe/parallel/transport.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace steadymoe {

class CollectiveQueue {
public:
    explicit CollectiveQueue(Transport& transport);
    ~CollectiveQueue();  // finishes the collectives already started, then stops the thread
    CollectiveQueue(const CollectiveQueue&) = delete;
    CollectiveQueue& operator=(const CollectiveQueue&) = delete;

    // Start a collective; the future yields what the blocking call returns, or throws its error.
    std::future<std::vector<Bytes>> all_to_all(std::vector<Bytes> send);
    std::future<std::vector<Bytes>> all_gather(const Bytes& mine);
    // Two all-to-alls in a row as one started collective: the second sends what `relay` makes of what
    // the first brought (a hop through another rank), on the communication thread, so the caller does
    // not wait in between. If `relay` throws, this rank still takes part in the second (sending
    // nothing), so that no rank waits for it, and the future throws the error.
    using Relay = std::function<std::vector<Bytes>(const std::vector<Bytes>&)>;
    std::future<std::vector<Bytes>> all_to_all_relayed(std::vector<Bytes> send, Relay relay);

private:
    void run();
    std::future<std::vector<Bytes>> start(std::packaged_task<std::vector<Bytes>()> task);
    Transport& transport_;
    bool threaded_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::packaged_task<std::vector<Bytes>()>> tasks_;
    bool stopping_ = false;
    std::thread thread_;
};

}  // namespace steadymoe
