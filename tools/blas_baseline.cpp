// The plain fp32 OpenBLAS peer of the CPU benchmark (see blas_baseline.hpp). It makes no promise of
// bitwise invariance; it exists to show what a straightforward, well-tuned GEMM library does with
// the same arithmetic on the same machine in the same run.
#include "blas_baseline.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "steadymoe/core/error.hpp"

namespace steadymoe::cli {

namespace {

// One expert in fp32: gate and up stacked as [2I, H] so they take one GEMM, down as [H, I].
struct DenseExpert {
    int64_t inter = 0;
    std::vector<float> gate_up;
    std::vector<float> down;
};

std::vector<float> dequantize(const WeightMatrix& w) {
    std::vector<float> out(size_t(w.rows * w.cols));
    for (int64_t r = 0; r < w.rows; ++r) w.dequantize_row(r, out.data() + r * w.cols);
    return out;
}

DenseExpert dense_expert(const ExpertWeights& w) {
    DenseExpert d;
    d.inter = w.gate.rows;
    d.gate_up = dequantize(w.gate);
    const std::vector<float> up = dequantize(w.up);
    d.gate_up.insert(d.gate_up.end(), up.begin(), up.end());
    d.down = dequantize(w.down);
    return d;
}

float silu(float g) { return g / (1.0f + std::exp(-g)); }

class OpenBlasBaseline final : public BlasBaseline {
  public:
    OpenBlasBaseline(const MoeConfig& config, const MoeLayerWeights& w, int threads)
        : H_(config.hidden_size),
          K_(config.top_k),
          limit_(float(config.swiglu_limit)),
          before_down_(config.weight_placement == WeightPlacement::BeforeDown),
          threads_(threads) {
        router_ = w.router.to_f32();
        experts_.resize(w.experts.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
        for (size_t e = 0; e < w.experts.size(); ++e) experts_[e] = dense_expert(w.experts[e]);
        if (w.has_shared) shared_ = dense_expert(w.shared);
        if (w.shared_gate.defined()) shared_gate_ = w.shared_gate.to_f32();
    }

    Tensor forward(const Tensor& hidden, const Tensor& topk_ids, const Tensor& topk_weights) const override {
        openblas_set_num_threads(threads_);
        const Tensor x = hidden.dtype() == DType::F32 ? hidden : hidden.to_f32();
        const int64_t T = x.dim(0), E = router_.dim(0);
        const float* xv = x.data<float>();
        Tensor y = Tensor::zeros(DType::F32, {T, H_});
        float* yv = y.mutable_data<float>();
        if (T == 0) return y;

        // Router logits: paid for, not used (the routing comes from the layer under test).
        std::vector<float> logits(size_t(T * E));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(E), int(H_), 1.0f, xv, int(H_),
                    router_.data<float>(), int(H_), 0.0f, logits.data(), int(E));

        if (!shared_.gate_up.empty()) {
            std::vector<float> scale(size_t(T), 1.0f);
            if (shared_gate_.defined()) {
                for (int64_t t = 0; t < T; ++t) {
                    const float s = cblas_sdot(int(H_), xv + t * H_, 1, shared_gate_.data<float>(), 1);
                    scale[size_t(t)] = 1.0f / (1.0f + std::exp(-s));
                }
            }
            expert(shared_, xv, T, scale.data(), /*shared=*/true, nullptr, yv);
        }

        // Tokens per expert, in token order, with their routing weights.
        const int32_t* ids = topk_ids.data<int32_t>();
        const float* wts = topk_weights.data<float>();
        std::vector<std::vector<int64_t>> rows(experts_.size());
        std::vector<std::vector<float>> weights(experts_.size());
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t k = 0; k < K_; ++k) {
                const int32_t e = ids[t * K_ + k];
                if (e < 0) continue;  // masked token
                rows[size_t(e)].push_back(t);
                weights[size_t(e)].push_back(wts[t * K_ + k]);
            }
        }
        std::vector<float> xe;
        for (size_t e = 0; e < experts_.size(); ++e) {
            const int64_t n = int64_t(rows[e].size());
            if (n == 0) continue;
            xe.resize(size_t(n * H_));
            for (int64_t j = 0; j < n; ++j)
                std::memcpy(xe.data() + j * H_, xv + rows[e][size_t(j)] * H_, size_t(H_) * sizeof(float));
            expert(experts_[e], xe.data(), n, weights[e].data(), /*shared=*/false, rows[e].data(), yv);
        }
        return y;
    }

  private:
    // y[dest[j]] += w_j * down(SwiGLU(x_j)) for the n rows of x (dest == nullptr: row j itself).
    void expert(const DenseExpert& d, const float* x, int64_t n, const float* w, bool shared,
                const int64_t* dest, float* y) const {
        const int64_t I = d.inter;
        std::vector<float> gu(size_t(n * 2 * I)), act(size_t(n * I)), out(size_t(n * H_));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(2 * I), int(H_), 1.0f, x, int(H_),
                    d.gate_up.data(), int(H_), 0.0f, gu.data(), int(2 * I));
        // DeepSeek-V4 clamps only its routed experts, and weights them before the down projection.
        const float limit = shared ? 0.0f : limit_;
        const bool before = before_down_ || shared;
        // The element-wise steps stay on one thread: OpenBLAS's workers keep spinning between GEMMs and
        // a second thread pool here would fight them for the same cores.
        for (int64_t j = 0; j < n; ++j) {
            for (int64_t i = 0; i < I; ++i) {
                float g = gu[size_t(j * 2 * I + i)], u = gu[size_t(j * 2 * I + I + i)];
                if (limit > 0) {
                    g = std::min(g, limit);
                    u = std::clamp(u, -limit, limit);
                }
                act[size_t(j * I + i)] = silu(g) * u * (before ? w[j] : 1.0f);
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(H_), int(I), 1.0f, act.data(),
                    int(I), d.down.data(), int(I), 0.0f, out.data(), int(H_));
        for (int64_t j = 0; j < n; ++j) {
            const float s = before ? 1.0f : w[j];
            cblas_saxpy(int(H_), s, out.data() + j * H_, 1, y + (dest ? dest[j] : j) * H_, 1);
        }
    }

    int64_t H_, K_;
    float limit_;
    bool before_down_;
    int threads_;
    Tensor router_;
    std::vector<DenseExpert> experts_;
    DenseExpert shared_;
    Tensor shared_gate_;
};

}  // namespace

std::unique_ptr<BlasBaseline> make_blas_baseline(const MoeConfig& config, const MoeLayerWeights& weights,
                                                 int threads) {
    return std::make_unique<OpenBlasBaseline>(config, weights, threads);
}

std::string blas_baseline_name() {
    std::string config = openblas_get_config();
    // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64": keep the name, version, core.
    while (!config.empty() && config.back() == ' ') config.pop_back();
    return "fp32 sgemm, " + config;
}

}  // namespace steadymoe::cli
