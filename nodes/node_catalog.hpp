#pragma once
// The node catalog (`dflow nodes`, docs/reference/nodes.md): every node kind
// a pipeline may declare, with its ports, its params (type, default, allowed
// values, one line each) and what it needs of a run, all read from its
// registration (graph::NodeSpec and its RunHooks), so that a new kind is
// listed without another edit.
#include <string>
#include <vector>

#include "graph/registry.hpp"

namespace dflow::nodes {

// `types` (every registered one when empty) as plain text for a terminal, or
// as the Markdown page docs/reference/nodes.md holds. What a kind needs comes
// from its hooks: one that answers from the node's params is asked with the
// defaults and with each other value of a boolean or fixed-set param ("the
// teacher ..., with loss: kl"), in the embedded demo's run config. Throws
// ConfigError for a type that is not registered, with a suggestion and the
// known types.
std::string node_catalog(const graph::NodeRegistry& registry, const std::vector<std::string>& types, bool markdown);

}  // namespace dflow::nodes
