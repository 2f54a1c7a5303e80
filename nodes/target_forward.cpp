// target_forward: one replica per target device. The frozen target runs the
// whole padded batch under no-grad and returns the fused features of the
// DFlash layers, delivered on the drafter's device; when the run needs the
// teacher (loss: kl) the same forward also returns the target's last hidden
// state after its final norm (FeatureBatch::teacher_hidden).
#include "config/log.hpp"
#include "nodes/capture_nodes.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

class TargetForward final : public graph::FunctionBody {
 public:
  TargetForward(const RunContext& run, std::string name, int replica, const target::TargetModel& target, bool for_cache)
      : run_(run), name_(std::move(name)), replica_(replica), target_(target), for_cache_(for_cache) {}

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& batch = graph::payload<PaddedBatch>(message);
    torch::Tensor features;  // [B, S, n*H], and the last layer after them when the run needs it
    auto compute = [&] {
      inject_node_faults(run_, name_, batch.position.global_step);
      if (batch.plan.rows() == 0) return;  // a rank's empty share of a short step: nothing to compute
      features = target_features(run_, target_, batch);
    };
    if (for_cache_) naming_capture_batch(batch.plan, compute);  // a capture has batches, not steps
    else with_batch_context(batch.plan, batch.position, compute);
    // For the drafter: the features, and the teacher split off the same
    // forward's last layer (one forward, no second pass).
    FeatureBatch result = for_cache_ ? FeatureBatch{std::move(batch), std::move(features), replica_, torch::Tensor()}
                                     : drafter_batch(run_, std::move(batch), features, replica_);
    out.emit(graph::make_message(message.seq, message.cost, std::move(result)));
  }

 private:
  const RunContext& run_;
  std::string name_;
  int replica_;
  const target::TargetModel& target_;
  bool for_cache_;  // the target's device and dtype, as a cache stores them; else the drafter's
};

}  // namespace

std::unique_ptr<graph::NodeBody> make_target_forward(const graph::NodeContext& context, bool for_cache) {
  return std::make_unique<TargetForward>(environment(context).run, context.name, context.replica,
                                         target_replica(context), for_cache);
}

void register_target_forward(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "target_forward";
  spec.description = "frozen target under no-grad: fused features of the DFlash layers (one replica per device)";
  spec.inputs = {{"in", "PaddedBatch"}};
  spec.outputs = {{"out", "FeatureBatch"}};
  spec.compute = true;  // the target's forward
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return make_target_forward(context, /*for_cache=*/false);
  };
  RunHooks hooks;
  hooks.needs_target = [](const config::Config&, const config::NodeDecl&) -> std::string {
    return "runs the target in-process";
  };
  hooks.gives_teacher = true;  // the same forward's last layer (drafter_batch)
  hooks.capture = CaptureRole::target;
  add_node_kind(registry, std::move(spec), std::move(hooks));
}

}  // namespace dflow::nodes
