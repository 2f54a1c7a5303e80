// `dflow nodes [TYPE...] [--markdown]`: the node kinds a pipeline may
// declare, with their ports, params and what they need of a run, from their
// registrations (nodes/node_catalog.hpp). --markdown writes the page
// docs/reference/nodes.md holds (tools/docs_reference.sh).
#include <iostream>

#include "nodes/node_catalog.hpp"
#include "nodes/registry.hpp"
#include "tools/cli.hpp"

namespace dflow::cli {

void add_nodes_command(CLI::App& app, Action& action) {
  auto* sub = app.add_subcommand("nodes", "list the node kinds a pipeline may declare: ports, params (type, default, "
                                          "allowed values) and what each needs of a run");
  static std::vector<std::string> types;
  static bool markdown = false;
  sub->add_option("TYPE", types, "only these node kinds (as `type:` in pipeline.nodes)");
  sub->add_flag("--markdown", markdown, "as the Markdown page docs/reference/nodes.md");
  sub->callback([&action] {
    action = [] {
      std::cout << nodes::node_catalog(nodes::default_registry(), types, markdown);
      return 0;
    };
  });
}

}  // namespace dflow::cli
