#include "cuda_layer_stages.hpp"

#include <algorithm>

#include "../kernels/cuda/check.hpp"
#include "../kernels/cuda/env_switch.hpp"
#include "../kernels/cuda/layer_kernels.hpp"
#include "../kernels/cuda/quant_mode.hpp"
#include "../kernels/cuda/row_gathers.hpp"
#include "steadymoe/kernels/cpu/experts.hpp"
#include "steadymoe/kernels/cpu/router.hpp"

namespace steadymoe::tc {

void grow(DeviceBuffer& b, size_t bytes, const char* what, bool& moved) {
    if (b.bytes() < bytes) {
        b = DeviceBuffer();  // free first: the old and new buffers need not fit together
        b = DeviceBuffer(bytes, what);
        moved = true;
    }
}

void grow_filled(DeviceBuffer& b, size_t bytes, const char* what, int byte, bool& moved) {
    bool reallocated = false;
    grow(b, bytes, what, reallocated);
    if (!reallocated) return;
    moved = true;
    SMOE_CUDA_CHECK(cudaMemset(b.get(), byte, b.bytes()));
    SMOE_CUDA_CHECK(cudaDeviceSynchronize());
}

void PermBuffers::reserve(int64_t max_rows, int64_t tiles_bound, int64_t experts, bool& moved) {
    grow(rows, size_t(max_rows) * 4, "permuted rows", moved);
    grow(dest, size_t(max_rows) * 8, "row destinations", moved);
    grow(weight, size_t(max_rows) * 4, "row weights", moved);
    grow(tiles, size_t(3 * tiles_bound + 1) * 4, "tile list", moved);
    grow(load, size_t(experts) * 4, "expert loads", moved);
    grow(offsets, size_t(2 * (experts + 1)) * 4, "expert offsets", moved);
    grow(chunk_counts, size_t(cuda::permutation_chunks(max_rows) * experts) * 4, "permutation chunk counts", moved);
}

cuda::PermutationOut PermBuffers::view(int64_t tiles_bound, int64_t experts) {
    int32_t* t = tiles.as<int32_t>();
    int32_t* o = offsets.as<int32_t>();
    return {rows.as<int32_t>(),  dest.as<int64_t>(),  weight.as<float>(), t, t + tiles_bound,
            t + 2 * tiles_bound, t + 3 * tiles_bound, load.as<int32_t>(), o, o + experts + 1, chunk_counts.as<int32_t>()};
}

void StageBuffers::reserve(int64_t rows, int64_t H, int64_t I, bool& moved, int64_t source_rows,
                           int64_t mid_bytes, bool e4m3_sources) {
    if (source_rows > 0) {
        if (e4m3_sources) {
            grow(source_codes, size_t(source_rows * H), "quantised expert inputs", moved);
            grow(source_scales, size_t(source_rows * (H / 128)) * 4, "quantised expert input scales", moved);
        }
        // Every entry is read, those of pairs without a row this batch too: set once, none is read unwritten.
        grow_filled(pair_rows, size_t(rows) * 4, "token pairs' rows", 0xFF, moved);
    }
    // (scales for rows rounded up to a multiple of 4, so that they may be held block-major: scale_layout)
    const int64_t scale_rows = (rows + 3) / 4 * 4;
    grow(a1, size_t(rows * H) * 2, "expert inputs", moved);
    grow(a1_scale, size_t(scale_rows * (H / 128)) * 4, "expert input scales", moved);
    if (mid_bytes > 0) grow(mid, size_t(rows * I * mid_bytes), "SwiGLU outputs", moved);
    grow(a2, size_t(rows * I) * 2, "down inputs", moved);
    grow(a2_scale, size_t(scale_rows * (I / 128)) * 4, "down input scales", moved);
}

cuda::GroupedGemmLaunch gemm_launch(const cuda::DeviceMatrixSet& w, const cuda::PermutationOut& perm,
                                    int64_t tiles, const uint16_t* a, const float* a_scale, cudaStream_t s) {
    cuda::GroupedGemmLaunch g;
    g.tile_expert = perm.tile_expert;
    g.tile_row0 = perm.tile_row0;
    g.tile_rows = perm.tile_rows;
    g.tile_count = perm.tile_count;
    g.max_tiles = int32_t(tiles);
    g.a = a;
    g.a_scale = a_scale;
    g.code = w.code;
    g.fp4_e4m3_order = w.fp4_e4m3_order;
    g.fp4_block_exact = w.fp4_block_exact;
    g.w = w.data.get();
    g.w_expert_bytes = w.expert_bytes;
    g.w_scale = w.scale.get();
    g.scale_expert_bytes = w.scale_expert_bytes;
    g.fp8_half_blocks = w.fp8_half_blocks;
    g.n = w.n;
    g.k = w.k;
    g.scaled = w.code == cuda::WeightCode::Fp8 || a_scale != nullptr;
    g.stream = s;
    return g;
}

EventTimer::EventTimer() {
    SMOE_CUDA_CHECK(cudaEventCreate(&begin_));
    SMOE_CUDA_CHECK(cudaEventCreate(&end_));
}

EventTimer::~EventTimer() {
    cudaEventDestroy(begin_);
    cudaEventDestroy(end_);
}

double EventTimer::ms() const {
    float v = 0;
    SMOE_CUDA_CHECK(cudaEventElapsedTime(&v, begin_, end_));
    return v;
}

void EventTimer::record(cudaEvent_t e, cudaStream_t s, bool capturing) {
    SMOE_CUDA_CHECK(
        cudaEventRecordWithFlags(e, s, capturing ? cudaEventRecordExternal : cudaEventRecordDefault));
}

namespace {

// How one GEMM over `w` takes its input rows: e4m3 codes where it takes FP8 activations, else their
// exact bf16 values, quantised per 128 values (mode 1 or 2: cuda::activation_quant_mode) or not (0).
struct InputForm {
    int mode;
    bool fp8;
};

InputForm input_form(const cuda::DeviceMatrixSet& w, ActivationQuant aq, bool fp8_tensor_cores) {
    const int mode = cuda::activation_quant_mode(aq, w.quantized);
    // FP4 sets take e4m3 activations exactly where they were uploaded in e4m3 order (fp4_takes_e4m3, asked
    // by the layer with the same flags); a launch that mixes the two is refused (launch_grouped_gemm).
    if (w.code == cuda::WeightCode::Fp4) return {mode, w.fp4_e4m3_order};
    return {mode, mode != 0 && fp8_tensor_cores && cuda::grouped_gemm_takes_fp8_activations(w.code)};
}

// Whether the SwiGLU outputs kept between the GEMMs (where the down GEMM quantises them) are bf16, not f32:
// where the activations are bf16, so that each output is a bf16 value already (swiglu_stage rounds it; a NaN
// keeps no bits past the top 16), and the quantising gather (launch_gather_fp8 / _bf16) reads the same values
// from half the bytes, the gate/up epilogue writing half. STEADYMOE_SWIGLU_MID=f32 keeps them f32, to compare
// (the same bits).
bool bf16_mid(bool bf16) {
    static const bool f32 = cuda::env_equals("STEADYMOE_SWIGLU_MID", "f32");
    return bf16 && !f32;
}

// At most 32 rows per expert on average (a decode batch): most 128-row tiles would be less than half full,
// so Hopper runs its decode kernel (the weights as the MMAs' first operand, a few tokens as the second)
// — the same arithmetic per row.
bool decode_batch(int64_t rows, int64_t experts) { return rows <= 32 * experts; }

InputForm input_form(const GroupRun& r, const cuda::DeviceMatrixSet& w, ActivationQuant aq) {
    return input_form(w, aq, r.fp8_tensor_cores);
}

// bf16 activations that the down GEMM (input form `down`) takes unquantised: no SwiGLU outputs kept between
// the GEMMs (swiglu_mid_bytes).
bool direct_form(InputForm down, bool bf16) { return bf16 && down.mode == 0 && !down.fp8; }

// A launch over `w` whose input rows are at `a` (bf16 values or e4m3 codes) with their scales at `a_scale`, in
// form `f` (the scales apply where it quantises).
cuda::GroupedGemmLaunch rows_launch(const GroupRun& r, const cuda::DeviceMatrixSet& w, const void* a, const float* a_scale,
                                    InputForm f, cudaStream_t s) {
    cuda::GroupedGemmLaunch g = gemm_launch(w, *r.perm, r.max_tiles, static_cast<const uint16_t*>(a),
                                            f.mode == 1 || f.fp8 ? a_scale : nullptr, s);
    if (f.fp8) g.a_fp8 = static_cast<const uint8_t*>(a);
    g.few_rows = decode_batch(r.max_rows, r.group->experts);
    g.tile_m = r.tile_m;
    return g;
}

// Whether the scales of e4m3 rows are held block-major where the GEMM reading them takes them so
// (cuda::grouped_gemm_reads_block_major_scales): its stages' row scales then come by one tensor copy each.
// STEADYMOE_BLOCK_MAJOR_SCALES=0 keeps them row-major everywhere, to compare (the same bits).
bool block_major_scales() {
    static const bool off = cuda::env_equals("STEADYMOE_BLOCK_MAJOR_SCALES", "0");
    return !off;
}

// The layout `g`'s row scales, `width` values a row, are to be written in: block-major over every row the
// buffer `a_scale` holds (StageBuffers::reserve rounds those to a multiple of 4) where `g` reads them so,
// else row-major.
cuda::ScaleLayout scale_layout(const cuda::GroupedGemmLaunch& g, const DeviceBuffer& a_scale, int64_t width) {
    if (!block_major_scales() || !cuda::grouped_gemm_reads_block_major_scales(g)) return {};
    return {int64_t(a_scale.bytes() / 4) / (width / 128) / 4 * 4};
}

// The same over rows held in `a` / `a_scale`, one after another as the tiles list them, with the scales in
// the layout the launch reads fastest (scale_layout): whoever writes them writes them in g.a_scale_layout.
cuda::GroupedGemmLaunch input_launch(const GroupRun& r, const cuda::DeviceMatrixSet& w, int64_t width, InputForm f,
                                     DeviceBuffer& a, DeviceBuffer& a_scale, cudaStream_t s) {
    cuda::GroupedGemmLaunch g = rows_launch(r, w, a.get(), a_scale.as<const float>(), f, s);
    g.a_rows = int64_t(a.bytes() / (size_t(width) * (f.fp8 ? 1 : 2)));
    g.a_scale_layout = scale_layout(g, a_scale, width);
    return g;
}

// The same reading the permutation's rows in place: tile row i is row perm->rows[i] of `a` and of `a_scale`.
// It runs where grouped_gemm_reads_indexed_rows says so; elsewhere the caller gathers the rows instead.
cuda::GroupedGemmLaunch indexed_launch(const GroupRun& r, const cuda::DeviceMatrixSet& w, const void* a, const float* a_scale,
                                       InputForm f, cudaStream_t s) {
    cuda::GroupedGemmLaunch g = rows_launch(r, w, a, a_scale, f, s);
    g.a_index = r.perm->rows;
    return g;
}

// Gathers (and quantises) one GEMM's input rows into `a` / `a_scale` and points a launch over `w` at them.
cuda::GroupedGemmLaunch gathered_launch(const GroupRun& r, const cuda::DeviceMatrixSet& w, const void* src,
                                        bool src_bf16, int64_t width, const int32_t* rows, InputForm f,
                                        DeviceBuffer& a, DeviceBuffer& a_scale, cudaStream_t s) {
    const cuda::GroupedGemmLaunch g = input_launch(r, w, width, f, a, a_scale, s);
    if (f.fp8) {
        SMOE_CUDA_CHECK(cuda::launch_gather_fp8(src, src_bf16, width, rows, r.max_rows, r.live_rows, width, f.mode == 2,
                                                a.as<uint8_t>(), a_scale.as<float>(), s, g.a_scale_layout));
    } else {
        SMOE_CUDA_CHECK(cuda::launch_gather_bf16(src, src_bf16, width, rows, r.max_rows, r.live_rows, width, f.mode,
                                                 a.as<uint16_t>(), a_scale.as<float>(), s));
    }
    return g;
}

// Whether a token's e4m3 codes go straight into its pairs' rows where the gate/up GEMM takes them in order
// (launch_quantise_to_pairs), in place of quantising each token once and copying codes: deepseek-v3 at 16384
// tokens 396-403 µs against 1164-1166 (bench/results/2026-12-04-cuda-row-quantiser.md).
// STEADYMOE_QUANTISE_TO_PAIRS=0 quantises and copies, to compare (the same bytes).
bool quantise_to_pairs() {
    static const bool off = cuda::env_equals("STEADYMOE_QUANTISE_TO_PAIRS", "0");
    return !off;
}

// Whether several of the group's rows read each of its source_rows tokens (GroupRun::source_rows): known,
// fewer than the rows, and the permutation's rows pointing into them.
bool tokens_read_by_several_rows(const GroupRun& r) {
    return r.source_rows > 0 && r.source_rows < r.max_rows && r.perm->rows;
}

// K, the pairs of each of the group's source_rows tokens (GroupRun::source_rows), checked.
int32_t pairs_a_token(const GroupRun& r) {
    SMOE_CHECK(r.max_rows % r.source_rows == 0, Internal, "{} rows for {} tokens: not K pairs a token",
               r.max_rows, r.source_rows);
    return int32_t(r.max_rows / r.source_rows);
}

// Whether bf16 tokens that the gate/up GEMM takes as they are, in order, are copied straight into their
// pairs' rows, each read once (launch_copy_bf16_to_pairs), in place of gathered through the permutation's
// rows, which reads each once a pair. STEADYMOE_COPY_TO_PAIRS=0 gathers, to compare (the same bytes).
bool copy_to_pairs() {
    static const bool off = cuda::env_equals("STEADYMOE_COPY_TO_PAIRS", "0");
    return !off;
}

// Whether decode CTAs of these weights whose tile list is older than the kernel before them start their first
// stages' weight copies before waiting for it (GroupedGemmLaunch::tiles_before_wait). At one and eight tokens
// qwen3's bf16 layer took 1.3-3% less time so, deepseek-v4-flash's fp4 layer 1.4% less at eight tokens (level
// at one), but deepseek-v3's fp8 layer 5% more at one token: its down GEMM's CTAs, seven to an SM, started
// beside its gate/up GEMM's and slowed them (bench/results/2026-12-04-cuda-row-copies-early-weights.md).
// So FP8 weights wait first. STEADYMOE_EARLY_WEIGHTS=0 waits first everywhere and =1 copies early everywhere,
// to compare (the same bits either way).
bool early_weights(cuda::WeightCode code) {
    static const bool off = cuda::env_equals("STEADYMOE_EARLY_WEIGHTS", "0");
    static const bool all = cuda::env_equals("STEADYMOE_EARLY_WEIGHTS", "1");
    return !off && (all || code != cuda::WeightCode::Fp8);
}

// Whether a one-token step's routing kernel publishes its experts early for the routed gate/up GEMM
// (RouteLaunch::early, GroupedGemmLaunch::early_route): only with STEADYMOE_EARLY_ROUTE=1 until a GPU run
// measures the form that lets the down GEMM start only after the routing kernel. Its first form took qwen3's
// one-token layer 0.2-0.6 µs longer, its gate/up CTAs' polls slowing the routing kernel from 5.6 to 10.8 µs
// (H100, bench/results/2026-12-08-cuda-early-route.md). The same bits either way.
bool early_route_asked() {
    static const bool on = cuda::env_equals("STEADYMOE_EARLY_ROUTE", "1");
    return on;
}

}  // namespace

int64_t swiglu_mid_bytes(const cuda::DeviceExpertGroup& group, ActivationQuant aq, bool fp8_tensor_cores, bool bf16) {
    if (direct_form(input_form(group.down, aq, fp8_tensor_cores), bf16)) return 0;
    return bf16_mid(bf16) ? 2 : 4;
}

bool gate_up_takes_e4m3(const cuda::DeviceExpertGroup& group, ActivationQuant aq, bool fp8_tensor_cores) {
    return input_form(group.gate_up, aq, fp8_tensor_cores).fp8;
}

void run_group(const GroupRun& r, const void* hidden, bool bf16, int64_t H, ActivationQuant aq,
               ContributionRows contributions, cudaStream_t s, bool capturing) {
    SMOE_CHECK(!contributions.bf16 || bf16, Internal, "bf16 contributions for f32 activations");
    StageBuffers& b = *r.buffers;
    const int64_t I = r.group->intermediate;
    const InputForm down_form = input_form(r, r.group->down, aq);
    const bool direct = direct_form(down_form, bf16);
    const InputForm up_form = input_form(r, r.group->gate_up, aq);
    cuda::GroupedGemmLaunch g1;
    // Whether a gather kernel runs between the permutation and the gate/up GEMM (one launches wherever the
    // GEMM may have rows: with none the tile bound is 0, and no GEMM runs either).
    bool gathered = true;
    if (up_form.fp8 && tokens_read_by_several_rows(r)) {
        const bool pow2 = up_form.mode == 2;
        g1 = indexed_launch(r, r.group->gate_up, b.source_codes.get(), b.source_scales.as<const float>(), up_form, s);
        // (rows in order where the GEMM cannot read them in place, or is faster on them: FP4 x e4m3 on
        // 64-token CTAs, in prefill and in decode batches past 24 rows an expert)
        const bool in_order =
            !cuda::grouped_gemm_reads_indexed_rows(g1) || cuda::grouped_gemm_prefers_rows_in_order(g1);
        if (in_order && quantise_to_pairs() && cuda::row_quantiser_takes(hidden, bf16, H, H, b.a1.get())) {
            const int32_t top_k = pairs_a_token(r);
            g1 = input_launch(r, r.group->gate_up, H, up_form, b.a1, b.a1_scale, s);
            SMOE_CUDA_CHECK(cuda::launch_quantise_to_pairs(
                hidden, bf16, H, r.source_rows, top_k, r.perm->dest, r.max_rows, r.live_rows, H, pow2,
                b.pair_rows.as<int32_t>(), b.a1.as<uint8_t>(), b.a1_scale.as<float>(), s, g1.a_scale_layout));
        } else {
            SMOE_CUDA_CHECK(cuda::launch_gather_fp8(hidden, bf16, H, nullptr, r.source_rows, nullptr, H, pow2,
                                                    b.source_codes.as<uint8_t>(), b.source_scales.as<float>(),
                                                    s));
            if (in_order) {
                g1 = input_launch(r, r.group->gate_up, H, up_form, b.a1, b.a1_scale, s);
                SMOE_CUDA_CHECK(cuda::launch_gather_e4m3_rows(
                    b.source_codes.as<const uint8_t>(), b.source_scales.as<const float>(), r.perm->rows,
                    r.max_rows, r.live_rows, H, b.a1.as<uint8_t>(), b.a1_scale.as<float>(), s, g1.a_scale_layout));
            }
        }
    } else {
        // bf16 hidden states that the GEMM takes as they are: the gather would only copy them
        const bool as_they_are = bf16 && up_form.mode == 0 && !up_form.fp8 && r.perm->rows;
        if (as_they_are) g1 = indexed_launch(r, r.group->gate_up, hidden, nullptr, up_form, s);
        gathered = !as_they_are || !cuda::grouped_gemm_reads_indexed_rows(g1);
        if (gathered && as_they_are && tokens_read_by_several_rows(r) && copy_to_pairs() &&
            cuda::bf16_rows_copyable(hidden, H, H, b.a1.get())) {
            g1 = input_launch(r, r.group->gate_up, H, up_form, b.a1, b.a1_scale, s);
            SMOE_CUDA_CHECK(cuda::launch_copy_bf16_to_pairs(
                static_cast<const uint16_t*>(hidden), H, r.source_rows, pairs_a_token(r), r.perm->dest,
                r.max_rows, r.live_rows, H, b.pair_rows.as<int32_t>(), b.a1.as<uint16_t>(), s));
        } else if (gathered) {
            g1 = gathered_launch(r, r.group->gate_up, hidden, bf16, H, r.perm->rows, up_form, b.a1, b.a1_scale, s);
        }
    }
    g1.epilogue = cuda::GemmEpilogue::SwiGlu;
    const bool mid_bf16 = !direct && bf16_mid(bf16);
    if (direct) g1.out_bf16 = b.a2.as<uint16_t>();
    else if (mid_bf16) g1.out_bf16 = b.mid.as<uint16_t>();
    else g1.out = b.mid.as<float>();
    g1.ldo = I;
    g1.row_weight = r.perm->weight;
    g1.swiglu_limit = r.swiglu_limit;
    g1.weight_before_down = r.weight_before_down;
    g1.round_bf16 = bf16;
    // Decode CTAs whose tile list is older than the kernel before them start their weights' copies before
    // waiting for it (early_weights): the down GEMM always, the gate/up GEMM after a gather; the gate/up GEMM
    // lets a down GEMM that reads its outputs directly start at once (once it has waited for the routing
    // kernel, where it took that kernel's early experts). (A gather between them, which waits first, keeps the
    // chain: GroupedGemmLaunch::tiles_before_wait.)
    g1.tiles_before_wait = gathered && early_weights(g1.code);
    // (right after the routing kernel that published them: no kernel between, so none that waits first)
    if (!gathered) g1.early_route = r.early_route;
    g1.early_dependents = direct && early_weights(r.group->down.code);
    if (r.gate_up_time) r.gate_up_time->begin(s, capturing);
    SMOE_CUDA_CHECK(cuda::launch_grouped_gemm(g1));
    if (r.gate_up_time) r.gate_up_time->end(s, capturing);

    cuda::GroupedGemmLaunch g2 =
        direct ? input_launch(r, r.group->down, I, down_form, b.a2, b.a2_scale, s)
               : gathered_launch(r, r.group->down, b.mid.get(), mid_bf16, I, nullptr, down_form, b.a2, b.a2_scale, s);
    g2.epilogue = cuda::GemmEpilogue::Scatter;
    if (contributions.bf16) g2.out_bf16 = static_cast<uint16_t*>(contributions.data);
    else g2.out = static_cast<float*>(contributions.data);
    g2.ldo = H;
    g2.row_weight = r.perm->weight;
    g2.row_dest = r.perm->dest;
    g2.weight_before_down = r.weight_before_down;
    g2.round_bf16 = bf16;
    g2.tiles_before_wait = early_weights(g2.code);
    if (r.down_time) r.down_time->begin(s, capturing);
    SMOE_CUDA_CHECK(cuda::launch_grouped_gemm(g2));
    if (r.down_time) r.down_time->end(s, capturing);
}

// At most n = min(experts, rows) experts have rows, and an expert with r > 0 rows fills ceil(r / tile_m) <=
// (r + tile_m - 1) / tile_m tiles: the sum is at most (rows + n (tile_m - 1)) / tile_m, and an integer.
int64_t tile_bound(int64_t rows, int64_t experts, int32_t tile_m) {
    return (rows + std::min(experts, rows) * (tile_m - 1)) / tile_m;
}

namespace {

// tile_bound, checked against what one launch takes.
int64_t launch_tile_bound(int64_t rows, int64_t experts, int32_t tile_m) {
    const int64_t tiles = tile_bound(rows, experts, tile_m);
    SMOE_CHECK(tiles <= cuda::kMaxLaunchTiles, InvalidArgument,
               "a batch of {} rows needs more row tiles than one launch holds ({} of {} rows); split it", rows,
               cuda::kMaxLaunchTiles, tile_m);
    return tiles;
}

}  // namespace

TileCounts tile_counts(int64_t tokens, int64_t pairs, int64_t experts) {
    TileCounts c;
    c.tile_m = cuda::grouped_gemm_tile_rows();
    c.token_tiles = launch_tile_bound(tokens, 1, c.tile_m);
    c.pair_tiles = launch_tile_bound(pairs, experts, c.tile_m);
    return c;
}

GroupTiles group_tiles(const cuda::DeviceExpertGroup& group, int64_t rows, int64_t experts, ActivationQuant aq,
                       bool fp8_tensor_cores) {
    int32_t tile_m = cuda::grouped_gemm_tile_rows();
    if (decode_batch(rows, experts)) {
        // Both GEMMs read the one tile list: the taller of their CTAs (a shorter CTA takes a tile in chunks,
        // a taller one would run half empty).
        const auto decode_rows = [&](const cuda::DeviceMatrixSet& w) {
            return cuda::grouped_gemm_decode_tile_rows(w.code, input_form(w, aq, fp8_tensor_cores).fp8, rows, experts);
        };
        tile_m = int32_t(std::max(decode_rows(group.gate_up), decode_rows(group.down)));
    } else {
        // Tall tiles where both GEMMs take them (the one list serves both)
        const auto tall_rows = [&](const cuda::DeviceMatrixSet& w) {
            return cuda::grouped_gemm_tall_tile_rows(w.code, input_form(w, aq, fp8_tensor_cores).fp8, w.fp4_block_exact);
        };
        const int tall = tall_rows(group.gate_up);
        // Block-exact FP4 weights only where the average expert has more rows than the GPU's tile holds: two
        // epilogue warps convert each tall tile's blocks (grouped_gemm_sm90.cu), and where an expert's rows
        // fit one 128-row tile either way, tall tiles were slower. Block-exact deepseek-v4-flash's routed
        // experts on an H100, tall against 128-row tiles (shared expert after): at 4096 tokens (96 rows an
        // expert) 21-22% more time, at 6144 (144) 18% less and at 8192 (192) 3% more (one run each), at 16384
        // (384) 3% less (bench/results/2026-12-06-cuda-converting-warps.md); since their converting threads
        // take a row of each half and sub-tile in turn, at 8192 6% less and at 16384 11% less (128-row tiles
        // measured without that change: bench/results/2026-12-06-cuda-per32-profile.md).
        // (only FP4 sets are block-exact: DeviceMatrixSet::fp4_block_exact)
        const bool converted = group.gate_up.fp4_block_exact || group.down.fp4_block_exact;
        if (tall > 0 && tall == tall_rows(group.down) && (!converted || rows > int64_t(tile_m) * experts)) tile_m = tall;
    }
    return {tile_m, launch_tile_bound(rows, experts, tile_m), tile_bound(rows, experts, cuda::kMinTileRows)};
}

namespace {

// The router GEMM's k split: blocks of at most 512 k (a multiple of 128 that divides H), at least two
// when H allows, so that a decode step's router streams its weights from many SMs rather than one or
// two. It depends on H alone, so every batch size gets the same logits. STEADYMOE_ROUTER_K_CHUNK=256 or
// =128 takes smaller blocks (other logits' bits), to compare.
int64_t router_k_chunk_limit() {
    static const int64_t limit = cuda::env_equals("STEADYMOE_ROUTER_K_CHUNK", "128")   ? 128
                                 : cuda::env_equals("STEADYMOE_ROUTER_K_CHUNK", "256") ? 256
                                                                                      : 512;
    return limit;
}

int32_t router_k_splits(int64_t H) {
    if (H < 256) return 1;
    // (the tensor-core path takes only H a multiple of 128; else no multiple of 128 divides it)
    SMOE_CHECK(H % 128 == 0, Internal, "router GEMM: hidden size {} is not a multiple of 128", H);
    int64_t chunk = std::min<int64_t>(router_k_chunk_limit(), H / 2) / 128 * 128;
    while (H % chunk != 0) chunk -= 128;
    return int32_t(H / chunk);
}

int score_func_code(ScoreFunc f) { return f == ScoreFunc::Softmax ? 0 : f == ScoreFunc::Sigmoid ? 1 : 2; }

}  // namespace

RouterStage::RouterStage(const MoeLayer& layer) : layer_(layer) {
    const MoeLayerWeights& w = layer.weights();
    if (w.router.dtype() == DType::BF16) router_ = cuda::upload_bf16_matrix(w.router, "router");
    router_exact_ = cuda::upload_weight(layer.packed_router(), "router");
    if (w.selection_bias.defined()) {
        bias_ = DeviceBuffer(w.selection_bias.nbytes(), "selection bias");
        bias_.upload(w.selection_bias.raw(), w.selection_bias.nbytes());
    }
    if (w.tid2eid.defined()) {
        tid2eid_ = DeviceBuffer(w.tid2eid.nbytes(), "tid2eid");
        tid2eid_.upload(w.tid2eid.raw(), w.tid2eid.nbytes());
    }
}

void RouterStage::reserve(Buffers& b, int64_t T, const TileCounts& tiles, bool bf16, bool& moved) const {
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k;
    // The bf16 router GEMM writes its k splits' partial sums, which the routing kernel adds up.
    const int64_t splits = router_ && bf16 ? router_k_splits(H) : 1;
    grow(b.logits, size_t(splits * T * E) * 4, "router logits", moved);
    grow(b.topk_ids, size_t(T * K) * 4, "top-k ids", moved);
    grow(b.topk_weights, size_t(T * K) * 4, "top-k weights", moved);
    grow_filled(b.early, sizeof(cuda::EarlyRoute), "early experts", 0, moved);
}

void RouterStage::enqueue_logits(Buffers& b, const void* hidden, int64_t T, const TileCounts& tiles, bool bf16,
                                 cudaStream_t s) const {
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts;
    if (router_ && bf16) {
        cuda::GroupedGemmLaunch g =
            gemm_launch(*router_, cuda::PermutationOut{}, tiles.token_tiles, static_cast<const uint16_t*>(hidden), nullptr, s);
        g.identity_rows = T;
        g.identity_tile_rows = tiles.tile_m;
        g.k_splits = router_k_splits(H);
        // A decode step's few tokens: Hopper's decode kernel (the same sums, so the same logits) spreads the
        // router's weights over twice the CTAs, 64 experts each, where the tiled kernel's 128-row tile
        // multiplies the tokens' rows and mostly padding.
        g.few_rows = T <= 32;
        g.out = b.logits.as<float>();
        g.split_stride = T * E;  // enqueue_routing reads the splits with this stride
        g.ldo = E;
        SMOE_CUDA_CHECK(cuda::launch_grouped_gemm(g));
    } else {
        SMOE_CHECK(!bf16, Internal, "bf16 inputs without a bf16 router");
        cuda::gemm({static_cast<const float*>(hidden), nullptr, T, H}, router_exact_, b.logits.as<float>(), E,
                   s);
    }
}

RouterStage::Enqueued RouterStage::enqueue_routing(Buffers& b, const uint8_t* active, const int64_t* token_ids, int64_t T,
                                                  bool bf16, cudaStream_t s, const cuda::PermutationOut* permute,
                                                  int32_t tile_m) const {
    const MoeConfig& cfg = layer_.config();
    const int64_t H = cfg.hidden_size, E = cfg.n_routed_experts, K = cfg.top_k;
    cuda::RouteLaunch route;
    if (router_ && bf16) {  // enqueue_logits wrote the k splits' partial sums
        route.logit_splits = router_k_splits(H);
        route.split_stride = T * E;
    }
    route.logits = b.logits.as<const float>();
    route.tokens = T;
    route.experts = int32_t(E);
    route.top_k = int32_t(K);
    route.score_func = score_func_code(cfg.score_func);
    route.bias = bias_.get() ? bias_.as<const float>() : nullptr;
    route.groups = int32_t(cfg.n_group);
    route.top_groups = int32_t(cfg.topk_group);
    route.group_score = cfg.group_score == GroupScore::Max ? 0 : 1;
    route.tid2eid = token_ids ? tid2eid_.as<const int32_t>() : nullptr;
    route.token_ids = token_ids;
    route.active = active;
    const cpu::WeightRule rule = cpu::weight_rule(cfg);
    route.normalise = rule.normalise;
    route.normalise_eps = rule.eps;
    route.scale = rule.scale;
    route.topk_ids = b.topk_ids.as<int32_t>();
    route.topk_weights = b.topk_weights.as<float>();
    route.stream = s;
    SMOE_CHECK(!permute || tile_m > 0, Internal, "routing asked to permute into tiles of {} rows", tile_m);
    const bool one_launch = permute && cuda::routes_and_permutes_in_one_launch(route);
    if (one_launch && early_route_asked() && cuda::route_publishes_early(route)) route.early = b.early.as<cuda::EarlyRoute>();
    SMOE_CUDA_CHECK(one_launch ? cuda::launch_route_and_permute(route, tile_m, *permute) : cuda::launch_route(route));
    return {one_launch, route.early};
}

}  // namespace steadymoe::tc
