// accumulate: sums a step's micro-batch statistics. Until the step's last
// micro-batch it hands the model token straight back to drafter_step; with
// the last one it passes the whole step (and the token) to optimizer_step.
// With several processes this is where gradients and the step's sums are
// all-reduced (nodes/step_allreduce.cpp), so that optimizer_step sees the
// whole global batch on every rank.
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"
#include "nodes/step_allreduce.hpp"

namespace dflow::nodes {

void LossSums::add(const LossSums& o) {
  weighted_ce_sum += o.weighted_ce_sum;
  weight_sum += o.weight_sum;
  auto add_vec = [](auto& into, const auto& from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); ++i) into[i] += from[i];
  };
  add_vec(correct_per_position, o.correct_per_position);
  add_vec(count_per_position, o.count_per_position);
  add_vec(batches_per_bucket, o.batches_per_bucket);
  add_vec(bucket_ce_sum, o.bucket_ce_sum);
  add_vec(bucket_weight_sum, o.bucket_weight_sum);
  add_vec(bucket_real_tokens, o.bucket_real_tokens);
  excluded_samples += o.excluded_samples;
  anchors += o.anchors;
  real_tokens += o.real_tokens;
  padded_tokens += o.padded_tokens;
  micro_batches += o.micro_batches;
  sample_ids.insert(sample_ids.end(), o.sample_ids.begin(), o.sample_ids.end());
  sample_lengths.insert(sample_lengths.end(), o.sample_lengths.begin(), o.sample_lengths.end());
}

namespace {

class Accumulate final : public graph::FunctionBody {
 public:
  explicit Accumulate(RunState& state) : state_(state) {}

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& micro = graph::payload<MicroStats>(message);
    if (micro.position.micro_in_step == 0) current_ = StepStats{micro.position, {}};
    if (micro.position.global_step != current_.position.global_step)
      throw std::logic_error("micro-batch of step " + std::to_string(micro.position.global_step) +
                             " arrived while step " + std::to_string(current_.position.global_step) + " was open");
    current_.sums.add(micro.sums);
    current_.position = micro.position;
    if (micro.position.last_micro()) {
      if (state_.options.dist) allreduce_step(state_, current_);
      out.emit("step", graph::make_message(message.seq, 0, std::move(current_)));
      current_ = {};
    } else {
      out.emit("token", graph::make_message(message.seq, 0, graph::Token{}));
    }
  }

 private:
  RunState& state_;
  StepStats current_;
};

}  // namespace

void register_accumulate(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "accumulate";
  spec.description = "sums a step's micro-batches; returns the token until the step is complete";
  spec.inputs = {{"in", "MicroStats"}};
  spec.outputs = {{"token", "ModelToken"}, {"step", "StepStats"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<Accumulate>(run_state(context));
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
