// target_forward: one replica per target device. The frozen target runs the
// whole padded batch under no-grad and returns the fused features of the
// DFlash layers, delivered on the drafter's device.
#include "config/log.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"
#include "train/devices.hpp"

namespace dflow::nodes {

namespace {

class TargetForward final : public graph::FunctionBody {
 public:
  TargetForward(const RunContext& run, std::string name, int replica)
      : run_(run), name_(std::move(name)), replica_(replica), target_(*run.targets.at(replica)) {}

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& batch = graph::payload<PaddedBatch>(message);
    torch::Tensor features;  // [B, S, n*H]
    with_batch_context(batch.plan, batch.position, [&] {
      inject_node_faults(run_, name_, batch.position.global_step);
      if (batch.plan.rows() == 0) return;  // a rank's empty share of a short step: nothing to compute
      torch::NoGradGuard no_grad;
      if (batch.input_ids.size(0) == 0) {  // every row quarantined: nothing to run
        const int64_t width = static_cast<int64_t>(run_.feature_layer_ids.size()) * target_.config().hidden_size;
        features = torch::zeros({0, batch.input_ids.size(1), width},
                                torch::TensorOptions().device(run_.drafter_device).dtype(run_.drafter_dtype));
        return;
      }
      // From pinned host memory when the target is on CUDA (pad_bucket pins it).
      auto ids = batch.input_ids.to(target_.device(), train::copy_may_be_non_blocking(target_.device()));
      // Packed rows: each sample attends only to itself, at its own positions.
      // A drafter on the CPU behind a CUDA target gets a blocking copy: it
      // reads the features as soon as they are emitted.
      features = (batch.packed() ? target_.context_features(ids, batch.documents(), run_.feature_layer_ids)
                                 : target_.context_features(ids, run_.feature_layer_ids))
                     .to(run_.drafter_device, run_.drafter_dtype,  // the drafter's fc reads them in its dtype
                         train::copy_may_be_non_blocking(run_.drafter_device));
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

void register_target_forward(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "target_forward";
  spec.description = "frozen target under no-grad: fused features of the DFlash layers (one replica per device)";
  spec.inputs = {{"in", "PaddedBatch"}};
  spec.outputs = {{"out", "FeatureBatch"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& run = environment(context).run;
    if (context.replicas != static_cast<int>(run.targets.size()))
      throw ConfigError(context.params.mark_of(""), "pipeline.nodes." + context.name + ".replicas",
                        "node '" + context.name + "' has " + std::to_string(context.replicas) +
                            " replicas but devices.target lists " + std::to_string(run.targets.size()) +
                            " devices: one replica per target device");
    return std::make_unique<TargetForward>(run, context.name, context.replica);
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
