#pragma once
// What a training node kind may do before the graph exists, beside building
// its body: the run context asks every declared node's kind through these
// hooks and never names a node type. A kind registers them with its spec
// (add_node_kind), in its own file; nodes/registry.cpp adds that file's
// register_* call. That is all a new node takes.
#include <any>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "config/pipeline.hpp"
#include "config/yaml_reader.hpp"
#include "data/batching_policy.hpp"
#include "graph/registry.hpp"
#include "drafter/drafter.hpp"
#include "drafter/objective.hpp"
#include "nodes/features_cached.hpp"
#include "train/optimizer.hpp"

namespace dflow::nodes {

class RunContext;

// A node's part in the pipeline `dflow cache-features` derives from the
// run's (nodes/capture_pipeline.hpp).
enum class CaptureRole {
  none,    // kept as declared when upstream of the feature source (batching, routing)
  loader,  // reads the run's batches: capture.load takes its place (epoch 0's batches the cache lacks)
  target,  // a feature source whose target the capture runs: target_forward.capture takes its place
};

// The drafter kind model.drafter.kind names, and the fields its params
// (keys of model.drafter) give the drafter's shape (DrafterSpec::kind,
// kind_fields): nodes/drafter_kind_choice.hpp reads them.
struct DrafterKindChoice {
  std::string kind = "dflash";
  nlohmann::json fields = nlohmann::json::object();
  // What drafter_step trains with (its loss, recomputation, position
  // weighting, and the kind's params in kind_options; the run's
  // loss_decay_gamma is not the node's): the memory fit sizes the step from
  // it, at start and in `dflow init`.
  drafter::ObjectiveOptions objective;
};

struct RunHooks {
  // A batching node: the policy its params pick. The epoch plans are built
  // with it before the graph exists, and a resume must keep it (its type and
  // params_text()). At most one node of a pipeline has this hook.
  std::function<std::shared_ptr<const data::BatchingPolicy>(config::YamlSection& params)> batching = {};
  // What of the node's params a resume must keep, as YAML ("" when they are
  // the defaults). A resume refuses another type or another text for a node
  // of the same name, naming it: the node computes something else then
  // (another objective, another optimizer).
  std::function<std::string(config::YamlSection& params)> resume_signature = {};
  // What the figure the node makes means (`dflow compare` ranks runs on it
  // only where every run's nodes say the same; nodes/figure_terms.hpp):
  // "params.<key>" for the node's params that define it (resolved: defaults
  // included, those that change only how it is computed left out) and the
  // run config keys it reads, each with its value. loss_terms: a node that
  // computes the training loss; tau_terms: one that measures tau.
  using FigureTermsHook = std::function<std::map<std::string, std::string>(const config::Config& config,
                                                                           config::YamlSection& params)>;
  FigureTermsHook loss_terms = {};
  FigureTermsHook tau_terms = {};
  // An optimizer node: the optimizer its params pick, over the drafter's
  // trainable parameters (by name), built when the trainable state is. At
  // most one node of a pipeline has this hook; without one, AdamW.
  std::function<std::unique_ptr<train::Optimizer>(const RunContext& run, config::YamlSection& params,
                                                  std::vector<std::pair<std::string, torch::Tensor>> parameters)>
      optimizer = {};
  // Reads and checks what the node needs before the graph is built (a node
  // factory that throws would leave a half-built graph): files, prompts. The
  // result is kept in the run context under the node's name
  // (RunContext::prepared). Throws ConfigError naming the node.
  std::function<std::any(const RunContext& run, const config::NodeDecl& node)> prepare = {};
  // A feature source whose features are fixed target layers (files a serving
  // engine wrote): the drafter's feature layers (model.drafter.target_layer_ids,
  // dflow numbering) its params give for a target of `target_layers` layers,
  // used when that key is empty, before the drafter's shape is made. Its
  // prepare checks explicit ids against what it has. Throws
  // std::invalid_argument saying what is wrong with the params.
  std::function<std::vector<int64_t>(config::YamlSection& params, int64_t target_layers)> feature_layers = {};
  // The drafter node: the objective its params choose (loss, position
  // weighting, recomputation; not the kind's params, which are
  // model.drafter's). Throws std::invalid_argument or ConfigError naming the
  // key and the value. At most one node of a pipeline has this hook.
  std::function<drafter::ObjectiveOptions(config::YamlSection& params)> objective = {};
  // Why the node needs the target's last hidden state with every batch
  // ("trains with loss: kl", from what its loss says it needs; "" when it
  // does not; a kind that reads it says so itself): RunContext::teacher_because.
  std::function<std::string(config::YamlSection& params)> teacher = {};
  // A node that makes FeatureBatches and sets their teacher_hidden whenever
  // the run needs the teacher (RunContext::needs_teacher). A run that needs it
  // refuses, before anything loads, a FeatureBatch source without this.
  bool gives_teacher = false;
  // A fresh run hands the node the untrained drafter's state (an evaluator's
  // baseline), taken before the first step.
  bool wants_untrained_state = false;
  // The node keeps its own copy of the drafter (in its dtype) on the
  // drafter's device, on rank 0 only, while it runs (off_because ""): the
  // memory fit counts it (nodes/drafter_memory_fit.hpp).
  bool holds_drafter_copy = false;
  // Why the node has nothing to do in this run ("" when it runs), decided
  // from the config before anything loads: the run then leaves it and its
  // edges out of the graph and says why once, in its log. For a node nothing
  // downstream needs (an evaluator without held-out prompts while no
  // periodic evaluation was asked for).
  std::function<std::string(const config::Config& config, const config::NodeDecl& node)> off_because = {};
  // Why the node needs the whole target in-process ("" when it does not),
  // decided from the config: "runs the target in-process". The run loads the
  // whole target only when some node (or RunOptions::whole_target_because)
  // needs it, else just its embedding and LM head (RunContext::target_head);
  // a target dflow cannot run is refused before training, naming the node.
  std::function<std::string(const config::Config& config, const config::NodeDecl& node)> needs_target = {};
  // Its part in the pipeline of `dflow cache-features` (CaptureRole).
  CaptureRole capture = CaptureRole::none;
  // A node that reads a feature cache: the cache its params name (directory,
  // storage dtype, shard size), which `dflow cache-features` fills unless
  // given another (--dir): cached_features_node.
  std::function<CachedFeaturesParams(config::YamlSection& params)> feature_cache = {};
};

// "pipeline.nodes[i]" of the declared `node`: where its errors point.
std::string node_path(const config::PipelineConfig& pipeline, const config::NodeDecl& node);
// The node's params as a section named as declared ("pipeline.nodes[i].params"),
// for hooks that read them (prepare).
config::YamlSection node_params(const config::PipelineConfig& pipeline, const config::NodeDecl& node);

// `config` without the nodes that are off in this run (their kind's
// off_because says why) and without every edge from or to them; each said
// once, in the log, naming the node and why.
config::Config without_nodes_that_are_off(config::Config config, const graph::NodeRegistry& registry);

// Registers `spec` with `hooks` attached.
void add_node_kind(graph::NodeRegistry& registry, graph::NodeSpec spec, RunHooks hooks);
// The hooks of `type` in `registry` (null for a kind without any, or unknown).
const RunHooks* run_hooks(const graph::NodeRegistry& registry, const std::string& type);
// The hooks registered with `spec` (null for a kind without any).
const RunHooks* run_hooks(const graph::NodeSpec& spec);

}  // namespace dflow::nodes
