// Answers asked of the current GPU once per device and kept: attribute and occupancy queries cost host
// time on every launch otherwise, and a decode step's launches are short enough for that to show.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace steadymoe::cuda {

// For questions whose answer is a positive int (a count, or 1 for yes). Each question keeps one of these
// (a function-local static). Two threads asking at once both ask and keep the same answer.
class PerDeviceAnswers {
  public:
    // `ask(device)` returns the answer, or a value <= 0 where the question fails or the answer is no (it
    // clears any CUDA error it leaves). Returns the kept answer, or `otherwise` where it was <= 0, where no
    // device is current, or for devices past the 64 kept.
    template <typename Ask>
    int get(Ask&& ask, int otherwise) {
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) {
            cudaGetLastError();
            return otherwise;
        }
        int answer = answers_[device].load(std::memory_order_relaxed);
        if (answer == 0) {
            const int asked = ask(device);
            answer = asked > 0 ? asked : -1;
            answers_[device].store(answer, std::memory_order_relaxed);
        }
        return answer > 0 ? answer : otherwise;
    }

  private:
    static constexpr int kDevices = 64;
    std::atomic<int> answers_[kDevices] = {};  // 0: not asked yet, -1: failed or no
};

}  // namespace steadymoe::cuda
