#include "nodes/figure_terms.hpp"

#include <fstream>
#include <iterator>

#include "nodes/drafter_kind_choice.hpp"
#include "nodes/node_kind.hpp"

namespace dflow::nodes {

namespace {

// The hook's terms under the node's name ("params.k" -> "pipeline.nodes.<name>.params.k"), with its type.
void add_terms(report::FlatConfig& out, const config::NodeDecl& node, const std::map<std::string, std::string>& terms) {
  if (terms.empty()) return;
  const std::string prefix = "pipeline.nodes." + node.name + ".";
  out[prefix + "type"] = node.type;
  for (const auto& [key, value] : terms) out[key.rfind("params.", 0) == 0 ? prefix + key : key] = value;
}

}  // namespace

report::FigureTerms figure_terms(const report::RunConfig& run_config, const graph::NodeRegistry& kinds) {
  report::FigureTerms out;
  try {
    std::ifstream in(run_config.file);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    config::Config config = config::load_config_text(text, run_config.file.string());
    (void)move_node_kind_params(config, kinds);  // a run of an earlier dflow: its kind on the drafter node
    for (const auto& node : config.pipeline.nodes) {
      if (!kinds.find(node.type)) {
        out.unknown = "its node '" + node.name + "' has the type '" + node.type + "', which this dflow does not know";
        return out;
      }
      const RunHooks* hooks = run_hooks(kinds, node.type);
      if (!hooks) continue;
      auto params = node_params(config.pipeline, node);
      if (hooks->loss_terms) add_terms(out.loss, node, hooks->loss_terms(config, params));
      if (hooks->tau_terms) add_terms(out.tau, node, hooks->tau_terms(config, params));
    }
  } catch (const std::exception& e) {
    out = {};
    out.unknown = std::string("its config could not be read: ") + e.what();
  }
  return out;
}

}  // namespace dflow::nodes
