// Drafter kinds: what a drafter adds to the shared DFlash backbone
// (model.drafter.kind), each declared once, in its own folder under
// drafter/kinds/, and registered by name as a node kind is. A kind says
// everything the rest of dflow asks about it, so nothing outside its folder
// names it or its params:
// - its params (keys of model.drafter beside `kind:`, each
//   with its type, default, allowed values, one line of help, whether a
//   resume must keep it) and the fields they give the drafter's shape
//   (DrafterSpec::kind_fields, which its config.json carries);
// - the modules it adds to the backbone and which parameters an optimizer
//   must leave to AdamW;
// - its part of the training forward (a bias on the draft logits, extra
//   loss terms with their weights and record fields);
// - its drafting of a block for `dflow eval` (greedy, lossless; sampled)
//   and the acceptance it predicts, if any;
// - its export (the config.json fields it writes and reads back, the
//   speculators names, the formats that would serve it wrongly);
// - what it adds to the memory fit.
// DFlash (the backbone alone) is the kind "dflash".
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/keys.hpp"
#include "config/yaml_reader.hpp"
#include "drafter/chunked_cross_entropy.hpp"

namespace dflow::drafter {

class DFlashDrafterImpl;
struct DrafterSpec;

// The trained slots of one micro-batch, as the objective hands them to a
// kind: every block's slots, and the P label-bearing ones among them.
struct TrainedSlots {
  torch::Tensor hidden;       // [K, Bs, H]: the backbone's hidden states after its final norm
  torch::Tensor prev_tokens;  // [K, Bs] int64: the data's token just before each slot (slot 0: the anchor)
  // With prev_tokens: [K] int64, the data's token just before each block's
  // anchor (the anchor's own where its sample starts there).
  torch::Tensor before_anchor;
  torch::Tensor rows;         // [P] int64: the trained slots' flat index in K * Bs
  torch::Tensor selected;     // [P, H]: their hidden states
  // What the main loss compares them with, for a kind's own terms:
  torch::Tensor labels;   // [P] int64: the data's token at each trained slot
  torch::Tensor head;     // [V, H]: the target's frozen LM head
  torch::Tensor teacher;  // [P, H]: the target's final hidden state predicting each slot (undefined without a teacher)
  // The main loss of these rows (its objective, teacher, temperature and
  // chunks) with another bias on their logits (null: the backbone's alone),
  // under the main loss's row weights or, position_weights false, weight 1
  // on every trained slot.
  std::function<ChunkedDraftLossResult(const LogitsBias* bias, bool position_weights)> loss;
};

// The main loss's rows, for the terms a kind computes after it.
struct MainLossRows {
  torch::Tensor accept_rate;  // [P] detached: 1 - TV(p, q) at temperature 1 (q(label) without a teacher)
  torch::Tensor row_loss;     // [P] detached, in the reduction dtype
  torch::Tensor row_weights;  // [P]: the weights applied
};

// A term a kind adds to the loss: loss_sum += weight * weighted_sum.
struct ExtraLossTerm {
  torch::Tensor weighted_sum;  // differentiable scalar: sum_i w_i * term_i
  torch::Tensor row_terms;     // [P] detached: w_i * term_i (per-sample and per-bucket sums)
  double weight = 1.0;
  torch::Tensor slot_values;   // [P] detached: the value summed per block slot into the term's series, if it has one
};

// What a kind's terms are called in the step record: "<name>_loss" (each
// / loss_weight, beside "main_loss"), and the per-slot mean of its
// slot_values under `series` ("" for none).
struct RecordTerm {
  std::string name;
  std::string series;
};

// One block being drafted (speculative decoding).
class SlotSampler {
 public:
  virtual ~SlotSampler() = default;
  virtual torch::Tensor probabilities(const torch::Tensor& logits) const = 0;  // softmax(logits / T), float64 CPU
  virtual int64_t draw(const torch::Tensor& probabilities) = 0;                // [V]
  virtual std::vector<int64_t> draw_rows(const torch::Tensor& probabilities) = 0;  // [N, V]
};

struct BlockDraftInputs {
  torch::Tensor hidden;           // [B, H]: the backbone's, slot 0 (the bonus token) included
  torch::Tensor backbone_logits;  // [B-1, V]: slots 1 .. B-1 through the target's LM head
  int64_t bonus_token = 0;
  int64_t previous_token = 0;      // the committed token before the bonus (the bonus itself with none)
  torch::Tensor head;              // [V, H]: the target's frozen LM head (on its device)
  SlotSampler* sampler = nullptr;  // null: greedy
  bool want_logits = false;
};

struct BlockDraft {
  std::vector<int64_t> drafts;        // slots 1 .. B-1
  torch::Tensor logits;               // want_logits or sampling: [B-1, V] float32 on the CPU, drafted from
  torch::Tensor probabilities;        // sampling: each slot's q, [B-1, V] float64
  std::vector<double> predicted_accept;  // slots 1 .. B-1, for a kind that predicts acceptance; else empty
};

// The two sublayers of a draft layer, each added to the layer's residual.
enum class DraftSublayer { attention, mlp };

// The tokens of the blocks the next pass of the draft layers runs over,
// for a kind that reads them inside the layers (begin_blocks).
struct BlockTokens {
  torch::Tensor tokens;  // [B, Q] int64 (whole blocks): slot 0 the anchor token (drafting: the bonus), MASK elsewhere
  // Training only (undefined in drafting): the data's token at each slot
  // (0 past a sample's end), the optimizer step (0-based), the steps the
  // run's schedule spans and a seed for the step's draws.
  torch::Tensor data_tokens;  // [B, Q] int64
  int64_t step = 0;
  int64_t total_steps = 0;
  uint64_t seed = 0;
  bool training() const { return data_tokens.defined(); }
};

// A kind's part of one drafter: the modules it registered on it and what
// they compute. The default is the backbone alone.
class KindModules {
 public:
  virtual ~KindModules() = default;
  // Every draft layer, training and drafting alike: sublayer `which` of
  // layer `layer` on its normed input x [B, Q, H] (Q: whole blocks of
  // block_size slots, each block's slot 0 first), returning what the layer
  // adds to its residual. `run` is the backbone's sublayer; the default
  // calls it on x. A kind may transform its input and its output (DFlash2's
  // convolutions within the block); modules it registers on a layer
  // (layers.<i>.<name>) are recomputed with it (recompute_layers).
  virtual torch::Tensor sublayer(int64_t /*layer*/, DraftSublayer /*which*/, const torch::Tensor& x,
                                 const std::function<torch::Tensor(const torch::Tensor&)>& run) {
    return run(x);
  }
  // After each draft layer (training and drafting alike): the layer's
  // output [B, Q, H] (whole blocks) -> what the next layer (or the final
  // norm) takes. The default passes it on; DSpine injects each slot's
  // predecessor here. Not recomputed with the layer (recompute_layers).
  virtual torch::Tensor after_layer(int64_t /*layer*/, const torch::Tensor& hidden) { return hidden; }
  // Before a pass of the draft layers whose after_layer reads the blocks'
  // tokens: the objective and the drafting give them.
  virtual void begin_blocks(const BlockTokens& /*tokens*/) {}
  // After the drafter drew every parameter (normal(0, 0.02), norms 1,
  // biases 0, in registration order): the kind's modules that start
  // otherwise (DFlash2's identity convolutions) set their values here.
  virtual void reset_parameters() {}
  // A drafter built to train from scratch: the modules a kind derives from
  // the target's frozen LM head [V, H] (DSpine's token codes) set here.
  virtual void initialize_from_head(const torch::Tensor& /*lm_head_weight*/) {}
  // Constant tensors its exports carry beside the parameters, as its
  // reference's loader expects them (DSpine's transfer_ready): save_pretrained
  // writes them; load_pretrained accepts each, if equal.
  virtual std::vector<std::pair<std::string, torch::Tensor>> saved_flags() const { return {}; }
  // Training. Whether logits_bias / extra_terms read TrainedSlots::prev_tokens.
  virtual bool reads_previous_tokens() const { return false; }
  // A trained low-rank bias added to the draft logits of the selected slots.
  virtual std::optional<LogitsBias> logits_bias(const TrainedSlots&) { return std::nullopt; }
  // Terms added after the main loss, in record_terms' order; `options` are
  // the kind's params (DrafterKind::read_params).
  virtual std::vector<ExtraLossTerm> extra_terms(const TrainedSlots&, const MainLossRows&,
                                                 const nlohmann::json& /*options*/) {
    return {};
  }
  // Drafting: the backbone's slots in parallel (argmax, or one draw per row).
  virtual BlockDraft draft_block(const BlockDraftInputs& in);
  // Whether draft_block gives predicted_accept (the eval then records its calibration).
  virtual bool predicts_acceptance() const { return false; }
};

// The memory a kind's loss terms hold in one drafter step beyond its
// activation_floats_per_slot (the memory fit, drafter/drafter_memory.hpp).
// Each extra call of TrainedSlots::loss keeps the gradients of its inputs
// until backward: [P, H] in the compute dtype and, with a bias of rank r,
// [P, r] in the compute dtype and [V, r] in float32 (drafter/chunked_cross_entropy.cpp).
struct KindLossMemory {
  int64_t extra_loss_calls = 0;    // calls of TrainedSlots::loss besides the main loss
  int64_t biased_loss_calls = 0;   // those of them with a bias (LogitsBias) of rank bias_rank
  int64_t bias_rank = 0;
  int64_t floats_per_slot = 0;     // float32 activations per trained slot kept for backward by those calls' inputs
  // Its own chunks of [rows, V] logits (DSpine's refinement, XPress's
  // argmax; at most kKindLogitsPerChunk logits a chunk): float32 buffers held
  // at once per chunk, one chunk at a time, after (not beside) the main loss's chunk.
  double logit_chunk_buffers = 0;
};
// The most logits a kind's own chunk computes at once.
inline constexpr int64_t kKindLogitsPerChunk = int64_t{1} << 25;

// speculators' names for a kind's export (`dflow export --format speculators`).
struct SpeculatorsNames {
  std::string architecture = "DFlashSpeculator";
  std::string model_type = "dflash";
  std::string algorithm = "dflash";
};

class DrafterKind {
 public:
  virtual ~DrafterKind() = default;
  virtual std::string name() const = 0;
  virtual std::string summary() const = 0;  // one line, for the catalog

  // The architecture its config.json names (its own layout: `--format dflash`
  // and the checkpoints).
  virtual std::string architecture() const { return "DFlashDraftModel"; }
  // Whether its draft blocks attend causally (slot k to slots 0 .. k of its
  // block), in training and drafting alike, rather than whole.
  virtual bool causal_blocks(const nlohmann::json& /*fields*/) const { return false; }
  // Whether training needs the target's distribution at every trained slot
  // (TrainedSlots::teacher) whatever the loss: the feature source must give it.
  virtual bool needs_teacher(const nlohmann::json& /*params*/) const { return false; }

  // Params, beside `kind: <name>` in model.drafter (nodes/drafter_kind_choice.hpp reads them).
  // Each declared key as the node catalog lists it (config::KeyDoc).
  virtual std::vector<config::KeyDoc> params() const { return {}; }
  // Reads the kind's own keys (the section holds only those) with their
  // defaults; throws ConfigError naming the key and the value.
  virtual nlohmann::json read_params(config::YamlSection& /*params*/) const { return nlohmann::json::object(); }
  // What a resume must keep of them, resolved, in declaration order.
  virtual std::vector<std::pair<std::string, std::string>> resume_terms(const nlohmann::json& /*params*/) const {
    return {};
  }

  // The drafter's shape: the fields the params give (config.json's names).
  virtual nlohmann::json spec_fields(const nlohmann::json& /*params*/) const { return nlohmann::json::object(); }
  // The fields a run's drafter is built with: spec_fields' with the defaults
  // the kind derives from the target's frozen LM head [V, H] (DSpine's
  // transfer_rank) chosen, once when the run starts; `why` says what it chose
  // and why (left empty when it chose nothing). `saved`: a resumed run's
  // fields (its checkpoint's config.json), whose choices a resume keeps; null
  // for a fresh run. Throws std::invalid_argument when the target gives none.
  virtual nlohmann::json resolve_fields(const nlohmann::json& fields, const torch::Tensor& /*lm_head_weight*/,
                                        const nlohmann::json* /*saved*/, std::string* /*why*/) const {
    return fields;
  }
  // Throws std::invalid_argument naming the first bad field.
  virtual void validate(const nlohmann::json& /*fields*/) const {}
  // Reading a drafter's config.json: this kind's fields when the config
  // carries them (nullopt: not this kind). Throws naming `source` and the key.
  virtual std::optional<nlohmann::json> fields_from_config(const nlohmann::json& /*config*/,
                                                           const std::string& /*source*/) const {
    return std::nullopt;
  }
  // The fields written into config.json (both export layouts).
  virtual nlohmann::json config_fields(const nlohmann::json& fields) const { return fields; }
  // What the fields add, in words, for messages.
  virtual std::string describe(const nlohmann::json& /*fields*/) const { return name(); }

  // The modules it adds, registered on `drafter` after the backbone's.
  virtual std::shared_ptr<KindModules> add_modules(DFlashDrafterImpl& drafter) const;
  // Parameter-name fragments an optimizer must leave to AdamW (tables and
  // vocabulary projections, one-row outputs: Muon's AdamW group).
  virtual std::vector<std::string> adamw_parameters() const { return {}; }
  // Parameters the modules add, and float32 activations per trained slot
  // (the memory fit).
  virtual int64_t parameter_count(const DrafterSpec&) const { return 0; }
  // Values its modules hold without training them (fixed codes), in the
  // compute dtype beside the frozen embedding and head.
  virtual int64_t frozen_count(const DrafterSpec&) const { return 0; }
  virtual int64_t activation_floats_per_slot(const DrafterSpec&) const { return 0; }
  // What its loss terms hold beyond those activations, with its params
  // (`options`: read_params's, as ObjectiveOptions::kind_options holds them).
  virtual KindLossMemory loss_memory(const DrafterSpec&, const nlohmann::json& /*options*/) const { return {}; }

  // The record's extra terms, for a drafter of these fields.
  virtual std::vector<RecordTerm> record_terms(const nlohmann::json& /*fields*/) const { return {}; }

  // Export: "" when `format` ("dflash", "speculators") serves a drafter of
  // these fields, else what it has that the format cannot carry and what to
  // use ("has ..., which the format cannot carry: export it with ...").
  virtual std::string refuses_format(const std::string& /*format*/, const nlohmann::json& /*fields*/) const {
    return "";
  }
  virtual SpeculatorsNames speculators_names() const { return {}; }
};

// The registered kinds: the built-in ones (drafter/kinds/registry.cpp) and
// any registered since. Unknown names throw std::invalid_argument naming
// the known ones.
const DrafterKind& drafter_kind(const std::string& name);
const DrafterKind* find_drafter_kind(const std::string& name);
std::vector<std::string> drafter_kind_names();  // sorted
// Adds a kind; a name already taken throws std::logic_error.
void register_drafter_kind(std::shared_ptr<const DrafterKind> kind);
// Every kind's adamw_parameters, together.
std::vector<std::string> adamw_parameter_fragments();

// The kind of a drafter's config.json (the one whose fields it carries;
// "dflash" when none) and its fields. Throws naming `source`.
std::pair<std::string, nlohmann::json> drafter_kind_of_config(const nlohmann::json& config, const std::string& source);

}  // namespace dflow::drafter
