// model.drafter.kind and the kind's params beside it: read once, from the
// config, into what the drafter, the objective, the memory fit, a resume and
// the reference take (nodes/drafter_kind_choice.hpp).
#include "nodes/drafter_kind_choice.hpp"

#include <algorithm>
#include <memory>
#include <set>
#include <stdexcept>

#include "config/config_keys.hpp"
#include "config/errors.hpp"
#include "drafter/kind.hpp"
#include "nodes/node_params.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

// The section the kind's params are read from: the keys of model.drafter
// the config did not declare, with the origins that name their lines.
config::YamlSection kind_section(const config::Config& config) {
  const auto& d = config.model.drafter;
  std::shared_ptr<const config::Origins> origins = d.origins;
  if (!origins) {  // a config made in code, not read from YAML
    auto made = std::make_shared<config::Origins>();
    made->file = config.source.empty() ? "<config>" : config.source;
    origins = made;
  }
  const YAML::Node params = d.params && d.params.IsMap() ? d.params : YAML::Node(YAML::NodeType::Map);
  return config::YamlSection(params, "model.drafter", origins);
}

// Every registered kind's param names, each with the kind that declares it.
std::vector<std::pair<std::string, std::string>> all_kind_params() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& name : drafter::drafter_kind_names())
    for (const auto& p : drafter::drafter_kind(name).params()) out.emplace_back(p.name, name);
  return out;
}

}  // namespace

KindConfig read_kind_config(const config::Config& config) {
  KindConfig out;
  out.kind = config.model.drafter.kind;
  const drafter::DrafterKind* kind = drafter::find_drafter_kind(out.kind);
  if (!kind) {
    const auto problem = config::one_of(drafter::drafter_kind_names())(out.kind);
    throw ConfigError(config.model.drafter.kind_mark, "model.drafter.kind",
                      "unknown drafter kind " + (problem ? *problem : out.kind));
  }
  config::YamlSection section = kind_section(config);
  std::vector<std::string> own;
  for (const auto& p : kind->params()) own.push_back(p.name);
  // Another kind's param: say whose it is (and know them all, so that a
  // typo of one gets a suggestion, as does one of the declared shape keys).
  for (const auto& [param, other] : all_kind_params()) {
    if (other == out.kind || std::find(own.begin(), own.end(), param) != own.end()) continue;
    if (section.has(param))
      throw section.error(param, param + " is a param of kind " + other + ", and model.drafter.kind is " + out.kind +
                                     ": set model.drafter.kind: " + other + ", or leave " + param + " out");
    (void)section.raw(param);
  }
  for (const auto& k : config::config_keys().keys())
    if (k.section() == "model.drafter") (void)section.raw(k.name());
  config::YamlSection own_section = section.only(own);
  out.params = kind->read_params(own_section);
  section.finish();
  return out;
}

std::string kind_resume_text(const KindConfig& kind) {
  return terms_text(drafter::drafter_kind(kind.kind).resume_terms(kind.params));
}

DrafterKindChoice drafter_kind_choice(const config::Config& config, const graph::NodeRegistry& kinds,
                                      std::string* teacher_because) {
  DrafterKindChoice choice;
  const KindConfig chosen = read_kind_config(config);
  const drafter::DrafterKind& kind = drafter::drafter_kind(chosen.kind);
  choice.kind = chosen.kind;
  try {
    choice.fields = kind.spec_fields(chosen.params);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(config.model.drafter.kind_mark, "model.drafter",
                      "model.drafter.kind " + chosen.kind + ": " + e.what());
  }
  for (size_t i = 0; i < config.pipeline.nodes.size(); ++i) {
    const auto& n = config.pipeline.nodes[i];
    const RunHooks* hooks = run_hooks(kinds, n.type);
    if (!hooks || (!hooks->objective && !hooks->teacher)) continue;
    const std::string key = "pipeline.nodes[" + std::to_string(i) + "].params";
    try {
      if (hooks->objective) {
        config::YamlSection params(n.params, key, config.pipeline.origins);
        choice.objective = hooks->objective(params);
      }
      if (hooks->teacher && teacher_because->empty()) {
        config::YamlSection params(n.params, key, config.pipeline.origins);
        const std::string why = hooks->teacher(params);
        if (!why.empty()) *teacher_because = "node '" + n.name + "' (" + n.type + ") " + why;
      }
    } catch (const std::invalid_argument& e) {
      throw ConfigError(n.mark, key, "node '" + n.name + "' (" + n.type + "): " + e.what());
    }
  }
  choice.objective.kind_options = chosen.params;
  if (teacher_because->empty() && kind.needs_teacher(chosen.params))
    *teacher_because = "model.drafter.kind " + chosen.kind + " trains loss terms that read the target's distribution";
  // The records' expected acceptance reads the target's distribution whatever the loss.
  choice.objective.expected_acceptance = config.eval.expected_acceptance;
  if (config.eval.expected_acceptance && teacher_because->empty())
    *teacher_because = "eval.expected_acceptance records the acceptance under the target's distribution";
  return choice;
}

std::string move_node_kind_params(config::Config& config, const graph::NodeRegistry& kinds) {
  std::set<std::string> kind_params;
  for (const auto& [param, _] : all_kind_params()) kind_params.insert(param);
  std::string moved;
  for (auto& n : config.pipeline.nodes) {
    const RunHooks* hooks = run_hooks(kinds, n.type);
    if (!hooks || !hooks->objective || !n.params || !n.params.IsMap()) continue;
    YAML::Node kept(YAML::NodeType::Map);
    YAML::Node given = config.model.drafter.params && config.model.drafter.params.IsMap()
                           ? YAML::Clone(config.model.drafter.params)
                           : YAML::Node(YAML::NodeType::Map);
    bool any = false;
    for (auto it = n.params.begin(); it != n.params.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
      if (key == "head" && it->second.IsScalar()) {
        config.model.drafter.kind = it->second.Scalar();
        moved += std::string(moved.empty() ? "" : ", ") + "head -> model.drafter.kind";
        any = true;
      } else if (kind_params.count(key)) {
        given.force_insert(it->first, it->second);
        moved += std::string(moved.empty() ? "" : ", ") + key + " -> model.drafter." + key;
        any = true;
      } else {
        kept.force_insert(it->first, it->second);
      }
    }
    if (!any) continue;
    // reset, not assignment: a YAML::Node assigned to rewrites the node every
    // copy of the config shares.
    n.params.reset(kept);
    config.model.drafter.params.reset(given);
  }
  return moved;
}

std::vector<config::KeyDoc> kind_param_docs() {
  std::vector<config::KeyDoc> out;
  for (const auto& name : drafter::drafter_kind_names()) {
    for (auto d : drafter::drafter_kind(name).params()) {
      d.name = "model.drafter." + d.name;
      d.when = "kind: " + name;
      out.push_back(std::move(d));
    }
  }
  return out;
}

std::string kind_reference_markdown() {
  std::string out =
      "\n## Drafter kinds\n\n"
      "`model.drafter.kind` chooses the drafter kind; each kind's own params are keys of `model.drafter` beside the "
      "shape keys above (`model.drafter.markov_rank: 32`). A param of another kind than the one chosen is refused, "
      "naming the kind that has it.\n\n";
  for (const auto& name : drafter::drafter_kind_names()) {
    const drafter::DrafterKind& kind = drafter::drafter_kind(name);
    out += "- `" + name + "`: " + kind.summary();
    // Its params at their defaults: whether its own terms read the target's distribution.
    config::YamlSection none(YAML::Node(YAML::NodeType::Map), "model.drafter",
                             std::make_shared<const config::Origins>());
    if (kind.needs_teacher(kind.read_params(none)))
      out += "; its loss terms read the target's distribution, so its feature source must give the teacher "
             "(the target's last hidden state) whatever the loss";
    out += "\n";
  }
  out += "\n| key | kind | type | default | on `--resume` | what it sets |\n| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& d : kind_param_docs()) {
    std::string allowed;
    for (const auto& a : d.allowed) allowed += (allowed.empty() ? " (" : ", ") + a;
    if (!allowed.empty()) allowed += ")";
    out += "| `" + d.name + "` | " + d.when.substr(6) + " | " + d.type + allowed + " | `" + d.default_text + "` | " +
           (d.on_resume == config::OnResume::may_change ? "may change" : "must match") + " | " + d.doc + " |\n";
  }
  return out;
}

}  // namespace dflow::nodes
