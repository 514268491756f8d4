// The CUDA runtime as the rest of SteadyMoE sees it: device discovery, owned device memory with
// errors that say how much was asked for and why it failed, and streams as plain handles. No CUDA
// header leaks out of here, so host-only code can include it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

struct CUstream_st;

namespace steadymoe::cuda {

using Stream = CUstream_st*;  // nullptr is the default stream

// True when a CUDA device is visible; `why` says why not otherwise.
bool device_available(std::string* why = nullptr);

// Owned device memory. Allocation failure throws Error(OutOfMemory) naming `what` and the size.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(size_t bytes, const std::string& what);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* get() const { return ptr_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t bytes() const { return bytes_; }

    void upload(const void* host, size_t bytes, Stream stream = nullptr);
    void download(void* host, size_t bytes, Stream stream = nullptr) const;

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// Visible CUDA devices (0 when none), and choosing the calling thread's current device: one rank of an
// expert-parallel group per device.
int device_count();
void set_device(int device);
int current_device();

// The current device's name ("NVIDIA H200"), or "" when none is visible.
std::string device_name();

// Device-to-device copy bandwidth in bytes per second, counting bytes read plus bytes written: the
// median of `repeats` copies of `bytes` bytes. The memory floor of a benchmark divides by this.
double copy_bandwidth(size_t bytes, int repeats);

// Waits for all work on `stream`, and turns any asynchronous kernel error into an Error.
void synchronize(Stream stream = nullptr);

// A bounded wait for `stream`: polls it until its work is done or `deadline` passes, calling `between`
// (which may throw) after each unfinished poll. Failed leaves the GPU's error in *why.
enum class StreamWait { Done, Failed, TimedOut };
StreamWait wait_until(Stream stream, std::chrono::steady_clock::time_point deadline,
                      const std::function<void()>& between, std::string* why);

}  // namespace steadymoe::cuda
