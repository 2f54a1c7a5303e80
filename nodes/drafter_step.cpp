// drafter_step: forward and backward of one micro-batch under the DFlash
// objective, with the drafter kind model.drafter.kind names (its params are
// model.drafter's: nodes/drafter_kind_choice.hpp) and the loss (or loss mix)
// the node's params choose from their registry (drafter/loss.hpp).
// Fires only with the model token (invariant 1), which carries the
// trainable state: the drafter is reached through it alone, and it travels on
// inside the MicroStats. Gradients of sum(w * loss) accumulate in the
// parameters; optimizer_step divides by the step's total weight, so a step's
// loss is sum(w * loss) / sum(w) over all of its micro-batches exactly.
// The objective's position weighting is the node's choice (params:
// objective: decay, the 2025 recipe with train.loss_decay_gamma, or dpace
// with alpha), and a resume must keep it. params.recompute recomputes each
// draft layer's activations in backward (same math, less memory, one more
// forward), so a resume may change it; at start the node says whether the
// configured micro-batches fit the drafter device's memory
// (drafter/drafter_memory.hpp) and the largest anchors_per_sequence that would.
// Rows of samples quarantined during this invocation are dropped here (the
// loader drops those known at the start): the live set only changes under
// the model token, which this node holds, so the run stays deterministic.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "config/errors.hpp"
#include "drafter/kind.hpp"
#include "drafter/loss.hpp"
#include "drafter/objective.hpp"
#include "nodes/drafter_kind_choice.hpp"
#include "nodes/drafter_memory_fit.hpp"
#include "nodes/exclude_samples.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_params.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

// params: the objective's position weighting and activation recomputation;
// the loss's are declared by the losses (drafter/loss.hpp).
struct ObjectiveParams {
  std::string objective = "decay";
  double alpha = 0.5;
  bool recompute = false;
};

struct LossParams {
  double kl_temperature = 1.0;
};

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
    return k;
  }();
  return keys;
}

const config::KeySet<LossParams>& loss_keys() {
  using config::OnResume;
  static const config::KeySet<LossParams> keys = [] {
    config::KeySet<LossParams> k;
    k.add("kl_temperature", [](LossParams& p) -> auto& { return p.kl_temperature; }, OnResume::must_match,
          "the losses that use a temperature (kl): both distributions at it (1.0; >= " +
              number_text(drafter::kMinLossTemperature) + ")",
          [](const double& t) -> std::optional<std::string> {
            if (t >= drafter::kMinLossTemperature && std::isfinite(t)) return std::nullopt;
            return "must be >= " + number_text(drafter::kMinLossTemperature) +
                   " (below it both distributions are nearly one-hot and the loss's gradient grows as 1/T), got " +
                   number_text(t);
          });
    return k;
  }();
  return keys;
}

// What the params chose.
struct DrafterChoice {
  ObjectiveParams base;
  drafter::LossMix loss;
  double kl_temperature = 1.0;
};

template <class S>
std::vector<std::string> names_of(const config::KeySet<S>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys.keys()) out.push_back(k.name());
  return out;
}

// `loss: ce`, `loss: tv`, ..., or a weighted mix `loss: {ce: 0.1, tv: 0.9}`.
drafter::LossMix read_loss(config::YamlSection& params) {
  drafter::LossMix mix;
  const YAML::Node node = params.raw("loss");  // known, so a typo of it gets a suggestion
  if (!params.has("loss")) return mix;
  const auto names = drafter::draft_loss_names();
  auto known = [&](const std::string& name) {
    if (const auto problem = config::one_of(names)(name)) throw params.error("loss", *problem);
  };
  if (node.IsScalar()) {
    known(node.Scalar());
    return drafter::LossMix::single(node.Scalar());
  }
  if (!node.IsMap() || node.size() == 0)
    throw params.error("loss", "must be a loss (" + drafter::LossMix{}.text() + ", ...) or a weighted mix such as "
                               "{ce: 0.1, tv: 0.9}");
  mix.terms.clear();
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string name = it->first.as<std::string>("");
    known(name);
    double weight = 0.0;
    try {
      weight = it->second.as<double>();
    } catch (const YAML::Exception&) {
      throw params.error("loss", "loss " + name + "'s weight must be a number > 0");
    }
    if (!(weight > 0.0) || !std::isfinite(weight))
      throw params.error("loss", "loss " + name + "'s weight must be > 0, got " + number_text(weight));
    mix.terms.emplace_back(name, weight);
  }
  return mix;
}

// Reads and checks the params across keys; throws ConfigError naming the
// key (pipeline.nodes[i].params.<key>), the value and what is wrong (the
// graph's description adds the node's name and kind).
DrafterChoice read_drafter_params(config::YamlSection& params) {
  DrafterChoice c;
  // The kind and its params moved to model.drafter (one place for the
  // drafter's config): say where, with the value given.
  auto value_of = [&](const std::string& key) {
    const YAML::Node v = params.raw(key);
    YAML::Emitter out;
    out << YAML::Flow << v;
    return std::string(out.c_str());
  };
  if (params.has("head"))
    throw params.error("head", "the drafter kind is model.drafter's now: set model.drafter.kind: " + value_of("head") +
                                   " (and leave head out of the drafter node's params)");
  for (const auto& kind : drafter::drafter_kind_names())
    for (const auto& p : drafter::drafter_kind(kind).params())
      if (params.has(p.name))
        throw params.error(p.name, p.name + " is a param of drafter kind " + kind +
                                       ", which model.drafter holds now: set model.drafter.kind: " + kind +
                                       " and model.drafter." + p.name + ": " + value_of(p.name) +
                                       " (and leave it out of the drafter node's params)");
  config::YamlSection base = params.only(names_of(objective_keys()));
  c.base = read_params(objective_keys(), base);
  c.loss = read_loss(params);
  config::YamlSection loss_section = params.only(names_of(loss_keys()));
  const LossParams loss_params = read_params(loss_keys(), loss_section);
  c.kl_temperature = loss_params.kl_temperature;
  if (loss_section.has("kl_temperature") && !c.loss.uses_temperature()) {
    std::string users;
    for (const auto& name : drafter::draft_loss_names())
      if (drafter::draft_loss(name).uses_temperature()) users += (users.empty() ? "" : " or ") + name;
    throw params.error("kl_temperature", "kl_temperature " + number_text(c.kl_temperature) + " needs loss: " + users +
                                             " (loss is " + c.loss.text() + ")");
  }
  if (!c.loss.is("ce") && c.base.objective == "dpace")
    throw params.error("loss", "loss: " + c.loss.text() + " with objective: dpace: D-PACE reweights by the "
                                       "cross-entropy's acceptance estimate; train " + c.loss.text() +
                                       " with objective: decay");
  params.finish();  // a key no one declared, now rather than when the graph is built
  return c;
}

// What the loss means (loss_terms): the objective's keys, then (unless the
// loss is cross-entropy) the loss and its temperature.
std::vector<std::pair<std::string, std::string>> objective_terms(const DrafterChoice& c) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(8);  // GCC 12 warns wrongly (-Warray-bounds) on growing it from one element
  const ObjectiveParams& p = c.base;
  out.emplace_back("objective", objective_keys().value_text(*objective_keys().find("objective"), p));
  out.emplace_back("alpha", objective_keys().value_text(*objective_keys().find("alpha"), p));
  if (c.loss.is("ce")) return out;
  out.emplace_back("loss", c.loss.text());
  if (c.loss.uses_temperature())
    out.emplace_back("kl_temperature", loss_keys().value_text(*loss_keys().find("kl_temperature"),
                                                              LossParams{c.kl_temperature}));
  return out;
}

// Why the node's loss needs the target's distribution ("" when it does not;
// a kind whose terms read it says so itself: drafter_kind_choice).
std::string teacher_reason(const DrafterChoice& c) {
  if (c.loss.needs_teacher()) return "trains with loss: " + c.loss.text();
  return "";
}

// The objective the params choose, on the run's (its position weighting's gamma).
drafter::ObjectiveOptions objective_of(const DrafterChoice& c, drafter::ObjectiveOptions base = {}) {
  if (c.base.objective == "dpace") {
    base.weighting = drafter::PositionWeighting::DPace;
    base.dpace_alpha = c.base.alpha;
  }
  base.recompute_layers = c.base.recompute;
  base.loss = c.loss;
  base.kl_temperature = c.kl_temperature;
  return base;
}

// What a resume must keep: the objective's and the loss's must_match keys,
// each left out at its default (nodes/node_params.hpp), the temperature only
// where the loss uses it (the kind's params: nodes/drafter_kind_choice.hpp).
std::string objective_resume_text(const DrafterChoice& c) {
  auto terms = resume_terms(objective_keys(), c.base);
  if (!(c.loss == drafter::LossMix{})) terms.emplace_back("loss", c.loss.text());
  if (c.loss.uses_temperature())
    for (auto& term : resume_terms(loss_keys(), LossParams{c.kl_temperature})) terms.push_back(std::move(term));
  return terms_text(terms);
}

// What the loss means: the objective's terms (D-PACE's alpha only under
// dpace), the drafter kind and its params (but for plain DFlash) and, under
// decay, the position weighting's gamma (resolved).
std::map<std::string, std::string> loss_terms(const config::Config& config, const DrafterChoice& c) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : objective_terms(c))
    if (name != "alpha" || c.base.objective == "dpace") out["params." + name] = value;
  const KindConfig kind = read_kind_config(config);
  if (kind.kind != "dflash") {
    out["model.drafter.kind"] = kind.kind;
    for (const auto& [name, value] : drafter::drafter_kind(kind.kind).resume_terms(kind.params))
      out["model.drafter." + name] = value;
  }
  if (c.base.objective == "decay")
    out["train.loss_decay_gamma"] = number_text(
        config.train.loss_decay_gamma > 0.0 ? config.train.loss_decay_gamma
                                            : drafter::default_loss_decay_gamma(config.model.drafter.block_size));
  return out;
}

class DrafterStep final : public graph::FunctionBody {
 public:
  DrafterStep(const RunEnvironment& env, std::string name, config::YamlSection& params)
      : run_(env.run), home_(env.home), name_(std::move(name)) {
    const DrafterChoice chosen = read_drafter_params(params);
    objective_ = objective_of(chosen, run_.objective);  // the run's carries the kind's params
    needs_teacher_because_ = teacher_reason(chosen);
    const auto& kind = run_.config.model.drafter.kind;
    if (needs_teacher_because_.empty() && drafter::drafter_kind(kind).needs_teacher(objective_.kind_options))
      needs_teacher_because_ = "trains model.drafter.kind " + kind + ", whose loss terms read the target's distribution";
    if (needs_teacher_because_.empty() && objective_.expected_acceptance)
      needs_teacher_because_ = "records the expected acceptance (eval.expected_acceptance)";
    needs_teacher_ = !needs_teacher_because_.empty();
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
    if (needs_teacher_ && received.batch.plan.rows() > 0 && !received.teacher_hidden.defined())
      throw std::runtime_error("node '" + name_ + "' (drafter_step) " + needs_teacher_because_ +
                               ", but its batch came without the target's last hidden state: the feature source "
                               "feeding it cannot give it");
    const FeatureBatch features = without_samples(run_, received, state.quarantined);
    const auto& batch = features.batch;
    const auto& position = batch.position;
    inject_node_faults(run_, name_, position.global_step);
    auto s = run_.step_totals_zeros();
    s.excluded_samples = batch.excluded_samples;
    // A rank's empty share of a short last step is no micro-batch; a planned
    // batch whose rows were all quarantined still is one.
    s.micro_batches = batch.plan.rows() > 0 || batch.excluded_samples > 0 ? 1 : 0;
    // Every row quarantined, or this rank's empty share of a short last step:
    // no loss and no gradient; the step's sums get zeros from this micro-batch.
    if (batch.plan.rows() == 0) return s;

    drafter::AnchorSamplingOptions anchor_options;
    anchor_options.anchors_per_sequence = run_.config.train.anchors_per_sequence;
    anchor_options.seed = run_.config.run.seed;
    anchor_options.epoch = position.epoch;
    anchor_options.batch_index = batch.plan.index_in_epoch;
    // Packed rows: anchors per sample, and each sample's blocks see only that sample.
    auto anchors = batch.packed() ? drafter::sample_packed_anchors(batch.loss_mask, batch.lengths, batch.document_ids,
                                                                   anchor_options)
                                  : drafter::sample_anchors(batch.loss_mask, batch.lengths, anchor_options);

    const auto device = run_.drafter_device;
    const target::PackedDocuments documents{batch.packed() ? batch.position_ids.to(device) : torch::Tensor(),
                                           batch.document_ids};
    const drafter::TeacherStates teacher{features.teacher_hidden};
    // Where the run is, for a kind whose terms follow a schedule, and a seed
    // for this micro-batch's draws (the same on a resume).
    drafter::ObjectiveOptions options = objective_;
    options.step = position.global_step;
    options.total_steps = state.schedule.total_steps;
    options.draw_seed = mix_seed(run_.config.run.seed, position.global_step, batch.plan.index_in_epoch, position.epoch);
    auto result = drafter::dflash_loss(*state.drafter, embedding_, lm_head_, features.features,
                                     batch.input_ids.to(device), batch.loss_mask.to(device), batch.lengths.to(device),
                                     anchors, options, batch.packed() ? &documents : nullptr,
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
    s.add_terms(result.term_loss_sums, result.term_series_per_position);
    add_per_position(s.accept_rate_per_position, result.accept_rate_per_position);
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

  static uint64_t mix_seed(uint64_t seed, int64_t step, int64_t batch, int64_t epoch) {
    uint64_t x = seed;
    for (const int64_t v : {step, batch, epoch}) {  // splitmix64 over each value in turn
      x += 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(v);
      x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
      x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
      x ^= x >> 31;
    }
    return x;
  }

  const RunContext& run_;
  StateHome& home_;
  std::string name_;
  bool needs_teacher_ = false;
  std::string needs_teacher_because_;  // "trains with loss: kl", ...
  drafter::ObjectiveOptions objective_;  // the run's, with this node's position weighting
  torch::Tensor embedding_, lm_head_;
};

}  // namespace

// The params as `dflow nodes` lists them: the node's own, the loss and the
// losses' temperature, from the registry, so a new loss appears without
// another edit (the drafter kind's params are model.drafter's).
std::vector<config::KeyDoc> drafter_param_docs() {
  std::vector<config::KeyDoc> out = objective_keys().docs();
  config::KeyDoc loss;
  loss.name = "loss";
  loss.type = "string, or a mapping of losses to weights";
  loss.default_text = "ce";
  loss.allowed = drafter::draft_loss_names();
  loss.doc = "the objective: a loss, or a weighted mix such as {ce: 0.1, tv: 0.9}";
  for (const auto& name : loss.allowed) loss.doc += "; " + name + ": " + drafter::draft_loss(name).summary();
  out.push_back(loss);
  std::string temperature_users;
  for (const auto& name : drafter::draft_loss_names())
    if (drafter::draft_loss(name).uses_temperature())
      temperature_users += (temperature_users.empty() ? "loss: " : " or ") + name;
  for (auto d : loss_keys().docs()) {
    d.when = temperature_users;
    out.push_back(d);
  }
  return out;
}

void register_drafter_step(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "drafter_step";
  spec.description = "the drafter's forward + backward of one micro-batch; needs the model token; params: "
                     "objective (decay | dpace), alpha (dpace), recompute (activations in backward), loss (a loss or "
                     "a weighted mix), kl_temperature; the drafter kind and its params are model.drafter's";
  spec.check_params = [](config::YamlSection& params) { read_drafter_params(params); };
  spec.params = drafter_param_docs();
  spec.inputs = {{"batch", "FeatureBatch"}, {"token", "ModelToken"}};
  spec.outputs = {{"out", "MicroStats"}};
  spec.compute = true;  // the drafter's forward and backward
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<DrafterStep>(environment(context), context.name, context.params);
  };
  RunHooks hooks;
  hooks.resume_signature = [](config::YamlSection& params) {
    return objective_resume_text(read_drafter_params(params));
  };
  hooks.loss_terms = [](const config::Config& config, config::YamlSection& params) {
    return loss_terms(config, read_drafter_params(params));
  };
  hooks.objective = [](config::YamlSection& params) { return objective_of(read_drafter_params(params)); };
  hooks.teacher = [](config::YamlSection& params) -> std::string {
    return teacher_reason(read_drafter_params(params));
  };
  add_node_kind(registry, std::move(spec), std::move(hooks));
}

}  // namespace dflow::nodes
