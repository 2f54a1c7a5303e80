// target_forward.capture: the capture graph's target replicas
// (nodes/capture_nodes.hpp). Unlike target_forward it hands the features on
// in the target's device and dtype, as the cache stores them (the old loop's
// bytes), and leaves the device-to-host copy to the writer, so that the
// target starts the next batch at once.
#include "nodes/capture_nodes.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_support.hpp"

namespace dflow::nodes {

void register_capture_target(graph::NodeRegistry& registry) {
  graph::NodeSpec target;
  target.type = "target_forward.capture";
  target.description = "frozen target under no-grad: fused features in the target's dtype, as the cache stores them";
  target.inputs = {{"in", "PaddedBatch"}};
  target.outputs = {{"out", "FeatureBatch"}};
  target.compute = true;  // the target's forward
  target.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return make_target_forward(context, /*for_cache=*/true);
  };
  RunHooks hooks;
  hooks.gives_teacher = true;  // the cache's last layer, when it stores one (target_features)
  add_node_kind(registry, std::move(target), std::move(hooks));
}

}  // namespace dflow::nodes
