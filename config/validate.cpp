#include "config/validate.hpp"

#include <algorithm>
#include <set>

#include "config/config_keys.hpp"
#include "config/pipeline_override.hpp"

namespace dflow::config {

namespace {

bool is_eval_node(const NodeDecl& node) { return node.type.rfind("eval.", 0) == 0; }

bool has_prompts(const Config& c, const NodeDecl& node) {
  if (!c.eval.prompts.empty()) return true;
  const YAML::Node own = node.params && node.params.IsMap() ? node.params["prompts"] : YAML::Node();
  return own && own.IsScalar() && !own.Scalar().empty();
}

// An eval node needs held-out prompts. Without them, eval.every_steps > 0
// asks for tau every N steps that cannot be measured: refused at the node.
// With eval.every_steps 0 (no periodic evaluation, the default outside the
// demo) the run leaves the node out and says so (its kind's off_because):
// a run without held-out prompts trains.
void check_eval_nodes(const Config& c) {
  if (c.eval.every_steps == 0) return;
  for (size_t i = 0; i < c.pipeline.nodes.size(); ++i) {
    const auto& node = c.pipeline.nodes[i];
    if (!is_eval_node(node) || has_prompts(c, node)) continue;
    const std::string every = std::to_string(c.eval.every_steps);
    throw ConfigError(node.mark, "pipeline.nodes[" + std::to_string(i) + "]",
                      "node '" + node.name + "' (" + node.type +
                          ") measures tau on held-out prompts, but neither its params.prompts nor eval.prompts is set "
                          "while eval.every_steps " + every + " asks for tau every " + every +
                          " steps: set one to a JSONL file of prompts that are not in the training data, or set "
                          "eval.every_steps: 0 to train without evaluation");
  }
}

std::vector<FaultDecl> read_faults(YamlSection& root) {
  std::vector<FaultDecl> out;
  YAML::Node list = root.raw("faults");
  if (!list || list.IsNull()) return out;
  root.require(list.IsSequence(), "faults", "expected a list of faults");
  for (size_t i = 0; i < list.size(); ++i) {
    YamlSection s = root.child(list[i], "faults[" + std::to_string(i) + "]");
    FaultDecl f;
    f.mark = mark_for(list[i], s.path(), *root.origins());
    s.read("kind", f.kind).read("node", f.node).read("step", f.step).read("factor", f.factor).read("seconds", f.seconds)
        .read("rank", f.rank);
    s.finish();
    if (auto problem = one_of({"exception", "nan_loss", "spike", "delay", "corrupt_weights", "corrupt_init", "stop"})(f.kind))
      throw s.error("kind", *problem);
    s.require(f.step >= 0, "step", "must be >= 0");
    s.require(f.kind == "nan_loss" || f.kind == "spike" || f.kind == "corrupt_weights" || f.kind == "corrupt_init" ||
                  f.kind == "stop" || !f.node.empty(),
              "node", "names the node to fault");
    // Every rank stops at the same step, or the others would wait for it.
    s.require(f.kind != "stop" || f.rank == -1, "rank", "a stop ends the run on every rank; leave rank out");
    s.require(f.factor > 0, "factor", "must be > 0");
    s.require(f.seconds >= 0, "seconds", "must be >= 0");
    s.require(f.rank >= -1, "rank", "must be a rank (0, 1, ...) or -1 for every rank");
    out.push_back(std::move(f));
  }
  return out;
}

PipelineConfig default_pipeline() {
  auto origins = std::make_shared<Origins>();
  origins->file = "<default>";
  YAML::Node root = YAML::Load(default_config_yaml());
  PipelineConfig p = parse_pipeline(YamlSection(root["pipeline"], "pipeline", origins));
  p.from_default = true;
  return p;
}

}  // namespace

Config read_config(YamlSection root) {
  Config c;
  c.faults = read_faults(root);
  c.pipeline = root.has("pipeline") ? parse_pipeline(root.section("pipeline")) : default_pipeline();
  if (pipeline_is_edited_default(*root.origins())) c.pipeline.from_default = true;
  std::map<std::string, YamlSection> sections;
  config_keys().read(root, c, &sections);
  check_across_keys(c, sections);
  check_eval_nodes(c);
  return c;
}

}  // namespace dflow::config
