// MoeLayer: one MoE block (router, routed SwiGLU experts, shared experts, combine) on the CPU backend,
// under the determinism contract of docs/determinism.md: each token's output bytes depend on that
// token alone (hidden vector, token id, mask bit), never on the batch or the thread count.
#pragma once

#include "steadymoe/core/tensor.hpp"
#include "steadymoe/model/config.hpp"
#include "steadymoe/model/weights.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace steadymoe {

class Checkpoint;
namespace cpu {
struct PackedLayer;
struct PackedExpert;
struct PackedWeight;
struct ExpertJob;
enum class ActDType;
}

// What to do with a token whose hidden vector holds NaN or Inf.
enum class NonFinitePolicy {
    Error,      // reject the batch, naming the token and column (default)
    Propagate,  // compute anyway; only that token's output is affected (its routing treats NaN
                // scores as lowest), every other token's bytes are unchanged
};

struct MoeLayerOptions {
    // Activation arithmetic of quantised expert GEMMs; unset = the checkpoint's own
    // (MoeConfig::native_activation_quant()).
    std::optional<ActivationQuant> activation_quant;
    int threads = 0;  // 0: all hardware threads
    NonFinitePolicy nonfinite = NonFinitePolicy::Error;
    // Check every weight for NaN/Inf codes at construction (costs one pass over the weights).
    bool check_weights = true;
};

struct MoeInput {
    Tensor hidden;     // [T, H] F32 or BF16; the activation dtype of the layer's arithmetic
    Tensor token_ids;  // [T] I32 or I64; required by hash-routed layers
    Tensor mask;       // [T] BOOL / U8 / I32 / I64, nonzero = a real token; undefined = all real

    // Tokens [begin, end) of this input (views, no copies).
    MoeInput rows(int64_t begin, int64_t end) const {
        MoeInput s;
        s.hidden = hidden.rows(begin, end);
        if (token_ids.defined()) s.token_ids = token_ids.rows(begin, end);
        if (mask.defined()) s.mask = mask.rows(begin, end);
        return s;
    }
};

struct MoeOutput {
    Tensor output;        // [T, H], the input's dtype; masked tokens are zeros
    Tensor topk_ids;      // [T, K] I32 in canonical slot order; -1 for masked tokens
    Tensor topk_weights;  // [T, K] F32, after normalisation and scaling; 0 for masked tokens
    std::vector<int64_t> expert_load;  // tokens routed to each expert (masked tokens not counted)
};

// One batch on its way through a layer: the parts every backend shares — the checked input, the
// routing and the list of expert work — while each backend does the arithmetic of the stages.
struct BatchPlan {
    int64_t tokens = 0;                 // T
    Tensor x;                           // [T, H] the input's exact values as float32 (when converted)
    cpu::ActDType act_dtype{};          // the input's dtype: what stage outputs are rounded to
    std::vector<uint8_t> active;        // [T] 1 = real token
    std::vector<int64_t> token_ids;     // [T] checked ids (hash layers only)
    MoeOutput out;                      // allocated by begin_batch, routing filled by route_batch
    std::vector<cpu::ExpertJob> jobs;   // one per expert with tokens, then the shared expert
};

class MoeLayer {
public:
    MoeLayer(MoeConfig config, MoeLayerWeights weights, MoeLayerOptions options = {});
    // Loads layer `layer` of a checkpoint (which must be an MoE layer); with `held`, only those routed
    // experts (a partial layer: forward() refuses it, EpMoeLayer runs it).
    static MoeLayer from_checkpoint(const Checkpoint& ckpt, int64_t layer, MoeLayerOptions options = {},
                                    const std::vector<bool>* held = nullptr);

    MoeOutput forward(const MoeInput& input) const;

    const MoeConfig& config() const { return config_; }
    const MoeLayerWeights& weights() const { return *weights_; }
    const MoeLayerOptions& options() const { return options_; }
    ActivationQuant activation_quant() const { return act_quant_; }
    bool is_hash_layer() const { return config_.is_hash_layer(weights_->layer); }
    // Returns a copy sharing the weights, with another thread count.
    MoeLayer with_threads(int threads) const;
    // Returns a copy sharing the weights, with another non-finite input policy.
    MoeLayer with_nonfinite(NonFinitePolicy policy) const;

    // Backend building blocks (forward() is begin, router GEMM, route, experts, combine):
    // checks the input and allocates the output; routes from fp32 logits [T][E] and lists the work.
    // `convert_hidden` = false leaves plan.x empty (for backends that read the input as it is);
    // `values_checked` skips the non-finite scan of an input check_input has passed.
    BatchPlan begin_batch(const MoeInput& input, bool convert_hidden = true, bool values_checked = false) const;
    // begin_batch's checks alone (shapes, dtypes, mask, token ids, and the values under
    // NonFinitePolicy::Error), throwing as it would, with nothing allocated.
    void check_input(const MoeInput& input) const;
    // fp32 router logits [T][E] of a planned batch (plan.x converted).
    void router_logits(const BatchPlan& plan, float* logits) const;
    // (Decodes for the CPU kernels those held experts the batch's jobs need that are not decoded yet.)
    void route_batch(BatchPlan& plan, const float* logits) const;
    // Fills plan.out.output from contribution rows: row t*K+k is slot k of token t, row T*K+t the
    // shared expert's (when the layer has one); only real tokens' rows are read.
    void combine(BatchPlan& plan, const float* contributions) const;
    // The weights as decoded for the CPU kernels. Each expert is decoded the first time something asks for it
    // (a batch routed to it, packed_expert, packed) and kept, shared by the layer's copies, so that a layer
    // whose batches run elsewhere (a GPU's tensor cores) never holds its experts twice. packed(): every held
    // expert (the CUDA backend's portable path uploads them); packed_router(): the router alone, decoded at
    // construction; packed_expert(e): routed expert e, which must be held; packed_shared(): the shared
    // expert. All are safe to call from several threads at once.
    const cpu::PackedLayer& packed() const;
    const cpu::PackedWeight& packed_router() const;
    const cpu::PackedExpert& packed_expert(int64_t e) const;
    const cpu::PackedExpert& packed_shared() const;
    // Decodes what forward(input) would: routes the input (checking it, and refusing a partial layer, as
    // forward does) and decodes the experts its tokens reach, the shared expert too where a token is real, so
    // that a caller timing forward(input) times no decoding and holds no more decoded experts than the batch
    // needs (a deepseek-v3 token: 8 of 256).
    void decode_for(const MoeInput& input) const;
    // The routed experts decoded so far, in ascending order (the shared expert is not listed).
    std::vector<int64_t> decoded_experts() const;

private:
    // The checks of begin_batch and check_input: fills plan's tokens, act_dtype, active and token_ids.
    void check_into(const MoeInput& input, bool values_checked, BatchPlan& plan) const;
    // forward()'s first steps, which decode_for stops after: refuses a partial layer, checks the input, and
    // routes its tokens (router logits, routing, the work list, the jobs' experts decoded).
    BatchPlan routed_batch(const MoeInput& input) const;

    MoeConfig config_;
    std::shared_ptr<const MoeLayerWeights> weights_;
    struct Packing;                     // the weights decoded for the CPU kernels, as far as asked for
    // Shared by copies; filled under once-flags, so never seen half-made
    std::shared_ptr<Packing> packing_;
    MoeLayerOptions options_;
    ActivationQuant act_quant_ = ActivationQuant::None;
};

}  // namespace steadymoe
