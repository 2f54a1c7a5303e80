// accumulate: sums a step's micro-batch totals. Until the step's last
// micro-batch it hands the model token straight back to drafter_step; with
// the last one it passes the whole step (and the token) to optimizer_step.
// With several processes this is where gradients and the step's totals are
// all-reduced (nodes/step_allreduce.cpp), so that optimizer_step sees the
// whole global batch on every rank.
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"
#include "nodes/step_allreduce.hpp"

namespace dflow::nodes {

namespace {

class Accumulate final : public graph::FunctionBody {
 public:
  explicit Accumulate(const RunContext& run) : run_(run) {}

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& micro = graph::payload<MicroStats>(message);
    if (micro.position.micro_in_step == 0) {
      current_ = StepStats{};
      current_.position = micro.position;
      current_.totals = run_.step_totals_zeros();
    }
    if (micro.position.global_step != current_.position.global_step)
      throw std::logic_error("micro-batch of step " + std::to_string(micro.position.global_step) +
                             " arrived while step " + std::to_string(current_.position.global_step) + " was open");
    current_.totals.add(micro.totals);
    current_.position = micro.position;
    if (micro.position.last_micro()) {
      current_.token = std::move(micro.token);
      if (run_.options.dist) allreduce_step(run_, current_);
      out.emit("step", graph::make_message(message.seq, 0, std::move(current_)));
      current_ = {};
    } else {
      out.emit("token", graph::make_message(message.seq, 0, std::move(micro.token)));
    }
  }

 private:
  const RunContext& run_;
  StepStats current_;  // the open step's totals (no token until it is complete)
};

}  // namespace

void register_accumulate(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "accumulate";
  spec.description = "sums a step's micro-batches; returns the token until the step is complete";
  spec.inputs = {{"in", "MicroStats"}};
  spec.outputs = {{"token", "ModelToken"}, {"step", "StepStats"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<Accumulate>(environment(context).run);
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
