// DSpine's kind: its params on the drafter node, the injection after every
// draft layer, the refinement and alignment terms in training, the chained
// refinement over the top-k in drafting, and SpecForge's checkpoint names.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>

#include "drafter/kind_params.hpp"
#include "drafter/kinds/dspine/dspine.hpp"
#include "drafter/kinds/registry.hpp"
#include "drafter/rerank_draft.hpp"

namespace dflow::drafter {

class DSpineModules final : public KindModules {
 public:
  DSpineModules(DFlashDrafterImpl& drafter, const DSpineConfig& config);

  torch::Tensor after_layer(int64_t layer, const torch::Tensor& hidden) override;
  void begin_blocks(const BlockTokens& tokens) override;
  void reset_parameters() override;
  void initialize_from_head(const torch::Tensor& lm_head_weight) override;
  std::vector<std::pair<std::string, torch::Tensor>> saved_flags() const override {
    return {{"transfer_ready", torch::tensor(true)}};
  }
  std::vector<ExtraLossTerm> extra_terms(const TrainedSlots& slots, const MainLossRows& main,
                                         const nlohmann::json& options) override;
  BlockDraft draft_block(const BlockDraftInputs& in) override;

  // sqrt(r) * code(ids), in the drafter's dtype.
  torch::Tensor scaled_codes(const torch::Tensor& ids) const;
  torch::Tensor refine(const torch::Tensor& hidden, const torch::Tensor& predecessor_ids);

  DSpineConfig config;
  int64_t block_size, num_layers;
  AdjacentInjection injection{nullptr};
  torch::Tensor transfer_codes;  // [V, r], a parameter that is never trained
  RMSNorm norm{nullptr};         // the drafter's final norm
  // The pass in progress: its blocks' tokens, the blocks whose predecessors
  // are teacher-forced, and what the loss and the drafting read back.
  BlockTokens tokens;
  torch::Tensor replace;                     // [B, N] bool, or undefined
  torch::Tensor pre_injection;               // [B, Q, H]: the last layer's output before its injection
  std::vector<torch::Tensor> layer_features;  // per layer, [B, Q, r] after its injection (training)
};

namespace {

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

template <class T>
config::Check<T> check_of(std::function<bool(T)> ok, std::string what) {
  return [ok = std::move(ok), what = std::move(what)](const T& v) -> std::optional<std::string> {
    if (ok(v)) return std::nullopt;
    std::ostringstream got;
    got << v;
    return what + ", got " + got.str();
  };
}

const KeySetParams<DSpineConfig>& dspine_params() {
  using config::OnResume;
  static const KeySetParams<DSpineConfig> params = [] {
    config::KeySet<DSpineConfig> k;
    const auto must = OnResume::must_match;
    auto positive = [](int64_t v) { return v >= 1; };
    auto non_negative = [](int64_t v) { return v >= 0; };
    auto unit = [](double v) { return std::isfinite(v) && v >= 0.0 && v <= 1.0; };
    k.add("transfer_rank", [](DSpineConfig& c) -> auto& { return c.transfer_rank; }, must,
          "rank of the fixed token codes (whitened principal directions of the target's LM-head rows) and of each "
          "layer's readout (0: from the target when the run starts, the principal directions its LM head has, at "
          "most min(hidden size, 1024), SpecForge's 1024 on a large target; set, at most those directions)",
          check_of<int64_t>(non_negative, "must be >= 0 (the codes' rank; 0: from the target)"));
    k.add("message_size", [](DSpineConfig& c) -> auto& { return c.message_size; }, must,
          "width of the gated message a slot receives from its predecessor (512)",
          check_of<int64_t>(positive, "must be >= 1 (the message's width)"));
    k.add("top_k", [](DSpineConfig& c) -> auto& { return c.top_k; }, must,
          "backbone candidates the refinement rescores at each slot, in the loss and in drafting (16; at most the "
          "vocabulary)",
          check_of<int64_t>(positive, "must be >= 1 (candidates per slot)"));
    k.add("ce_weight", [](DSpineConfig& c) -> auto& { return c.ce_weight; }, must,
          "the refinement term's cross-entropy share, 1 - ce_weight its L1 to the target's distribution (0.1; in "
          "[0, 1]); the backbone's own pair is the node's loss ({ce: 0.1, tv: 1.8} is SpecForge's)",
          check_of<double>(unit, "must lie in [0, 1]"));
    k.add("alignment_weight", [](DSpineConfig& c) -> auto& { return c.alignment_weight; }, must,
          "weight of the readouts' alignment with the label's code, times the micro-batch's mean cross-entropy "
          "(0.5; >= 0)",
          check_of<double>([](double v) { return std::isfinite(v) && v >= 0.0; }, "must be a finite number >= 0"));
    k.add("alignment_warmup_steps", [](DSpineConfig& c) -> auto& { return c.alignment_warmup_steps; }, must,
          "optimizer steps over which the alignment weight rises linearly from 0 (146; 0: none)",
          check_of<int64_t>(non_negative, "must be >= 0"));
    k.add("replacement_layers", [](DSpineConfig& c) -> auto& { return c.replacement_layers; }, must,
          "the first layers whose predecessors are teacher-forced (the data's token code) in a drawn block (3)",
          check_of<int64_t>(non_negative, "must be >= 0"));
    k.add("replacement_probability", [](DSpineConfig& c) -> auto& { return c.replacement_probability; }, must,
          "share of blocks teacher-forced early in the run (0.5; in [0, 1])",
          check_of<double>(unit, "must lie in [0, 1]"));
    k.add("replacement_hold_ratio", [](DSpineConfig& c) -> auto& { return c.replacement_hold_ratio; }, must,
          "share of the run's steps at full replacement_probability (1/6), which then falls linearly to 0",
          check_of<double>(unit, "must lie in [0, 1]"));
    k.add("replacement_end_ratio", [](DSpineConfig& c) -> auto& { return c.replacement_end_ratio; }, must,
          "share of the run's steps where teacher forcing ends (1/3; above replacement_hold_ratio)",
          check_of<double>(unit, "must lie in [0, 1]"));
    k.add("candidate_mass_threshold", [](DSpineConfig& c) -> auto& { return c.candidate_mass_threshold; }, must,
          "the refinement's L1 counts only where the target puts more than this mass on the candidates (1e-4; in "
          "[0, 1))",
          check_of<double>([](double v) { return std::isfinite(v) && v >= 0.0 && v < 1.0; }, "must lie in [0, 1)"));
    auto cross = [](config::YamlSection& section, const DSpineConfig& c) {
      if (c.replacement_hold_ratio < c.replacement_end_ratio) return;
      const std::string key = section.has("replacement_end_ratio") ? "replacement_end_ratio" : "replacement_hold_ratio";
      throw section.error(key, "replacement_hold_ratio " + number_text(c.replacement_hold_ratio) +
                                   " must be below replacement_end_ratio " + number_text(c.replacement_end_ratio) +
                                   " (teacher forcing holds, then falls to 0 by the end ratio)");
    };
    return KeySetParams<DSpineConfig>(std::move(k), [](const DSpineConfig& c) { return dspine_fields(c); }, cross);
  }();
  return params;
}

// Rows of full-vocabulary logits at once (as the main loss's chunks).
constexpr int64_t kMaxLogitsPerChunk = kKindLogitsPerChunk;  // as the memory fit counts them

class DSpineKind final : public DrafterKind {
 public:
  std::string name() const override { return "dspine"; }
  std::string summary() const override {
    return "DSpine: the backbone with each slot's predecessor injected after every draft layer (fixed whitened "
           "codes of the target's LM-head rows), a refinement of the top-k from the predecessor and an alignment "
           "term, SpecForge's defaults";
  }
  std::string architecture() const override { return "DSpineDraftModel"; }
  bool needs_teacher(const nlohmann::json&) const override { return true; }
  // SpecForge trains DSpine with causal_block masks.
  bool causal_blocks(const nlohmann::json&) const override { return true; }
  std::vector<config::KeyDoc> params() const override { return dspine_params().params(); }
  nlohmann::json read_params(config::YamlSection& params) const override { return dspine_params().read(params); }
  std::vector<std::pair<std::string, std::string>> resume_terms(const nlohmann::json& p) const override {
    return dspine_params().resume_terms(p);
  }

  nlohmann::json spec_fields(const nlohmann::json& p) const override { return dspine_fields(dspine_config(p)); }
  // transfer_rank 0: the principal directions the target's LM head has, at
  // most min(hidden size, SpecForge's 1024), or a resumed run's own.
  nlohmann::json resolve_fields(const nlohmann::json& fields, const torch::Tensor& lm_head_weight,
                                const nlohmann::json* saved, std::string* why) const override {
    DSpineConfig c = dspine_config(fields);
    if (c.transfer_rank > 0) return fields;
    if (saved != nullptr && saved->contains("transfer_rank")) {
      c.transfer_rank = dspine_config(*saved).transfer_rank;
      *why = "transfer_rank " + std::to_string(c.transfer_rank) +
             " (left to the target), as the run started with (its checkpoint's config.json)";
      return dspine_fields(c);
    }
    const int64_t hidden = lm_head_weight.size(1), vocab = lm_head_weight.size(0);
    const int64_t directions = dspine_principal_directions(lm_head_weight);
    const int64_t most = std::min({hidden, vocab - 1, kSpecForgeTransferRank});
    if (directions < 1)
      throw std::invalid_argument("DSpine drafter: the target's LM head has no principal direction of positive "
                                  "variance, from which its token codes come: DSpine cannot train on this target");
    c.transfer_rank = std::min(directions, most);
    const std::string has = "the target's LM head has " + std::to_string(directions) +
                            " principal directions of positive variance";
    std::string because;  // the head's directions, or what caps them
    if (directions <= most) because = has + " (hidden size " + std::to_string(hidden) + ")";
    else if (most == kSpecForgeTransferRank) because = "SpecForge's default (" + has + ")";
    else because = "min(hidden size, vocabulary - 1) (" + has + ")";
    *why = "transfer_rank " + std::to_string(c.transfer_rank) + " (left to the target): " + because +
           "; set the drafter node's transfer_rank to choose";
    return dspine_fields(c);
  }
  void validate(const nlohmann::json& fields) const override { dspine_config(fields).validate(); }
  std::optional<nlohmann::json> fields_from_config(const nlohmann::json& config,
                                                   const std::string& source) const override {
    if (!config.contains("dspine_config") || config["dspine_config"].is_null()) return std::nullopt;
    try {
      if (!config["dspine_config"].is_object())
        throw std::invalid_argument("dspine_config must be an object, got " + config["dspine_config"].dump());
      nlohmann::json fields = config["dspine_config"];
      if (!fields.contains("transfer_rank") || fields["transfer_rank"].is_null())
        fields["transfer_rank"] = kSpecForgeTransferRank;  // SpecForge's default
      const DSpineConfig c = dspine_config(fields);
      c.validate();
      if (c.transfer_rank < 1)
        throw std::invalid_argument("transfer_rank must be >= 1 in a drafter's config (the codes' rank), got " +
                                    std::to_string(c.transfer_rank));
      return dspine_fields(c);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("drafter config '" + source + "': dspine_config." + e.what());
    }
  }
  // SpecForge writes asdict(DSpineConfig) under dspine_config.
  nlohmann::json config_fields(const nlohmann::json& fields) const override { return {{"dspine_config", fields}}; }
  std::string describe(const nlohmann::json& fields) const override {
    const DSpineConfig c = dspine_config(fields);
    const std::string rank = c.transfer_rank > 0 ? "rank-" + std::to_string(c.transfer_rank) : "target-rank";
    return rank + " token codes, " + std::to_string(c.message_size) +
           "-wide messages, a refinement over the top " + std::to_string(c.top_k);
  }

  std::shared_ptr<KindModules> add_modules(DFlashDrafterImpl& drafter) const override {
    const DSpineConfig c = dspine_config(drafter.spec().kind_fields);
    try {
      c.validate_for(drafter.spec());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("DSpine drafter: ") + e.what());
    }
    return std::make_shared<DSpineModules>(drafter, c);
  }
  int64_t parameter_count(const DrafterSpec& spec) const override {
    const DSpineConfig c = dspine_config(spec.kind_fields);
    const int64_t h = spec.hidden_size, r = c.rank_for(spec), m = c.message_size;
    return spec.num_layers * (r * h + m * h) + 3 * r * m + m;
  }
  // The codes, [vocabulary, rank]: no gradient, no optimizer state.
  int64_t frozen_count(const DrafterSpec& spec) const override {
    return spec.vocab_size * dspine_config(spec.kind_fields).rank_for(spec);
  }
  int64_t activation_floats_per_slot(const DrafterSpec& spec) const override {
    const DSpineConfig c = dspine_config(spec.kind_fields);
    const int64_t h = spec.hidden_size, r = c.rank_for(spec), m = c.message_size, k = c.top_k;
    // Per layer: the readout, its features before and after the write, the
    // predecessor, three projections and the gate, the delta and the sum;
    // the refinement: its write at the last layer, the candidates' head rows, their scores.
    const int64_t per_layer = 4 * r + 4 * m + 3 * h;
    return spec.num_layers * per_layer + per_layer + k * h + 4 * k;
  }

  // The refinement's chunks of logits: the head's product and its float32
  // copy, their log-sum-exp, the teacher's product and its softmax.
  KindLossMemory loss_memory(const DrafterSpec&, const nlohmann::json&) const override {
    KindLossMemory out;
    out.logit_chunk_buffers = 4;
    return out;
  }

  std::vector<RecordTerm> record_terms(const nlohmann::json&) const override {
    return {{"refinement", ""}, {"alignment", ""}};
  }

  std::string refuses_format(const std::string& format, const nlohmann::json& fields) const override {
    if (format != "speculators") return "";
    return "has DSpine's injection and token codes (" + describe(fields) +
           "), which speculators' layout cannot carry (speculators has no DSpine model); export it with --format "
           "dflash, which writes SpecForge's DSpineDraftModel checkpoint";
  }
};

}  // namespace

// The injection is registered on the drafter as SpecForge names it
// (injection.readouts.<i>, injection.writes.<i>, injection.message, ...),
// the codes beside it (transfer_codes).
DSpineModules::DSpineModules(DFlashDrafterImpl& drafter, const DSpineConfig& c)
    : config(c), block_size(drafter.spec().block_size), num_layers(drafter.spec().num_layers), norm(drafter.norm) {
  const DrafterSpec& spec = drafter.spec();
  injection = drafter.register_module("injection", AdjacentInjection(spec.hidden_size, spec.num_layers, config));
  transfer_codes = drafter.register_parameter("transfer_codes", torch::zeros({spec.vocab_size, config.transfer_rank}),
                                              /*requires_grad=*/false);
}

// SpecForge's initialisation: the writes and the predecessor gate zero (a
// fresh DSpine drafter computes what DFlash would), the codes zero until
// the target's head gives them.
void DSpineModules::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < injection->writes->size(); ++i)
    injection->writes->ptr<torch::nn::LinearImpl>(i)->weight.zero_();
  injection->predecessor_gate->weight.zero_();
  transfer_codes.zero_();
}

void DSpineModules::initialize_from_head(const torch::Tensor& lm_head_weight) {
  if (lm_head_weight.dim() != 2 || lm_head_weight.size(0) != transfer_codes.size(0) ||
      lm_head_weight.size(1) != injection->readouts->ptr<torch::nn::LinearImpl>(0)->weight.size(1))
    throw std::invalid_argument("DSpine drafter: the transfer space needs the target's LM head [" +
                                std::to_string(transfer_codes.size(0)) + ", hidden], got " +
                                c10::str(lm_head_weight.sizes()));
  torch::NoGradGuard no_grad;
  const TransferSpace space =
      dspine_transfer_space(lm_head_weight.to(transfer_codes.device()), config.transfer_rank);
  transfer_codes.copy_(space.codes);
  for (size_t i = 0; i < injection->readouts->size(); ++i)
    injection->readouts->ptr<torch::nn::LinearImpl>(i)->weight.copy_(space.directions.t());
}

torch::Tensor DSpineModules::scaled_codes(const torch::Tensor& ids) const {
  const torch::Tensor flat = transfer_codes.index_select(0, ids.reshape({-1}).to(transfer_codes.device(), torch::kInt64));
  std::vector<int64_t> shape(ids.sizes().begin(), ids.sizes().end());
  shape.push_back(config.transfer_rank);
  return flat.view(shape) * std::sqrt(static_cast<double>(config.transfer_rank));
}

void DSpineModules::begin_blocks(const BlockTokens& t) {
  tokens = t;
  replace = torch::Tensor();
  pre_injection = torch::Tensor();
  layer_features.clear();
  if (!t.training()) return;
  const double probability = dspine_schedule(config, t.step, t.total_steps).second;
  if (probability <= 0.0) return;
  const int64_t blocks = t.tokens.size(1) / block_size;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(t.seed);
  replace = torch::rand({t.tokens.size(0), blocks}, generator, torch::TensorOptions().dtype(torch::kFloat64))
                .lt(probability)
                .to(t.tokens.device());
}

// SpecForge's AdjacentInjection.forward on whole blocks: slot 0 kept, slot
// k >= 1 written from its own readout (the receiver) and its predecessor's:
// the anchor's code for slot 1, slot k - 1's readout at this layer for the
// rest, or in the first replacement_layers layers of a teacher-forced block
// the code of the data's token at slot k - 1.
torch::Tensor DSpineModules::after_layer(int64_t layer, const torch::Tensor& hidden) {
  if (!tokens.tokens.defined() || tokens.tokens.numel() != hidden.size(0) * hidden.size(1))
    throw std::logic_error("DSpine drafter: its layers read the blocks' anchor tokens, which this pass was not given "
                           "(KindModules::begin_blocks with [" + std::to_string(hidden.size(0)) + ", " +
                           std::to_string(hidden.size(1)) + "] tokens)");
  const int64_t batch = hidden.size(0), blocks = hidden.size(1) / block_size, width = hidden.size(2);
  const torch::Tensor h = hidden.view({batch, blocks, block_size, width});
  const torch::Tensor ids = tokens.tokens.view({batch, blocks, block_size});
  const torch::Tensor features = injection->feature(h, layer);
  torch::Tensor predecessors =
      torch::cat({scaled_codes(ids.narrow(2, 0, 1)).to(features.scalar_type()), features.narrow(2, 1, block_size - 2)}, 2);
  if (replace.defined() && layer < config.replacement_layers) {
    const torch::Tensor data = tokens.data_tokens.view({batch, blocks, block_size});
    const torch::Tensor correct = scaled_codes(data.narrow(2, 0, block_size - 1)).to(features.scalar_type());
    predecessors = torch::where(replace.view({batch, blocks, 1, 1}), correct, predecessors);
  }
  const torch::Tensor successors = injection->write(h.narrow(2, 1, block_size - 1),
                                                    features.narrow(2, 1, block_size - 1), predecessors, layer);
  const torch::Tensor out = torch::cat({h.narrow(2, 0, 1), successors}, 2).view({batch, blocks * block_size, width});
  if (layer == num_layers - 1) pre_injection = hidden;
  if (tokens.training()) {
    if (static_cast<int64_t>(layer_features.size()) <= layer) layer_features.resize(static_cast<size_t>(layer) + 1);
    layer_features[static_cast<size_t>(layer)] = injection->feature(out, layer);
  }
  return out;
}

torch::Tensor DSpineModules::refine(const torch::Tensor& hidden, const torch::Tensor& predecessor_ids) {
  const int64_t last = num_layers - 1;
  const torch::Tensor receiver = injection->feature(hidden, last);
  return norm(injection->write(hidden, receiver, scaled_codes(predecessor_ids), last));
}

// SpecForge's terms after the backbone's (the node's loss):
// - refinement: at each trained slot the backbone's top_k candidates
//   rescored by the head from refine(pre-injection, the data's previous
//   token); ce_weight x their cross-entropy at the label (0 when the label is
//   not among them) + (1 - ce_weight) x the L1 to the target's distribution
//   renormalised over them (where it puts more than candidate_mass_threshold
//   on them), under the main loss's row weights;
// - alignment: sum over layers of 1 - cos(readout after the injection, the
//   label's code), under the row weights, weighed by beta (the schedule's) x
//   the micro-batch's weighted mean cross-entropy of the backbone (detached).
std::vector<ExtraLossTerm> DSpineModules::extra_terms(const TrainedSlots& slots, const MainLossRows& main,
                                                      const nlohmann::json&) {
  const torch::Tensor& hidden = slots.selected;  // [P, H]
  const int64_t rows = hidden.size(0), top = config.top_k, width = hidden.size(1);
  const auto reduction = main.row_loss.scalar_type();
  const auto [beta, probability] = dspine_schedule(config, tokens.step, tokens.total_steps);
  (void)probability;
  ExtraLossTerm refinement, alignment;
  if (rows == 0) {  // no trained slot: zeros that still back-propagate
    for (ExtraLossTerm* t : {&refinement, &alignment}) {
      t->weighted_sum = (hidden.sum() * 0).to(reduction);
      t->row_terms = main.row_loss.detach();
    }
    alignment.weight = 0.0;
    return {refinement, alignment};
  }
  if (!slots.teacher.defined())
    throw std::invalid_argument("DSpine drafter: its refinement term needs the target's distribution at every "
                                "trained slot (TrainedSlots::teacher), which this micro-batch lacks");
  const torch::Tensor head = slots.head.to(hidden.scalar_type());
  const torch::Tensor labels = slots.labels.to(hidden.device(), torch::kInt64);
  const torch::Tensor weights = main.row_weights.to(reduction);
  torch::Tensor candidates = torch::empty({rows, top}, hidden.options().dtype(torch::kInt64));
  torch::Tensor target = torch::empty({rows, top}, hidden.options().dtype(reduction));
  torch::Tensor ce = torch::empty({rows}, hidden.options().dtype(reduction));
  {
    torch::NoGradGuard no_grad;
    const int64_t chunk = std::max<int64_t>(1, kMaxLogitsPerChunk / std::max<int64_t>(1, head.size(0)));
    for (int64_t begin = 0; begin < rows; begin += chunk) {
      const int64_t n = std::min(chunk, rows - begin);
      const torch::Tensor logits = torch::matmul(hidden.narrow(0, begin, n).detach(), head.t()).to(reduction);
      const torch::Tensor top_ids = std::get<1>(logits.topk(top, -1));
      candidates.narrow(0, begin, n).copy_(top_ids);
      ce.narrow(0, begin, n).copy_(logits.logsumexp(-1) - logits.gather(1, labels.narrow(0, begin, n).unsqueeze(1)).squeeze(1));
      const torch::Tensor teacher =
          torch::matmul(slots.teacher.narrow(0, begin, n).to(head.scalar_type()), head.t()).to(reduction).softmax(-1);
      target.narrow(0, begin, n).copy_(teacher.gather(1, top_ids));
    }
  }
  const torch::Tensor mass = target.sum(-1);
  const torch::Tensor target_share = target / mass.unsqueeze(-1).clamp_min(1e-30);
  const torch::Tensor pre = pre_injection.reshape({-1, width}).index_select(0, slots.rows);
  const torch::Tensor prev = tokens.data_tokens.reshape({-1}).index_select(0, slots.rows - 1);
  const torch::Tensor refined = refine(pre, prev);  // [P, H]
  const torch::Tensor candidate_rows = head.index_select(0, candidates.reshape({-1})).view({rows, top, width});
  const torch::Tensor scores = torch::bmm(candidate_rows, refined.unsqueeze(-1)).squeeze(-1).to(reduction);
  const torch::Tensor log_q = scores.log_softmax(-1);
  const torch::Tensor covered = candidates.eq(labels.unsqueeze(1));
  const torch::Tensor refined_ce = -(log_q * covered).sum(-1);
  const torch::Tensor refined_l1 =
      (log_q.exp() - target_share).abs().sum(-1) * mass.gt(config.candidate_mass_threshold);
  const torch::Tensor refinement_rows =
      ((config.ce_weight * refined_ce + (1.0 - config.ce_weight) * refined_l1).to(reduction) * weights);
  refinement.weighted_sum = refinement_rows.sum();
  refinement.row_terms = refinement_rows.detach();

  const torch::Tensor codes = transfer_codes.index_select(0, labels).to(reduction);  // [P, r]
  torch::Tensor misalignment = torch::zeros({rows}, hidden.options().dtype(reduction));
  for (const torch::Tensor& features : layer_features) {
    const torch::Tensor f = features.reshape({-1, config.transfer_rank}).index_select(0, slots.rows).to(reduction);
    misalignment = misalignment + (1.0 - torch::nn::functional::cosine_similarity(
                                             f, codes, torch::nn::functional::CosineSimilarityFuncOptions().dim(-1)));
  }
  const torch::Tensor alignment_rows = misalignment.to(reduction) * weights;
  alignment.weighted_sum = alignment_rows.sum();
  const double weight_sum = weights.sum().item<double>();
  const double mean_ce = weight_sum > 0.0 ? (ce.to(reduction) * weights).sum().item<double>() / weight_sum : 0.0;
  alignment.weight = beta * mean_ce;
  alignment.row_terms = alignment_rows.detach();
  return {refinement, alignment};
}

// SpecForge's transition_scores + select_cached, chained: at slot k the
// backbone's top_k candidates scored by the head from refine(the slot's
// pre-injection state, the token chosen at slot k - 1; the bonus for slot
// 1), through drafter/rerank_draft.hpp.
BlockDraft DSpineModules::draft_block(const BlockDraftInputs& in) {
  if (!pre_injection.defined() || !in.head.defined())
    throw std::logic_error("DSpine drafter: drafting needs the pass's pre-injection states and the target's LM head");
  const torch::Device device = transfer_codes.device();
  const torch::Tensor pre = pre_injection[0];  // [B, H]
  return draft_by_reranking(in, config.top_k, device,
                            [&](int64_t slot, int64_t previous, const torch::Tensor& candidates) {
                              const torch::Tensor refined = refine(
                                  pre.narrow(0, slot, 1),
                                  torch::full({1}, previous, torch::TensorOptions().device(device).dtype(torch::kInt64)));
                              const torch::Tensor head_rows = in.head.index_select(0, candidates.to(in.head.device()))
                                                                  .to(device, refined.scalar_type());
                              return torch::matmul(head_rows, refined[0]);  // [K]
                            });
}

namespace {

DSpineModules& modules_of(DFlashDrafterImpl& drafter) {
  auto* modules = dynamic_cast<DSpineModules*>(&drafter.kind_modules());
  if (modules == nullptr)
    throw std::invalid_argument("drafter of kind '" + drafter.spec().kind + "' has no DSpine modules");
  return *modules;
}

}  // namespace

AdjacentInjectionImpl& dspine_injection(DFlashDrafterImpl& drafter) { return *modules_of(drafter).injection; }
torch::Tensor& dspine_transfer_codes(DFlashDrafterImpl& drafter) { return modules_of(drafter).transfer_codes; }
torch::Tensor dspine_pre_injection(DFlashDrafterImpl& drafter) { return modules_of(drafter).pre_injection; }
torch::Tensor dspine_refine(DFlashDrafterImpl& drafter, const torch::Tensor& hidden,
                            const torch::Tensor& predecessor_ids) {
  return modules_of(drafter).refine(hidden, predecessor_ids);
}

std::shared_ptr<const DrafterKind> dspine_kind() { return std::make_shared<DSpineKind>(); }

}  // namespace dflow::drafter
