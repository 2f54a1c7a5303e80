// drafter_step: forward and backward of one micro-batch under the DFlash
// objective. Fires only with the model token (invariant 1), which carries the
// trainable state: the drafter is reached through it alone, and it travels on
// inside the MicroStats. Gradients of sum(w * CE) accumulate in the
// parameters; optimizer_step divides by the step's total weight, so a step's
// loss is sum(w * CE) / sum(w) over all of its micro-batches exactly.
// The objective's position weighting is the node's choice (params:
// objective: decay, the 2025 recipe with train.loss_decay_gamma, or dpace
// with alpha), and a resume must keep it. params.recompute recomputes each
// draft layer's activations in backward (same math, less memory, one more
// forward), so a resume may change it; at start the node says whether the
// configured micro-batches fit the drafter device's memory
// (model/drafter_memory.hpp) and the largest anchors_per_sequence that would.
// Rows of samples quarantined during this invocation are dropped here (the
// loader drops those known at the start): the live set only changes under
// the model token, which this node holds, so the run stays deterministic.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "config/errors.hpp"
#include "model/dspark_limits.hpp"
#include "model/objective.hpp"
#include "nodes/drafter_memory_fit.hpp"
#include "nodes/exclude_samples.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_params.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {


namespace {

// params: the objective's position weighting, activation recomputation,
// the DSpark heads and the distillation loss.
struct ObjectiveParams {
  std::string objective = "decay";
  double alpha = 0.5;
  bool recompute = false;
  // DSpark heads (README "DSpark heads and distillation"): head: dspark turns
  // them on with speculators' defaults; the other keys need head: dspark.
  std::string head = "dflash";
  int64_t markov_rank = 256;
  std::string markov_head = "vanilla";
  bool confidence_head = true;
  bool confidence_with_markov = true;
  double confidence_alpha = 1.0;
  std::string loss = "ce";
  double kl_temperature = 1.0;
};

// The keys that only a DSpark drafter takes.
const std::vector<std::string>& head_keys() {
  static const std::vector<std::string> keys{"markov_rank", "markov_head", "confidence_head", "confidence_with_markov",
                                             "confidence_alpha"};
  return keys;
}

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

const config::KeySet<ObjectiveParams>& objective_keys() {
  using config::OnResume;
  static const config::KeySet<ObjectiveParams> keys = [] {
    config::KeySet<ObjectiveParams> k;
    k.add("objective", [](ObjectiveParams& p) -> auto& { return p.objective; }, OnResume::must_match,
          "position weights: decay (exp(-(k-1)/train.loss_decay_gamma)) or dpace (D-PACE)",
          config::one_of({"decay", "dpace"}));
    k.add("alpha", [](ObjectiveParams& p) -> auto& { return p.alpha; }, OnResume::must_match,
          "D-PACE smoothing: q~ = (1 - alpha) q + alpha",
          config::must<double>([](double a) { return a > 0.0 && a <= 1.0; }, "must lie in (0, 1] (0.5 by default)"));
    k.add("recompute", [](ObjectiveParams& p) -> auto& { return p.recompute; }, OnResume::may_change,
          "recompute each draft layer's activations in backward: same gradients, activation memory of about one "
          "layer instead of all, a slower backward");
    k.add("head", [](ObjectiveParams& p) -> auto& { return p.head; }, OnResume::must_match,
          "dflash (the backbone alone) or dspark (adds the Markov and confidence heads, speculators' defaults)",
          config::one_of({"dflash", "dspark"}));
    k.add("markov_rank", [](ObjectiveParams& p) -> auto& { return p.markov_rank; }, OnResume::must_match,
          "dspark: rank of the Markov head's low-rank logit bias (256; 1 to " +
              std::to_string(model::kMaxMarkovRank) + ")",
          [](const int64_t& r) -> std::optional<std::string> {
            constexpr int64_t most = model::kMaxMarkovRank;
            if (r >= 1 && r <= most) return std::nullopt;
            if (r < 1) return "must be >= 1 (the Markov head's rank), got " + std::to_string(r);
            return "must be at most " + std::to_string(most) + " (the Markov head is a low-rank bias: larger, its " +
                   "factors W1, W2 [vocabulary, rank] outweigh the drafter), got " + std::to_string(r);
          });
    k.add("markov_head", [](ObjectiveParams& p) -> auto& { return p.markov_head; }, OnResume::must_match,
          "dspark: the Markov head's variant: vanilla, gated or rnn", config::one_of({"vanilla", "gated", "rnn"}));
    k.add("confidence_head", [](ObjectiveParams& p) -> auto& { return p.confidence_head; }, OnResume::must_match,
          "dspark: a confidence head predicting each slot's acceptance (true)");
    k.add("confidence_with_markov", [](ObjectiveParams& p) -> auto& { return p.confidence_with_markov; },
          OnResume::must_match, "dspark: the confidence head also reads the Markov embedding of the previous token (true)");
    k.add("confidence_alpha", [](ObjectiveParams& p) -> auto& { return p.confidence_alpha; }, OnResume::must_match,
          "dspark: weight of the confidence head's BCE in the loss (1.0; > 0)",
          [](const double& a) -> std::optional<std::string> {
            if (a > 0.0 && std::isfinite(a)) return std::nullopt;
            return "must be > 0: a confidence head without its loss weight, got " + number_text(a);
          });
    k.add("loss", [](ObjectiveParams& p) -> auto& { return p.loss; }, OnResume::must_match,
          "ce (cross-entropy on the data's tokens) or kl (distillation on the target's own distribution)",
          config::one_of({"ce", "kl"}));
    k.add("kl_temperature", [](ObjectiveParams& p) -> auto& { return p.kl_temperature; }, OnResume::must_match,
          "kl: both distributions at this temperature (1.0; >= " + number_text(model::kMinKlTemperature) + ")",
          [](const double& t) -> std::optional<std::string> {
            if (t >= model::kMinKlTemperature && std::isfinite(t)) return std::nullopt;
            return "must be >= " + number_text(model::kMinKlTemperature) +
                   " (below it both distributions are nearly one-hot and the loss's gradient grows as 1/T), got " +
                   number_text(t);
          });
    return k;
  }();
  return keys;
}

// Reads and checks the params across keys; throws ConfigError naming the
// key (pipeline.nodes[i].params.<key>), the value and what is wrong (the
// graph's description adds the node's name and kind).
ObjectiveParams read_objective_params(config::YamlSection& params) {
  std::vector<std::string> given;
  for (const auto& key : head_keys())
    if (params.has(key)) given.push_back(key);
  const bool temperature_given = params.has("kl_temperature");
  ObjectiveParams p = read_params(objective_keys(), params);
  if (p.head == "dflash" && !given.empty())
    throw params.error(given.front(), given.front() + " is a DSpark head's param, and head is dflash (no heads): "
                                             "set head: dspark, or leave " + given.front() + " out");
  if (p.head == "dspark" && !p.confidence_head && params.has("confidence_alpha"))
    throw params.error("confidence_alpha", "confidence_alpha " + number_text(p.confidence_alpha) +
                                               " weighs the confidence head's loss, but confidence_head is false");
  if (p.head == "dspark" && !p.confidence_head && params.has("confidence_with_markov"))
    throw params.error("confidence_with_markov", std::string("confidence_with_markov ") +
                                                     (p.confidence_with_markov ? "true" : "false") +
                                                     " chooses the confidence head's input, but confidence_head is "
                                                     "false: leave it out, or set confidence_head: true");
  if (p.loss == "ce" && temperature_given)
    throw params.error("kl_temperature", "kl_temperature " + number_text(p.kl_temperature) +
                                             " needs loss: kl (loss is ce)");
  if (p.loss == "kl" && p.objective == "dpace")
    throw params.error("loss", "loss: kl with objective: dpace: D-PACE reweights by the cross-entropy's "
                                      "acceptance estimate; train kl with objective: decay");
  return p;
}

// What a resume must keep: the keys declared must_match, the heads' and the
// loss's only when they differ from plain DFlash with cross-entropy (so a
// DFlash run's signature is what it always was).
std::vector<std::pair<std::string, std::string>> objective_terms(const ObjectiveParams& p) {
  const bool plain = p.head == "dflash" && p.loss == "ce";
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& k : objective_keys().keys()) {
    if (k.on_resume != config::OnResume::must_match) continue;
    const bool base = k.name() == "objective" || k.name() == "alpha";
    if (!base && plain) continue;
    if (p.head == "dflash" && std::find(head_keys().begin(), head_keys().end(), k.name()) != head_keys().end()) continue;
    if (p.head == "dspark" && !p.confidence_head && (k.name() == "confidence_alpha" || k.name() == "confidence_with_markov"))
      continue;
    if (p.loss == "ce" && k.name() == "kl_temperature") continue;
    out.emplace_back(k.name(), objective_keys().value_text(k, p));
  }
  return out;
}

std::string objective_resume_text(const ObjectiveParams& p) {
  std::string out;
  for (const auto& [name, value] : objective_terms(p)) out += (out.empty() ? "{" : ", ") + name + ": " + value;
  return out.empty() ? out : out + "}";
}

// What the loss means: the objective's terms (D-PACE's alpha only under
// dpace) and, under decay, the position weighting's gamma (resolved).
std::map<std::string, std::string> loss_terms(const config::Config& config, const ObjectiveParams& p) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : objective_terms(p))
    if (name != "alpha" || p.objective == "dpace") out["params." + name] = value;
  if (p.objective == "decay")
    out["train.loss_decay_gamma"] =
        number_text(config.train.loss_decay_gamma > 0.0 ? config.train.loss_decay_gamma
                                                        : model::default_loss_decay_gamma(config.model.drafter.block_size));
  return out;
}

model::DraftHeads heads_of(const ObjectiveParams& p) {
  model::DraftHeads heads;
  if (p.head != "dspark") return heads;
  heads.markov_rank = p.markov_rank;
  heads.markov_type = p.markov_head;
  heads.confidence = p.confidence_head;
  heads.confidence_with_markov = p.confidence_head && p.confidence_with_markov;
  return heads;
}

class DrafterStep final : public graph::FunctionBody {
 public:
  DrafterStep(const RunEnvironment& env, std::string name, config::YamlSection& params)
      : run_(env.run), home_(env.home), name_(std::move(name)), objective_(run_.objective) {
    const ObjectiveParams chosen = read_objective_params(params);
    if (chosen.objective == "dpace") {
      objective_.weighting = model::PositionWeighting::DPace;
      objective_.dpace_alpha = chosen.alpha;
    }
    objective_.recompute_layers = chosen.recompute;
    if (chosen.loss == "kl") {
      objective_.loss = model::Distillation::KL;
      objective_.kl_temperature = chosen.kl_temperature;
    }
    if (chosen.head == "dspark" && chosen.confidence_head) objective_.confidence_alpha = chosen.confidence_alpha;
    log_memory_fit(run_, objective_, name_);
    const auto& head = *run_.target_head;
    // Frozen [V, H], in the drafter's compute dtype: a bf16 drafter runs the
    // LM head in bf16; the chunked loss takes logsumexp and softmax in fp32.
    embedding_ = head.embedding_weight().to(run_.drafter_device, run_.drafter_dtype);
    lm_head_ = head.lm_head_weight().to(run_.drafter_device, run_.drafter_dtype);
  }

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in.at("batch");
    auto& features = graph::payload<FeatureBatch>(message);
    MicroStats stats{features.batch.position, {}, home_.take(in.at("token"))};
    with_batch_context(features.batch.plan, features.batch.position,
                       [&] { stats.totals = step(*stats.token, features); });
    out.emit(graph::make_message(message.seq, 0, std::move(stats)));
  }

 private:
  StepTotals step(TrainableState& state, const FeatureBatch& received) {
    if (objective_.loss == model::Distillation::KL && received.batch.plan.rows() > 0 &&
        !received.teacher_hidden.defined())
      throw std::runtime_error("node '" + name_ + "' (drafter_step) trains with loss: kl, but its batch came without "
                               "the target's last hidden state: the feature source feeding it cannot give it");
    const FeatureBatch features = without_samples(run_, received, state.quarantined);
    const auto& batch = features.batch;
    const auto& position = batch.position;
    inject_node_faults(run_, name_, position.global_step);
    auto s = StepTotals::zeros(run_.drafter_spec.block_size, run_.config.data.buckets.size());
    s.excluded_samples = batch.excluded_samples;
    // A rank's empty share of a short last step is no micro-batch; a planned
    // batch whose rows were all quarantined still is one.
    s.micro_batches = batch.plan.rows() > 0 || batch.excluded_samples > 0 ? 1 : 0;
    // Every row quarantined, or this rank's empty share of a short last step:
    // no loss and no gradient; the step's sums get zeros from this micro-batch.
    if (batch.plan.rows() == 0) return s;

    model::AnchorSamplingOptions anchor_options;
    anchor_options.anchors_per_sequence = run_.config.train.anchors_per_sequence;
    anchor_options.seed = run_.config.run.seed;
    anchor_options.epoch = position.epoch;
    anchor_options.batch_index = batch.plan.index_in_epoch;
    // Packed rows: anchors per sample, and each sample's blocks see only that sample.
    auto anchors = batch.packed()
                       ? model::sample_packed_anchors(batch.loss_mask, batch.lengths, batch.document_ids, anchor_options)
                       : model::sample_anchors(batch.loss_mask, batch.lengths, anchor_options);

    const auto device = run_.drafter_device;
    const model::PackedDocuments documents{batch.packed() ? batch.position_ids.to(device) : torch::Tensor(),
                                           batch.document_ids};
    const model::TeacherStates teacher{features.teacher_hidden};
    auto result = model::dflash_loss(*state.drafter, embedding_, lm_head_, features.features,
                                     batch.input_ids.to(device), batch.loss_mask.to(device), batch.lengths.to(device),
                                     anchors, objective_, batch.packed() ? &documents : nullptr,
                                     teacher.final_hidden.defined() ? &teacher : nullptr);
    torch::Tensor weighted_ce = result.loss_sum;  // sum(w * CE), differentiable
    double weighted_ce_sum = result.weighted_ce_sum;
    if (auto* f = run_.fault("spike", name_, position.global_step)) {
      weighted_ce = weighted_ce * f->factor;
      weighted_ce_sum *= f->factor;
    }
    if (run_.fault("nan_loss", name_, position.global_step)) {
      weighted_ce = weighted_ce * std::nan("");
      weighted_ce_sum = std::nan("");
    }
    if (result.weight_sum > 0) weighted_ce.backward();

    s.weighted_ce_sum = weighted_ce_sum;
    s.main_loss_sum = result.main_loss_sum;
    s.confidence_loss_sum = result.confidence_loss_sum;
    add_per_position(s.accept_rate_per_position, result.accept_rate_per_position);
    add_per_position(s.confidence_per_position, result.confidence_per_position);
    s.weight_sum = result.weight_sum;
    s.correct_per_position = result.correct_per_position;
    s.count_per_position = result.count_per_position;
    s.anchors = result.num_anchors;
    s.real_tokens = batch.plan.real_tokens;
    s.padded_tokens = batch.plan.padded_tokens;
    const auto dataset_lengths = run_.dataset.lengths();
    if (run_.batching.policy->one_bucket_per_batch()) {
      const auto b = static_cast<size_t>(batch.plan.bucket_index);
      s.batches_per_bucket.at(b) = 1;
      s.bucket_ce_sum.at(b) = weighted_ce_sum;
      s.bucket_weight_sum.at(b) = result.weight_sum;
      s.bucket_real_tokens.at(b) = batch.plan.real_tokens;
    } else if (batch.packed()) {
      // Each sample of a packed batch to the bucket of its own length. The
      // rows may still hold samples excluded since they were collated
      // (quarantined, or an engine file of other tokens; without a loss):
      // the loss's samples are the collated rows', those left out skipped.
      const auto& ids = batch.collated_plan().sample_ids;
      const data::SampleSet trained(batch.plan.sample_ids.begin(), batch.plan.sample_ids.end());
      const double factor = std::isnan(weighted_ce_sum) ? std::nan("")
                            : result.weighted_ce_sum != 0.0 ? weighted_ce_sum / result.weighted_ce_sum
                                                            : 1.0;  // an injected spike scales every sample
      const auto& buckets = run_.config.data.buckets;
      for (size_t i = 0; i < ids.size() && i < result.sample_weight_sum.size(); ++i) {
        if (!trained.count(ids[i])) continue;
        const int length = dataset_lengths[static_cast<size_t>(ids[i])];
        const auto b = static_cast<size_t>(
            std::min<ptrdiff_t>(std::lower_bound(buckets.begin(), buckets.end(), length) - buckets.begin(),
                                static_cast<ptrdiff_t>(buckets.size()) - 1));
        s.batches_per_bucket.at(b) = 1;
        s.bucket_ce_sum.at(b) += result.sample_weighted_ce_sum[i] * factor;
        s.bucket_weight_sum.at(b) += result.sample_weight_sum[i];
        s.bucket_real_tokens.at(b) += length;
      }
    }
    s.sample_ids = batch.plan.sample_ids;  // per sample, packed or not
    for (const int64_t id : batch.plan.sample_ids) s.sample_lengths.push_back(dataset_lengths[static_cast<size_t>(id)]);
    return s;
  }

  static void add_per_position(std::vector<double>& into, const std::vector<double>& from) {
    for (size_t k = 0; k < from.size() && k < into.size(); ++k) into[k] += from[k];
  }

  const RunContext& run_;
  StateHome& home_;
  std::string name_;
  model::ObjectiveOptions objective_;  // the run's, with this node's position weighting
  torch::Tensor embedding_, lm_head_;
};

}  // namespace

void register_drafter_step(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "drafter_step";
  spec.description = "DFlash forward + backward of one micro-batch; needs the model token; params: objective "
                     "(decay | dpace), alpha (dpace), recompute (activations in backward), head (dflash | dspark: "
                     "markov_rank, markov_head, confidence_head, confidence_with_markov, confidence_alpha), loss "
                     "(ce | kl), kl_temperature";
  spec.check_params = [](config::YamlSection& params) { read_objective_params(params); };
  spec.params = objective_keys().docs();
  spec.inputs = {{"batch", "FeatureBatch"}, {"token", "ModelToken"}};
  spec.outputs = {{"out", "MicroStats"}};
  spec.compute = true;  // the drafter's forward and backward
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<DrafterStep>(environment(context), context.name, context.params);
  };
  RunHooks hooks;
  hooks.resume_signature = [](config::YamlSection& params) {
    return objective_resume_text(read_objective_params(params));
  };
  hooks.loss_terms = [](const config::Config& config, config::YamlSection& params) {
    return loss_terms(config, read_objective_params(params));
  };
  hooks.drafter_heads = [](config::YamlSection& params) { return heads_of(read_objective_params(params)); };
  hooks.teacher = [](config::YamlSection& params) -> std::string {
    return read_objective_params(params).loss == "kl" ? "trains with loss: kl" : "";
  };
  add_node_kind(registry, std::move(spec), std::move(hooks));
}

}  // namespace dflow::nodes
