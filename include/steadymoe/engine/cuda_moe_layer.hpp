// The MoE layer on one CUDA GPU. It shares the CPU layer's checks, routing and work list
// (MoeLayer::begin_batch / route_batch) and has two paths:
//  - TensorCore: grouped tensor-core GEMMs over the weights in their stored width (bf16, FP8, FP4),
//    SwiGLU and the scatter fused into them (src/engine/cuda_tensor_core_path.hpp). Outputs agree with
//    the CPU backend within the formats' rounding, not bit for bit (the sums run in another order).
//  - Portable: the CPU backend's arithmetic element for element over its decoded weight panels; the
//    GEMMs agree with the CPU bit for bit. Slow; the reference on the GPU.
// On either path every stage is row-local and its arithmetic depends only on the model's sizes and
// formats, so a token's output bytes do not depend on the batch it is in.
#pragma once

#include "steadymoe/engine/moe_layer.hpp"

#include <memory>
#include <string>

namespace steadymoe {

enum class CudaPath { Auto, TensorCore, Portable };

// How FP8 and FP4 weights meet FP8 activations (DeepSeek-V3's per-128 activation scales, V4's power-of-two
// ones) on the tensor-core path of a Hopper. Whichever is chosen, a token's bits do not depend on its batch.
enum class Fp8Products {
    // On the FP8 tensor cores, as DeepSeek runs them: the partial sums of each 128-wide block (FP8 weights)
    // or 32-wide group (FP4 weights, as e4m3 codes) are added up by the tensor cores, whose adder keeps
    // fewer bits than fp32 (a few 1e-3 relative from exact sums), then scaled and folded in fp32. Twice
    // the bf16 rate and half the bytes; the default.
    TensorCores,
    // Exact products summed in fp32 (e4m3 and e2m1 values widened to bf16 for the bf16 tensor cores): the
    // CPU backend's arithmetic to fp32 rounding, at the bf16 rate. Other GPUs always work this way.
    Fp32Sums,
    // As TensorCores, but FP4 weights take the FP8 weights' arithmetic: each 128 x 128 block converted
    // exactly to e4m3 codes under one power-of-two scale (DeepSeek-V4's FP4 x FP8 path), one tensor-core sum
    // per 128-wide block, folded once — the FP8 kernels' bits for those codes. Every FP4 matrix must have
    // that exact form, or the layer is refused. On an H200, deepseek-v4-flash's routed experts took 6.5% less
    // time than with TensorCores at 4096 and 16384 tokens and 11-17% more at 1 and 8
    // (bench/results/2026-12-04-cuda-fp4-block-exact.md). STEADYMOE_FP4_BLOCK_EXACT=1 in the environment
    // makes TensorCores this (for the CLI).
    TensorCoresBlockExact,
};

// GPU time of a forward's stages in milliseconds (CUDA events), when asked for.
struct CudaStageTimes {
    double router_ms = 0;   // router GEMM and routing
    double routed_ms = 0;   // routed experts: row gathers, both GEMMs, scatter
    double shared_ms = 0;   // the shared expert (overlapping the routed experts on its own stream)
    double combine_ms = 0;  // combine
    double total_ms = 0;    // router GEMM through combine: the layer on the GPU, transfers excluded
    double gate_up_ms = 0;  // the routed experts' gate/up GEMM alone (with SwiGLU)
    double down_ms = 0;     // the routed experts' down GEMM alone (with the scatter)
    // The same layer run once more before, without the stage timers (whose events between kernels keep
    // each from starting before the one before it ends), timed from outside: the layer as served. So a
    // timed forward runs the layer twice (and a size's first capture lands in this run), then its experts
    // alone and, where it has a shared expert, its routed experts alone. Tensor-core path only (0 on the
    // portable path).
    double untimed_ms = 0;
    // The experts alone as that untimed layer runs them — the routed experts (permutation, gathers, both GEMMs)
    // and beside them the shared expert — on the routing just made, timed from outside: what the layer is
    // measured against (its router and combine on top). Tensor-core path only (0 on the portable path).
    double experts_untimed_ms = 0;
    // The routed experts alone (permutation, gathers, both GEMMs; no shared expert beside them), run the same
    // way after: what their memory floor is set against. Where the layer has no shared expert, the run above.
    // Tensor-core path only (0 on the portable path).
    double routed_untimed_ms = 0;
};

class CudaMoeLayer {
public:
    // Uploads `layer`'s weights for the chosen path; `layer` must outlive this object. Auto takes the
    // tensor-core path whenever the layer's formats allow it, and runs a batch it cannot take (f32 hidden
    // states for bf16 experts) on the portable path, uploading that path's weights the first time.
    // Throws OutOfMemory naming the tensor that did not fit, Unsupported when no CUDA device is visible
    // or the asked path cannot run the layer.
    explicit CudaMoeLayer(const MoeLayer& layer, CudaPath path = CudaPath::Auto,
                          Fp8Products fp8 = Fp8Products::TensorCores);
    ~CudaMoeLayer();
    CudaMoeLayer(CudaMoeLayer&&) noexcept;

    MoeOutput forward(const MoeInput& input, CudaStageTimes* times = nullptr) const;
    const MoeLayer& layer() const { return layer_; }
    CudaPath path() const { return path_; }
    // The expert GEMM kernel the tensor-core path runs on this GPU: "wgmma (sm_90a)" or "mma.sync (sm_80)".
    static std::string gemm_kernel();
    // Whether Fp8Products::TensorCores runs on FP8 tensor cores here (a Hopper, and no
    // STEADYMOE_FP8_TENSOR_CORES=0 in the environment), for FP8 and FP4 weights; elsewhere their products
    // are summed in fp32.
    static bool fp8_tensor_cores();
    // The expert-GEMM kernels of decode batches (at most 32 rows per expert) on this GPU, in words, with
    // their CTAs per SM: the decode kernel (the weights as the MMAs' first operand), or for BF16 and FP8
    // weights with STEADYMOE_DECODE_KERNEL=tiled the tiled kernel's 64-row CTAs, and the CTAs per SM of
    // FP4 weights meeting e4m3 activations; "" where there are none (not a Hopper, or
    // STEADYMOE_FEW_ROW_KERNELS=0).
    static std::string few_row_kernels();
    // Rows per tile of the FP8 tensor cores' expert GEMMs outside decode batches where they take tall tiles
    // (192 on a Hopper: three-warpgroup CTAs, unless STEADYMOE_TALL_TILES=0), else 0.
    static int tall_tile_rows();
    // Whether batches that run as CUDA graphs launch their kernels as dependent launches here (each may
    // start before the one before it ends): a Hopper or later, unless STEADYMOE_DEPENDENT_LAUNCHES=0.
    static bool dependent_launches();
    // How this layer's routed FP4 experts meet FP8 activations on the FP8 tensor cores, in words: per
    // projection "block-exact" (its every 128 x 128 block converts exactly to e4m3 codes under one scale, so
    // it takes the FP8 kernels' arithmetic) or "per-32" (DeepSeek-V4's sums per 32-wide group); "" where
    // its routed experts do not (not FP4, not on the tensor-core path or not meeting e4m3 activations); and
    // whether block-exact ones take the tiled kernel in other batches than decode ones
    // (STEADYMOE_FP4_EXACT_TILED=1), and its tall tiles (STEADYMOE_TALL_TILES).
    std::string fp4_arithmetic() const;
    // Why the tensor-core path is not used ("" when it is).
    const std::string& portable_reason() const { return portable_reason_; }

    // On the tensor-core path, batches of up to this many tokens (256 by default) run as CUDA graph
    // replays from the second batch of their size on: one launch instead of a dozen, the same bits as
    // launching the kernels one by one. 0 turns graphs off. No effect on the portable path.
    void set_graph_max_tokens(int64_t tokens);
    int64_t graph_max_tokens() const;
    // CUDA graphs the tensor-core path holds: one per batch shape replayed (a shape whose capture or
    // instantiation failed runs eagerly and has none); 0 on the portable path.
    size_t graph_count() const;

private:
    struct Device;
    const MoeLayer& layer_;
    CudaPath path_ = CudaPath::Portable;
    bool fallback_ = false;  // Auto: batches the tensor-core path cannot take run on the portable path
    std::string portable_reason_;
    std::unique_ptr<Device> device_;
};

const char* cuda_path_name(CudaPath path);

}  // namespace steadymoe
