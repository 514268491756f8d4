#include "pinned_uploads.hpp"

#include "check.hpp"
#include "env_switch.hpp"
#include "steadymoe/core/parallel.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace steadymoe::cuda {

PinnedUploads::PinnedUploads(size_t chunk_bytes, int chunks) : chunk_bytes_(chunk_bytes) {
    if (chunks < 2 || chunk_bytes == 0) return;
    // Without page-locked memory (a locked-memory limit, say) the copies still work, only slower: so a failed
    // allocation here falls back rather than refusing the upload. (Only this call's own error is cleared.)
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        stream_ = nullptr;
        return;
    }
    for (int i = 0; i < chunks; ++i) {
        Chunk c;
        if (cudaHostAlloc(&c.host, chunk_bytes, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();
            break;
        }
        if (cudaEventCreateWithFlags(&c.drained, cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            cudaFreeHost(c.host);
            break;
        }
        chunks_.push_back(c);
    }
    // One chunk could not overlap filling with draining; then plain copies are as good.
    if (chunks_.size() < 2) release();
}

PinnedUploads PinnedUploads::for_total(size_t total_bytes) {
    constexpr size_t kChunk = size_t(16) << 20;
    static const bool plain = env_equals("STEADYMOE_PINNED_UPLOADS", "0"), small = env_equals("STEADYMOE_PINNED_UPLOADS", "test");
    if (small) return PinnedUploads(4096, 4);
    return PinnedUploads(kChunk, total_bytes >= 2 * kChunk && !plain ? 4 : 0);
}

PinnedUploads::~PinnedUploads() { release(); }

void PinnedUploads::release() noexcept {
    bool failed = stream_ && cudaStreamSynchronize(stream_) != cudaSuccess;
    for (Chunk& c : chunks_) {
        failed |= cudaEventDestroy(c.drained) != cudaSuccess;
        failed |= cudaFreeHost(c.host) != cudaSuccess;
    }
    chunks_.clear();
    failed |= stream_ && cudaStreamDestroy(stream_) != cudaSuccess;
    stream_ = nullptr;
    // An error here was reported by finish() or is the caller's to find; only a non-sticky one of these
    // calls' own is cleared, so that nothing pending from before is lost.
    if (failed) cudaGetLastError();
}

void PinnedUploads::next_chunk() {
    SMOE_CUDA_CHECK(cudaEventRecord(chunks_[current_].drained, stream_));
    current_ = (current_ + 1) % chunks_.size();
    SMOE_CUDA_CHECK(cudaEventSynchronize(chunks_[current_].drained));  // its last copy out has finished
    used_ = 0;
}

void PinnedUploads::copy(void* device, const void* host, size_t bytes) {
    if (!pinned()) {
        if (bytes) SMOE_CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
        return;
    }
    const auto* src = static_cast<const char*>(host);
    auto* dst = static_cast<char*>(device);
    // Pieces of 1 MB per thread: a single thread's memcpy would be slower than the copy engine.
    constexpr size_t kPiece = size_t(1) << 20;
    for (size_t done = 0; done < bytes;) {
        if (used_ == chunk_bytes_) next_chunk();
        char* staging = static_cast<char*>(chunks_[current_].host) + used_;
        const size_t n = std::min(chunk_bytes_ - used_, bytes - done);
        const int64_t pieces = int64_t((n + kPiece - 1) / kPiece);
        if (pieces == 1) {
            std::memcpy(staging, src + done, n);
        } else {
            parallel_for(pieces, ambient_threads(), [&](int64_t p) {
                const size_t at = size_t(p) * kPiece;
                std::memcpy(staging + at, src + done + at, std::min(kPiece, n - at));
            });
        }
        SMOE_CUDA_CHECK(cudaMemcpyAsync(dst + done, staging, n, cudaMemcpyHostToDevice, stream_));
        used_ += n, done += n;
    }
}

void PinnedUploads::finish() {
    // (A plain copy from pageable memory may return before its last bytes land: the null stream is waited
    // for then.)
    SMOE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace steadymoe::cuda
