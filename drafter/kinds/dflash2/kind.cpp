// DFlash2's kind: its params on the drafter node, its convolutions around
// every draft sublayer, the selector's K-way loss in training, the
// selector's reranking in drafting, and speculators' names.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "drafter/kind_params.hpp"
#include "drafter/kinds/dflash2/dflash2.hpp"
#include "drafter/kinds/registry.hpp"
#include "drafter/learning_rate_scale.hpp"
#include "drafter/rerank_draft.hpp"

namespace dflow::drafter {

class DFlash2Modules final : public KindModules {
 public:
  DFlash2Modules(DFlashDrafterImpl& drafter, const DFlash2Shape& shape);

  torch::Tensor sublayer(int64_t layer, DraftSublayer which, const torch::Tensor& x,
                         const std::function<torch::Tensor(const torch::Tensor&)>& run) override;
  void reset_parameters() override;
  bool reads_previous_tokens() const override { return true; }
  std::vector<ExtraLossTerm> extra_terms(const TrainedSlots& slots, const MainLossRows& main,
                                         const nlohmann::json& options) override;
  BlockDraft draft_block(const BlockDraftInputs& in) override;

  DFlash2Shape shape;
  std::vector<GroupedDynamicConv> attention_convs, mlp_convs;
  CandidateSelector selector{nullptr};
};

namespace {

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

struct DFlash2Params {
  int64_t conv_kernel_size = 2;
  int64_t conv_group_size = 16;
  int64_t selector_rank = 256;
  int64_t selector_top_k = 16;
  bool sliding_window_non_causal = true;
  double selector_loss_alpha = 1.0;
};

config::Check<int64_t> at_least_one(const std::string& what) {
  return [what](const int64_t& v) -> std::optional<std::string> {
    if (v >= 1) return std::nullopt;
    return "must be >= 1 (" + what + "), got " + std::to_string(v);
  };
}

const KeySetParams<DFlash2Params>& dflash2_params() {
  using config::OnResume;
  static const KeySetParams<DFlash2Params> params = [] {
    config::KeySet<DFlash2Params> k;
    k.add("conv_kernel_size", [](DFlash2Params& p) -> auto& { return p.conv_kernel_size; }, OnResume::must_match,
          "causal taps of each local dynamic convolution around attention and MLP (2; 1 to block_size)",
          at_least_one("the convolution's taps"));
    k.add("conv_group_size", [](DFlash2Params& p) -> auto& { return p.conv_group_size; }, OnResume::must_match,
          "hidden channels sharing each dynamic kernel (16; divides the hidden size)",
          at_least_one("channels per kernel"));
    k.add("selector_rank", [](DFlash2Params& p) -> auto& { return p.selector_rank; }, OnResume::must_match,
          "rank of the candidate selector's codebooks (256)", at_least_one("the selector's rank"));
    k.add("selector_top_k", [](DFlash2Params& p) -> auto& { return p.selector_top_k; }, OnResume::must_match,
          "unary candidates the selector reranks at each slot (16; at most the vocabulary)",
          at_least_one("candidates per slot"));
    k.add("sliding_window_non_causal", [](DFlash2Params& p) -> auto& { return p.sliding_window_non_causal; },
          OnResume::must_match,
          "draft blocks attend bidirectionally in sliding layers too (true; dflow's blocks are always whole)",
          [](const bool& v) -> std::optional<std::string> {
            if (v) return std::nullopt;
            return "false (causal blocks in sliding layers) is not what dflow trains or drafts: its blocks are whole "
                   "in every layer; leave it out or set true";
          });
    k.add("selector_loss_alpha", [](DFlash2Params& p) -> auto& { return p.selector_loss_alpha; },
          OnResume::must_match, "weight of the selector's K-way cross-entropy in the loss (1.0; >= 0)",
          [](const double& a) -> std::optional<std::string> {
            if (a >= 0.0 && std::isfinite(a)) return std::nullopt;
            return "must be a finite number >= 0 (the selector loss's weight), got " + number_text(a);
          });
    auto to_json = [](const DFlash2Params& p) {
      return nlohmann::json{{"conv_kernel_size", p.conv_kernel_size},
                            {"conv_group_size", p.conv_group_size},
                            {"selector_rank", p.selector_rank},
                            {"selector_top_k", p.selector_top_k},
                            {"sliding_window_non_causal", p.sliding_window_non_causal},
                            {"selector_loss_alpha", p.selector_loss_alpha}};
    };
    return KeySetParams<DFlash2Params>(std::move(k), to_json);
  }();
  return params;
}

// Rows of logits computed at once for the selector's candidates (as the
// main loss's chunks: no [rows, vocabulary] matrix for all trained slots).
constexpr int64_t kMaxLogitsPerChunk = kKindLogitsPerChunk;  // as the memory fit counts them

class DFlash2Kind final : public DrafterKind {
 public:
  std::string name() const override { return "dflash2"; }
  std::string summary() const override {
    return "DFlash2: the backbone with local dynamic convolutions around each draft layer's attention and MLP and a "
           "bilinear selector reranking the top-k candidates from the previous token, speculators' defaults";
  }
  std::vector<config::KeyDoc> params() const override { return dflash2_params().params(); }
  nlohmann::json read_params(config::YamlSection& params) const override { return dflash2_params().read(params); }
  std::vector<std::pair<std::string, std::string>> resume_terms(const nlohmann::json& p) const override {
    return dflash2_params().resume_terms(p);
  }

  nlohmann::json spec_fields(const nlohmann::json& p) const override { return dflash2_fields(dflash2_shape(p)); }
  void validate(const nlohmann::json& fields) const override { dflash2_shape(fields).validate(); }
  std::optional<nlohmann::json> fields_from_config(const nlohmann::json& config,
                                                   const std::string& source) const override {
    bool present = false;
    for (const char* key : {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"})
      present = present || (config.contains(key) && !config[key].is_null());
    if (!present) return std::nullopt;
    try {
      const DFlash2Shape shape = dflash2_shape(config);
      shape.validate();
      return dflash2_fields(shape);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("drafter config '" + source + "': " + e.what());
    }
  }
  std::string describe(const nlohmann::json& fields) const override {
    const DFlash2Shape s = dflash2_shape(fields);
    return "convolutions of " + std::to_string(s.conv_kernel_size) + " taps over groups of " +
           std::to_string(s.conv_group_size) + " channels, a rank-" + std::to_string(s.selector_rank) +
           " selector over the top " + std::to_string(s.selector_top_k);
  }

  std::shared_ptr<KindModules> add_modules(DFlashDrafterImpl& drafter) const override {
    const DFlash2Shape shape = dflash2_shape(drafter.spec().kind_fields);
    try {
      shape.validate_for(drafter.spec());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("DFlash2 drafter: ") + e.what());
    }
    return std::make_shared<DFlash2Modules>(drafter, shape);
  }
  // The codebooks are lookup tables (a row per token): orthogonalising
  // their update would move every row.
  std::vector<std::string> adamw_parameters() const override {
    return {"candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook"};
  }
  int64_t parameter_count(const DrafterSpec& spec) const override {
    const DFlash2Shape s = dflash2_shape(spec.kind_fields);
    const int64_t h = spec.hidden_size, k = s.conv_kernel_size, groups = h / s.conv_group_size;
    const int64_t per_conv = 2 * k * h + 2 * k * groups * h;
    return spec.num_layers * 2 * per_conv + 2 * spec.vocab_size * s.selector_rank + h * s.selector_rank;
  }
  int64_t activation_floats_per_slot(const DrafterSpec& spec) const override {
    const DFlash2Shape s = dflash2_shape(spec.kind_fields);
    const int64_t h = spec.hidden_size, k = s.conv_kernel_size, groups = h / s.conv_group_size;
    const int64_t r = s.selector_rank, top = s.selector_top_k;
    // Per convolution: its kernels, each tap's product and the two outputs;
    // the selector: the candidates' LM-head rows and codebook rows, the
    // context and the scores.
    const int64_t per_conv = 2 * k * groups + 2 * (k + 1) * h;
    return spec.num_layers * 2 * per_conv + top * (h + r) + 3 * r + 2 * top;
  }
  // The selector's chunks of logits: the head's product for the top-k and the teacher's for its argmax.
  KindLossMemory loss_memory(const DrafterSpec&, const nlohmann::json&) const override {
    KindLossMemory out;
    out.logit_chunk_buffers = 2;
    return out;
  }

  std::vector<RecordTerm> record_terms(const nlohmann::json&) const override { return {{"selector", ""}}; }

  std::string refuses_format(const std::string& format, const nlohmann::json& fields) const override {
    if (format != "dflash") return "";
    return "has DFlash2's convolutions and candidate selector (" + describe(fields) +
           "), which z-lab's DFlash layout (--format dflash, the default) cannot carry: a DFlash server would draft "
           "without them; export it with --format speculators (speculators' DFlash2DraftModel, which vLLM's dflash "
           "method serves)";
  }
  // speculators' DFlash2 (dflash2/core.py _build_base_config_kwargs("dflash2", ...)).
  SpeculatorsNames speculators_names() const override { return {"DFlash2DraftModel", "dflash2", "dflash2"}; }
};

}  // namespace

// The convolutions are registered on each layer (layers.<i>.attention_conv,
// layers.<i>.mlp_conv: speculators' names, recomputed with the layer), the
// selector on the drafter (candidate_selector).
DFlash2Modules::DFlash2Modules(DFlashDrafterImpl& drafter, const DFlash2Shape& s) : shape(s) {
  const DrafterSpec& spec = drafter.spec();
  for (size_t i = 0; i < drafter.layers->size(); ++i) {
    auto& layer = *drafter.layers->ptr<DraftLayerImpl>(i);
    attention_convs.push_back(
        layer.register_module("attention_conv", GroupedDynamicConv(spec.hidden_size, spec.block_size, shape)));
    mlp_convs.push_back(
        layer.register_module("mlp_conv", GroupedDynamicConv(spec.hidden_size, spec.block_size, shape)));
  }
  selector = drafter.register_module("candidate_selector",
                                     CandidateSelector(spec.vocab_size, spec.hidden_size, shape.selector_rank));
}

torch::Tensor DFlash2Modules::sublayer(int64_t layer, DraftSublayer which, const torch::Tensor& x,
                                       const std::function<torch::Tensor(const torch::Tensor&)>& run) {
  GroupedDynamicConvImpl& conv =
      *(which == DraftSublayer::attention ? attention_convs : mlp_convs).at(static_cast<size_t>(layer));
  const auto [prepared, output_kernel] = conv.prepare(x);
  return conv.finish(run(prepared), output_kernel);
}

// As speculators' reset_convolutions: each convolution starts as the
// identity, so a fresh DFlash2 drafter computes what DFlash would.
void DFlash2Modules::reset_parameters() {
  for (auto& conv : attention_convs) conv->reset();
  for (auto& conv : mlp_convs) conv->reset();
}

// speculators' selector loss: at each trained slot the unary top-k of the
// drafter's own logits, the target (the teacher's argmax, or the data's
// token without a teacher) put in place of the weakest candidate when
// absent, and the cross-entropy of the selector's scores over those K
// against it, under the main loss's row weights.
std::vector<ExtraLossTerm> DFlash2Modules::extra_terms(const TrainedSlots& slots, const MainLossRows& main,
                                                       const nlohmann::json& options) {
  const torch::Tensor& hidden = slots.selected;  // [P, H]
  const int64_t rows = hidden.size(0), top = shape.selector_top_k;
  const auto reduction = main.row_loss.scalar_type();
  ExtraLossTerm term;
  term.weight = options.value("selector_loss_alpha", 1.0);
  if (rows == 0) {  // no trained slot: a zero that still back-propagates
    term.weighted_sum = (hidden.sum() * 0).to(reduction);
    term.row_terms = main.row_loss.detach();
    return {term};
  }
  const torch::Tensor head = slots.head.to(hidden.scalar_type());
  torch::Tensor candidates = torch::empty({rows, top}, hidden.options().dtype(torch::kInt64));
  torch::Tensor target = slots.labels.to(hidden.device(), torch::kInt64).clone();
  {
    torch::NoGradGuard no_grad;
    const int64_t chunk = std::max<int64_t>(1, kMaxLogitsPerChunk / std::max<int64_t>(1, head.size(0)));
    for (int64_t begin = 0; begin < rows; begin += chunk) {
      const int64_t n = std::min(chunk, rows - begin);
      const torch::Tensor logits = torch::matmul(hidden.narrow(0, begin, n).detach(), head.t());
      candidates.narrow(0, begin, n).copy_(std::get<1>(logits.topk(top, -1)));
      if (slots.teacher.defined())
        target.narrow(0, begin, n).copy_(torch::matmul(slots.teacher.narrow(0, begin, n).to(head.scalar_type()),
                                                       head.t()).argmax(-1));
    }
  }
  const torch::Tensor matches = candidates.eq(target.unsqueeze(1));
  const torch::Tensor contains = matches.any(1);
  const torch::Tensor position = torch::where(contains, matches.to(torch::kInt64).argmax(1),
                                              torch::full_like(target, top - 1));
  candidates.select(1, top - 1).copy_(torch::where(contains, candidates.select(1, top - 1), target));
  // The candidates' unary logits, through the frozen head (differentiable in the hidden state).
  const torch::Tensor candidate_rows = head.index_select(0, candidates.reshape({-1})).view({rows, top, -1});
  const torch::Tensor unary = torch::bmm(candidate_rows, hidden.unsqueeze(-1)).squeeze(-1);  // [P, K]
  const torch::Tensor prev = slots.prev_tokens.reshape({-1}).index_select(0, slots.rows);
  const torch::Tensor scores = selector->scores(unary, hidden, prev, candidates);
  const torch::Tensor ce =
      torch::nn::functional::cross_entropy(scores.to(reduction), position,
                                           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  const torch::Tensor weighted = ce * main.row_weights.to(reduction);
  term.weighted_sum = weighted.sum();
  term.row_terms = weighted.detach();
  return {term};
}

// The selector's reranking as z-lab's DFlash2 drafts (drafter/rerank_draft.hpp).
BlockDraft DFlash2Modules::draft_block(const BlockDraftInputs& in) {
  const torch::Device device = selector->predecessor_codebook.device();
  const auto dtype = selector->predecessor_codebook.scalar_type();
  return draft_by_reranking(in, shape.selector_top_k, device,
                            [&](int64_t slot, int64_t previous, const torch::Tensor& candidates) {
                              const torch::Tensor unary =
                                  in.backbone_logits[slot - 1].to(device, torch::kFloat32).index_select(0, candidates);
                              return selector->scores(
                                  unary.unsqueeze(0), in.hidden.narrow(0, slot, 1).to(device, dtype),
                                  torch::full({1}, previous, torch::TensorOptions().device(device).dtype(torch::kInt64)),
                                  candidates.unsqueeze(0))[0];  // [K]
                            });
}

namespace {

DFlash2Modules& modules_of(DFlashDrafterImpl& drafter) {
  auto* modules = dynamic_cast<DFlash2Modules*>(&drafter.kind_modules());
  if (modules == nullptr)
    throw std::invalid_argument("drafter of kind '" + drafter.spec().kind + "' has no DFlash2 modules");
  return *modules;
}

}  // namespace

CandidateSelectorImpl& candidate_selector(DFlashDrafterImpl& drafter) { return *modules_of(drafter).selector; }

GroupedDynamicConvImpl& sublayer_conv(DFlashDrafterImpl& drafter, int64_t layer, bool attention) {
  DFlash2Modules& m = modules_of(drafter);
  return *(attention ? m.attention_convs : m.mlp_convs).at(static_cast<size_t>(layer));
}

// drafter/learning_rate_scale.hpp: the convolutions' kernel projections
// step at lr / hidden size. A dynamic kernel is the projection of a whole
// normed hidden state, so a step that moves every weight by ~lr (Adam's
// first steps, Muon's) moves the kernel by ~lr x hidden where the inputs
// agree (every mask slot of a block feeds layer 0 the same one), and the
// kernel multiplies the sublayer it wraps (the MLP's input: more than
// linearly there). At the demo's lr 2e-2 that took the kernels from 0 to
// tens within ten steps and the residual stream to ~1e4 (speculators' own
// DFlash2DraftModel and trainer too): the final norm then left nothing on
// the LM head's dims and the draft logits flat. At lr / hidden a kernel
// moves about as fast as its base kernel (lr a step).
double learning_rate_scale(const std::string& name, const torch::Tensor& param) {
  if (name.find("_conv.kernel_projection") == std::string::npos || param.dim() != 2) return 1.0;
  return 1.0 / static_cast<double>(param.size(1));
}

std::shared_ptr<const DrafterKind> dflash2_kind() { return std::make_shared<DFlash2Kind>(); }

}  // namespace dflow::drafter
