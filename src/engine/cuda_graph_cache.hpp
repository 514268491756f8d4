// Captured launch sequences of the CUDA layer, one per batch shape, replayed instead of launched kernel by
// kernel from the host: a decode step is a dozen short kernels, and launching them one at a time costs
// more host time than they take on the GPU. A replay runs the same kernels on the same buffers with the
// same launch shapes, so it gives the same bits as the eager launches.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_set>
#include <vector>

namespace steadymoe {

class GraphCache {
public:
    explicit GraphCache(size_t capacity) : capacity_(capacity) {}
    ~GraphCache() { clear(); }
    GraphCache(const GraphCache&) = delete;
    GraphCache& operator=(const GraphCache&) = delete;

    // Runs `enqueue(capturing)` on `stream` for a batch of shape `key`: eagerly the first time (so that
    // one-time set-up, such as kernel attributes, happens outside any capture), captured into a graph
    // and launched the second time, and as a replay of that graph from then on. The least recently used
    // graph is dropped beyond `capacity` shapes. A shape whose capture fails runs eagerly from then on.
    // The caller must not have a replay in flight when a graph can be dropped (it synchronises after every
    // batch; a timed forward's runs, up to four, are fine: the graph just launched is the most recently used,
    // never the one dropped).
    void run(uint64_t key, cudaStream_t stream, const std::function<void(bool capturing)>& enqueue);

    // Forgets every graph: the buffers they were captured on have moved.
    void clear();
    size_t size() const { return entries_.size(); }

private:
    struct Entry {
        uint64_t key;
        cudaGraphExec_t exec;
        uint64_t last_use;
    };
    size_t capacity_;
    uint64_t clock_ = 0;
    std::vector<Entry> entries_;
    std::unordered_set<uint64_t> seen_;
    std::unordered_set<uint64_t> eager_only_;  // shapes whose capture failed
};

}  // namespace steadymoe
