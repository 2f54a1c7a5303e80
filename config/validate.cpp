#include "config/validate.hpp"

#include <algorithm>
#include <set>

#include "config/config_keys.hpp"
#include "config/pipeline_override.hpp"

namespace dflow::config {

namespace {

// A config without a pipeline section runs the default graph; without
// held-out prompts, it runs it without the eval node.
void drop_default_eval_without_prompts(Config& c) {
  if (!c.pipeline.from_default || !c.eval.prompts.empty()) return;
  std::vector<std::string> dropped;
  std::erase_if(c.pipeline.nodes, [&](const NodeDecl& n) {
    if (n.type.rfind("eval.", 0) != 0) return false;
    dropped.push_back(n.name);
    return true;
  });
  std::erase_if(c.pipeline.edges, [&](const EdgeDecl& e) {
    const std::string to = e.to.substr(0, e.to.find('.'));
    return std::find(dropped.begin(), dropped.end(), to) != dropped.end();
  });
}

// An eval node needs held-out prompts; say so at the node.
void check_eval_nodes(const Config& c) {
  for (size_t i = 0; i < c.pipeline.nodes.size(); ++i) {
    const auto& node = c.pipeline.nodes[i];
    if (node.type.rfind("eval.", 0) != 0 || !c.eval.prompts.empty() || (node.params && node.params["prompts"])) continue;
    throw ConfigError(node.mark, "pipeline.nodes[" + std::to_string(i) + "]",
                      "node '" + node.name + "' (" + node.type +
                          ") measures tau on held-out prompts, but neither its params.prompts nor eval.prompts is set: "
                          "set one to a JSONL file of prompts that are not in the training data");
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
    if (auto problem = one_of({"exception", "nan_loss", "spike", "delay", "corrupt_weights", "stop"})(f.kind))
      throw s.error("kind", *problem);
    s.require(f.step >= 0, "step", "must be >= 0");
    s.require(f.kind == "nan_loss" || f.kind == "spike" || f.kind == "corrupt_weights" || f.kind == "stop" ||
                  !f.node.empty(),
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
  drop_default_eval_without_prompts(c);
  check_eval_nodes(c);
  return c;
}

}  // namespace dflow::config
