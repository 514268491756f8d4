// The pieces of the CUDA tensor-core layer that the one-GPU path (cuda_tensor_core_path.hpp) and the
// expert-parallel path (cuda_ep_layer.hpp) share: workspace buffers grown to the largest batch, the
// grouped-GEMM launch of a weight set, the expert stages of one group (gather, gate/up with SwiGLU, down
// with the scatter), timing events, and the router (GEMM and routing). Launches only: callers reserve
// the buffers first and synchronise when they need results.
#pragma once

#include <cuda_runtime.h>

#include <optional>

#include "../kernels/cuda/expert_group.hpp"
#include "../kernels/cuda/routing.hpp"
#include "steadymoe/engine/moe_layer.hpp"
#include "steadymoe/kernels/cuda/gemm.hpp"

namespace steadymoe::tc {

using cuda::DeviceBuffer;

// Grows `b` to at least `bytes`; `moved` becomes true when it was reallocated.
void grow(DeviceBuffer& b, size_t bytes, const char* what, bool& moved);
// The same, and a new buffer has every byte set to `byte` before this returns (for buffers read where no
// kernel wrote them this batch). Keyed to the reallocation, not the address: a new buffer may take the old
// one's. (The layer's streams do not wait for the default stream's memset: the device is synchronised.)
void grow_filled(DeviceBuffer& b, size_t bytes, const char* what, int byte, bool& moved);

// A permutation's device buffers, grown to the largest batch so far.
struct PermBuffers {
    DeviceBuffer rows, dest, weight, tiles, load, offsets, chunk_counts;

    void reserve(int64_t max_rows, int64_t tiles_bound, int64_t experts, bool& moved);
    cuda::PermutationOut view(int64_t tiles_bound, int64_t experts);
};

// One group's stage buffers.
struct StageBuffers {
    DeviceBuffer a1, a1_scale, mid, a2, a2_scale;
    DeviceBuffer source_codes, source_scales;  // the group's source rows quantised once (GroupRun::source_rows)
    DeviceBuffer pair_rows;  // scratch of cuda::launch_quantise_to_pairs and launch_copy_bf16_to_pairs

    // source_rows: see GroupRun (pair_rows for that many tokens' pairs; with e4m3_sources,
    // gate_up_takes_e4m3, their codes quantised once too); mid_bytes: swiglu_mid_bytes (bytes a SwiGLU output
    // between the GEMMs).
    void reserve(int64_t rows, int64_t H, int64_t I, bool& moved, int64_t source_rows = 0,
                 int64_t mid_bytes = 4, bool e4m3_sources = false);
};

// The grouped GEMM over weight set `w` for the tiles of `perm`.
cuda::GroupedGemmLaunch gemm_launch(const cuda::DeviceMatrixSet& w, const cuda::PermutationOut& perm,
                                    int64_t tiles, const uint16_t* a, const float* a_scale, cudaStream_t s);

// A pair of timing events around part of a forward. Inside a graph capture the records become the
// graph's own event nodes (external records), so a replay is timed the same way as eager launches.
class EventTimer {
  public:
    EventTimer();
    ~EventTimer();
    EventTimer(const EventTimer&) = delete;
    EventTimer& operator=(const EventTimer&) = delete;
    void begin(cudaStream_t s, bool capturing = false) { record(begin_, s, capturing); }
    void end(cudaStream_t s, bool capturing = false) { record(end_, s, capturing); }
    double ms() const;

  private:
    static void record(cudaEvent_t e, cudaStream_t s, bool capturing);
    cudaEvent_t begin_ = nullptr, end_ = nullptr;
};

struct GroupRun {
    const cuda::DeviceExpertGroup* group;
    const cuda::PermutationOut* perm;
    int64_t max_rows;
    int64_t max_tiles;
    const int32_t* live_rows;  // device: rows of this batch
    StageBuffers* buffers;
    float swiglu_limit;
    bool weight_before_down;
    EventTimer* gate_up_time = nullptr;  // around the gate/up GEMM, when timing
    EventTimer* down_time = nullptr;
    bool fp8_tensor_cores = true;  // FP8 weights meet FP8 activations on the FP8 tensor cores where there are some
                                   // (FP4 sets: where uploaded for it, DeviceMatrixSet::fp4_e4m3_order)
    // Rows of the input that perm->rows points into (0: not known): tokens whose pairs t * K + j
    // (K = max_rows / source_rows) perm->dest names. Where several GEMM rows read each, each is read once:
    // going in as e4m3, quantised once, straight into its pairs' rows (or its codes read or copied from one
    // place); as bf16 to a GEMM that takes rows in order, copied straight into its pairs' rows.
    int64_t source_rows = 0;
    int32_t tile_m = 0;  // rows per tile of perm (GroupTiles); 0: grouped_gemm_tile_rows()
    // The routing kernel that made perm, just before, published its one token's experts here
    // (RouterStage::Enqueued::early): the gate/up GEMM takes them where no kernel runs between them.
    const cuda::EarlyRoute* early_route = nullptr;
};

// Where the down GEMM scatters the expert outputs: f32 rows, or bf16 bits where the activations are bf16
// (each expert output is rounded to the activation dtype before the combine, DESIGN.md §2, so bf16 holds
// it exactly in half the bytes).
struct ContributionRows {
    void* data = nullptr;
    bool bf16 = false;
};

// The bytes of a SwiGLU output kept between the group's gate/up and down GEMMs: none where the gate/up
// epilogue writes its outputs straight into the down GEMM's input rows (bf16 activations that the down GEMM
// takes unquantised; the outputs are rounded to bf16 already); else 2 where the activations are bf16 (the
// outputs, so rounded, are bf16 values: the quantising gather reads the same values from half the bytes)
// unless STEADYMOE_SWIGLU_MID=f32; else 4 (f32).
int64_t swiglu_mid_bytes(const cuda::DeviceExpertGroup& group, ActivationQuant aq, bool fp8_tensor_cores, bool bf16);

// Whether the group's gate/up GEMM takes its input rows as e4m3 codes (FP8 or FP4 weights meeting
// FP8-quantised activations on FP8 tensor cores): then each of GroupRun::source_rows is quantised once, not
// once a slot (StageBuffers::reserve's e4m3_sources).
bool gate_up_takes_e4m3(const cuda::DeviceExpertGroup& group, ActivationQuant aq, bool fp8_tensor_cores);

// The expert stages of one group on stream `s`: gather (and quantise) its rows of `hidden`, gate/up with
// SwiGLU, quantise, down with the routing weight and scatter into `contributions` (row perm->dest).
void run_group(const GroupRun& r, const void* hidden, bool bf16, int64_t H, ActivationQuant aq,
               ContributionRows contributions, cudaStream_t s, bool capturing);

// Rows per tile of the grouped GEMMs, and the tile bounds of a batch.
struct TileCounts {
    int32_t tile_m = 0;
    int64_t token_tiles = 0;  // tiles over every token (router GEMM, shared expert)
    int64_t pair_tiles = 0;   // a bound on the routed experts' tiles over `pairs` rows of `experts` experts
};
TileCounts tile_counts(int64_t tokens, int64_t pairs, int64_t experts);
// The most tiles of at most tile_m rows that `rows` rows over `experts` experts fill (each expert's rows in
// tiles of their own, the last partly filled).
int64_t tile_bound(int64_t rows, int64_t experts, int32_t tile_m);

// The tile list of one expert group's batch of at most `rows` rows over `experts` experts: rows per tile
// (decode batches take the decode kernel's CTA height, cuda::grouped_gemm_decode_tile_rows; other batches
// tall tiles where both GEMMs take them, cuda::grouped_gemm_tall_tile_rows), a bound on
// the tiles, and the tiles to make room for: as many as any batch of at most `rows` rows may have (a
// smaller batch's tiles may be shorter), so that a batch never grows the list a larger one left — which
// would drop the captured graphs.
struct GroupTiles {
    int32_t tile_m = 0;
    int64_t tiles = 0;
    int64_t room = 0;
};
GroupTiles group_tiles(const cuda::DeviceExpertGroup& group, int64_t rows, int64_t experts, ActivationQuant aq,
                       bool fp8_tensor_cores);

// The router on the GPU: logits (bf16 tensor cores for bf16 hidden states and a bf16 router, the exact
// fp32 GEMM otherwise), then the routing kernel — scores, bias, group limits, hash routing, top-k.
class RouterStage {
  public:
    struct Buffers {
        DeviceBuffer logits;  // the logits, or the router GEMM's k splits' partial sums
        DeviceBuffer topk_ids, topk_weights;
        DeviceBuffer early;  // one cuda::EarlyRoute, zeroed (enqueue_routing)
    };
    // What enqueue_routing launched: whether it permuted the routed experts' rows too, and where it published
    // the one token's experts early for the routed gate/up GEMM (GroupedGemmLaunch::early_route), or null.
    struct Enqueued {
        bool permuted = false;
        const cuda::EarlyRoute* early = nullptr;
    };

    explicit RouterStage(const MoeLayer& layer);
    void reserve(Buffers& b, int64_t tokens, const TileCounts& tiles, bool bf16, bool& moved) const;
    // Fills b.topk_ids / b.topk_weights for `tokens` rows of `hidden` (`token_ids` for hash layers): the
    // logits, then the routing.
    void enqueue(Buffers& b, const void* hidden, const uint8_t* active, const int64_t* token_ids,
                 int64_t tokens, const TileCounts& tiles, bool bf16, cudaStream_t s) const {
        enqueue_logits(b, hidden, tokens, tiles, bf16, s);
        enqueue_routing(b, active, token_ids, tokens, bf16, s);
    }
    // The two halves, for a layer that starts other work between them.
    void enqueue_logits(Buffers& b, const void* hidden, int64_t tokens, const TileCounts& tiles, bool bf16,
                        cudaStream_t s) const;
    // With `permute` (the routed experts' permutation, in tiles of tile_m rows), where a decode step's few
    // tokens allow: the routing's top-k permuted there too, in the same launch
    // (cuda::launch_route_and_permute), and where it can (cuda::route_publishes_early), the one token's
    // experts published early in b.early.
    Enqueued enqueue_routing(Buffers& b, const uint8_t* active, const int64_t* token_ids, int64_t tokens, bool bf16,
                             cudaStream_t s, const cuda::PermutationOut* permute = nullptr, int32_t tile_m = 0) const;

  private:
    const MoeLayer& layer_;
    std::optional<cuda::DeviceMatrixSet> router_;  // bf16 router (tensor cores), when stored in bf16
    cuda::DevicePackedWeight router_exact_;        // f32 router arithmetic for f32 inputs
    DeviceBuffer bias_;                            // [E] f32, or empty
    DeviceBuffer tid2eid_;                         // [vocab][K] i32, or empty
};

}  // namespace steadymoe::tc
