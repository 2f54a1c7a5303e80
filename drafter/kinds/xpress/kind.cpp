// XPress's kind: its params on the drafter node, the refiner's bias on the
// teacher-forced logits, the consistency rounds and the base anchor as loss
// terms, the Jacobi passes in drafting, and speculators' names.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "drafter/kind_params.hpp"
#include "drafter/kinds/registry.hpp"
#include "drafter/kinds/xpress/xpress.hpp"

namespace dflow::drafter {

class XPressModules final : public KindModules {
 public:
  XPressModules(DFlashDrafterImpl& drafter, const XPressShape& shape);

  void reset_parameters() override;
  bool reads_previous_tokens() const override { return true; }
  std::optional<LogitsBias> logits_bias(const TrainedSlots& slots) override;
  std::vector<ExtraLossTerm> extra_terms(const TrainedSlots& slots, const MainLossRows& main,
                                         const nlohmann::json& options) override;
  BlockDraft draft_block(const BlockDraftInputs& in) override;

  XPressShape shape;
  RefinerHead refiner{nullptr};

 private:
  // The argmax of hidden [N, H] through the head plus readout(x) [N, r] (x undefined: none), chunked.
  torch::Tensor argmax_rows(const torch::Tensor& hidden, const torch::Tensor& head, const torch::Tensor& x);
};

namespace {

std::vector<int64_t> token_list(const torch::Tensor& ids) {
  const torch::Tensor cpu = ids.to(torch::kCPU, torch::kInt64).contiguous();
  return {cpu.data_ptr<int64_t>(), cpu.data_ptr<int64_t>() + cpu.numel()};
}

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

struct XPressParams {
  int64_t xpress_rank = 256;
  int64_t xpress_mlp_ratio = 2;
  int64_t num_jacobi_passes = 6;
  double consistency_weight = 0.3;
  int64_t consistency_passes = 3;
  double base_anchor_weight = 0.6;
  bool base_anchor_full_weight = false;
};

config::Check<int64_t> at_least(int64_t bound, const std::string& what) {
  return [bound, what](const int64_t& v) -> std::optional<std::string> {
    if (v >= bound) return std::nullopt;
    return "must be >= " + std::to_string(bound) + " (" + what + "), got " + std::to_string(v);
  };
}

config::Check<double> weight_check(const std::string& what) {
  return [what](const double& w) -> std::optional<std::string> {
    if (w >= 0.0 && std::isfinite(w)) return std::nullopt;
    return "must be a finite number >= 0 (" + what + "), got " + number_text(w);
  };
}

const KeySetParams<XPressParams>& xpress_params() {
  using config::OnResume;
  static const KeySetParams<XPressParams> params = [] {
    config::KeySet<XPressParams> k;
    k.add("xpress_rank", [](XPressParams& p) -> auto& { return p.xpress_rank; }, OnResume::must_match,
          "width r of the refiner: its token embedding, hidden projections, causal mixer and MLP (256)",
          at_least(1, "the refiner's width"));
    k.add("xpress_mlp_ratio", [](XPressParams& p) -> auto& { return p.xpress_mlp_ratio; }, OnResume::must_match,
          "the refiner's SwiGLU width as a multiple of xpress_rank (2, as the released XPress checkpoints)",
          at_least(1, "the MLP's expansion"));
    k.add("num_jacobi_passes", [](XPressParams& p) -> auto& { return p.num_jacobi_passes; }, OnResume::must_match,
          "parallel refine passes that draft a block in dflow eval and the serving engine (6; 0: the backbone's "
          "argmax)",
          at_least(0, "refine passes"));
    k.add("consistency_weight", [](XPressParams& p) -> auto& { return p.consistency_weight; }, OnResume::must_match,
          "weight of the consistency rounds' mean loss (0.3; 0 leaves them out)", weight_check("the rounds' weight"));
    k.add("consistency_passes", [](XPressParams& p) -> auto& { return p.consistency_passes; }, OnResume::must_match,
          "consistency rounds per step, each fed the previous round's argmax as the previous tokens (3)",
          at_least(0, "rounds"));
    k.add("base_anchor_weight", [](XPressParams& p) -> auto& { return p.base_anchor_weight; }, OnResume::must_match,
          "weight of the loss on the backbone's own logits, which keeps the passes' seed good (0.6; 0 leaves it out)",
          weight_check("the base anchor's weight"));
    k.add("base_anchor_full_weight", [](XPressParams& p) -> auto& { return p.base_anchor_full_weight; },
          OnResume::must_match,
          "the base anchor weighs every slot 1 instead of by the loss's position weights (false)");
    auto to_json = [](const XPressParams& p) {
      return nlohmann::json{{"xpress_rank", p.xpress_rank},
                            {"xpress_mlp_ratio", p.xpress_mlp_ratio},
                            {"num_jacobi_passes", p.num_jacobi_passes},
                            {"consistency_weight", p.consistency_weight},
                            {"consistency_passes", p.consistency_passes},
                            {"base_anchor_weight", p.base_anchor_weight},
                            {"base_anchor_full_weight", p.base_anchor_full_weight}};
    };
    return KeySetParams<XPressParams>(std::move(k), to_json);
  }();
  return params;
}

// Rows of logits computed at once for the rounds' argmax (as the main
// loss's chunks: no [slots, vocabulary] matrix for the whole batch).
constexpr int64_t kMaxLogitsPerChunk = kKindLogitsPerChunk;  // as the memory fit counts them

class XPressKind final : public DrafterKind {
 public:
  std::string name() const override { return "xpress"; }
  std::string summary() const override {
    return "XPress: the backbone with a causal low-rank refiner biasing each slot's logits from the previous token, "
           "trained teacher-forced with consistency rounds and a base anchor, drafting in Jacobi passes";
  }
  std::vector<config::KeyDoc> params() const override { return xpress_params().params(); }
  nlohmann::json read_params(config::YamlSection& params) const override { return xpress_params().read(params); }
  std::vector<std::pair<std::string, std::string>> resume_terms(const nlohmann::json& p) const override {
    return xpress_params().resume_terms(p);
  }

  nlohmann::json spec_fields(const nlohmann::json& p) const override { return xpress_fields(xpress_shape(p)); }
  void validate(const nlohmann::json& fields) const override { xpress_shape(fields).validate(); }
  std::optional<nlohmann::json> fields_from_config(const nlohmann::json& config,
                                                   const std::string& source) const override {
    if (!config.contains("xpress_rank") || config["xpress_rank"].is_null()) return std::nullopt;
    try {
      const XPressShape shape = xpress_shape(config);
      shape.validate();
      return xpress_fields(shape);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("drafter config '" + source + "': " + e.what());
    }
  }
  std::string describe(const nlohmann::json& fields) const override {
    const XPressShape s = xpress_shape(fields);
    return "a rank-" + std::to_string(s.xpress_rank) + " causal refiner (MLP x" + std::to_string(s.xpress_mlp_ratio) +
           ") drafting in " + std::to_string(s.num_jacobi_passes) + " Jacobi passes";
  }

  std::shared_ptr<KindModules> add_modules(DFlashDrafterImpl& drafter) const override {
    const XPressShape shape = xpress_shape(drafter.spec().kind_fields);
    try {
      shape.validate();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("XPress drafter: ") + e.what());
    }
    return std::make_shared<XPressModules>(drafter, shape);
  }
  // A lookup table (a row per token) and a vocabulary projection.
  std::vector<std::string> adamw_parameters() const override {
    return {"refiner_head.token_embed", "refiner_head.readout"};
  }
  int64_t parameter_count(const DrafterSpec& spec) const override {
    const XPressShape s = xpress_shape(spec.kind_fields);
    const int64_t r = s.xpress_rank, m = r * s.xpress_mlp_ratio, b = spec.block_size;
    return 2 * spec.vocab_size * r + 2 * spec.hidden_size * r + 3 * r * r + r * b * b + 3 * r * m;
  }
  int64_t activation_floats_per_slot(const DrafterSpec& spec) const override {
    const XPressShape s = xpress_shape(spec.kind_fields);
    const int64_t r = s.xpress_rank, m = r * s.xpress_mlp_ratio;
    // The shared hidden cache, then the teacher-forced pass: the embedding,
    // the fused input, the mixed and residual features, the MLP's gate,
    // activation, up and product, its output. The consistency rounds are
    // loss_memory's (their count is a param).
    return 2 * r + (7 * r + 4 * m);
  }
  KindLossMemory loss_memory(const DrafterSpec& spec, const nlohmann::json& options) const override {
    const XPressShape s = xpress_shape(spec.kind_fields);
    const int64_t r = s.xpress_rank, m = r * s.xpress_mlp_ratio;
    const XPressParams defaults;
    const int64_t passes = options.value("consistency_weight", defaults.consistency_weight) > 0.0
                               ? options.value("consistency_passes", defaults.consistency_passes)
                               : 0;
    KindLossMemory out;
    // Each consistency round: a pass of the refiner (as the teacher-forced
    // one) and a loss call with its bias; the base anchor term: one more
    // call, on the backbone's logits alone.
    out.floats_per_slot = passes * (7 * r + 4 * m);
    out.extra_loss_calls = passes + (options.value("base_anchor_weight", defaults.base_anchor_weight) > 0.0 ? 1 : 0);
    out.biased_loss_calls = passes;
    out.bias_rank = r;
    // argmax_rows between rounds: the head's logits, the readout's and their sum.
    out.logit_chunk_buffers = passes > 1 ? 3 : 0;
    return out;
  }

  std::vector<RecordTerm> record_terms(const nlohmann::json&) const override {
    return {{"consistency", ""}, {"base_anchor", "base_accept_rate_per_position"}};
  }

  std::string refuses_format(const std::string& format, const nlohmann::json& fields) const override {
    if (format != "dflash") return "";
    return "has XPress's refiner (" + describe(fields) +
           "), which z-lab's DFlash layout (--format dflash, the default) cannot carry: a DFlash server would draft "
           "without it; export it with --format speculators (speculators' XPress model)";
  }
  // speculators' XPress (xpress/config.py, _build_base_config_kwargs("xpress", ...)).
  SpeculatorsNames speculators_names() const override { return {"XPressSpeculator", "xpress", "xpress"}; }
};

}  // namespace

// The refiner is registered on the drafter as refiner_head (speculators' name).
XPressModules::XPressModules(DFlashDrafterImpl& drafter, const XPressShape& s) : shape(s) {
  const DrafterSpec& spec = drafter.spec();
  refiner = drafter.register_module("refiner_head",
                                    RefinerHead(spec.vocab_size, spec.hidden_size, spec.block_size, shape));
}

// As speculators: the mixer starts at zero (the rest at normal(0, 0.02),
// as the drafter draws it).
void XPressModules::reset_parameters() {
  torch::NoGradGuard no_grad;
  refiner->mix_l.zero_();
}

// The teacher-forced pass: the data's previous tokens (prev_tokens from
// slot 1 on, the token before the anchor at slot 0).
std::optional<LogitsBias> XPressModules::logits_bias(const TrainedSlots& slots) {
  const int64_t block = slots.prev_tokens.size(1);
  const torch::Tensor prev =
      torch::cat({slots.before_anchor.reshape({-1, 1}), slots.prev_tokens.narrow(1, 1, block - 1)}, 1);
  const torch::Tensor x = refiner->features(prev, refiner->hidden_cache(slots.hidden));  // [K, Bs, r]
  return LogitsBias{x.reshape({-1, x.size(2)}).index_select(0, slots.rows), refiner->readout->weight};
}

torch::Tensor XPressModules::argmax_rows(const torch::Tensor& hidden, const torch::Tensor& head,
                                         const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  const int64_t rows = hidden.size(0);
  torch::Tensor out = torch::empty({rows}, hidden.options().dtype(torch::kInt64));
  const int64_t chunk = std::max<int64_t>(1, kMaxLogitsPerChunk / std::max<int64_t>(1, head.size(0)));
  for (int64_t begin = 0; begin < rows; begin += chunk) {
    const int64_t n = std::min(chunk, rows - begin);
    torch::Tensor logits = torch::matmul(hidden.narrow(0, begin, n).to(head.scalar_type()), head.t());
    if (x.defined()) logits = logits + refiner->readout->forward(x.narrow(0, begin, n)).to(logits.scalar_type());
    out.narrow(0, begin, n).copy_(logits.argmax(-1));
  }
  return out;
}

// speculators' XPress loss after the teacher-forced one (the main loss):
// consistency_weight times the mean over consistency_passes rounds of the
// same loss on the refined logits, each round's previous tokens the argmax
// of the round before (the first: of the backbone's logits; slot 0 keeps
// the anchor), no gradient through the argmax; base_anchor_weight times the
// same loss on the backbone's own logits (under weight 1 per slot with
// base_anchor_full_weight).
std::vector<ExtraLossTerm> XPressModules::extra_terms(const TrainedSlots& slots, const MainLossRows& main,
                                                      const nlohmann::json& options) {
  const double consistency_weight = options.value("consistency_weight", 0.3);
  const int64_t passes = options.value("consistency_passes", int64_t{3});
  const double anchor_weight = options.value("base_anchor_weight", 0.6);
  const bool anchor_full_weight = options.value("base_anchor_full_weight", false);
  const auto reduction = main.row_loss.scalar_type();
  const torch::Tensor zero = (slots.selected.sum() * 0).to(reduction);  // still back-propagates
  ExtraLossTerm consistency{zero, torch::zeros_like(main.row_loss), consistency_weight, {}};
  ExtraLossTerm anchor{zero, torch::zeros_like(main.row_loss), anchor_weight, {}};
  if (slots.rows.size(0) == 0) return {consistency, anchor};

  if (consistency_weight > 0.0 && passes > 0) {
    const int64_t blocks = slots.hidden.size(0), block = slots.hidden.size(1), r = shape.xpress_rank;
    const torch::Tensor flat_hidden = slots.hidden.reshape({blocks * block, -1});
    const torch::Tensor cache = refiner->hidden_cache(slots.hidden);
    const torch::Tensor anchor_tokens = slots.prev_tokens.select(1, 0);  // slot 0's previous position is the anchor
    torch::Tensor pred = argmax_rows(flat_hidden, slots.head, {}).view({blocks, block});
    torch::Tensor sum = zero, row_sum = torch::zeros_like(main.row_loss);
    for (int64_t round = 0; round < passes; ++round) {
      pred.select(1, 0).copy_(anchor_tokens);
      const torch::Tensor x = refiner->features(
          torch::cat({slots.before_anchor.reshape({-1, 1}), pred.narrow(1, 0, block - 1)}, 1), cache);
      const torch::Tensor flat_x = x.reshape({-1, r});
      const LogitsBias bias{flat_x.index_select(0, slots.rows), refiner->readout->weight};
      const ChunkedDraftLossResult result = slots.loss(&bias, true);
      sum = sum + result.weighted_loss_sum.to(reduction);
      row_sum = row_sum + result.row_weighted_loss.to(reduction);
      if (round + 1 < passes) pred = argmax_rows(flat_hidden, slots.head, flat_x.detach()).view({blocks, block});
    }
    consistency.weighted_sum = sum / static_cast<double>(passes);
    consistency.row_terms = (row_sum / static_cast<double>(passes)).detach();
  }
  if (anchor_weight > 0.0) {
    const ChunkedDraftLossResult result = slots.loss(nullptr, !anchor_full_weight);
    anchor.weighted_sum = result.weighted_loss_sum.to(reduction);
    anchor.row_terms = result.row_weighted_loss.to(reduction).detach();
    anchor.slot_values = result.accept_rate;  // the backbone's own acceptance: the passes' seed
  }
  return {consistency, anchor};
}

// speculators' Jacobi recurrence (its consistency rounds, as vLLM drafts
// XPress): the seed is the backbone's argmax at each slot; each pass feeds
// every slot the token the pass before chose at the slot before (slot 1:
// the bonus; slot 0: the committed token before it) and takes the refined
// argmax; num_jacobi_passes passes. Sampling draws each slot from the last
// pass's refined logits at the temperature.
BlockDraft XPressModules::draft_block(const BlockDraftInputs& in) {
  BlockDraft out;
  const int64_t slots = in.hidden.size(0) - 1;
  const torch::Device device = refiner->mix_l.device();
  const auto long_options = torch::TensorOptions().device(device).dtype(torch::kInt64);
  const torch::Tensor backbone = in.backbone_logits.to(device, torch::kFloat32);  // [B-1, V]
  const torch::Tensor cache = refiner->hidden_cache(in.hidden.to(device).unsqueeze(0));
  const torch::Tensor before = torch::full({1}, in.previous_token, long_options);
  torch::Tensor tokens = torch::cat({torch::full({1}, in.bonus_token, long_options), backbone.argmax(-1)});  // [B]
  torch::Tensor refined = backbone;
  for (int64_t pass = 0; pass < shape.num_jacobi_passes; ++pass) {
    const torch::Tensor prev = torch::cat({before, tokens.narrow(0, 0, slots)}).unsqueeze(0);
    const torch::Tensor x = refiner->features(prev, cache)[0].narrow(0, 1, slots);  // [B-1, r]
    refined = backbone + refiner->readout->forward(x).to(torch::kFloat32);
    tokens = torch::cat({tokens.narrow(0, 0, 1), refined.argmax(-1)});
  }
  if (in.want_logits || in.sampler) out.logits = refined.to(torch::kCPU);
  if (in.sampler) {
    out.probabilities = in.sampler->probabilities(out.logits);
    out.drafts = in.sampler->draw_rows(out.probabilities);
  } else {
    out.drafts = token_list(tokens.narrow(0, 1, slots));
  }
  return out;
}

RefinerHeadImpl& refiner_head(DFlashDrafterImpl& drafter) {
  auto* modules = dynamic_cast<XPressModules*>(&drafter.kind_modules());
  if (modules == nullptr)
    throw std::invalid_argument("drafter of kind '" + drafter.spec().kind + "' has no XPress refiner");
  return *modules->refiner;
}

std::shared_ptr<const DrafterKind> xpress_kind() { return std::make_shared<XPressKind>(); }

}  // namespace dflow::drafter
