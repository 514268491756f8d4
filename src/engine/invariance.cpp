#include "steadymoe/engine/invariance.hpp"

#include "steadymoe/core/numeric.hpp"
#include "steadymoe/engine/synthetic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

namespace steadymoe {

namespace {

// A batch of `size` tokens: filler tokens everywhere, the probe's first n tokens at `at`.
struct Batch {
    MoeInput input;
    std::vector<int64_t> probe_rows;  // where probe token i sits
};

Tensor filler_ids(int64_t size, int64_t vocab, uint32_t seed) {
    Tensor t = Tensor::zeros(DType::I64, {size});
    for (int64_t i = 0; i < size; ++i)
        t.mutable_data<int64_t>()[i] = vocab > 0 ? int64_t(synthetic::lowbias32(seed ^ uint32_t(i * 2654435761u)) %
                                                           uint32_t(vocab))
                                                 : 0;
    return t;
}

int64_t probe_id(const MoeInput& probe, int64_t i) {
    if (!probe.token_ids.defined()) return 0;
    return probe.token_ids.dtype() == DType::I64 ? probe.token_ids.data<int64_t>()[i]
                                                 : probe.token_ids.data<int32_t>()[i];
}

Batch make_batch(const MoeLayer& layer, const MoeInput& probe, int64_t n, int64_t size, int64_t at, bool reversed,
                 bool mask_fillers, bool nan_filler, uint32_t seed) {
    const int64_t H = layer.config().hidden_size;
    const DType dt = probe.hidden.dtype();
    SMOE_CHECK(at >= 0 && n <= size && at + n <= size, Internal, "probe rows {}..{} do not fit a batch of {}", at,
               at + n - 1, size);
    Batch b;
    Tensor hidden = synthetic::tensor(dt, {size, H}, seed, synthetic::kFillerHidden, 1.0f);
    Tensor ids = filler_ids(size, layer.config().vocab_size, seed);
    Tensor mask = Tensor::zeros(DType::U8, {size});
    const size_t row_bytes = size_t(H) * dtype_size(dt);
    for (int64_t r = 0; r < size; ++r) mask.mutable_data<uint8_t>()[r] = mask_fillers ? (r % 2) : 1;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t row = reversed ? size - 1 - (at + i) : at + i;
        std::memcpy(static_cast<char*>(hidden.mutable_raw()) + size_t(row) * row_bytes,
                    static_cast<const char*>(probe.hidden.raw()) + size_t(i) * row_bytes, row_bytes);
        ids.mutable_data<int64_t>()[row] = probe_id(probe, i);
        mask.mutable_data<uint8_t>()[row] = 1;
        b.probe_rows.push_back(row);
    }
    if (nan_filler) {
        // Poison one real filler token that is not a probe.
        for (int64_t r = 0; r < size; ++r) {
            if (std::find(b.probe_rows.begin(), b.probe_rows.end(), r) != b.probe_rows.end()) continue;
            mask.mutable_data<uint8_t>()[r] = 1;
            if (dt == DType::BF16) hidden.mutable_data<uint16_t>()[r * H + H / 2] = 0x7FC0;
            else hidden.mutable_data<float>()[r * H + H / 2] = std::numeric_limits<float>::quiet_NaN();
            break;
        }
    }
    b.input.hidden = hidden;
    b.input.token_ids = ids;
    b.input.mask = mask;
    return b;
}

// Compares probe token i's output, ids and weights between the reference and a batch.
std::string first_difference(const MoeOutput& ref, const MoeOutput& got, const std::vector<int64_t>& rows,
                             int64_t H, int64_t K) {
    const size_t esz = dtype_size(ref.output.dtype());
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto* a = static_cast<const uint8_t*>(ref.output.raw()) + i * size_t(H) * esz;
        const auto* b = static_cast<const uint8_t*>(got.output.raw()) + size_t(rows[i]) * size_t(H) * esz;
        for (int64_t h = 0; h < H; ++h) {
            if (std::memcmp(a + size_t(h) * esz, b + size_t(h) * esz, esz) != 0) {
                return fmt::format("probe token {} (row {}), output column {}: {} vs {}", i, rows[i], h,
                                   ref.output.get(int64_t(i) * H + h), got.output.get(rows[i] * H + h));
            }
        }
        for (int64_t k = 0; k < K; ++k) {
            const int64_t ra = int64_t(i) * K + k, rb = rows[i] * K + k;
            if (ref.topk_ids.data<int32_t>()[ra] != got.topk_ids.data<int32_t>()[rb] ||
                std::memcmp(ref.topk_weights.data<float>() + ra, got.topk_weights.data<float>() + rb, 4) != 0)
                return fmt::format("probe token {} (row {}), slot {}: expert {} weight {} vs expert {} weight {}", i,
                                   rows[i], k, ref.topk_ids.data<int32_t>()[ra], ref.topk_weights.data<float>()[ra],
                                   got.topk_ids.data<int32_t>()[rb], got.topk_weights.data<float>()[rb]);
        }
    }
    return {};
}

}  // namespace

bool InvarianceReport::passed() const { return failures() == 0; }
int64_t InvarianceReport::failures() const {
    return std::count_if(cases.begin(), cases.end(), [](const InvarianceCase& c) { return !c.passed; });
}

InvarianceRunner cpu_invariance_runner(const MoeLayer& layer, const InvarianceOptions& options) {
    auto first =
        std::make_shared<MoeLayer>(layer.with_threads(options.thread_counts.empty() ? 1 : options.thread_counts.front()));
    auto propagating = std::make_shared<MoeLayer>(first->with_nonfinite(NonFinitePolicy::Propagate));
    InvarianceRunner runner;
    runner.forward = [first](const MoeInput& in) { return first->forward(in); };
    runner.forward_propagating = [propagating](const MoeInput& in) { return propagating->forward(in); };
    for (int threads : options.thread_counts) {
        auto l = std::make_shared<MoeLayer>(layer.with_threads(threads));
        runner.variants.push_back({fmt::format("{} threads", threads), 0, [l](const MoeInput& in) { return l->forward(in); }});
    }
    return runner;
}

InvarianceReport run_invariance(const MoeLayer& layer, const MoeInput& probe, const InvarianceOptions& options) {
    return run_invariance(layer, probe, options, cpu_invariance_runner(layer, options));
}

InvarianceReport run_invariance(const MoeLayer& layer, const MoeInput& probe, const InvarianceOptions& options,
                                const InvarianceRunner& runner) {
    const int64_t H = layer.config().hidden_size, K = layer.config().top_k;
    const int64_t n = std::min(options.probe_tokens, probe.hidden.dim(0));
    InvarianceReport report;

    // Reference: the probe tokens alone, one at a time (a batch of one).
    std::vector<MoeOutput> alone;
    for (int64_t i = 0; i < n; ++i) {
        MoeInput one;
        one.hidden = probe.hidden.rows(i, i + 1);
        if (probe.token_ids.defined()) one.token_ids = probe.token_ids.rows(i, i + 1);
        alone.push_back(runner.forward(one));
    }
    // Reassemble the single-token references as one reference output of n rows.
    MoeOutput ref;
    ref.output = Tensor::zeros(probe.hidden.dtype(), {n, H});
    ref.topk_ids = Tensor::zeros(DType::I32, {n, K});
    ref.topk_weights = Tensor::zeros(DType::F32, {n, K});
    for (int64_t i = 0; i < n; ++i) {
        const size_t rb = size_t(H) * dtype_size(probe.hidden.dtype());
        std::memcpy(static_cast<char*>(ref.output.mutable_raw()) + size_t(i) * rb, alone[size_t(i)].output.raw(), rb);
        std::memcpy(ref.topk_ids.mutable_data<int32_t>() + i * K, alone[size_t(i)].topk_ids.raw(), size_t(K) * 4);
        std::memcpy(ref.topk_weights.mutable_data<float>() + i * K, alone[size_t(i)].topk_weights.raw(), size_t(K) * 4);
    }

    auto check = [&](const std::string& name, const LayerForward& forward, const Batch& b, int64_t count) {
        InvarianceCase c;
        c.name = name;
        const MoeOutput got = forward(b.input);
        MoeOutput ref_part = ref;
        std::vector<int64_t> rows(b.probe_rows.begin(), b.probe_rows.begin() + count);
        c.first_difference = first_difference(ref_part, got, rows, H, K);
        c.passed = c.first_difference.empty();
        if (options.progress) options.progress(fmt::format("{:<48} {}", name, c.passed ? "identical" : "DIFFERS"));
        report.cases.push_back(c);
    };

    int64_t largest = 1;
    for (int64_t size : options.batch_sizes) {
        largest = std::max(largest, size);
        const int64_t m = std::min(n, size);
        const std::pair<const char*, int64_t> places[] = {{"first", 0}, {"middle", (size - m) / 2}, {"last", size - m}};
        for (size_t i = 0; i < 3; ++i) {
            const auto& [where, at] = places[i];
            // Small batches put several places at the same offset; run each distinct offset once.
            if (i > 0 && (at == places[i - 1].second || at == places[0].second)) continue;
            check(fmt::format("batch {:>5}, probe tokens {}", size, where), runner.forward,
                  make_batch(layer, probe, m, size, at, false, false, false, options.seed), m);
        }
    }
    const int64_t m = std::min(n, largest);
    check(fmt::format("batch {:>5}, reversed order", largest), runner.forward,
          make_batch(layer, probe, m, largest, 0, true, false, false, options.seed), m);
    check(fmt::format("batch {:>5}, every other filler masked", largest), runner.forward,
          make_batch(layer, probe, m, largest, std::min(largest / 3, largest - m), false, true, false, options.seed), m);
    check(fmt::format("batch {:>5}, a NaN token beside the probes", largest), runner.forward_propagating,
          make_batch(layer, probe, m, largest, 0, false, false, true, options.seed), m);
    for (const InvarianceRunner::Variant& v : runner.variants) {
        const int64_t size = v.batch > 0 ? v.batch : largest, mv = std::min(n, size);
        check(fmt::format("batch {:>5}, {}", size, v.name), v.forward,
              make_batch(layer, probe, mv, size, (size - mv) / 2, false, false, false, options.seed + 1), mv);
    }
    return report;
}

}  // namespace steadymoe
