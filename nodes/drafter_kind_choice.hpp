#pragma once
// The drafter's kind as its config declares it, before any model loads:
// model.drafter.kind and the kind's params beside it (model.drafter.<param>,
// declared by the kind: drafter/kind.hpp), read once here into the JSON the
// kind works from; what a run builds (nodes/run_context.cpp), what `dflow
// init` sizes and what a resume must keep of them.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/keys.hpp"
#include "nodes/node_kind.hpp"

namespace dflow::graph {
class NodeRegistry;
}

namespace dflow::nodes {

// The kind model.drafter.kind names and its params, read from the keys of
// model.drafter beside the declared ones with their defaults. Throws
// ConfigError naming model.drafter.<key> and its line: a kind that is not
// registered (naming those that are), another kind's param (naming the kind
// that has it), a key no kind declares (did you mean), a bad value.
struct KindConfig {
  std::string kind = "dflash";
  nlohmann::json params = nlohmann::json::object();
};
KindConfig read_kind_config(const config::Config& config);

// What a resume must keep of the kind's params ("" for none), as YAML:
// "{markov_rank: 32}", its must_match params away from their defaults.
std::string kind_resume_text(const KindConfig& kind);

// The kind and fields model.drafter chooses, with the objective the drafter
// node's params choose (RunHooks::objective; kind_options the kind's
// params); and who needs the target's last hidden state (the drafter node's
// loss, the kind's own terms, or eval.expected_acceptance), in
// `teacher_because`. Bad params are a ConfigError naming the key or the node.
DrafterKindChoice drafter_kind_choice(const config::Config& config, const graph::NodeRegistry& kinds,
                                      std::string* teacher_because);

// A config saved by a dflow that chose the kind on the drafter node
// (`head:` and the kind's params among the node's params): both moved to
// model.drafter, so that a checkpoint or a run directory written then still
// resumes, compares and replays. Returns what moved ("" when nothing did).
// A config given by a user is not moved: the drafter node refuses those
// keys, naming where they now go.
std::string move_node_kind_params(config::Config& config, const graph::NodeRegistry& kinds);

// Every registered kind's params, as model.drafter keys ("model.drafter.markov_rank",
// `when` naming the kind), for the reference and the catalog.
std::vector<config::KeyDoc> kind_param_docs();
// docs/reference/config.md's "Drafter kinds" section (`dflow config --reference`).
std::string kind_reference_markdown();

}  // namespace dflow::nodes
