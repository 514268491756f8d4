#include "steadymoe/kernels/cuda/runtime.hpp"

#include "check.hpp"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>

namespace steadymoe::cuda {

bool device_available(std::string* why) {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        if (why) *why = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device is visible";
        cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
        return false;
    }
    return true;
}

int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

void set_device(int device) {
    const int count = device_count();
    SMOE_CHECK(device >= 0 && device < count, InvalidArgument, "CUDA device {} does not exist ({} visible)", device,
               count);
    SMOE_CUDA_CHECK(cudaSetDevice(device));
}

int current_device() {
    int d = 0;
    SMOE_CUDA_CHECK(cudaGetDevice(&d));
    return d;
}

StreamWait wait_until(Stream stream, std::chrono::steady_clock::time_point deadline,
                      const std::function<void()>& between, std::string* why) {
    while (true) {
        const cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess) return StreamWait::Done;
        if (q != cudaErrorNotReady) {
            cudaGetLastError();
            if (why) *why = cudaGetErrorString(q);
            return StreamWait::Failed;
        }
        if (between) between();
        if (std::chrono::steady_clock::now() > deadline) return StreamWait::TimedOut;
        std::this_thread::yield();
    }
}

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
    if (bytes == 0) return;
    const cudaError_t err = cudaMalloc(&ptr_, bytes);
    if (err != cudaSuccess) {
        cudaGetLastError();
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        ptr_ = nullptr;
        SMOE_CHECK(false, OutOfMemory, "cannot allocate {} bytes of GPU memory for {} ({} of {} bytes free): {}",
                   bytes, what, free_bytes, total, cudaGetErrorString(err));
    }
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (ptr_) cudaFree(ptr_);
        ptr_ = std::exchange(other.ptr_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, Stream stream) {
    SMOE_CHECK(bytes <= bytes_, Internal, "upload of {} bytes into a {}-byte device buffer", bytes, bytes_);
    if (bytes) SMOE_CUDA_CHECK(cudaMemcpyAsync(ptr_, host, bytes, cudaMemcpyHostToDevice, stream));
}

void DeviceBuffer::download(void* host, size_t bytes, Stream stream) const {
    SMOE_CHECK(bytes <= bytes_, Internal, "download of {} bytes from a {}-byte device buffer", bytes, bytes_);
    if (bytes) SMOE_CUDA_CHECK(cudaMemcpyAsync(host, ptr_, bytes, cudaMemcpyDeviceToHost, stream));
}

std::string device_name() {
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        cudaGetLastError();
        return {};
    }
    return prop.name;
}

double copy_bandwidth(size_t bytes, int repeats) {
    DeviceBuffer src(bytes, "bandwidth probe source"), dst(bytes, "bandwidth probe destination");
    SMOE_CUDA_CHECK(cudaMemset(src.get(), 1, bytes));
    cudaEvent_t begin = nullptr, end = nullptr;
    SMOE_CUDA_CHECK(cudaEventCreate(&begin));
    SMOE_CUDA_CHECK(cudaEventCreate(&end));
    std::vector<float> ms;
    for (int i = 0; i <= repeats; ++i) {  // the first copy warms up and is not counted
        SMOE_CUDA_CHECK(cudaEventRecord(begin));
        SMOE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice));
        SMOE_CUDA_CHECK(cudaEventRecord(end));
        SMOE_CUDA_CHECK(cudaEventSynchronize(end));
        float t = 0;
        SMOE_CUDA_CHECK(cudaEventElapsedTime(&t, begin, end));
        if (i > 0) ms.push_back(t);
    }
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    std::sort(ms.begin(), ms.end());
    return 2.0 * double(bytes) / (double(ms[ms.size() / 2]) * 1e-3);
}

void synchronize(Stream stream) {
    SMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    SMOE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace steadymoe::cuda
