#pragma once
// `dflow compare`'s FigureTerms of a run (report/compare.hpp), asked of the
// node kinds of its saved config: each declared node's loss_terms and
// tau_terms (nodes/node_kind.hpp), under the node's name
// ("pipeline.nodes.drafter.params.objective") with its type, beside the run
// config keys they read.
#include "graph/registry.hpp"
#include "report/compare.hpp"

namespace dflow::nodes {

// Never throws: a config that does not load, a node type this dflow does not
// know, or params that do not read make the terms unknown, saying why.
report::FigureTerms figure_terms(const report::RunConfig& config, const graph::NodeRegistry& kinds);

}  // namespace dflow::nodes
