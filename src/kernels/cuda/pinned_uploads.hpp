// Large host-to-device copies through a small ring of page-locked staging buffers. A copy from pageable
// memory goes through the driver's own staging one piece at a time, at a fraction of the link's rate
// (deepseek-v3's experts took about 4.6 s a layer so: bench/results/2026-12-05-cuda-measured-switches.md).
// Here the host fills a staging chunk on several threads while the copy engine drains the ones before, and
// small copies (an expert's scales) share a chunk with the copies around them.
#pragma once

#include <cstddef>
#include <vector>

struct CUstream_st;
struct CUevent_st;

namespace steadymoe::cuda {

class PinnedUploads {
public:
    // `chunks` staging buffers of `chunk_bytes` each on the calling thread's current device; with fewer than
    // two chunks, or where page-locked memory cannot be had, every copy is a plain one.
    PinnedUploads(size_t chunk_bytes, int chunks);
    // The ring for copies of `total_bytes` in all: four chunks of 16 MB, or plain copies where the total is
    // under two chunks (page-locking costs more than it saves there). STEADYMOE_PINNED_UPLOADS=0 makes every
    // copy a plain one, to compare; =test gives every upload a ring of four 4 KB chunks, so that small
    // layers' tests run their uploads through its packing and wrapping.
    static PinnedUploads for_total(size_t total_bytes);
    ~PinnedUploads();  // waits for the copies in flight; reports no error (finish() does)
    PinnedUploads(const PinnedUploads&) = delete;
    PinnedUploads& operator=(const PinnedUploads&) = delete;

    // Queues the copy of `bytes` bytes from `host` to `device`. When it returns, `host` may be changed or
    // freed: its bytes are in staging or already on the device. Throws on a CUDA error.
    void copy(void* device, const void* host, size_t bytes);
    // Waits until every copy made so far has reached the device; throws on a CUDA error.
    void finish();

    bool pinned() const { return !chunks_.empty(); }

private:
    struct Chunk {
        void* host = nullptr;
        CUevent_st* drained = nullptr;  // recorded after the chunk's last copy out
    };
    size_t chunk_bytes_;
    std::vector<Chunk> chunks_;
    size_t current_ = 0;  // the chunk being filled
    size_t used_ = 0;     // its bytes already handed to copies
    CUstream_st* stream_ = nullptr;
    void next_chunk();
    void release() noexcept;
};

}  // namespace steadymoe::cuda
