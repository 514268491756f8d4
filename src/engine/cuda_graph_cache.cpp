#include "cuda_graph_cache.hpp"

#include "../kernels/cuda/check.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace steadymoe {

void GraphCache::run(uint64_t key, cudaStream_t stream, const std::function<void(bool capturing)>& enqueue) {
    ++clock_;
    const auto found = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
    if (found != entries_.end()) {
        found->last_use = clock_;
        SMOE_CUDA_CHECK(cudaGraphLaunch(found->exec, stream));
        return;
    }
    if (capacity_ == 0 || eager_only_.count(key) || seen_.insert(key).second) {
        enqueue(false);
        return;
    }

    // A shape whose capture fails runs eagerly from then on: the error of this batch goes to the caller,
    // later batches of the shape do not retry the capture.
    eager_only_.insert(key);
    SMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
        enqueue(true);
    } catch (...) {
        // End the capture whatever happened, so the stream is usable again; the error goes on.
        if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
    }
    SMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (made != cudaSuccess) {  // the captured work never ran: run it eagerly now
        cudaGetLastError();
        enqueue(false);
        return;
    }
    eager_only_.erase(key);

    if (entries_.size() >= capacity_) {
        const auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                             [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
        cudaGraphExecDestroy(oldest->exec);
        seen_.erase(oldest->key);  // seen again, it runs eagerly once before a new capture
        entries_.erase(oldest);
    }
    entries_.push_back({key, exec, clock_});
    SMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
}

void GraphCache::clear() {
    for (const Entry& e : entries_) cudaGraphExecDestroy(e.exec);
    entries_.clear();
    seen_.clear();
    eager_only_.clear();
}

}  // namespace steadymoe
