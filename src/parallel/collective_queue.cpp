#include "steadymoe/parallel/collective_queue.hpp"

#include <exception>

namespace steadymoe {

CollectiveQueue::CollectiveQueue(Transport& transport)
    : transport_(transport), threaded_(transport.callable_from_any_thread()) {
    if (threaded_) thread_ = std::thread([this] { run(); });
}

CollectiveQueue::~CollectiveQueue() {
    if (!threaded_) return;
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void CollectiveQueue::run() {
    while (true) {
        std::packaged_task<std::vector<Bytes>()> task;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
            if (tasks_.empty()) return;  // stopping, and every started collective has run
            task = std::move(tasks_.front());
            tasks_.pop_front();
        }
        task();  // an error lands in the task's future
    }
}

std::future<std::vector<Bytes>> CollectiveQueue::all_to_all(std::vector<Bytes> send) {
    return start(std::packaged_task<std::vector<Bytes>()>(
        [this, send = std::move(send)]() mutable { return transport_.all_to_all(std::move(send)); }));
}

std::future<std::vector<Bytes>> CollectiveQueue::all_to_all_relayed(std::vector<Bytes> send, Relay relay) {
    return start(std::packaged_task<std::vector<Bytes>()>([this, send = std::move(send), relay = std::move(relay)]() mutable {
        const std::vector<Bytes> arrived = transport_.all_to_all(std::move(send));
        std::vector<Bytes> onward;
        std::exception_ptr error;
        try {
            onward = relay(arrived);
        } catch (...) {
            error = std::current_exception();
            onward.assign(size_t(transport_.size()), Bytes{});
        }
        std::vector<Bytes> result = transport_.all_to_all(std::move(onward));
        if (error) std::rethrow_exception(error);
        return result;
    }));
}

std::future<std::vector<Bytes>> CollectiveQueue::start(std::packaged_task<std::vector<Bytes>()> task) {
    std::future<std::vector<Bytes>> done = task.get_future();
    if (!threaded_) {
        task();
        return done;
    }
    {
        const std::lock_guard<std::mutex> lock(mutex_);
        tasks_.push_back(std::move(task));
    }
    wake_.notify_one();
    return done;
}

std::future<std::vector<Bytes>> CollectiveQueue::all_gather(const Bytes& mine) {
    return all_to_all(std::vector<Bytes>(size_t(transport_.size()), mine));
}

}  // namespace steadymoe
