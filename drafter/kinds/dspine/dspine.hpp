// DSpine (SpecForge `modeling/draft/dspine.py`, `algorithms/dspine`): the
// DFlash backbone with an adjacent injection after every draft layer. Each
// slot k >= 1 of a block receives a gated message from its predecessor: the
// anchor token's code for slot 1, the readout of slot k - 1 at that layer for
// the rest (early in training, in the first replacement_layers layers of a
// drawn share of blocks, the data's token at slot k - 1 instead). Token codes
// are fixed: the whitened principal directions of the target's normalised
// LM-head rows (transfer_rank of them), which also start every layer's
// readout. The loss adds a refinement of the backbone's top-k candidates
// from the true predecessor and an alignment of each layer's readout with
// the label's code; drafting chains the refinement over the top-k from the
// bonus token on. `model.drafter.kind: dspine`; kind.cpp registers it;
// this header is what its files and its tests share.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>

#include "drafter/drafter.hpp"

namespace dflow::drafter {

// SpecForge's 1024: its default transfer_rank, the rank a config.json
// without one has, and the most the default takes from a large target.
constexpr int64_t kSpecForgeTransferRank = 1024;

// SpecForge's DSpineConfig, its defaults and its names (config.json's
// dspine_config carries all of them), but for transfer_rank.
struct DSpineConfig {
  // 0: from the target, resolved once when a run starts (the drafter kind's
  // resolve_fields); a drafter (and its config.json) always has the rank itself.
  int64_t transfer_rank = 0;
  int64_t message_size = 512;
  int64_t top_k = 16;
  double ce_weight = 0.1;
  double alignment_weight = 0.5;
  int64_t alignment_warmup_steps = 146;
  int64_t replacement_layers = 3;
  double replacement_probability = 0.5;
  double replacement_hold_ratio = 1.0 / 6.0;
  double replacement_end_ratio = 1.0 / 3.0;
  double candidate_mass_threshold = 1e-4;

  // SpecForge's checks, each throwing std::invalid_argument naming the field
  // and its value; validate_for adds those against the drafter's shape.
  void validate() const;
  void validate_for(const DrafterSpec& spec) const;
  // The rank a drafter of `spec` has: transfer_rank, or for 0 the most the
  // target can give it, min(hidden size, vocabulary - 1, 1024) (what the
  // memory fit counts before the run resolves it).
  int64_t rank_for(const DrafterSpec& spec) const;
};

nlohmann::json dspine_fields(const DSpineConfig& config);
// Absent fields at SpecForge's defaults; throws std::invalid_argument naming the key.
DSpineConfig dspine_config(const nlohmann::json& fields);

// The alignment term's weight beta and the probability of teacher-forcing a
// block's predecessors at optimizer step `step` (0-based) of `total_steps`
// (<= 0: unknown, no replacement): beta rises linearly to alignment_weight
// over alignment_warmup_steps; the probability holds replacement_probability
// until replacement_hold_ratio of the run, then falls linearly to 0 at
// replacement_end_ratio.
std::pair<double, double> dspine_schedule(const DSpineConfig& config, int64_t step, int64_t total_steps);

// The fixed codes and the readouts' start from the LM head [V, H]: the
// rows normalised, their covariance's top transfer_rank eigenvectors D (by
// ascending eigenvalue, as torch.linalg.eigh orders them) and eigenvalues
// lambda; code(v) = normalise((row_v / |row_v| - mean) D / sqrt(lambda)).
// Computed in float32 in chunks of rows on the head's device. Throws when
// fewer than transfer_rank directions have positive variance.
struct TransferSpace {
  torch::Tensor codes;       // [V, r] float32
  torch::Tensor directions;  // [H, r] float32
};
TransferSpace dspine_transfer_space(const torch::Tensor& lm_head_weight, int64_t transfer_rank);
// The directions of positive variance (beyond float32 rounding) that the
// normalised rows of the LM head [V, H] have, as dspine_transfer_space counts
// them: the largest transfer_rank it accepts.
int64_t dspine_principal_directions(const torch::Tensor& lm_head_weight);

// SpecForge's AdjacentInjection: per layer a readout H -> r and a write
// m -> H, shared message / receiver_gate / predecessor_gate r -> m and bias.
class AdjacentInjectionImpl : public torch::nn::Module {
 public:
  AdjacentInjectionImpl(int64_t hidden_size, int64_t num_layers, const DSpineConfig& config);
  // sqrt(r) * normalise(readout_l(h)), normalised in float32.
  torch::Tensor feature(const torch::Tensor& hidden, int64_t layer);
  // hidden + |hidden| / sqrt(H) * write_l(sigmoid(Wr receiver + Wp pred + b) * message(pred)).
  torch::Tensor write(const torch::Tensor& hidden, const torch::Tensor& receiver, const torch::Tensor& predecessor,
                      int64_t layer);

  torch::nn::ModuleList readouts{nullptr}, writes{nullptr};
  torch::nn::Linear message{nullptr}, receiver_gate{nullptr}, predecessor_gate{nullptr};
  torch::Tensor bias;

 private:
  int64_t rank_;
};
TORCH_MODULE(AdjacentInjection);

// A DSpine drafter's parts (throw for a drafter of another kind).
AdjacentInjectionImpl& dspine_injection(DFlashDrafterImpl& drafter);
torch::Tensor& dspine_transfer_codes(DFlashDrafterImpl& drafter);  // [V, r], not trained
// The last pass's final layer output before its injection, [B, Q, H].
torch::Tensor dspine_pre_injection(DFlashDrafterImpl& drafter);
// SpecForge's refine: the final norm of the last layer's write of
// `hidden` [..., H] from the codes of `predecessor_ids` [...].
torch::Tensor dspine_refine(DFlashDrafterImpl& drafter, const torch::Tensor& hidden,
                            const torch::Tensor& predecessor_ids);

}  // namespace dflow::drafter
