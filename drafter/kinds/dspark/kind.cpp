// DSpark's kind: its params on the drafter node, its heads on the drafter,
// the Markov bias and the confidence term in training, slot-by-slot
// drafting, and its speculators names.
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "drafter/kind_params.hpp"
#include "drafter/kinds/dspark/dspark.hpp"
#include "drafter/kinds/dspark/limits.hpp"
#include "drafter/kinds/registry.hpp"

namespace dflow::drafter {

// The heads as the kind registered them on one drafter.
class DSparkModules final : public KindModules {
 public:
  DSparkModules(DFlashDrafterImpl& drafter, const DraftHeads& heads);

  bool reads_previous_tokens() const override { return static_cast<bool>(markov); }
  std::optional<LogitsBias> logits_bias(const TrainedSlots& slots) override;
  std::vector<ExtraLossTerm> extra_terms(const TrainedSlots& slots, const MainLossRows& main,
                                         const nlohmann::json& options) override;
  BlockDraft draft_block(const BlockDraftInputs& in) override;
  bool predicts_acceptance() const override { return static_cast<bool>(confidence); }

  torch::Tensor confidence_logits(const torch::Tensor& hidden, const torch::Tensor& prev_embedding);

  DraftHeads heads;
  MarkovHead markov{nullptr};          // null without a Markov head
  ConfidenceHead confidence{nullptr};  // null without a confidence head
};

namespace {

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

struct DSparkParams {
  int64_t markov_rank = 256;
  std::string markov_head = "vanilla";
  bool confidence_head = true;
  bool confidence_with_markov = true;
  double confidence_alpha = 1.0;
  bool confidence_detach = false;
};

const KeySetParams<DSparkParams>& dspark_params() {
  using config::OnResume;
  static const KeySetParams<DSparkParams> params = [] {
    config::KeySet<DSparkParams> k;
    k.add("markov_rank", [](DSparkParams& p) -> auto& { return p.markov_rank; }, OnResume::must_match,
          "rank of the Markov head's low-rank logit bias (256; 1 to " + std::to_string(kMaxMarkovRank) + ")",
          [](const int64_t& r) -> std::optional<std::string> {
            constexpr int64_t most = kMaxMarkovRank;
            if (r >= 1 && r <= most) return std::nullopt;
            if (r < 1) return "must be >= 1 (the Markov head's rank), got " + std::to_string(r);
            return "must be at most " + std::to_string(most) + " (the Markov head is a low-rank bias: larger, its " +
                   "factors W1, W2 [vocabulary, rank] outweigh the drafter), got " + std::to_string(r);
          });
    k.add("markov_head", [](DSparkParams& p) -> auto& { return p.markov_head; }, OnResume::must_match,
          "the Markov head's variant: vanilla, gated or rnn", config::one_of({"vanilla", "gated", "rnn"}));
    k.add("confidence_head", [](DSparkParams& p) -> auto& { return p.confidence_head; }, OnResume::must_match,
          "a confidence head predicting each slot's acceptance (true)");
    k.add("confidence_with_markov", [](DSparkParams& p) -> auto& { return p.confidence_with_markov; },
          OnResume::must_match, "the confidence head also reads the Markov embedding of the previous token (true)");
    k.add("confidence_alpha", [](DSparkParams& p) -> auto& { return p.confidence_alpha; }, OnResume::must_match,
          "weight of the confidence head's BCE in the loss (1.0; > 0)",
          [](const double& a) -> std::optional<std::string> {
            if (a > 0.0 && std::isfinite(a)) return std::nullopt;
            return "must be > 0: a confidence head without its loss weight, got " + number_text(a);
          });
    k.add("confidence_detach", [](DSparkParams& p) -> auto& { return p.confidence_detach; }, OnResume::must_match,
          "the confidence head reads a detached copy of the hidden state and the Markov embedding, so its BCE "
          "trains the head alone (false: speculators' way, the BCE's gradient also reaches the backbone)");
    auto to_json = [](const DSparkParams& p) {
      return nlohmann::json{{"markov_rank", p.markov_rank},
                            {"markov_head", p.markov_head},
                            {"confidence_head", p.confidence_head},
                            {"confidence_with_markov", p.confidence_with_markov},
                            {"confidence_alpha", p.confidence_alpha},
                            {"confidence_detach", p.confidence_detach}};
    };
    auto cross_check = [](config::YamlSection& section, const DSparkParams& p) {
      if (!p.confidence_head && section.has("confidence_alpha"))
        throw section.error("confidence_alpha", "confidence_alpha " + number_text(p.confidence_alpha) +
                                                    " weighs the confidence head's loss, but confidence_head is false");
      if (!p.confidence_head && section.has("confidence_with_markov"))
        throw section.error("confidence_with_markov", std::string("confidence_with_markov ") +
                                                          (p.confidence_with_markov ? "true" : "false") +
                                                          " chooses the confidence head's input, but confidence_head "
                                                          "is false: leave it out, or set confidence_head: true");
      if (!p.confidence_head && section.has("confidence_detach"))
        throw section.error("confidence_detach", std::string("confidence_detach ") +
                                                     (p.confidence_detach ? "true" : "false") +
                                                     " chooses what the confidence head's loss trains, but "
                                                     "confidence_head is false: leave it out, or set "
                                                     "confidence_head: true");
    };
    return KeySetParams<DSparkParams>(std::move(k), to_json, cross_check);
  }();
  return params;
}

class DSparkKind final : public DrafterKind {
 public:
  std::string name() const override { return "dspark"; }
  std::string summary() const override {
    return "DSpark: the backbone with a Markov head (a low-rank logit bias from the previous token) and a "
           "confidence head (each slot's acceptance), speculators' defaults";
  }
  std::vector<config::KeyDoc> params() const override { return dspark_params().params(); }
  nlohmann::json read_params(config::YamlSection& params) const override { return dspark_params().read(params); }
  std::vector<std::pair<std::string, std::string>> resume_terms(const nlohmann::json& p) const override {
    // Without a confidence head its params mean nothing (and are refused when given).
    const bool confidence = p.value("confidence_head", true);
    return dspark_params().resume_terms(p, [&](const std::string& key) {
      return !confidence && (key == "confidence_alpha" || key == "confidence_with_markov" || key == "confidence_detach");
    });
  }

  nlohmann::json spec_fields(const nlohmann::json& p) const override {
    DraftHeads heads;
    heads.markov_rank = p.at("markov_rank").get<int64_t>();
    heads.markov_type = p.at("markov_head").get<std::string>();
    heads.confidence = p.at("confidence_head").get<bool>();
    heads.confidence_with_markov = heads.confidence && p.at("confidence_with_markov").get<bool>();
    return dspark_fields(heads);
  }
  void validate(const nlohmann::json& fields) const override { dspark_heads(fields).validate(); }
  std::optional<nlohmann::json> fields_from_config(const nlohmann::json& config,
                                                   const std::string& source) const override {
    bool present = false;
    for (const char* key : {"markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov"})
      present = present || (config.contains(key) && !config[key].is_null());
    if (!present) return std::nullopt;
    try {
      const DraftHeads heads = dspark_heads(config);
      heads.validate();
      if (!heads.any()) return std::nullopt;  // speculators' "no heads": plain DFlash
      return dspark_fields(heads);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("drafter config '" + source + "': " + e.what());
    }
  }
  std::string describe(const nlohmann::json& fields) const override {
    const DraftHeads heads = dspark_heads(fields);
    std::string text;
    if (heads.markov()) text = "markov_rank " + std::to_string(heads.markov_rank) + " (" + heads.markov_type + ")";
    if (heads.confidence) text += std::string(text.empty() ? "" : ", ") + "a confidence head";
    return text;
  }

  std::shared_ptr<KindModules> add_modules(DFlashDrafterImpl& drafter) const override {
    return std::make_shared<DSparkModules>(drafter, dspark_heads(drafter.spec().kind_fields));
  }
  // The Markov head is an embedding (markov_w1: a row per previous token)
  // and a projection onto the vocabulary (markov_w2), the confidence head a
  // one-logit output (confidence_head.proj: [1, n]), none a hidden matrix:
  // orthogonalising a lookup table's update would move every row, and a
  // single row's would only normalise it.
  std::vector<std::string> adamw_parameters() const override { return {"markov_w1", "markov_w2", "confidence_head"}; }
  int64_t parameter_count(const DrafterSpec& spec) const override {
    const DraftHeads heads = dspark_heads(spec.kind_fields);
    const int64_t r = heads.markov_rank, h = spec.hidden_size;
    int64_t count = 0;
    if (heads.markov()) {
      count += 2 * spec.vocab_size * r;
      if (heads.markov_type == "gated") count += (h + r) * r + r;
      if (heads.markov_type == "rnn") count += (2 * r + h) * 3 * r + 3 * r;
    }
    if (heads.confidence) count += h + (heads.confidence_with_markov ? r : 0) + 1;
    return count;
  }
  int64_t activation_floats_per_slot(const DrafterSpec& spec) const override {
    const DraftHeads heads = dspark_heads(spec.kind_fields);
    // u and W1[prev] per slot (rnn: its state and gates too), the confidence logit.
    int64_t floats = heads.markov() ? (heads.markov_type == "rnn" ? 6 : 2) * heads.markov_rank : 0;
    return floats + (heads.confidence ? 1 : 0);
  }

  std::vector<RecordTerm> record_terms(const nlohmann::json& fields) const override {
    if (!dspark_heads(fields).confidence) return {};
    return {{"confidence", "confidence_per_position"}};
  }

  std::string refuses_format(const std::string& format, const nlohmann::json& fields) const override {
    if (format != "dflash") return "";
    return "has DSpark heads (" + describe(fields) +
           "), which z-lab's DFlash layout (--format dflash, the default) cannot carry: a DFlash server would draft "
           "without them; export it with --format speculators (speculators' DSpark model, which vLLM's dspark "
           "method serves)";
  }
  // speculators' DSpark (dspark/core.py _build_base_config_kwargs("dspark", ...)).
  SpeculatorsNames speculators_names() const override { return {"DSparkSpeculator", "dspark", "dspark"}; }
};

}  // namespace

DSparkModules::DSparkModules(DFlashDrafterImpl& drafter, const DraftHeads& h) : heads(h) {
  const DrafterSpec& spec = drafter.spec();
  if (heads.markov()) markov = drafter.register_module("markov_head", MarkovHead(spec, heads));
  if (heads.confidence)
    confidence = drafter.register_module(
        "confidence_head", ConfidenceHead(spec.hidden_size + (heads.confidence_with_markov ? heads.markov_rank : 0)));
}

std::optional<LogitsBias> DSparkModules::logits_bias(const TrainedSlots& slots) {
  if (!markov) return std::nullopt;
  const torch::Tensor u = markov->block_features(slots.prev_tokens, slots.hidden);  // [K, Bs, r]
  LogitsBias bias;
  bias.features = u.reshape({-1, u.size(2)}).index_select(0, slots.rows);
  bias.weight = markov->markov_w2->weight;
  return bias;
}

std::vector<ExtraLossTerm> DSparkModules::extra_terms(const TrainedSlots& slots, const MainLossRows& main,
                                                      const nlohmann::json& options) {
  if (!confidence) return {};
  // BCE of the head's logit against the slot's acceptance rate (detached),
  // under the main loss's row weights. With confidence_detach its inputs
  // are detached too: the BCE trains the head alone.
  const bool detach = options.value("confidence_detach", false);
  torch::Tensor prev_embedding;  // [P, r]: W1 of each trained slot's previous token
  if (heads.confidence_with_markov)
    prev_embedding = markov->prev_embeddings(slots.prev_tokens.reshape({-1}).index_select(0, slots.rows));
  if (detach && prev_embedding.defined()) prev_embedding = prev_embedding.detach();
  const torch::Tensor logits = confidence_logits(detach ? slots.selected.detach() : slots.selected, prev_embedding);
  const auto reduction = main.row_loss.scalar_type();
  const torch::Tensor bce = torch::binary_cross_entropy_with_logits(
      logits.to(reduction), main.accept_rate.detach().to(reduction), {}, {}, at::Reduction::None);
  const torch::Tensor weighted_bce = bce * main.row_weights.to(reduction);
  ExtraLossTerm term;
  term.weighted_sum = weighted_bce.sum();
  term.row_terms = weighted_bce.detach();
  term.weight = options.value("confidence_alpha", 1.0);
  term.slot_values = torch::sigmoid(logits.detach().to(reduction));
  return {term};
}

torch::Tensor DSparkModules::confidence_logits(const torch::Tensor& hidden, const torch::Tensor& prev_embedding) {
  if (!confidence) throw std::invalid_argument("DSpark drafter: no confidence head (enable_confidence_head is off)");
  const auto dtype = confidence->proj->weight.scalar_type();
  if (!heads.confidence_with_markov) return confidence->forward(hidden.to(dtype));
  if (!prev_embedding.defined() || prev_embedding.dim() != hidden.dim() ||
      prev_embedding.sizes().slice(0, hidden.dim() - 1) != hidden.sizes().slice(0, hidden.dim() - 1)) {
    throw std::invalid_argument("DSpark drafter: the confidence head takes the Markov embedding too "
                                "(confidence_with_markov): need prev_embedding [..., r] beside hidden " +
                                c10::str(hidden.sizes()));
  }
  return confidence->forward(torch::cat({hidden.to(dtype), prev_embedding.to(dtype)}, -1));
}

// Without a Markov head the slots are drafted in parallel (the backbone's
// way). With one: still one backbone pass, then slot by slot, slot k's
// logits are the backbone's plus the bias W2 u_k from the token chosen at
// slot k - 1 (the bonus for slot 1); the Markov state is advanced through
// slot 0 first (previous token: the bonus), as block_features does in
// training.
BlockDraft DSparkModules::draft_block(const BlockDraftInputs& in) {
  BlockDraft out;
  const int64_t slots = in.hidden.size(0) - 1;
  std::vector<int64_t> previous;  // slot k's previous token, k = 1 .. B-1
  if (!markov) {
    out = KindModules::draft_block(in);
    previous.push_back(in.bonus_token);
    previous.insert(previous.end(), out.drafts.begin(), out.drafts.end() - 1);
  } else {
    const torch::Device head_device = markov->markov_w2->weight.device();
    auto token = [&](int64_t id) {
      return torch::full({1}, id, torch::TensorOptions().device(head_device).dtype(torch::kInt64));
    };
    MarkovState state;
    markov->step_features(token(in.bonus_token), in.hidden.narrow(0, 0, 1), state);  // slot 0: advances the rnn state only
    std::vector<torch::Tensor> rows, probability_rows;
    int64_t prev = in.bonus_token;
    for (int64_t k = 1; k <= slots; ++k) {
      previous.push_back(prev);
      const torch::Tensor u = markov->step_features(token(prev), in.hidden.narrow(0, k, 1), state);  // [1, r]
      const torch::Tensor logits = in.backbone_logits[k - 1].to(torch::kFloat32) +
                                   markov->bias(u)[0].to(in.backbone_logits.device(), torch::kFloat32);
      if (in.sampler) {
        const torch::Tensor q = in.sampler->probabilities(logits);
        prev = in.sampler->draw(q);
        probability_rows.push_back(q);
      } else {
        prev = logits.argmax().item<int64_t>();
      }
      out.drafts.push_back(prev);
      if (in.want_logits) rows.push_back(logits.to(torch::kCPU));
    }
    if (in.want_logits) out.logits = torch::stack(rows);
    if (in.sampler) out.probabilities = torch::stack(probability_rows);
  }
  if (confidence) {
    torch::Tensor prev_embedding;
    if (heads.confidence_with_markov) prev_embedding = markov->prev_embeddings(torch::tensor(previous, torch::kInt64));
    const torch::Tensor c = torch::sigmoid(confidence_logits(in.hidden.narrow(0, 1, slots), prev_embedding));
    const torch::Tensor cpu = c.to(torch::kCPU, torch::kFloat64).contiguous();
    out.predicted_accept.assign(cpu.data_ptr<double>(), cpu.data_ptr<double>() + cpu.numel());
  }
  return out;
}

DSparkModules& dspark_modules(DFlashDrafterImpl& drafter) {
  auto* modules = dynamic_cast<DSparkModules*>(&drafter.kind_modules());
  if (modules == nullptr)
    throw std::invalid_argument("drafter of kind '" + drafter.spec().kind + "' has no DSpark heads");
  return *modules;
}

MarkovHeadImpl* markov_head(DFlashDrafterImpl& drafter) {
  auto* modules = dynamic_cast<DSparkModules*>(&drafter.kind_modules());
  return modules != nullptr && modules->markov ? modules->markov.get() : nullptr;
}

ConfidenceHeadImpl* confidence_head(DFlashDrafterImpl& drafter) {
  auto* modules = dynamic_cast<DSparkModules*>(&drafter.kind_modules());
  return modules != nullptr && modules->confidence ? modules->confidence.get() : nullptr;
}

torch::Tensor confidence_logits(DFlashDrafterImpl& drafter, const torch::Tensor& hidden,
                                const torch::Tensor& prev_embedding) {
  return dspark_modules(drafter).confidence_logits(hidden, prev_embedding);
}

std::shared_ptr<const DrafterKind> dspark_kind() { return std::make_shared<DSparkKind>(); }

}  // namespace dflow::drafter
