#include "steadymoe/kernels/cuda/gemm.hpp"

#include "check.hpp"
#include "gemm_launch.hpp"

#include <algorithm>

namespace steadymoe::cuda {

DevicePackedWeight upload_weight(const cpu::PackedWeight& w, const std::string& what, Stream stream) {
    DevicePackedWeight d;
    d.rows = w.rows;
    d.cols = w.cols;
    d.f32_panels = w.f32_panels;
    d.quantized = w.quantized;
    const size_t panel_bytes = w.f32_panels ? w.f32.size() * 4 : w.bf16.size() * 2;
    d.panels = DeviceBuffer(panel_bytes, what + " panels");
    d.panels.upload(w.f32_panels ? static_cast<const void*>(w.f32.data()) : static_cast<const void*>(w.bf16.data()),
                    panel_bytes, stream);
    if (!w.block_scale.empty()) {
        d.block_scale = DeviceBuffer(w.block_scale.size() * 4, what + " block scales");
        d.block_scale.upload(w.block_scale.data(), w.block_scale.size() * 4, stream);
    }
    return d;
}

void gemm(const DeviceActivations& a, const DevicePackedWeight& w, float* c, int64_t ldc, Stream stream) {
    SMOE_CHECK(a.cols == w.cols, Internal, "gemm: activations have {} columns, weight has {}", a.cols, w.cols);
    if (a.rows == 0 || w.rows == 0) return;
    const int64_t warps = w.panel_count() * ((a.rows + 7) / 8);
    SMOE_CHECK(warps / 4 < (int64_t(1) << 31), InvalidArgument,
               "gemm of {} rows x {} outputs needs more thread blocks than one launch allows", a.rows, w.rows);
    GemmLaunch g;
    g.a = a.values;
    g.a_scale = a.block_scale;
    g.m = a.rows;
    g.k = a.cols;
    g.panels = w.panels.get();
    g.f32_panels = w.f32_panels;
    g.w_scale = w.block_scale.as<const float>();
    g.n = w.rows;
    g.c = c;
    g.ldc = ldc;
    // One chain over K unless a scale must be applied per 128-wide block (the CPU's rule).
    g.scaled = w.block_scale.get() != nullptr || a.block_scale != nullptr;
    g.kblock = g.scaled ? 128 : std::max<int64_t>(w.cols, 1);
    g.stream = stream;
    SMOE_CUDA_CHECK(launch_gemm_panels(g));
}

}  // namespace steadymoe::cuda
