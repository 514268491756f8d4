// KernelTrace over the profiling interface's activity records (CUPTI), its library loaded at run time: the
// CLI starts on machines without it and says so only when asked to trace.
#include "kernel_trace.hpp"

#include "steadymoe/core/error.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <cupti_activity.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

#ifndef STEADYMOE_CUPTI_LIBRARY
#define STEADYMOE_CUPTI_LIBRARY ""
#endif

namespace steadymoe::cli {

namespace {

// The interface's entry points the trace uses, looked up once.
struct Cupti {
    decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
    decltype(&cuptiActivityEnable) enable = nullptr;
    decltype(&cuptiActivityDisable) disable = nullptr;
    decltype(&cuptiActivityFlushAll) flush_all = nullptr;
    decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
    decltype(&cuptiGetResultString) result_string = nullptr;
    std::string missing;  // why it could not be loaded ("" when it was)
};

template <class F>
void look_up(void* lib, const char* name, F& f, std::string& missing) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (!f && missing.empty()) missing = fmt::format("the profiling library has no {}", name);
}

const Cupti& cupti() {
    static const Cupti loaded = [] {
        Cupti c;
        void* lib = nullptr;
        // The toolkit's copy found at configure time first, then the loader's search path.
        // Versioned names before the bare one, which may be a stray copy of another version.
        std::string tried;
        for (const char* name : {STEADYMOE_CUPTI_LIBRARY, "libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
            if (!*name) continue;
            if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
            const char* why = dlerror();
            tried += fmt::format("{}{}", tried.empty() ? "" : "; ", why ? why : name);
        }
        if (!lib) {
            c.missing = fmt::format("the profiling library (libcupti) could not be loaded ({}); set LD_LIBRARY_PATH to "
                                    "the CUDA toolkit's directory that holds it", tried);
            return c;
        }
        look_up(lib, "cuptiActivityRegisterCallbacks", c.register_callbacks, c.missing);
        look_up(lib, "cuptiActivityEnable", c.enable, c.missing);
        look_up(lib, "cuptiActivityDisable", c.disable, c.missing);
        look_up(lib, "cuptiActivityFlushAll", c.flush_all, c.missing);
        look_up(lib, "cuptiActivityGetNextRecord", c.next_record, c.missing);
        look_up(lib, "cuptiGetResultString", c.result_string, c.missing);
        return c;
    }();
    return loaded;
}

void check(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return;
    const char* text = "unknown error";
    if (cupti().result_string) cupti().result_string(r, &text);
    SMOE_THROW(Unsupported, "kernel trace: {} failed: {}", what, text);
}

std::string demangled(const char* name) {
    if (!name) return "(unnamed kernel)";
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
    return status == 0 && d ? std::string(d.get()) : std::string(name);
}

// The records the interface hands back, buffer by buffer, from its own threads.
std::mutex records_mutex;
std::vector<KernelSpan> records;
bool tracing = false;

constexpr size_t kBufferBytes = size_t(1) << 20;
constexpr size_t kRecordAlignment = 8;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlignment, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    std::vector<KernelSpan> got;
    CUpti_Activity* record = nullptr;
    while (buffer && cupti().next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        if (k->start == 0 || k->end < k->start) continue;  // a record the GPU did not finish timing
        got.push_back({demangled(k->name), k->streamId, k->start, k->end, int64_t(k->gridX) * k->gridY * k->gridZ});
    }
    std::free(buffer);
    const std::lock_guard<std::mutex> lock(records_mutex);
    records.insert(records.end(), got.begin(), got.end());
}

}  // namespace

KernelTrace::KernelTrace() = default;

KernelTrace::~KernelTrace() {
    if (!on_) return;
    try {
        (void)stop();
    } catch (...) {
        // A destructor must not throw; the trace is dropped.
    }
}

void KernelTrace::start() {
    const Cupti& c = cupti();
    SMOE_CHECK(c.missing.empty(), Unsupported, "kernel trace: {}", c.missing);
    {
        const std::lock_guard<std::mutex> lock(records_mutex);
        SMOE_CHECK(!tracing, Internal, "kernel trace: one is already running in this process");
        tracing = true;
        records.clear();
    }
    on_ = true;
    static const bool registered = [&] {
        check(c.register_callbacks(buffer_requested, buffer_completed), "registering the record buffers");
        return true;
    }();
    (void)registered;
    check(c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "turning kernel records on");
}

std::vector<KernelSpan> KernelTrace::stop() {
    SMOE_CHECK(on_, Internal, "kernel trace: stop() without start()");
    on_ = false;
    const cudaError_t synced = cudaDeviceSynchronize();
    const Cupti& c = cupti();
    // Off before the flush, so that no kernel launched in between is left to land in the next trace.
    const CUptiResult disabled = c.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    const CUptiResult flushed = c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::vector<KernelSpan> spans;
    {
        const std::lock_guard<std::mutex> lock(records_mutex);
        spans.swap(records);
        tracing = false;
    }
    SMOE_CHECK(synced == cudaSuccess, Internal, "kernel trace: waiting for the GPU failed: {}",
               cudaGetErrorString(synced));
    check(disabled, "turning kernel records off");
    check(flushed, "flushing the kernel records");
    std::stable_sort(spans.begin(), spans.end(),
                     [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
    return spans;
}

}  // namespace steadymoe::cli
