// target_forward.capture: the capture graph's target replicas
// (nodes/capture_nodes.hpp). Unlike target_forward it hands the features on
// in the target's device and dtype, as the cache stores them (the old loop's
// bytes), and leaves the device-to-host copy to the writer, so that the
// target starts the next batch at once.
#include "nodes/capture_nodes.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"

namespace dflow::nodes {

namespace {

class CaptureTarget final : public graph::FunctionBody {
 public:
  CaptureTarget(const RunContext& run, std::string name, int replica, const model::TargetModel& target)
      : run_(run), name_(std::move(name)), replica_(replica), target_(target) {}

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& batch = graph::payload<PaddedBatch>(message);
    torch::Tensor features;  // [B, S, n*H] on the target's device, in its dtype
    naming_capture_batch(batch.plan, [&] {
      inject_node_faults(run_, name_, batch.position.global_step);
      features = target_features(run_, target_, batch);
    });
    FeatureBatch result{std::move(batch), std::move(features), replica_};
    out.emit(graph::make_message(message.seq, message.cost, std::move(result)));
  }

 private:
  const RunContext& run_;
  std::string name_;
  int replica_;
  const model::TargetModel& target_;
};

}  // namespace

void register_capture_target(graph::NodeRegistry& registry) {
  graph::NodeSpec target;
  target.type = "target_forward.capture";
  target.description = "frozen target under no-grad: fused features in the target's dtype, as the cache stores them";
  target.inputs = {{"in", "PaddedBatch"}};
  target.outputs = {{"out", "FeatureBatch"}};
  target.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<CaptureTarget>(environment(context).run, context.name, context.replica, target_replica(context));
  };
  registry.add(std::move(target));
}

}  // namespace dflow::nodes
