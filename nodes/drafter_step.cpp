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

#include "config/errors.hpp"
#include "nodes/drafter_memory_fit.hpp"
#include "nodes/exclude_samples.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_params.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {


namespace {

// params: the objective's position weighting, activation recomputation.
struct ObjectiveParams {
  std::string objective = "decay";
  double alpha = 0.5;
  bool recompute = false;
};

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

ObjectiveParams read_objective_params(config::YamlSection& params) { return read_params(objective_keys(), params); }

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
    auto result = model::dflash_loss(*state.drafter, embedding_, lm_head_, features.features,
                                     batch.input_ids.to(device), batch.loss_mask.to(device), batch.lengths.to(device),
                                     anchors, objective_, batch.packed() ? &documents : nullptr);
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
      // collated rows still hold samples quarantined since loading (without
      // a loss), so the loss's samples are the received plan's.
      const auto& ids = received.batch.plan.sample_ids;
      const double factor = std::isnan(weighted_ce_sum) ? std::nan("")
                            : result.weighted_ce_sum != 0.0 ? weighted_ce_sum / result.weighted_ce_sum
                                                            : 1.0;  // an injected spike scales every sample
      const auto& buckets = run_.config.data.buckets;
      for (size_t i = 0; i < ids.size() && i < result.sample_weight_sum.size(); ++i) {
        if (state.quarantined.count(ids[i])) continue;
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
                     "(decay | dpace), alpha (dpace), recompute (activations in backward)";
  spec.check_params = [](config::YamlSection& params) { read_objective_params(params); };
  spec.inputs = {{"batch", "FeatureBatch"}, {"token", "ModelToken"}};
  spec.outputs = {{"out", "MicroStats"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<DrafterStep>(environment(context), context.name, context.params);
  };
  RunHooks hooks;
  hooks.resume_signature = [](config::YamlSection& params) {
    return resume_text(objective_keys(), read_objective_params(params));
  };
  add_node_kind(registry, std::move(spec), std::move(hooks));
}

}  // namespace dflow::nodes
