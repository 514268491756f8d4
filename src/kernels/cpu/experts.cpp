#include "steadymoe/kernels/cpu/experts.hpp"

#include "steadymoe/core/error.hpp"
#include "steadymoe/core/parallel.hpp"

#include <algorithm>
#include <cmath>

namespace steadymoe::cpu {

namespace {

// An expert's inputs (gathered token rows, FP8-quantised when its weights are quantised) packed for
// the GEMM, and its SwiGLU output rows.
struct JobBuffers {
    std::vector<float> values;      // gathered (quantised) rows before packing
    std::vector<float> scales;      // their per-128 scales, when kept
    PackedActivations x;
    std::vector<float> gate_up;     // [m][I] gate then [m][I] up; later [m][H] down output
    std::vector<float> hidden_mid;  // [m][I] SwiGLU output, rounded to the activation dtype
    PackedActivations mid;
};

// The expert stage's buffers, one set per calling thread, kept between calls: after the first batch
// of a given size no forward pass allocates or faults in fresh pages. Every element a pass reads was
// written earlier in the same pass, so nothing needs clearing.
thread_local std::vector<JobBuffers> t_buffers;

void grow(std::vector<float>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(size_t(n));
}

size_t held_floats(const JobBuffers& b) {
    return b.values.capacity() + b.scales.capacity() + b.x.tiles.capacity() + b.x.block_scale.capacity() +
           b.gate_up.capacity() + b.hidden_mid.capacity() + b.mid.tiles.capacity() + b.mid.block_scale.capacity();
}

// Buffers are indexed by a job's place in the list, which changes with the routing, so each slot can
// grow to the largest job it ever held. When what is held far exceeds this call's need, let it all go:
// retained memory stays within a small multiple of the largest single call.
void release_if_oversized(std::vector<JobBuffers>& buffers, const std::vector<ExpertJob>& jobs, int64_t H) {
    size_t held = 0, need = 0;
    for (const auto& b : buffers) held += held_floats(b);
    for (const auto& j : jobs) {
        const size_t m = j.tokens.size() + size_t(kTileRows), I = size_t(j.expert->gate.rows);
        need += m * (3 * size_t(H) + 6 * I);
    }
    if (held > 4 * need + (size_t(16) << 20)) std::vector<JobBuffers>().swap(buffers);  // 16M floats: 64 MB
}

ActivationQuant quant_for(const PackedWeight& w, ActivationQuant mode) {
    return w.quantized ? mode : ActivationQuant::None;
}

// Gathers (and, if asked, FP8-quantises) rows of `src` into a packed GEMM operand. `quantised`: the rows
// already hold quantize_row_fp8's values (their kept scales in src_scales, one row of groups per row).
void prepare_operand(const float* src, int64_t stride, const std::vector<int64_t>* rows, int64_t m, int64_t k,
                     ActivationQuant mode, JobBuffers& buf, PackedActivations& out, bool quantised = false,
                     const float* src_scales = nullptr) {
    std::vector<float>& values = buf.values;
    grow(values, m * k);
    const int64_t groups = fp8_groups(k);
    const bool keep_scales = fp8_keeps_scales(mode);
    if (keep_scales) grow(buf.scales, m * groups);
    for (int64_t i = 0; i < m; ++i) {
        const int64_t r = rows ? (*rows)[size_t(i)] : i;
        const float* row = src + r * stride;
        if (mode == ActivationQuant::None || quantised) {
            std::copy(row, row + k, values.data() + i * k);
            if (keep_scales) std::copy(src_scales + r * groups, src_scales + (r + 1) * groups, buf.scales.data() + i * groups);
        } else {
            quantize_row_fp8(row, k, mode, values.data() + i * k, keep_scales ? buf.scales.data() + i * groups : nullptr);
        }
    }
    ActivationRows a;
    a.values = values.data();
    a.block_scale = keep_scales ? buf.scales.data() : nullptr;
    a.rows = m;
    a.cols = k;
    pack_activations(a, out);
}

// A unit of parallel work: one expert's rows against a group of adjacent weight panels (grouped so
// each activation tile is reused across panels while it sits in L1).
constexpr int64_t kPanelsPerItem = 4;
struct WorkItem {
    size_t job;
    int64_t panel;  // first panel of the group
    int64_t panel_end;
};

std::vector<WorkItem> work_items(const std::vector<ExpertJob>& jobs, bool down) {
    std::vector<WorkItem> items;
    for (size_t j = 0; j < jobs.size(); ++j) {
        const int64_t panels = down ? jobs[j].expert->down.panels() : jobs[j].expert->gate.panels();
        for (int64_t p = 0; p < panels; p += kPanelsPerItem) items.push_back({j, p, std::min(panels, p + kPanelsPerItem)});
    }
    return items;
}

}  // namespace

void check_packable(const ExpertWeights& w) {
    const bool quantized = w.gate.format != ExpertFormat::Dense;
    SMOE_CHECK((w.up.format != ExpertFormat::Dense) == quantized && (w.down.format != ExpertFormat::Dense) == quantized,
               BadFormat, "{}: gate, up and down projections mix quantised and dense formats", w.gate.name);
}

PackedExpert pack_expert(const ExpertWeights& w) {
    check_packable(w);
    return {pack_weight(w.gate), pack_weight(w.up), pack_weight(w.down)};
}

void parallel_gemm(const PackedActivations& a, const PackedWeight& w, float* c, int64_t ldc, int threads) {
    const int64_t panels = w.panels();
    // Tiles are grouped so each item has enough work to amortise its panel's trip through cache.
    const int64_t tiles = a.tile_count(), tiles_per_item = 16;
    const int64_t tile_chunks = (tiles + tiles_per_item - 1) / tiles_per_item;
    const int64_t panel_groups = (panels + kPanelsPerItem - 1) / kPanelsPerItem;
    parallel_for(panel_groups * tile_chunks, threads, [&](int64_t it) {
        const int64_t p = (it % panel_groups) * kPanelsPerItem, tc = it / panel_groups;
        gemm_tiles(a, w, p, std::min(panels, p + kPanelsPerItem), tc * tiles_per_item, (tc + 1) * tiles_per_item, c,
                   ldc);
    });
}

void run_expert_jobs(const ExpertStageParams& params, const std::vector<ExpertJob>& jobs) {
    const int64_t H = params.hidden_size;
    if (params.hidden_quantised && !jobs.empty()) {  // no job reads anything otherwise
        SMOE_CHECK(params.act_quant != ActivationQuant::None, InvalidArgument,
                   "expert inputs marked quantised for a layer without activation quantisation");
        SMOE_CHECK(!fp8_keeps_scales(params.act_quant) || params.hidden_scales, InvalidArgument,
                   "quantised expert inputs without their per-128 scales");
        for (const ExpertJob& job : jobs)
            SMOE_CHECK(job.expert->gate.quantized, InvalidArgument,
                       "quantised expert inputs for a dense expert, which takes them unquantised");
    }
    std::vector<JobBuffers>& buffers = t_buffers;
    release_if_oversized(buffers, jobs, H);
    if (buffers.size() < jobs.size()) buffers.resize(jobs.size());

    // 1. Gather and quantise each expert's input rows.
    parallel_for(int64_t(jobs.size()), params.threads, [&](int64_t j) {
        const ExpertJob& job = jobs[size_t(j)];
        JobBuffers& buf = buffers[size_t(j)];
        const int64_t m = int64_t(job.tokens.size()), I = job.expert->gate.rows;
        prepare_operand(params.hidden, H, &job.tokens, m, H, quant_for(job.expert->gate, params.act_quant), buf,
                        buf.x, params.hidden_quantised, params.hidden_scales);
        grow(buf.gate_up, std::max(2 * m * I, m * H));
        grow(buf.hidden_mid, m * I);
    });

    // 2. Gate and up projections with SwiGLU, split by (expert, panel of 32 intermediate features).
    std::vector<WorkItem> items = work_items(jobs, false);
    parallel_for(int64_t(items.size()), params.threads, [&](int64_t it) {
        const ExpertJob& job = jobs[items[size_t(it)].job];
        JobBuffers& buf = buffers[items[size_t(it)].job];
        const int64_t m = int64_t(job.tokens.size()), I = job.expert->gate.rows;
        const int64_t p = items[size_t(it)].panel, pe = items[size_t(it)].panel_end;
        float* g = buf.gate_up.data();
        float* u = g + m * I;
        gemm_tiles(buf.x, job.expert->gate, p, pe, 0, buf.x.tile_count(), g, I);
        gemm_tiles(buf.x, job.expert->up, p, pe, 0, buf.x.tile_count(), u, I);
        const int64_t n0 = p * kPanelWidth, n1 = std::min(I, pe * kPanelWidth);
        for (int64_t i = 0; i < m; ++i) {
            const float w = job.weight_before_down ? job.weights[size_t(i)] : 1.0f;
            for (int64_t n = n0; n < n1; ++n) {
                const float gv = round_act(g[i * I + n], params.act_dtype);
                const float uv = round_act(u[i * I + n], params.act_dtype);
                float h = swiglu(gv, uv, job.swiglu_limit);
                if (job.weight_before_down) h = w * h;
                buf.hidden_mid[size_t(i * I + n)] = round_act(h, params.act_dtype);
            }
        }
    });

    // 3. Down projection input (quantised again for quantised experts).
    parallel_for(int64_t(jobs.size()), params.threads, [&](int64_t j) {
        const ExpertJob& job = jobs[size_t(j)];
        JobBuffers& buf = buffers[size_t(j)];
        const int64_t m = int64_t(job.tokens.size()), I = job.expert->gate.rows;
        prepare_operand(buf.hidden_mid.data(), I, nullptr, m, I, quant_for(job.expert->down, params.act_quant), buf,
                        buf.mid);
    });

    // 4. Down projection, split by (expert, panel of 32 hidden features); contributions rounded once.
    // gate_up is free again and holds the down projection's fp32 output.
    items = work_items(jobs, true);
    parallel_for(int64_t(items.size()), params.threads, [&](int64_t it) {
        const ExpertJob& job = jobs[items[size_t(it)].job];
        JobBuffers& buf = buffers[items[size_t(it)].job];
        const int64_t m = int64_t(job.tokens.size());
        const int64_t p = items[size_t(it)].panel, pe = items[size_t(it)].panel_end;
        float* d = buf.gate_up.data();
        gemm_tiles(buf.mid, job.expert->down, p, pe, 0, buf.mid.tile_count(), d, H);
        const int64_t n0 = p * kPanelWidth, n1 = std::min(H, pe * kPanelWidth);
        for (int64_t i = 0; i < m; ++i) {
            float* dst = params.out + job.destinations[size_t(i)] * H;
            const float w = job.weight_before_down ? 1.0f : job.weights[size_t(i)];
            for (int64_t n = n0; n < n1; ++n) {
                const float v = d[i * H + n];
                dst[n] = round_act(job.weight_before_down ? v : w * v, params.act_dtype);
            }
        }
    });
}

}  // namespace steadymoe::cpu

namespace steadymoe::cpu {

size_t PackedLayer::bytes() const {
    size_t total = router.bytes() + (has_shared ? shared.bytes() : 0);
    for (const auto& e : experts) total += e.bytes();
    return total;
}

}  // namespace steadymoe::cpu
