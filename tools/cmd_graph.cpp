// `dflow graph [FILE] --format dot|json`: the declared graph, validated
// against the node registry, without loading any model.
#include <iostream>

#include "config/config.hpp"
#include "graph/description.hpp"
#include "graph/export.hpp"
#include "nodes/registry.hpp"
#include "tools/cli.hpp"

namespace dflow::cli {

void add_graph_command(CLI::App& app, Common& common, Action& action) {
  auto* sub = app.add_subcommand("graph", "print the declared pipeline (nodes, edge capacities, token cycles)");
  static std::string file, format = "dot";
  sub->add_option("FILE", file, "YAML config file (the embedded demo when absent)")->check(CLI::ExistingFile);
  sub->add_option("--format", format, "dot (render with `dot -Tsvg`) or json")
      ->check(CLI::IsMember({"dot", "json"}))
      ->capture_default_str();
  add_common_options(*sub, common);
  sub->callback([&action, &common] {
    action = [&common] {
      auto config = config::load_config(file, common.overrides);
      auto description = graph::describe(config.pipeline, nodes::default_registry());
      if (format == "dot") std::cout << graph::to_dot(description);
      else std::cout << graph::to_json(description).dump(2) << "\n";
      return 0;
    };
  });
}

}  // namespace dflow::cli
